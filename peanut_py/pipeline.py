"""Threads and bounded queues: reader -> device(s) [-> host stage] -> postprocess pool [-> batch step -> pool]
-> writer.

The device thread works on batch k+1 while the pool postprocesses batch k and the writer (the calling
thread) writes batch k-1.  With several devices, each has a device thread taking the next batch as it
becomes free, and their results are put back into input order before anything downstream sees them.  An optional host stage (pairs: the insert-size estimate, then mate rescue) runs
in a thread of its own between the device thread and the pool.  A batch's postprocessing may come in two
phases (TwoPhaseSteps: the final alignment on the device): the pool runs its plans, a batch-step thread
joins them in one call per batch, and the pool runs the finishing steps that call returns.  Output order
equals input order because the writer consumes the pool's futures in submission order. The first error in
any stage stops every stage and is re-raised in the caller.
"""
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, NamedTuple

from .allocator import keep_freed_memory

_END = object()

# CPython hands the GIL to a waiting thread only after this long (default 5 ms). The device thread waits for
# the GIL after every blocking OpenCL call while postprocessing threads run short GIL-holding steps, so at the
# default a fast device would spend much of its time waiting for hand-overs (docs/gpu.md, "GIL").
SWITCH_INTERVAL = 0.0005


class TwoPhaseSteps(NamedTuple):
    """A batch's postprocessing in two phases: ``plans`` run on the pool, then ``join(their results)`` runs
    once for the batch in the batch-step thread and returns the finishing steps, which run on the pool."""

    plans: List[Callable]
    join: Callable


class _Failed:
    def __init__(self, exc):
        self.exc = exc


class Stopped(Exception):
    """Raised inside a stage when another stage failed; never escapes run_pipeline."""


class _Channel:
    """A bounded queue whose blocking operations give up once the pipeline is stopping."""

    def __init__(self, stop, size):
        self.q = queue.Queue(maxsize=size)
        self.stop = stop

    def put(self, item):
        while True:
            if self.stop.is_set() and not isinstance(item, _Failed):
                raise Stopped()
            try:
                self.q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def get(self):
        while True:
            try:
                return self.q.get(timeout=0.1)
            except queue.Empty:
                if self.stop.is_set():
                    raise Stopped() from None


class _InOrder:
    """Results of several device threads, handed out in input order: ``put(seq, item)`` from any thread,
    ``get()`` the item of the next sequence number, or _END once every producer has called ``put_end()`` and
    all items were taken. Items wait here only while an earlier batch is still on another device; a fast
    device that gets ``window`` batches ahead of a slow one waits, so the held results stay bounded."""

    def __init__(self, stop, producers, window=None):
        self.stop = stop
        self.items = {}
        self.next = 0
        self.open = producers
        self.window = window if window is not None else 2 * producers
        self.cond = threading.Condition()

    def put(self, seq, item):
        with self.cond:
            # the batch the sequencer waits for always fits (seq == next), so this wait cannot deadlock
            while seq >= self.next + self.window:
                if self.stop.is_set():
                    raise Stopped()
                self.cond.wait(timeout=0.1)
            self.items[seq] = item
            self.cond.notify_all()

    def put_end(self):
        with self.cond:
            self.open -= 1
            self.cond.notify_all()

    def get(self):
        with self.cond:
            while True:
                if self.next in self.items:
                    self.next += 1
                    self.cond.notify_all()
                    return self.items.pop(self.next - 1)
                if self.open == 0:
                    return _END
                if self.stop.is_set():
                    raise Stopped()
                self.cond.wait(timeout=0.1)


class StageTimes:
    """Seconds per stage and counters from the postprocessing steps, summed over the run."""

    def __init__(self):
        self.seconds = {}
        self.counts = {}
        self._lock = threading.Lock()

    def count(self, stats):
        with self._lock:
            for key, value in stats.items():
                self.counts[key] = self.counts.get(key, 0) + value

    def add(self, stage, seconds):
        with self._lock:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds


