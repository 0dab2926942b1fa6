#!/usr/bin/env python3
"""Human-scale reference on the device (issue 7): a 3.1 Gbp genome, its index, one filtration pass, 5 M reads.

    python benchmarks/human_scale.py prepare --work DIR    # genome FASTA, `peanut index`, mason reads
    python benchmarks/human_scale.py prepare --work DIR --genome repeat-rich   # the repeat-rich genome
    python benchmarks/human_scale.py map --work DIR -t 16   # peanut map of the reads, one-buffer profile

The genome is GRCh37 chr20 (real, contig name "20") plus the other 23 GRCh37 chromosomes at their real
lengths (``--scale`` shrinks them), made reproducibly from a fixed seed in one of two ways:

* ``random`` (default): random sequence (benchmarks/index_build.synthetic_genome: N runs at the telomeres
  and centromere, a planted 300-bp repeat family at 100 k copies per Gbp, 10 % diverged).  The random
  chromosomes add the chance q-gram hits of a large genome but few repeats: an easy case.
* ``repeat-rich`` (:func:`write_repeat_rich_contigs`): half of every chromosome is diverged copies of real
  chr20 segments (300 bp to 10 kb, 1-20 % divergence by substitutions and 1-bp indels, either strand), the
  rest random, with the same N runs; so reads from chr20 meet many near-copies elsewhere and the q-gram
  counts have a real genome's heavy tail.

3.1 Gbp at scale 1, so that every table, offset and pass has its human size. Reads are simulated from chr20
only (mason_simulator, Illumina 100 bp), so their truth is known and their repeats are real.

``prepare`` runs the index build and the simulation side by side and reports the build's wall time and peak
RSS (os.wait4 of the process), the index file's size; ``map`` reports the start-up (index load + upload),
the end-to-end throughput (SAM to a file), placement accuracy against mason's truth, and the device time of
one read buffer (benchmarks/core_kernels.py) on the human-scale index and on chr20's alone.
"""
import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from benchmarks import simulate  # noqa: E402
from benchmarks.measure import run_measured  # noqa: E402
from benchmarks.index_build import GRCH37_MBP, write_contig, write_synthetic_contigs  # noqa: E402

CHR20_INDEX = 19  # GRCH37_MBP is chr1..chr22, X, Y
REPEAT_SHARE = 0.5  # of every repeat-rich chromosome: diverged copies of chr20 segments
COPY_LENGTHS = (300, 10_000)  # copied segment lengths, log-uniform
DIVERGENCE = (0.01, 0.20)  # per copy, uniform: substitutions, plus 1-bp indels at a tenth of that rate


def chr20_codes(fasta):
    """Base codes (A0 C1 G2 T3, N and other letters 4) of a one-contig FASTA, plain or gzip."""
    import numpy as np

    opener = gzip.open if fasta.endswith(".gz") else open
    with opener(fasta, "rb") as f:
        text = b"".join(line.strip() for line in f if not line.startswith(b">")).upper()
    table = np.full(256, 4, dtype=np.uint8)
    table[list(b"ACGT")] = np.arange(4, dtype=np.uint8)
    return table[np.frombuffer(text, dtype=np.uint8)]


def diverged_copy(rng, source, divergence):
    """``source`` (codes 0..3) with substitutions at rate ``divergence`` and 1-bp deletions and insertions at a
    tenth of it each, reverse-complemented half of the time."""
    import numpy as np

    seg = source.copy()
    sub = rng.random(seg.size) < divergence
    seg[sub] = (seg[sub] + rng.integers(1, 4, int(sub.sum()), dtype=np.uint8)) % 4  # always another base
    seg = seg[rng.random(seg.size) >= divergence / 10]
    ins = np.flatnonzero(rng.random(seg.size) < divergence / 10)
    seg = np.insert(seg, ins, rng.integers(0, 4, ins.size, dtype=np.uint8))
    if rng.random() < 0.5:
        seg = (3 - seg)[::-1]
    return seg


