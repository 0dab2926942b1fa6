#!/usr/bin/env python3
"""Time of each device kernel of the mapping core for one buffer of simulated reads (issue 3).

    python benchmarks/core_kernels.py                      # 1,000,000 reads of 100 bp against chr20
    python benchmarks/core_kernels.py --reads 200000       # what fits the 2-core VM's PoCL CPU device
    python benchmarks/core_kernels.py --index chr20.h5 --device 0 --json out.json

One buffer of N reads goes through the three device steps of ``DeviceStage.map_batch`` (q-group index,
filtration, validation), each step split into its kernels: ``QGroupIndex`` and ``filter_reference`` run with
``profile=True`` (the queue is drained after every kernel, so each time is that kernel's alone), the read
upload and validation are timed with ``queue.finish()`` around them. The buffer runs twice in one process;
the first run also pays kernel compilation and the first touch of fresh device memory, the second is warm.

Reads: ``mason_simulator`` (Illumina profile, fixed seed), looked up on PATH and in Debian's seqan folder;
with ``--no-mason`` or without mason, substrings of the reference with ~1 % substitutions (NumPy, seeded),
half of them reverse-complemented. Without ``--index`` the chr20 index is built (``peanut index``, ~10 s)
into ``--work`` and reused by later runs.
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

SEQAN_BIN = "/usr/lib/seqan/bin"
FASTA_NAME = os.path.join("human", "GRCh37_chr20.fa.gz")
# The first that exists: shared/ inside the checkout (travels to a lent machine), beside it, the workplace's.
FASTA_CANDIDATES = (
    os.path.join(ROOT, "shared", "data", FASTA_NAME),
    os.path.join(os.path.dirname(ROOT), "shared", "data", FASTA_NAME),
    os.path.join("/work", "shared", "data", FASTA_NAME),
)
DEFAULT_WORK = os.path.join(HERE, "work", "core_kernels")

QGROUP_STEPS = ("q-grams", "zero I", "mark I", "scan S", "count", "scan S'", "fill O", "sort O", "other")
FILTER_STEPS = ("upload", "count", "emit", "sort", "collapse", "merge", "other")


# ---------------------------------------------------------------------------------------------- inputs

def default_fasta():
    for path in FASTA_CANDIDATES:
        if os.path.exists(path):
            return path
    return FASTA_CANDIDATES[0]


def find_mason():
    """mason_simulator on PATH (a carried binary on a lent machine) or in Debian's seqan-apps folder."""
    path = shutil.which("mason_simulator")
    if path:
        return path
    candidate = os.path.join(SEQAN_BIN, "mason_simulator")
    return candidate if os.access(candidate, os.X_OK) else None


