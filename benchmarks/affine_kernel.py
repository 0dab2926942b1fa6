#!/usr/bin/env python3
"""Alignments per second of the final alignment: align.align_batch (CPU, one thread) vs
affine.align_batch_device (kernels/affine.cl) on the same pairs (issue 8).

    python benchmarks/affine_kernel.py                          # 100k pairs of 100 and 150 bp, +-10 band
    python benchmarks/affine_kernel.py --pairs 20000 --device 0 --band 30 --layout interleaved

Pairs: a random reference window (seeded NumPy), a read drawn from its middle with ~1 % errors (80 %
substitutions, 10 % 1-3 bp insertions, 10 % 1-3 bp deletions), window = read source +- band, band diagonals
[0, 2 band] as the postprocessor uses them; local mode with bwa-mem scores unless --semiglobal. Each path runs
once to warm up (kernel compilation, first touch of device memory), then --runs times; the best run counts.
Device times include upload, the kernels and download (the whole call). Both paths must give identical
results; the script checks and exits non-zero if not. Prints a Markdown table.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from peanut_py.align_device import align_batch_device, default_layout  # noqa: E402
from peanut_py.align import align_batch  # noqa: E402
from peanut_py.device import Device  # noqa: E402


def simulate(n_pairs, length, band, error_rate, seed):
    """Flat read/window arrays of ``n_pairs`` pairs (align_batch's input) and the global window starts."""
    rng = np.random.default_rng(seed)
    span = length + 16  # source bases a read may consume (deletions)
    src = rng.integers(0, 4, size=(n_pairs, span + 2 * band), dtype=np.uint8)
    reads = np.empty((n_pairs, length), dtype=np.uint8)
    for p in range(n_pairs):
        core = src[p, band:]  # the read starts on diagonal `band` of its window
        # copy the source up to each error event: substitution 80 %, 1-3 bp insertion 10 %, 1-3 bp deletion 10 %
        read, k, last = [], 0, 0
        for q in np.flatnonzero(rng.random(length) < error_rate):
            read.append(core[k:k + q - last])
            k += q - last
            last = q
            x = rng.random()
            if x < 0.8:
                read.append(np.array([(core[k] + rng.integers(1, 4)) % 4], dtype=np.uint8))
                k += 1
                last += 1
            elif x < 0.9:
                read.append(rng.integers(0, 4, size=int(rng.integers(1, 4)), dtype=np.uint8))
            else:
                k += int(rng.integers(1, 4))
        read.append(core[k:k + length])
        read = np.concatenate(read)
        assert read.size >= length
        reads[p] = read[:length]
    wins = src[:, :length + 2 * band]
    roff = np.arange(n_pairs + 1, dtype=np.int64) * length
    foff = np.arange(n_pairs + 1, dtype=np.int64) * wins.shape[1]
    gstart = 1024 + np.arange(n_pairs, dtype=np.int64) * 1000
    return reads.ravel(), roff, np.ascontiguousarray(wins).ravel(), foff, gstart


def best_time(fn, runs):
    result, best = None, float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=100_000, help="pairs per read length (default 100,000)")
    ap.add_argument("--lengths", default="100,150", help="read lengths, comma-separated (default 100,150)")
    ap.add_argument("--band", type=int, default=10, help="window = read source +- BAND, diagonals [0, 2 BAND]")
    ap.add_argument("--errors", type=float, default=0.01, help="error rate per read base (default 0.01)")
    ap.add_argument("--semiglobal", action="store_true", help="semiglobal instead of local mode")
    ap.add_argument("--device", help="OpenCL device index or name substring (default: peanut's default)")
    ap.add_argument("--layout", choices=("interleaved", "item"), help="scratch layout (default: by device type)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per path after a warm-up (default 3)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)

    device = Device(args.device)
    layout = args.layout or default_layout(device)
    local = not args.semiglobal
    print(f"device: {device.info.describe()}; layout {layout}; {'local' if local else 'semiglobal'} mode, "
          f"bwa-mem scores, best of {args.runs}", flush=True)
    rows = []
    for length in (int(x) for x in args.lengths.split(",")):
        batch = simulate(args.pairs, length, args.band, args.errors, args.seed)
        call = (*batch, 0, 2 * args.band, local)
        cpu_t, cpu = best_time(lambda: align_batch(*call), args.runs)
        align_batch_device(device, *call, layout=layout)  # warm-up: compilation, memory pool
        dev_t, dev = best_time(lambda: align_batch_device(device, *call, layout=layout), args.runs)
        for field in cpu._fields:
            if not np.array_equal(getattr(cpu, field), getattr(dev, field)):
                sys.exit(f"device and CPU results differ in {field} ({length} bp)")
        rows.append((length, cpu_t, dev_t))
        print(f"  {length} bp: CPU {args.pairs / cpu_t:,.0f}/s, device {args.pairs / dev_t:,.0f}/s", flush=True)

    print(f"\n| read, band | pairs | align_batch (CPU, 1 thread) | align_batch_device ({device.name}) | ratio |")
    print("|---|---|---|---|---|")
    for length, cpu_t, dev_t in rows:
        print(f"| {length} bp, ±{args.band} | {args.pairs:,} | {args.pairs / cpu_t:,.0f} /s | "
              f"{args.pairs / dev_t:,.0f} /s | {cpu_t / dev_t:.2f}x |")


if __name__ == "__main__":
    main()
