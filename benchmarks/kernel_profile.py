"""Where the device thread's time goes: one `peanut map` run with OpenCL profiling on, every kernel launch and
copy recorded, and a table of device time per kernel next to the run's wall and its device stage.

    python -m benchmarks.kernel_profile INDEX READS [MATES] [-t 16] [--batch-size N] [--top 30]
    python -m benchmarks.kernel_profile INDEX READS --set filtration.EMIT_BLOCK=64 -o out.sam

The queue is created with CL_QUEUE_PROFILING_ENABLE (which some drivers make a little slower), every kernel
enqueued through pyopencl's invoker and every ``pyopencl.enqueue_copy`` is kept with its event, and after the
run each event's start and end give its device time. ``busy`` is the union of those intervals: the share of
the device stage's wall during which the device computed or copied something; the rest is the device thread's
host work and its waits (for the interpreter lock among them). ``blocking`` counts the copies that made the
calling thread wait and the wall they took.

``--gaps N`` lists where the device sat idle: the commands of each queue in the order the device ran them, and
before each one the time since the device last finished anything of that queue, summed by the line of
peanut_py that enqueued the command (the nearest frame outside device.py and scans.py). A gap is the host
work (and waits for the interpreter lock) between a command's predecessor and its enqueue: the syncs and host
steps that keep the device waiting.

``--set module.NAME=VALUE`` changes a constant of peanut_py (a kernel's block or group size, a knob that picks
one of two kernels) before the run, so that variants are compared in one installation.
"""
import argparse
import collections
import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.append(ROOT)  # after an installed peanut_py (the GPU hosts install it beside the checkout)


@contextmanager
def recorded():
    """While active, pyopencl's queues profile and every kernel launch and ``enqueue_copy`` is kept with its
    event in the yielded record (``events``: (name, event); ``blocking``/``blocking_s``: per thread, the
    copies that made it wait and their wall). pyopencl is restored on exit."""
    import pyopencl as cl
    import pyopencl._cl as _cl

    record = {"events": [], "blocking": collections.Counter(), "blocking_s": collections.Counter(), "sites": []}
    lock = threading.Lock()
    original_queue, launch, copy = cl.CommandQueue, _cl.enqueue_nd_range_kernel, cl.enqueue_copy

    class ProfilingQueue(original_queue):
        def __init__(self, context, device=None, properties=None):
            props = cl.command_queue_properties.PROFILING_ENABLE | (properties or 0)
            super().__init__(context, device, props)

    def recorded_launch(queue, kernel, *args):
        event = launch(queue, kernel, *args)
        with lock:
            record["events"].append((kernel.function_name, event))
            record["sites"].append((queue.int_ptr, _site()))
        return event

    def recorded_copy(queue, dest, src, **kwargs):
        if not isinstance(dest, cl.MemoryObjectHolder):
            kind = "copy to host"
        else:
            kind = "copy on device" if isinstance(src, cl.MemoryObjectHolder) else "copy to device"
        t0 = time.perf_counter()
        event = copy(queue, dest, src, **kwargs)
        with lock:
            if kwargs.get("is_blocking", True):
                name = threading.current_thread().name
                record["blocking"][name] += 1
                record["blocking_s"][name] += time.perf_counter() - t0
            record["events"].append((kind, event))
            record["sites"].append((queue.int_ptr, _site()))
        return event

    cl.CommandQueue, _cl.enqueue_nd_range_kernel, cl.enqueue_copy = ProfilingQueue, recorded_launch, recorded_copy
    try:
        yield record
    finally:
        cl.CommandQueue, _cl.enqueue_nd_range_kernel, cl.enqueue_copy = original_queue, launch, copy


