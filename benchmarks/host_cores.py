#!/usr/bin/env python3
"""How much compute a host's cores give when many are busy at once:

    python3 benchmarks/host_cores.py [N ...]     # default: 1, half the cores, all of them

Runs N processes at once, each the same fixed integer loop, and prints per N the mean seconds of one loop and
the total rate over that of one process alone. Cores that are hyperthreads of fewer physical cores (as a
virtual machine's may be, whatever lscpu says) show a total rate well below N at the larger N.
"""
import multiprocessing
import os
import sys
import time

LOOP = 3_000_000


def one_loop(_):
    t = time.perf_counter()
    x = 0
    for i in range(LOOP):
        x = (x * 1103515245 + i) & 0xFFFFFFFF
    return time.perf_counter() - t


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cores = os.cpu_count() or 1
    counts = [int(a) for a in argv] or sorted({1, max(1, cores // 2), cores})
    alone = None
    for n in counts:
        with multiprocessing.Pool(n) as pool:
            seconds = pool.map(one_loop, range(n))
        mean = sum(seconds) / n
        if n == 1 and alone is None:
            alone = mean
        rate = f", total rate {n * alone / mean:.1f}x one process" if alone else ""
        print(f"{n} processes: {mean:.3f} s per loop{rate}", flush=True)


if __name__ == "__main__":
    main()