class Progress:
    """Reads done and reads/s on stderr every ``interval`` seconds (never per read)."""

    def __init__(self, log, interval=5.0):
        self.log = log
        self.interval = interval
        self.start = time.perf_counter()
        self.last = self.start
        self.reads = 0

    def advance(self, n):
        self.reads += n
        now = time.perf_counter()
        if self.log is not None and now - self.last >= self.interval:
            self.last = now
            self.log(f"{self.reads:,} reads done, {self.reads / (now - self.start):,.0f} reads/s")


def postprocess_threads(threads):
    """Workers of the postprocessing pool for ``-t threads``. As bwa's -t counts all its threads, the pool
    leaves two of them to the reader and device threads once there are more than two, so that ``-t`` equal to
    the number of cores does not oversubscribe them."""
    threads = max(1, int(threads))
    return threads if threads <= 2 else max(2, threads - 2)


def run_pipeline(batches, device_step, post_steps, write, threads=1, queue_size=2, log=None, times=None,
                 host_stage=None, host_name="rescue"):
    """Run the mapping pipeline.

    ``batches``: iterable of read batches (consumed in a reader thread).
    ``device_step(batch) -> result`` runs in the device thread; a list of them runs one device thread each
    (one per device), every batch on whichever is free, the results taken downstream in input order.
    ``host_stage(items) -> items`` (optional) runs in a thread of its own after the device thread, so that it
    works on batch k while the device thread maps batch k+1: a generator over the device's ``(batch, result)``
    pairs in input order that yields them, changed, in the same order; it may hold some back before it yields
    (pairs: until the insert size is estimated).  Its time, less the time it waits for the device, is reported
    as ``host_name``.
    ``post_steps(batch, result) -> list of callables``: independent chunks of postprocessing; each callable
    returns ``(text, n_reads)`` or ``(text, n_reads, counters)`` and runs on the pool of ``threads`` workers.
    It may return TwoPhaseSteps instead (for every batch of the run): the join's time, less the time it waits
    for the plans, is reported as "batch step".
    ``write(text)`` runs in the calling thread, in input order.
    """
    keep_freed_memory()
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(min(previous_interval, SWITCH_INTERVAL))
    try:
        return _run(batches, device_step, post_steps, write, threads, queue_size, log, times, host_stage,
                    host_name)
    finally:
        sys.setswitchinterval(previous_interval)