def _site():
    """file:line of the nearest peanut_py frame that is not the device's or the scans' plumbing."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "peanut_py" in name and not name.endswith(("device.py", "scans.py")):
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def idle_gaps(record):
    """{site: (gaps, idle seconds)}: per queue, the device's idle time before each command (since it last
    finished a command of that queue), summed by the site that enqueued the command."""
    per_queue = collections.defaultdict(list)
    for (name, event), (queue, site) in zip(record["events"], record["sites"]):
        try:
            per_queue[queue].append((event.profile.start, event.profile.end, site))
        except Exception:  # noqa: BLE001 - no profiling information
            continue
    gaps = collections.defaultdict(lambda: [0, 0])
    for events in per_queue.values():
        events.sort()
        last_end = None
        for start, end, site in events:
            if last_end is not None and start > last_end:
                gaps[site][0] += 1
                gaps[site][1] += start - last_end
            last_end = end if last_end is None else max(last_end, end)
    return {site: (n, ns / 1e9) for site, (n, ns) in gaps.items()}


def summarize(record):
    """(rows of (name, launches, device seconds), busy seconds, first start, last end) from the events."""
    per = collections.defaultdict(lambda: [0, 0])
    spans = []
    for name, event in record["events"]:
        try:
            start, end = event.profile.start, event.profile.end
        except Exception:  # noqa: BLE001 - an event without profiling information (a user event)
            continue
        per[name][0] += 1
        per[name][1] += end - start
        spans.append((start, end))
    spans.sort()
    busy, cur_s, cur_e = 0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    rows = sorted(((n, c, ns / 1e9) for n, (c, ns) in per.items()), key=lambda r: -r[2])
    first = spans[0][0] if spans else 0
    last = max((e for _, e in spans), default=0)
    return rows, busy / 1e9, (last - first) / 1e9


def set_knobs(assignments):
    """Set module constants of peanut_py before a run, each given as ``module.NAME=VALUE`` (``VALUE`` a Python
    literal; ``module`` below peanut_py, e.g. ``filtration.EMIT_BLOCK=64``): variants of a kernel's launch
    compared in one installation.  Returns the previous values, as the same strings."""
    import ast
    import importlib

    before = []
    for text in assignments:
        target, sep, value = text.partition("=")
        module_name, _, name = target.strip().rpartition(".")
        if not sep or not module_name or not name:
            raise ValueError(f"--set {text!r}: give module.NAME=VALUE, e.g. filtration.EMIT_BLOCK=64")
        module = importlib.import_module(f"peanut_py.{module_name}")
        if not hasattr(module, name):
            raise ValueError(f"--set {text!r}: peanut_py.{module_name} has no {name}")
        before.append(f"{module_name}.{name}={getattr(module, name)!r}")
        setattr(module, name, ast.literal_eval(value.strip()))
    return before


def profile_run(index, reads, mates=None, threads=2, batch_size=None, log=None, output=None):
    """One ``peanut map`` run (SAM to ``output``, default a temporary file) under :func:`recorded`: a dict of
    its ``wall``, its ``stages`` (the run's summary), ``rows``, ``busy`` and ``span`` (:func:`summarize`) and
    the ``record``."""
    from peanut_py.mapping import map_reads
    from peanut_py.options import MapOptions, RunOptions

    with recorded() as record, tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        summary = map_reads(index, reads, MapOptions(), output=output or os.path.join(tmp, "out.sam"),
                            run=RunOptions(threads=threads, batch_size=batch_size), mates=mates, log=log)
        wall = time.perf_counter() - t0
    rows, busy, span = summarize(record)
    return {"wall": wall, "stages": summary.get("stages", {}), "rows": rows, "busy": busy, "span": span,
            "record": record}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index", help="a peanut index (peanut index)")
    ap.add_argument("reads", help="FASTQ or FASTA reads, or the first file of pairs")
    ap.add_argument("mates", nargs="?", help="the second file of pairs")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count(), help="-t of the run (default: all cores)")
    ap.add_argument("--batch-size", type=int, default=None, help="--batch-size of the run (default: the device's)")
    ap.add_argument("--top", type=int, default=30, help="kernels and copies listed (default 30)")
    ap.add_argument("--gaps", type=int, default=0, metavar="N", help="list the N sites with the most idle time")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="set a constant of peanut_py.MODULE before the run (repeatable)")
    ap.add_argument("-o", "--output", help="keep the run's SAM here")
    a = ap.parse_args(argv)
    if a.set:
        set_knobs(a.set)
        print("set " + " ".join(a.set))
    out = profile_run(a.index, a.reads, a.mates, a.threads, a.batch_size, log=lambda m: print(m, file=sys.stderr),
                      output=a.output)
    rows, busy, span, record = out["rows"], out["busy"], out["span"], out["record"]
    total = sum(r[2] for r in rows)
    print(f"wall {out['wall']:.2f} s; device stage {out['stages'].get('device', 0):.2f} s; events span {span:.2f} s, "
          f"device busy {busy:.2f} s ({100 * busy / max(span, 1e-9):.0f} % of the span); summed event time "
          f"{total:.2f} s")
    for name in sorted(record["blocking"]):
        print(f"blocking copies on thread {name}: {record['blocking'][name]:,}, {record['blocking_s'][name]:.2f} s")
    print(f"{'kernel or copy':40s} {'launches':>9s} {'seconds':>8s} {'share':>6s}")
    for name, count, seconds in rows[: a.top]:
        print(f"{name[:40]:40s} {count:9,d} {seconds:8.3f} {100 * seconds / max(total, 1e-9):5.1f}%")
    if a.gaps:
        gaps = sorted(idle_gaps(record).items(), key=lambda kv: -kv[1][1])
        print(f"device idle before commands: {sum(v[1] for _, v in gaps):.2f} s in all")
        print(f"{'enqueued at':40s} {'gaps':>9s} {'seconds':>8s}")
        for site, (n, seconds) in gaps[: a.gaps]:
            print(f"{site[:40]:40s} {n:9,d} {seconds:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