def plain_fasta(src, work):
    """mason reads only plain FASTA: a decompressed copy of ``src`` in ``work`` (kept for later runs)."""
    if not str(src).endswith(".gz"):
        return src
    dst = os.path.join(work, os.path.basename(str(src))[:-3])
    if not os.path.exists(dst):
        tmp = dst + ".tmp"
        with gzip.open(src, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        os.replace(tmp, dst)
    return dst


def build_index(fasta, out, q=16, step=1, log=print):
    """``peanut index FASTA -q Q -s STEP -o OUT`` in a subprocess; returns its wall time (s)."""
    cmd = [sys.executable, "-m", "peanut_py", "index", str(fasta), "-q", str(q), "-s", str(step), "-o", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    log(f"building the index: {' '.join(cmd)}")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"peanut index failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def open_or_build_index(path, fasta, work, log=print):
    """The index at ``path``; without one, chr20's default index in ``work`` (built once, rebuilt when it no
    longer opens, e.g. after a format change)."""
    from peanut_py.errors import PeanutError
    from peanut_py.reference import ReferenceIndex

    if path:
        return ReferenceIndex(path)
    out = os.path.join(work, "chr20-q16-s1.peanut.h5")
    if os.path.exists(out):
        try:
            return ReferenceIndex(out)
        except PeanutError as e:
            log(f"rebuilding {out}: {e}")
    build_index(fasta, out, log=log)
    return ReferenceIndex(out)


def mason_reads(mason, fasta, work, n, length, seed, threads, mismatch_scale=1.0, truth=False, log=print):
    """Simulate ``n`` single-end Illumina reads (cached by their parameters); returns (fastq, truth or None)."""
    tag = f"mason-n{n}-l{length}-s{seed}-t{threads}-m{mismatch_scale:g}"
    fq = os.path.join(work, tag + ".fq")
    sam = os.path.join(work, tag + ".truth.sam") if truth else None
    if os.path.exists(fq) and (sam is None or os.path.exists(sam)):
        return fq, sam
    ref = plain_fasta(fasta, work)
    cmd = [mason, "-ir", ref, "-n", str(n), "--illumina-read-length", str(length), "-o", fq + ".tmp.fq",
           "--seed", str(seed), "--num-threads", str(threads), "-q"]
    if mismatch_scale != 1.0:
        cmd += ["--illumina-prob-mismatch-scale", str(mismatch_scale)]
    if sam:
        cmd += ["-oa", sam + ".tmp.sam"]
    log(f"simulating: {' '.join(cmd)}")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"mason_simulator failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-2000:]}")
    if sam:
        os.replace(sam + ".tmp.sam", sam)
    os.replace(fq + ".tmp.fq", fq)
    log(f"  {time.perf_counter() - t0:.1f} s")
    return fq, sam


def load_reads(fastq):
    """(codes, offsets) of every read of ``fastq``, as ``peanut map`` parses them."""
    from peanut_py.reads import read_batches

    codes, lengths = [], []
    for batch in read_batches(fastq, max_reads=1 << 18):
        codes.append(batch.codes)
        lengths.append(batch.lengths)
    lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return (np.concatenate(codes) if codes else np.zeros(0, np.uint8)), offsets


def sampled_reads(index, n, length, seed, error_rate=0.01):
    """``n`` reads of ``length`` sampled uniformly from the contigs, windows with an N skipped, ~``error_rate``
    substitutions, half reverse-complemented. Returns (codes, offsets)."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(index.lengths, np.int64)
    offsets = np.asarray(index.offsets, np.int64)
    usable = np.maximum(lengths - length + 1, 0)
    genome = index.codes(0, int(offsets[-1] + lengths[-1]))
    reads = np.empty((n, length), np.uint8)
    filled = 0
    while filled < n:
        k = 2 * (n - filled) + 1000
        contig = rng.choice(len(lengths), size=k, p=usable / usable.sum())
        start = offsets[contig] + (rng.random(k) * usable[contig]).astype(np.int64)
        windows = genome[start[:, None] + np.arange(length)[None, :]]
        windows = windows[(windows < 4).all(axis=1)][: n - filled]
        reads[filled: filled + len(windows)] = windows
        filled += len(windows)
    subst = rng.random(reads.shape) < error_rate
    reads[subst] = (reads[subst] + rng.integers(1, 4, int(subst.sum()))) % 4
    reverse = rng.random(n) < 0.5
    reads[reverse] = 3 - reads[reverse, ::-1]
    return reads.ravel(), np.arange(n + 1, dtype=np.int64) * length


# ---------------------------------------------------------------------------------------------- measure

def run_buffer(device, resident, codes, offsets, min_identity=0.8, min_votes=None, validate_all=False):
    """One buffer through the three device steps, every kernel timed. Returns a dict of times and counts.

    Validation uses the best-stratum selection of mode best (peanut map's default) unless ``validate_all``."""
    from peanut_py.filtration import DEFAULT_COLLAPSE_GAP, filter_reference
    from peanut_py.qgroup import QGroupIndex, ReadBuffer
    from peanut_py.selection import BestStratumSelection
    from peanut_py.validation import validate_hits

    queue = device.queue
    queue.finish()
    times = {}
    t0 = time.perf_counter()
    buffer = ReadBuffer(device, codes, offsets)
    queue.finish()
    t1 = time.perf_counter()
    times["read upload + text"] = t1 - t0
    index = QGroupIndex(device, buffer, resident.q, profile=True)
    queue.finish()
    t2 = time.perf_counter()
    times.update({f"index: {k}": v for k, v in index.timings.items()})
    # Kernel compilation (first run) and host work between the profiled steps.
    times["index: other"] = max(0.0, t2 - t1 - sum(index.timings.values()))
    times["index total"] = t2 - t1
    kwargs = {} if min_votes is None else {"min_votes": min_votes}
    # the threshold lowered by the masked q-grams, as DeviceStage runs it
    cand = filter_reference(device, resident, index, buffer, profile=True, **kwargs)
    queue.finish()
    t3 = time.perf_counter()
    times.update({f"filtration: {k}": v for k, v in cand.timings.items()})
    times["filtration: other"] = max(0.0, t3 - t2 - sum(cand.timings.values()))
    times["filtration total"] = t3 - t2
    select = None if validate_all else BestStratumSelection(
        device, resident.q, resident.step, DEFAULT_COLLAPSE_GAP, masked_per_rs=cand.masked_per_rs)
    hits = validate_hits(device, resident, buffer, cand, min_identity=min_identity, select=select)
    queue.finish()
    t4 = time.perf_counter()
    times["validation"] = t4 - t3
    hits.to_host()
    t5 = time.perf_counter()
    times["hits download"] = t5 - t4
    times["device total"] = t5 - t0
    n = buffer.n_reads
    counts = {
        "reads": n,
        "raw_hits": int(cand.n_raw_hits),
        "collapsed": int(cand.n_collapsed),
        "candidates": int(cand.n),
        "validated": int(hits.n),
        "validated_candidates_per_read": (cand.n if select is None else sum(select.counts.get(k, 0) for k in (
            "leaders", "rivals"))) / max(n, 1),
        "raw_hits_per_read": cand.n_raw_hits / max(n, 1),
        "collapsed_per_read": cand.n_collapsed / max(n, 1),
        "candidates_per_read": cand.n / max(n, 1),
        "validated_per_read": hits.n / max(n, 1),
        "ranges": int(cand.n_ranges),
        "chunks": int(cand.n_chunks),
        "windows": int(cand.n_windows),
        # (getattr: the script also times older peanut-py versions, before these counts)
        "packed_chunks": int(getattr(cand, "n_packed", 0)),
        "gathered_chunks": int(getattr(cand, "n_gathered_chunks", 0)),
        "gathered_mb": getattr(cand, "gathered_bytes", 0) / 1e6,
        "distinct_qgrams": int(index.n_distinct),
        "occurrences": int(index.n_occurrences),
    }
    del hits, cand, index, buffer
    return {"seconds": times, "counts": counts}


def table(runs):
    """Markdown: one row per step, one column per run (seconds), then the counts per read."""
    labels = [f"run {i + 1}" + (" (cold)" if i == 0 else " (warm)") for i in range(len(runs))]
    steps = []
    for r in runs:
        steps += [k for k in r["seconds"] if k not in steps]
    order = ["read upload + text"]
    order += [f"index: {k}" for k in QGROUP_STEPS] + ["index total"]
    order += [f"filtration: {k}" for k in FILTER_STEPS] + ["filtration total"]
    order += ["validation", "hits download", "device total"]
    order = [k for k in order if k in steps] + [k for k in steps if k not in order]
    lines = ["| step | " + " | ".join(f"{x}, s" for x in labels) + " |", "|---" * (len(runs) + 1) + "|"]
    for k in order:
        cells = [f"{r['seconds'][k]:.3f}" if k in r["seconds"] else "-" for r in runs]
        name = f"**{k}**" if k.endswith("total") else k
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    c = runs[-1]["counts"]
    reads_per_s = c["reads"] / runs[-1]["seconds"]["device total"]
    lines += [
        "",
        "| per read (last run) | raw hits | candidates before threshold | candidates | candidates validated | "
        "validated hits | device reads/s |",
        "|---|---|---|---|---|---|---|",
        f"| {c['reads']:,} reads | {c['raw_hits_per_read']:.1f} | {c['collapsed_per_read']:.1f} | "
        f"{c['candidates_per_read']:.1f} | {c.get('validated_candidates_per_read', c['candidates_per_read']):.1f} | "
        f"{c['validated_per_read']:.2f} | {reads_per_s:,.0f} |",
        "",
        f"raw hits {c['raw_hits']:,} in {c['ranges']} range(s) of read strands, {c['chunks']} chunk pass(es)"
        + (f"; streamed table: {c['packed_chunks']} chunks packed ({c['gathered_mb']:,.0f} MB), passes over "
           f"{c['gathered_chunks']}" if c.get("packed_chunks") else ""),
    ]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reads", type=int, default=1_000_000, help="reads in the buffer (default 1,000,000)")
    ap.add_argument("--length", type=int, default=100, help="read length (default 100)")
    ap.add_argument("--index", help="peanut index (.h5); default: build chr20's into --work")
    ap.add_argument("--ref", default=default_fasta(), help="reference FASTA for mason and the index build "
                    "(default: GRCh37 chr20 of shared/data)")
    ap.add_argument("--device", help="OpenCL device index or name substring (default: peanut's default)")
    ap.add_argument("--memory-cap", help="use at most SIZE of device memory (e.g. 16G), as `peanut map` does")
    ap.add_argument("--no-mason", action="store_true", help="sample reads with NumPy instead of mason_simulator")
    ap.add_argument("--fastq", help="use the reads of this FASTQ/FASTA (all of them) instead of simulating")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mason-threads", type=int, default=2,
                    help="mason's --num-threads (the reads depend on it; default 2)")
    ap.add_argument("--runs", type=int, default=2, help="times the buffer runs in this process (default 2)")
    ap.add_argument("--min-identity", type=float, default=0.8)
    ap.add_argument("--min-votes", help="filtration's votes threshold: 'auto' (default) or an int")
    ap.add_argument("--validate-all", action="store_true",
                    help="validate every candidate (default: best-stratum selection, as peanut map's mode best)")
    ap.add_argument("--work", default=DEFAULT_WORK, help=f"cache of index and reads (default {DEFAULT_WORK})")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)

    from peanut_py.device import Device
    from peanut_py.layout import reads_per_buffer
    from peanut_py.resident import ResidentReference

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    os.makedirs(args.work, exist_ok=True)
    need_fasta = not args.index or not (args.no_mason or args.fastq)
    if need_fasta and not os.path.exists(args.ref):
        sys.exit(f"{args.ref}: reference FASTA not found (give --ref, or --index with --no-mason)")
    index = open_or_build_index(args.index, args.ref, args.work, log=log)
    mason = None if args.no_mason or args.fastq else find_mason()
    if not (args.no_mason or args.fastq) and mason is None:
        log("mason_simulator not found (PATH, /usr/lib/seqan/bin): sampling reads with NumPy")
    t0 = time.perf_counter()
    if args.fastq:
        codes, offsets = load_reads(args.fastq)
        source = os.path.basename(args.fastq)
    elif mason:
        fq, _ = mason_reads(mason, args.ref, args.work, args.reads, args.length, args.seed, args.mason_threads,
                            log=log)
        codes, offsets = load_reads(fq)
        source = f"mason_simulator Illumina {args.length} bp, seed {args.seed}, {args.mason_threads} threads"
    else:
        codes, offsets = sampled_reads(index, args.reads, args.length, args.seed)
        source = f"reference substrings, {args.length} bp, 1 % substitutions, seed {args.seed}"
    log(f"{len(offsets) - 1:,} reads ({source}) ready in {time.perf_counter() - t0:.1f} s")

    from peanut_py.cli import _size

    device = Device(args.device, memory_cap=_size(args.memory_cap) if args.memory_cap else None)
    t0 = time.perf_counter()
    resident = ResidentReference.from_index(device, index)
    device.queue.finish()
    upload = time.perf_counter() - t0
    mean = float(np.diff(offsets).mean()) if len(offsets) > 1 else args.length
    fits = reads_per_buffer(device, mean, q=resident.q, reserved_bytes=resident.device_bytes)
    log(f"device: {device.name}; reference resident in {upload:.1f} s "
        f"({resident.device_bytes / 2**20:.0f} MiB, streamed table: {resident.streamed}); "
        f"reads_per_buffer for this device: {fits:,}")
    if len(offsets) - 1 > fits:
        log(f"warning: {len(offsets) - 1:,} reads exceed the {fits:,} that peanut map would put in one buffer")
    min_votes = None if args.min_votes in (None, "auto") else int(args.min_votes)

    runs = []
    for i in range(args.runs):
        r = run_buffer(device, resident, codes, offsets, args.min_identity, min_votes, args.validate_all)
        log(f"run {i + 1}: device total {r['seconds']['device total']:.2f} s")
        runs.append(r)

    print(f"\nmapping core kernels: {len(offsets) - 1:,} reads ({source}) against {index.path} "
          f"(q={index.q}, step={index.step}); device: {device.name}\n")
    print(table(runs))
    if args.json:
        out = {
            "reads": len(offsets) - 1, "read_source": source, "index": index.path, "q": index.q,
            "step": index.step, "device": device.name, "reference_upload_s": upload,
            "resident_bytes": resident.device_bytes, "reads_per_buffer": fits, "runs": runs,
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    index.close()


if __name__ == "__main__":
    main()