def _run(batches, device_step, post_steps, write, threads, queue_size, log, times, host_stage, host_name):
    times = times if times is not None else StageTimes()
    stop = threading.Event()
    to_device = _Channel(stop, queue_size)
    to_host = _Channel(stop, queue_size)
    to_writer = _Channel(stop, queue_size * max(threads, 1) * 2)
    to_join = _Channel(stop, queue_size)
    errors = []
    progress = Progress(log)
    device_steps = list(device_step) if isinstance(device_step, (list, tuple)) else [device_step]
    in_order = _InOrder(stop, len(device_steps)) if len(device_steps) > 1 else None

    def fail(exc):
        if not isinstance(exc, Stopped):
            errors.append(exc)
        stop.set()

    def reader():
        try:
            it = iter(batches)
            seq = 0
            while True:
                t = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                times.add("read", time.perf_counter() - t)
                to_device.put((seq, batch))
                seq += 1
            for _ in device_steps:
                to_device.put(_END)
        except BaseException as exc:  # noqa: BLE001 - forwarded to the caller
            fail(exc)

    pool = ThreadPoolExecutor(max_workers=max(threads, 1), thread_name_prefix="peanut-post")

    def timed(step):
        def run():
            t, c = time.perf_counter(), time.thread_time()
            out = step()
            times.add("postprocess", time.perf_counter() - t)
            # the step's own CPU beside its wall: the rest is waiting (interpreter lock, page faults, a busy host)
            times.add("postprocess CPU", time.thread_time() - c)
            return out

        return run

    def submit(batch, result):
        steps = post_steps(batch, result)
        if isinstance(steps, TwoPhaseSteps):
            to_join.put((steps.join, [pool.submit(timed(plan)) for plan in steps.plans]))
            return
        for step in steps:
            to_writer.put(pool.submit(timed(step)))

    def batch_stepper():
        """Joins two-phase batches; also forwards the end of the stream, which comes after every batch's
        futures were queued for the writer."""
        try:
            while True:
                item = to_join.get()
                if item is _END:
                    break
                join, futures = item
                planned = [f.result() for f in futures]
                t = time.perf_counter()
                steps = join(planned)
                times.add("batch step", time.perf_counter() - t)
                for step in steps:
                    to_writer.put(pool.submit(timed(step)))
            to_writer.put(_END)
        except BaseException as exc:  # noqa: BLE001
            fail(exc)

    def forward(batch, result):
        if host_stage is None:
            submit(batch, result)
        else:
            to_host.put((batch, result))

    def forward_end():
        (to_join if host_stage is None else to_host).put(_END)

    def device_worker(step):
        try:
            while True:
                t = time.perf_counter()
                item = to_device.get()
                # the device thread's waits: for the reader, and (below) for the stages after it
                times.add("device waits for reads", time.perf_counter() - t)
                if item is _END:
                    break
                seq, batch = item
                t, c = time.perf_counter(), time.thread_time()
                result = step(batch)
                t1 = time.perf_counter()
                times.add("device", t1 - t)
                # the device thread's CPU: its host steps, and the driver's own busy waits on the device
                times.add("device CPU", time.thread_time() - c)
                if in_order is None:
                    forward(batch, result)
                else:
                    in_order.put(seq, (batch, result))
                times.add("device hand-off", time.perf_counter() - t1)
            if in_order is None:
                forward_end()
            else:
                in_order.put_end()
        except BaseException as exc:  # noqa: BLE001
            fail(exc)

    def sequencer():
        """Several devices: forwards their results in input order."""
        try:
            while True:
                item = in_order.get()
                if item is _END:
                    break
                forward(*item)
            forward_end()
        except BaseException as exc:  # noqa: BLE001
            fail(exc)

    def host_worker():
        waited = [0.0]

        def items():
            while True:
                t = time.perf_counter()
                item = to_host.get()
                waited[0] += time.perf_counter() - t
                if item is _END:
                    return
                yield item

        try:
            stage = host_stage(items())
            while True:
                t, w = time.perf_counter(), waited[0]
                try:
                    batch, result = next(stage)
                except StopIteration:
                    break
                times.add(host_name, time.perf_counter() - t - (waited[0] - w))
                submit(batch, result)
            to_join.put(_END)
        except BaseException as exc:  # noqa: BLE001
            fail(exc)

    threads_ = [threading.Thread(target=reader, name="peanut-reader", daemon=True)]
    for i, step in enumerate(device_steps):
        name = "peanut-device" if len(device_steps) == 1 else f"peanut-device-{i}"
        threads_.append(threading.Thread(target=device_worker, args=(step,), name=name, daemon=True))
    if in_order is not None:
        threads_.append(threading.Thread(target=sequencer, name="peanut-sequencer", daemon=True))
    if host_stage is not None:
        threads_.append(threading.Thread(target=host_worker, name=f"peanut-{host_name}", daemon=True))
    threads_.append(threading.Thread(target=batch_stepper, name="peanut-batch-step", daemon=True))
    for th in threads_:
        th.start()
    try:
        while True:
            try:
                item = to_writer.get()
            except Stopped:
                break
            if item is _END:
                break
            text, n, *extra = item.result()
            t = time.perf_counter()
            write(text)
            times.add("write", time.perf_counter() - t)
            progress.advance(n)
            for stats in extra:
                times.count(stats)
    except BaseException as exc:  # noqa: BLE001
        fail(exc)
    finally:
        if errors:
            stop.set()
        for th in threads_:
            # after a failure the reader may sit in a slow read; it is a daemon and may be left behind
            th.join(timeout=None if not stop.is_set() else 5)
        pool.shutdown(wait=True, cancel_futures=True)
    if errors:
        raise errors[0]
    return progress.reads, times