def write_repeat_rich_contigs(f, contigs, source, seed=1, share=REPEAT_SHARE):
    """Write ``contigs`` ((name, length), length a multiple of 60) to the open file: random sequence of which
    ``share`` is overwritten by diverged copies (:func:`diverged_copy`) of segments of ``source`` (chr20's
    codes) without N, with N runs at the telomeres and the centromere as index_build.write_synthetic_contigs."""
    import numpy as np

    rng = np.random.default_rng(seed)
    cs = np.concatenate(([0], np.cumsum(source == 4)))
    lo, hi = np.log(COPY_LENGTHS[0]), np.log(COPY_LENGTHS[1])
    for name, n in contigs:
        codes = rng.integers(0, 4, n, dtype=np.uint8)
        covered, at = 0, 0
        while covered < share * n:
            length = int(np.exp(rng.uniform(lo, hi)))
            start = int(rng.integers(0, source.size - length))
            if cs[start + length] != cs[start]:
                continue  # the segment holds an N: draw another
            seg = diverged_copy(rng, source[start:start + length], rng.uniform(*DIVERGENCE))
            # copies at random places, spread so that about `share` of the contig is covered
            at = int(rng.integers(0, max(1, n - seg.size)))
            codes[at:at + seg.size] = seg[: n - at]
            covered += seg.size
        write_contig(f, name, "repeat-rich", codes)
        del codes


