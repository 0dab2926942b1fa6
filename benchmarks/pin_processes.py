#!/usr/bin/env python3
"""Pin the mapping processes of a running `peanut map` to the cores next to their GPUs, from outside, to
measure whether placing them helps before peanut-py does it itself (docs/gpu.md, "Several GPUs"):

    python3 benchmarks/pin_processes.py --under PID --gpus N [--seconds 120]

Watches the processes below PID (a measure.py or a peanut process) for mapping processes (multiprocessing's
spawned children, in the order they started) and sets the CPU affinity of every thread of mapping process i,
again every 50 ms so that threads started later are caught, to its share of the CPUs local to GPU i mod N
(the PCI device's local_cpulist in sysfs, found through nvidia-smi's bus id; OpenCL's and nvidia-smi's GPU
numbering agree on the hosts measured): processes on GPUs of one NUMA node split that node's CPUs into
consecutive blocks. Prints the plan once, as JSON. Ends when PID ends or after ``--seconds``.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def cpu_list(text):
    """The CPUs of a sysfs list such as "0-15,32-47"."""
    cpus = []
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def gpu_local_cpus(n_gpus):
    """[sorted CPUs local to GPU g] for g < n_gpus, from nvidia-smi's bus ids; every allowed CPU where unknown."""
    allowed = sorted(os.sched_getaffinity(0))
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return [allowed] * n_gpus
    local = {}
    for line in out.strip().splitlines():
        index, bus = (x.strip() for x in line.split(","))
        domain, rest = bus.split(":", 1)
        path = f"/sys/bus/pci/devices/{int(domain, 16):04x}:{rest.lower()}/local_cpulist"
        try:
            with open(path) as f:
                local[int(index)] = [c for c in cpu_list(f.read()) if c in set(allowed)] or allowed
        except OSError:
            local[int(index)] = allowed
    return [local.get(g, allowed) for g in range(n_gpus)]


def plan(n_processes, n_gpus, local):
    """[CPUs of mapping process i]: the processes whose GPUs share a set of local CPUs split it in order."""
    groups = {}
    for i in range(n_processes):
        groups.setdefault(tuple(local[i % n_gpus]), []).append(i)
    out = [None] * n_processes
    for cpus, members in groups.items():
        for k, i in enumerate(members):
            lo, hi = k * len(cpus) // len(members), (k + 1) * len(cpus) // len(members)
            out[i] = list(cpus[lo:hi]) or list(cpus)
    return out


def descendants(pid):
    """Every process below ``pid`` (from /proc's children lists)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def is_mapping_process(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ")
    except OSError:
        return False
    return b"spawn_main" in cmd and b"resource_tracker" not in cmd


def pin(pid, cpus):
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setaffinity(int(t), cpus)
            except OSError:
                pass
    except OSError:
        pass


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--under", type=int, required=True)
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--processes", type=int, help="mapping processes expected (default: --gpus)")
    p.add_argument("--seconds", type=float, default=120)
    args = p.parse_args(argv)
    n = args.processes or args.gpus
    local = gpu_local_cpus(args.gpus)
    cpus = plan(n, args.gpus, local)
    print(json.dumps({"local": [f"{c[0]}-{c[-1]} ({len(c)})" for c in local],
                      "plan": [f"{c[0]}-{c[-1]} ({len(c)})" for c in cpus]}), flush=True)
    order, t0 = [], time.monotonic()
    while time.monotonic() - t0 < args.seconds and os.path.exists(f"/proc/{args.under}"):
        for pid in sorted(descendants(args.under)):
            if pid not in order and len(order) < n and is_mapping_process(pid):
                order.append(pid)
        for i, pid in enumerate(order):
            pin(pid, cpus[i])
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
