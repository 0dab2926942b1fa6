#!/usr/bin/env python3
"""Whether the OpenCL driver keeps a core busy while a thread waits for the device:

    python3 benchmarks/device_wait_cpu.py [SECONDS]

Enqueues a kernel that runs for about SECONDS (default 1) on the first device, then waits for it with
``queue.finish()`` and with a blocking read, and prints each wait's wall time and the waiting thread's own CPU
time (``time.thread_time``). A driver that spins shows CPU close to the wall; one that sleeps shows almost none.
"""
import sys
import time

import numpy as np
import pyopencl as cl

SOURCE = """
__kernel void spin(__global uint *out, const uint rounds) {
    uint x = get_global_id(0);
    for (uint i = 0; i < rounds; ++i) x = x * 1103515245u + 12345u;
    out[get_global_id(0)] = x;
}
"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    target = float(argv[0]) if argv else 1.0
    ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
    queue = cl.CommandQueue(ctx)
    spin = cl.Kernel(cl.Program(ctx, SOURCE).build(), "spin")
    n = 1 << 16
    out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, 4 * n)
    host = np.empty(n, np.uint32)
    rounds = 1 << 16
    while True:  # find a round count that runs about `target` seconds
        t = time.perf_counter()
        spin(queue, (n,), None, out, np.uint32(rounds))
        queue.finish()
        took = time.perf_counter() - t
        if took >= target / 4 or rounds >= 1 << 30:
            break
        rounds *= 4
    rounds = min(int(rounds * target / max(took, 1e-6)), (1 << 32) - 1)
    for how in ("finish", "blocking read"):
        spin(queue, (n,), None, out, np.uint32(rounds))
        t, c = time.perf_counter(), time.thread_time()
        if how == "finish":
            queue.finish()
        else:
            cl.enqueue_copy(queue, host, out, is_blocking=True)
        wall, cpu = time.perf_counter() - t, time.thread_time() - c
        print(f"{queue.device.name}: wait by {how}: {wall:.3f} s, the waiting thread's CPU {cpu:.3f} s", flush=True)


if __name__ == "__main__":
    main()