def write_genome(path, chr20_fasta, kind="random", scale=1.0, seed=1):
    """The benchmark genome: chr20 (plain FASTA ``chr20_fasta``) and the 23 other GRCh37 chromosomes at
    ``scale`` times their lengths, ``kind`` random or repeat-rich (module docstring)."""
    others = [(f"chr{i + 1}" if i < 22 else "chrX" if i == 22 else "chrY", mbp)
              for i, mbp in enumerate(GRCH37_MBP) if i != CHR20_INDEX]
    contigs = [(name, int(mbp * 1e6 * scale) // 60 * 60) for name, mbp in others]
    with open(path + ".tmp", "wb") as f:
        with open(chr20_fasta, "rb") as c:
            shutil.copyfileobj(c, f, 1 << 24)
        if kind == "repeat-rich":
            write_repeat_rich_contigs(f, contigs, chr20_codes(chr20_fasta), seed=seed)
        else:
            write_synthetic_contigs(f, contigs, seed=seed)
    os.replace(path + ".tmp", path)


def log(msg):
    print(msg, flush=True)


def peanut_cmd(*args):
    return [sys.executable, "-m", "peanut_py", *args]


def prepare(args):
    os.makedirs(args.work, exist_ok=True)
    chr20 = os.path.join(args.work, "chr20.fa")
    genome = os.path.join(args.work, "human_scale.fa")
    index = os.path.join(args.work, "human_scale.peanut.h5")
    reads = os.path.join(args.work, "reads.fq")
    truth = os.path.join(args.work, "truth.sam")
    t0 = time.perf_counter()
    with gzip.open(args.chr20, "rb") as fin, open(chr20, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 24)
    write_genome(genome, chr20, args.genome, args.scale, args.seed)
    size = os.path.getsize(genome)
    log(f"genome: {genome}, {size / 1e9:.2f} GB FASTA (chr20 + 23 {args.genome} chromosomes) in "
        f"{time.perf_counter() - t0:.0f} s")

    # mason runs beside the (mostly single-threaded) index build
    mason = shutil.which("mason_simulator") or "/usr/lib/seqan/bin/mason_simulator"
    mason_cmd = [mason, "-ir", chr20, "-n", str(args.reads), "--illumina-read-length", "100", "-o", reads,
                 "-oa", truth, "--seed", "1", "--num-threads", str(args.mason_threads), "-q"]
    mason_log = open(os.path.join(args.work, "mason.log"), "w")
    t_mason = time.perf_counter()
    mason_proc = subprocess.Popen(mason_cmd, stdout=mason_log, stderr=subprocess.STDOUT)
    mason_done = []
    import threading

    waiter = threading.Thread(target=lambda: mason_done.append((mason_proc.wait(), time.perf_counter())))
    waiter.start()

    build_log = os.path.join(args.work, "index.log")
    with open(build_log, "w") as err:
        rc, wall, rss, cpu = run_measured(peanut_cmd("index", genome, "-o", index, "-t", str(args.index_threads)),
                                          stderr=err)
    with open(build_log) as f:
        tail = f.read().strip().splitlines()[-1:]
    if rc:
        sys.exit(f"peanut index failed ({rc}): see {build_log}")
    build = {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "index_gb": os.path.getsize(index) / 1e9,
             "genome_gb": size / 1e9, "log": tail}
    log(f"peanut index: {wall:.0f} s wall, {cpu:.0f} s CPU, peak RSS {rss:,.0f} MB, index "
        f"{build['index_gb']:.2f} GB; {tail[0] if tail else ''}")
    waiter.join()
    if mason_done[0][0]:
        sys.exit(f"mason_simulator failed ({mason_proc.returncode}): see {args.work}/mason.log")
    log(f"mason_simulator: {args.reads:,} reads of 100 bp from chr20 in {mason_done[0][1] - t_mason:.0f} s "
        f"({args.mason_threads} threads, beside the index build)")
    with open(os.path.join(args.work, "prepare.json"), "w") as f:
        json.dump(build, f, indent=1)


def map_step(args):
    index = os.path.join(args.work, "human_scale.peanut.h5")
    reads = os.path.join(args.work, "reads.fq")
    sam = os.path.join(args.work, "out.sam")
    if not os.path.exists(index) or not os.path.exists(reads):
        sys.exit(f"{args.work}: no index or reads; run `human_scale.py prepare` first")
    result = {"threads": args.threads}
    err_path = os.path.join(args.work, "map.log")
    with open(err_path, "w") as err:
        rc, wall, rss, cpu = run_measured(peanut_cmd("map", index, reads, "-t", str(args.threads), "-o", sam),
                                          stderr=err)
    text = open(err_path).read()
    if rc:
        sys.exit(f"peanut map failed ({rc}):\n{text[-3000:]}")
    n_reads = int(re.search(r"([\d,]+) reads in", text).group(1).replace(",", ""))
    upload = re.search(r"; ([\d.]+) s to load and upload", text)
    result.update(reads=n_reads, wall_s=wall, cpu_s=cpu, peak_rss_mb=rss, reads_per_s=n_reads / wall,
                  startup_s=float(upload.group(1)) if upload else None, log=text.strip().splitlines()[-4:])
    log("\n".join(result["log"]))
    log(f"peanut map (human scale, -t {args.threads}): {n_reads:,} reads in {wall:.1f} s = "
        f"{n_reads / wall:,.0f} reads/s end to end, of which {result['startup_s']} s index load + upload; "
        f"{cpu:.0f} s CPU, peak RSS {rss:,.0f} MB")

    from benchmarks import scoring

    truth = scoring.load_truth(os.path.join(args.work, "truth.sam"))
    score = scoring.score_sam(sam, truth)
    result["accuracy"] = {k: score[k] for k in ("n_truth", "mapped", "correct", "wrong", "missing",
                                                "frac_correct", "wrong_at")}
    log(f"accuracy: {score['correct']:,} of {score['n_truth']:,} correct ({100 * score['frac_correct']:.2f} %), "
        f"wrong at MAPQ >= 20: {score['wrong_at'].get('20')}, missing {score['missing']}")

    # one read buffer's device time, on this index and on chr20's own (same reads)
    one = os.path.join(args.work, "buffer.fq")
    simulate.head_fastq(reads, one, args.buffer_reads)
    for label, idx in (("human scale", index), ("chr20 only", args.chr20_index)):
        if not idx:
            continue
        out = os.path.join(args.work, f"core-{label.replace(' ', '_')}.json")
        cmd = [sys.executable, os.path.join(HERE, "core_kernels.py"), "--index", idx, "--fastq", one, "--runs",
               "2", "--json", out]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            log(f"core_kernels on {label} failed:\n{proc.stderr[-2000:]}")
            continue
        log(f"one buffer of {args.buffer_reads:,} reads, {label}:")
        log("\n".join(line for line in proc.stdout.splitlines() if "total" in line or "reads/s" in line
                      or line.startswith("| step") or re.match(r"\| [\d,]+ reads", line)))
        with open(out) as f:
            result[f"buffer_{label}"] = json.load(f)
    with open(os.path.join(args.work, "map.json"), "w") as f:
        json.dump(result, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--work", required=True)
    p.add_argument("--chr20", default=os.path.join(ROOT, ".bench_data", "human", "GRCh37_chr20.fa.gz"))
    p.add_argument("--reads", type=int, default=5_000_000)
    p.add_argument("--mason-threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scale", type=float, default=1.0, help="shrink the 23 other chromosomes (a quick check)")
    p.add_argument("--genome", choices=("random", "repeat-rich"), default="random",
                   help="the 23 other chromosomes: random sequence, or half diverged copies of chr20 segments")
    p.add_argument("--index-threads", type=int, default=os.cpu_count(), help="peanut index -t")
    m = sub.add_parser("map")
    m.add_argument("--work", required=True)
    m.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    m.add_argument("--buffer-reads", type=int, default=262_144)
    m.add_argument("--chr20-index", help="chr20's peanut index, for the one-buffer comparison")
    args = ap.parse_args()
    prepare(args) if args.step == "prepare" else map_step(args)


if __name__ == "__main__":
    main()
