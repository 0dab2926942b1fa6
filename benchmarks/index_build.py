#!/usr/bin/env python3
"""Reference index build: `peanut index` against `bwa index` on the same FASTA, and the mask-threshold table.

    python benchmarks/index_build.py                 # chr20: peanut vs bwa, 2 alternating repetitions
    python benchmarks/index_build.py --mask-table    # chr20: what each mask threshold removes (docs/indexing.md)
    python benchmarks/index_build.py --synthetic 3.1 # build a synthetic 3.1 Gbp human-like genome: time, memory

Runs are alternated (peanut, bwa, bwa, peanut, ...) so that a change in machine load hits both tools alike.
Wall time and peak RSS come from /usr/bin/time -v of each process; bwa writes into a temporary directory.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FASTA = REPO.parent / "shared" / "data" / "human" / "GRCh37_chr20.fa.gz"


def timed(cmd, env=None):
    """(wall s, CPU s, peak RSS MB) of one command, via /usr/bin/time -v when available."""
    time_bin = shutil.which("time") if not os.path.exists("/usr/bin/time") else "/usr/bin/time"
    t0 = time.perf_counter()
    if time_bin:
        proc = subprocess.run([time_bin, "-v", *cmd], env=env, capture_output=True, text=True)
    else:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", proc.stderr))
    return wall, (cpu if time_bin else float("nan")), (int(m.group(1)) / 1024 if m else float("nan"))


def compare(fasta, reps, workdir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    tools = {
        "peanut index": lambda d: [sys.executable, "-m", "peanut_py", "index", str(fasta), "-o", str(d / "ref.peanut.h5")],
        "bwa index": lambda d: ["bwa", "index", "-p", str(d / "ref"), str(fasta)],
    }
    names = list(tools)
    rows = []
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            d = Path(tempfile.mkdtemp(prefix="index_build_", dir=workdir))
            try:
                wall, cpu, rss = timed(tools[name](d), env=env)
                size = sum(p.stat().st_size for p in d.iterdir())
            finally:
                shutil.rmtree(d, ignore_errors=True)
            rows.append((name, rep + 1, wall, rss, size, cpu))
            print(f"  {name:<13} rep {rep + 1}: {wall:7.1f} s wall {cpu:7.1f} s CPU {rss:7.0f} MB peak RSS "
                  f"{size / 1e6:7.0f} MB on disk", flush=True)
    print()
    print("| tool | runs | wall s (each) | median wall s | CPU s (each) | peak RSS MB (max) | index size MB |")
    print("|---|---|---|---|---|---|---|")
    med, cpu = {}, {}
    for name in names:
        r = [x for x in rows if x[0] == name]
        med[name] = statistics.median(x[2] for x in r)
        cpu[name] = statistics.median(x[5] for x in r)
        print(f"| {name} | {len(r)} | {', '.join(f'{x[2]:.1f}' for x in r)} | {med[name]:.1f} | "
              f"{', '.join(f'{x[5]:.1f}' for x in r)} | {max(x[3] for x in r):.0f} | {r[0][4] / 1e6:.0f} |")
    print(f"\nratio peanut / bwa: median wall time {med['peanut index'] / med['bwa index']:.3f}, "
          f"median CPU time {cpu['peanut index'] / cpu['bwa index']:.3f}")


def mask_table(fasta, thresholds, workdir, read_length=100):
    """Fractions masked per threshold, computed from one unmasked index (q = 16, step = 1)."""
    import numpy as np

    sys.path.insert(0, str(REPO))
    from peanut_py.reference import ReferenceIndex, build_index

    out = Path(workdir) / "unmasked.peanut.h5"
    t0 = time.perf_counter()
    build_index(fasta, out, q=16, step=1, mask_threshold=0)
    print(f"unmasked index built in {time.perf_counter() - t0:.1f} s")
    q = 16
    with ReferenceIndex(out) as ix:
        pos = ix.positions()
        _, cnt = np.unique(ix.qgram_values(pos), return_counts=True)  # P is sorted by q-gram value
        pos = pos.astype(np.int64)
        lengths, offsets = ix.lengths, ix.offsets
    os.unlink(out)
    total_pos, total_kmers = int(cnt.sum()), cnt.size
    # per-position occurrence count of its q-gram, in a padded global array
    n = int(offsets[-1] + lengths[-1])
    occ = np.zeros(n + 1, dtype=np.int64)
    occ[pos] = np.repeat(cnt, cnt)
    del pos
    # read-sized windows (read_length bases in one contig, all their q-grams indexed) and their q-gram starts
    w_len = read_length - q + 1
    windows = []
    for off, length in zip(offsets, lengths):
        cs = np.concatenate(([0], np.cumsum(occ[off:off + length] > 0)))
        windows.append((int(off), int(length), np.flatnonzero(cs[w_len:] - cs[:-w_len] == w_len)))
    print(f"{total_pos:,} indexed positions, {total_kmers:,} distinct 16-grams, max occurrences {cnt.max():,}")
    print()
    print("| threshold | positions masked | distinct q-grams masked | mean candidates per read q-gram | "
          f"{read_length}-bp windows without an unmasked q-gram |")
    print("|---|---|---|---|---|")
    sq = cnt.astype(np.float64) ** 2
    for t in thresholds:
        keep = cnt <= t if t else np.ones(cnt.size, dtype=bool)
        pm = cnt[~keep].sum() / total_pos
        km = (~keep).sum()
        hits = sq[keep].sum() / total_pos  # a read q-gram drawn like a reference position hits c copies
        lost = total = 0
        for off, length, full in windows:
            o = occ[off:off + length]
            cs = np.concatenate(([0], np.cumsum((o > 0) & ((o <= t) if t else True))))
            lost += int((cs[full + w_len] - cs[full] == 0).sum())
            total += full.size
        label = str(t) if t else "0 (none)"
        print(f"| {label} | {100 * pm:.2f} % | {km:,} ({100 * km / total_kmers:.4f} %) | {hits:.1f} | "
              f"{lost:,} ({100 * lost / max(total, 1):.4f} %) |")


# GRCh37 chromosome lengths in Mbp (1..22, X, Y), scaled to the requested genome size
GRCH37_MBP = [249.3, 243.2, 198.0, 191.2, 180.9, 171.1, 159.1, 146.4, 141.2, 135.5, 135.0, 133.9, 115.2, 107.3,
              102.5, 90.4, 81.2, 78.1, 59.1, 63.0, 48.1, 51.3, 155.3, 59.4]


def synthetic_genome(path, gbp, seed=1):
    """Random bases with human-like N runs (telomeres, centromere) and a planted repeat family (100 k copies
    per Gbp of a 300-bp element, 10 % diverged): exercises masking, N handling and the multi-round build."""
    scale = gbp * 1000 / sum(GRCH37_MBP)
    contigs = [(f"chr{i + 1}", int(mbp * 1e6 * scale) // 60 * 60) for i, mbp in enumerate(GRCH37_MBP)]
    with open(path, "wb") as f:
        write_synthetic_contigs(f, contigs, seed)


def write_synthetic_contigs(f, contigs, seed=1):
    """Write ``contigs`` ((name, length), length a multiple of 60) of synthetic sequence to the open file."""
    import numpy as np

    rng = np.random.default_rng(seed)
    element = rng.integers(0, 4, 300, dtype=np.uint8)
    for name, n in contigs:
        codes = rng.integers(0, 4, n, dtype=np.uint8)
        copies = int(100_000 * n / 1e9)
        at = rng.integers(0, n - 300, copies)
        idx = (at[:, None] + np.arange(300)).ravel()
        rep = np.tile(element, copies)
        mut = rng.random(rep.size) < 0.1
        rep[mut] = rng.integers(0, 4, int(mut.sum()), dtype=np.uint8)
        codes[idx] = rep
        del idx, rep
        write_contig(f, name, "synthetic", codes)
        del codes


def write_contig(f, name, description, codes):
    """One synthetic chromosome (base codes, a multiple of 60 long) into the FASTA file ``f``: its telomeres
    (10 kb each end) and a centromere (a third of the way in, up to 3 Mbp) set to N, 60 bases per line."""
    import numpy as np

    n = codes.size
    codes[:10_000] = 4
    codes[-10_000:] = 4
    mid = n // 3
    codes[mid:mid + min(3_000_000, n // 20)] = 4
    text = np.frombuffer(b"ACGTN", dtype=np.uint8)[codes].reshape(-1, 60)
    text = np.hstack([text, np.full((text.shape[0], 1), 10, dtype=np.uint8)])
    f.write(f">{name} {description}\n".encode())
    f.write(text.tobytes())


def synthetic(gbp, workdir):
    fasta = Path(workdir) / f"synthetic_{gbp:g}gbp.fa"
    t0 = time.perf_counter()
    synthetic_genome(fasta, gbp)
    print(f"wrote {fasta} ({fasta.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s", flush=True)
    out = Path(workdir) / "synthetic.peanut.h5"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "peanut_py", "index", str(fasta), "-o", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    print(proc.stderr.strip())
    if proc.returncode:
        sys.exit(f"peanut index failed ({proc.returncode})")
    import resource

    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peanut index of {gbp:g} Gbp: {wall:.0f} s wall, peak RSS {rss:,.0f} MB, "
          f"index {out.stat().st_size / 1e9:.2f} GB")
    os.unlink(fasta)
    os.unlink(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fasta", type=Path, default=DEFAULT_FASTA)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=None, help="where temporary indexes go (default: system tmp)")
    ap.add_argument("--mask-table", action="store_true", help="print the mask-threshold table instead")
    ap.add_argument("--thresholds", default="30,100,300,1000,3000,10000,0")
    ap.add_argument("--synthetic", type=float, metavar="GBP", help="index a synthetic genome of GBP Gbp instead")
    args = ap.parse_args()
    workdir = args.workdir or tempfile.gettempdir()
    if args.synthetic:
        return synthetic(args.synthetic, workdir)
    if not args.fasta.exists():
        sys.exit(f"{args.fasta}: not found (pass --fasta)")
    print(f"{args.fasta} ({args.fasta.stat().st_size / 1e6:.1f} MB), {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    if args.mask_table:
        mask_table(args.fasta, [int(x) for x in args.thresholds.split(",")], workdir)
    else:
        if not shutil.which("bwa"):
            sys.exit("bwa not found on PATH")
        compare(args.fasta, args.reps, workdir)


if __name__ == "__main__":
    main()
