#!/usr/bin/env python3
"""Per read buffer: device seconds, page faults, system time and the device memory pool's size.

    python benchmarks/buffer_memory.py INDEX.h5 READS.fq [--buffer-reads 32768] [--buffers 4]

Shows what the first buffer pays for fresh memory (the q-group index's I and S, the raw hits and their sort
scratch are first touched there) against the later buffers, which reuse the pool's blocks (docs/benchmarks.md,
"Where it goes"). Runs on the default OpenCL device (PoCL on a machine without a GPU).
"""
import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from peanut_py import reads as readsmod  # noqa: E402
from peanut_py.device_stage import DeviceStage  # noqa: E402
from peanut_py.device import Device  # noqa: E402
from peanut_py.mapping import open_index  # noqa: E402
from peanut_py.resident import ResidentReference  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("index")
    p.add_argument("reads")
    p.add_argument("--buffer-reads", type=int, default=32768)
    p.add_argument("--buffers", type=int, default=4)
    args = p.parse_args()
    index = open_index(args.index)
    device = Device()
    core = DeviceStage(device, ResidentReference.from_index(device, index), best_stratum=True)
    pool = device.pool
    print(f"device: {device.name}")
    print("| buffer | reads | wall s | index s | filtration s | validation s | minor faults | system s | pool MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, batch in enumerate(readsmod.read_batches(args.reads, max_reads=args.buffer_reads)):
        if k == args.buffers:
            break
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        result = core.map_batch(batch.codes, batch.offsets)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        sec = result.seconds
        print(f"| {k} | {batch.n:,} | {wall:.2f} | {sec['index']:.2f} | {sec['filter']:.2f} | {sec['validate']:.2f} "
              f"| {r1.ru_minflt - r0.ru_minflt:,} | {r1.ru_stime - r0.ru_stime:.2f} | {pool.managed_bytes / 2**20:,.0f} |")


if __name__ == "__main__":
    main()
