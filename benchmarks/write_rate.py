#!/usr/bin/env python3
"""How fast one output file takes bytes when several writers fill it (docs/gpu.md, "Several GPUs"):

    python3 benchmarks/write_rate.py DIR [--gb 4] [--writers 1,2,4,8] [--chunk-mb 64]

Each writer is a process that writes its share of the file's chunks (chunk i goes to writer i mod n) at their
offsets, as `peanut map`'s mapping processes write their batches' records into one SAM file; ``pwrite``
copies through the kernel's write path (which holds the file's inode lock for each call on most Linux file
systems), ``mmap`` copies into a shared mapping of the file (page faults, no inode lock) after the file was
extended to its size, ``reserved+mmap`` reserves each chunk's range with fallocate first and then copies
through a mapping, as peanut_py/range_writes.py does. Prints one line per writer count and way: GB/s of the whole file, from the first
writer's start to the last one's end. The file is removed afterwards.
"""
import argparse
import mmap
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from peanut_py.range_writes import copy_mapped, reserve, write_at  # noqa: E402


WAYS = ("pwrite", "mmap", "reserved+mmap")


def _fill(path, way, offsets, chunk, start):
    data = os.urandom(chunk)
    start.wait()
    fd = os.open(path, os.O_RDWR)
    try:
        if way == "pwrite":
            for off in offsets:
                write_at(fd, data, off)
        elif way == "reserved+mmap":
            for off in offsets:
                if not reserve(fd, off, chunk):
                    raise SystemExit("fallocate: not supported here")
                copy_mapped(fd, data, off)
        else:
            for off in offsets:
                with mmap.mmap(fd, chunk, offset=off) as m:
                    m[:] = data
    finally:
        os.close(fd)


def rate(path, way, writers, total, chunk):
    """GB/s of ``writers`` processes filling a new ``total``-byte file at ``path`` in ``chunk``-byte pieces."""
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o644)
    if way == "mmap":
        os.ftruncate(fd, total)
    os.close(fd)
    context = multiprocessing.get_context("fork")
    start = context.Barrier(writers + 1)
    offsets = list(range(0, total, chunk))
    procs = [context.Process(target=_fill, args=(path, way, offsets[i::writers], chunk, start))
             for i in range(writers)]
    for p in procs:
        p.start()
    start.wait()
    t0 = time.perf_counter()
    for p in procs:
        p.join()
    seconds = time.perf_counter() - t0
    size = os.path.getsize(path)
    os.unlink(path)
    if any(p.exitcode for p in procs) or size != total:
        raise SystemExit(f"{path}: a writer failed (exit codes {[p.exitcode for p in procs]}, size {size})")
    return total / seconds / 1e9


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--gb", type=float, default=4.0)
    p.add_argument("--writers", default="1,2,4,8")
    p.add_argument("--chunk-mb", type=int, default=64)
    args = p.parse_args(argv)
    chunk = args.chunk_mb << 20
    total = max(1, int(args.gb * 1e9) // chunk) * chunk
    path = os.path.join(args.dir, f"write_rate.{os.getpid()}.tmp")
    for writers in (int(w) for w in args.writers.split(",")):
        line = "  ".join(f"{way} {rate(path, way, writers, total, chunk):.2f} GB/s" for way in WAYS)
        print(f"{total / 1e9:.1f} GB in {chunk >> 20} MiB chunks, {writers} writer(s): {line}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
