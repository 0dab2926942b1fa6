#!/usr/bin/env python3
"""How long processes take to open their OpenCL device when several start at once (docs/gpu.md, "Where
several GPUs stop scaling": the mapping processes' first batch waits for it):

    python3 benchmarks/device_open_time.py [--processes N] [--visible] [--parent-open]

Starts N processes at once (default: one per GPU, else one); process i imports PyOpenCL, lists the platforms,
takes device i (mod the devices found) and makes a context and a queue on it, and reports the seconds from its
start to the listing and to the queue, and the device's PCI id. ``--visible`` gives process i
CUDA_DEVICE_ORDER=PCI_BUS_ID and CUDA_VISIBLE_DEVICES=i, so that NVIDIA's driver sets up only that GPU there
(the PCI ids show that CUDA's numbering and OpenCL's agree); other vendors' platforms ignore the variables.
``--parent-open``: this process lists the platforms first and keeps them open while the others start, as the
writing process of ``peanut map`` does when it looks up the device type.
"""
import argparse
import json
import multiprocessing
import os
import sys
import time


def pci_id(device):
    """"domain:bus:slot" (hex) of an NVIDIA GPU as cl_nv_device_attribute_query gives them, else None. The
    slot is printed as the driver returns it: on the H200 hosts measured it is the PCI device number that
    nvidia-smi shows, not clinfo's device << 3 | function."""
    import pyopencl as cl

    if "cl_nv_device_attribute_query" not in device.extensions:
        return None
    try:
        bus, slot = (device.get_info(getattr(cl.device_info, f"PCI_{x}_ID_NV")) for x in ("BUS", "SLOT"))
        domain = device.get_info(cl.device_info.PCI_DOMAIN_ID_NV)
    except cl.Error:
        return None
    return f"{domain:04x}:{bus:02x}:{slot:02x}"


def _open(i, visible, queue):
    t0 = time.perf_counter()
    if visible:
        os.environ.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(i))
    import pyopencl as cl

    t_import = time.perf_counter() - t0
    devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    t_list = time.perf_counter() - t0
    device = devices[0 if visible else i % len(devices)]
    context = cl.Context([device])
    cl.CommandQueue(context).finish()
    t_queue = time.perf_counter() - t0
    queue.put(dict(process=i, devices=len(devices), name=device.name, pci=pci_id(device),
                   import_s=round(t_import, 3), listed_s=round(t_list, 3), queue_s=round(t_queue, 3)))


def gpu_count():
    import pyopencl as cl

    return sum(len(p.get_devices(cl.device_type.GPU)) for p in cl.get_platforms())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int)
    p.add_argument("--visible", action="store_true", help="CUDA_VISIBLE_DEVICES=i in process i")
    p.add_argument("--parent-open", action="store_true", help="this process holds the platforms open meanwhile")
    args = p.parse_args(argv)
    n = args.processes
    context = multiprocessing.get_context("spawn")
    if n is None:
        # counted in a process of its own: this one must not hold the GPUs open while the others start
        with context.Pool(1) as pool:
            n = max(1, pool.apply(gpu_count))
    held = None
    if args.parent_open:
        t0 = time.perf_counter()
        import pyopencl as cl

        held = [d for q in cl.get_platforms() for d in q.get_devices()]
        print(json.dumps(dict(parent_listed_s=round(time.perf_counter() - t0, 3), devices=len(held))), flush=True)
    results = context.Queue()
    procs = [context.Process(target=_open, args=(i, args.visible, results)) for i in range(n)]
    for proc in procs:
        proc.start()
    rows = sorted((results.get(timeout=300) for _ in procs), key=lambda r: r["process"])
    for proc in procs:
        proc.join()
    for row in rows:
        print(json.dumps(row), flush=True)
    return 0 if all(proc.exitcode == 0 for proc in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
