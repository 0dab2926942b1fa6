"""`peanut map` in several mapping processes: each maps every n-th batch of the input with its own device
(or its share of one) and its own share of ``-t``, and writes its records into the output at the offsets this
process hands out in input order (or hands them to this process where the output cannot be written at
offsets: BAM, a pipe, a file opened for appending).

Why processes: within one process the device threads, the reader and the postprocessing threads take turns
at one interpreter lock for their Python steps between kernels and around the nogil loops, so a second GPU,
or more host cores, add little (docs/gpu.md, "Mapping processes"). Processes share nothing but the output.

How the output stays the same as one process's: every mapping process parses the whole input (so batch
boundaries and record numbers are the same in all of them) but gathers and maps only batches i, i + n, ...
(reads._sharded); they agree on one batch size before the first batch; for pairs each estimates the insert
size from the same first pairs (insert_size.estimate_before_run); this process takes batch k's records from
process k mod n, in order. Output records do not depend on the batch they were mapped in.
"""
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import replace

from .errors import PeanutError
from .options import check
from .pipeline import Progress
from .post_processes import die_with_parent, worker_processes

# messages from a mapping process, each a pickled tuple whose first item is one of these
_LOG, _BATCH_SIZE, _DATA, _PLACE, _END, _DONE, _ERROR = "log", "batch_size", "data", "place", "end", "done", "error"


class BatchEnd:
    """Where a batch's records end (mapping._encoding); ``n`` is the batch's read count."""

    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n


class ShardLink:
    """A mapping process's side of its pipe to the writing process (mapping.map_reads's ``shard``)."""

    BATCH_END = BatchEnd

    def __init__(self, conn, index, count, started_at):
        self.conn, self.index, self.count, self.started_at = conn, index, count, started_at
        self._lock = threading.Lock()  # log lines come from several threads
        self._fd = None  # the output, where this process writes its records itself

    def _send(self, message, data=None):
        with self._lock:
            self.conn.send(message)
            if data is not None:
                self.conn.send_bytes(data)

    def log(self, text):
        self._send((_LOG, text))

    def agree_batch_size(self, batch_size):
        """This process's largest batch in, the run's (the smallest of all processes') out; the output file
        comes with it where this process may write into it itself (sam._Writer.direct_target)."""
        self._send((_BATCH_SIZE, batch_size))
        batch_size, target = self.conn.recv()
        if target is not None:
            path = target[0]
            # the output file (its temporary name), or the standard output this process shares
            self._fd = os.open(path, os.O_WRONLY) if path is not None else sys.stdout.fileno()
        return batch_size

    def send(self, data):
        """The pipeline's writer: encoded records, or a BatchEnd. Records go into the output at the offset
        the writing process gives, or through the pipe."""
        if isinstance(data, BatchEnd):
            self._send((_END, data.n))
        elif data and self._fd is not None:
            self._send((_PLACE, len(data)))
            offset = self.conn.recv()
            view = memoryview(data)
            while view:
                written = os.pwrite(self._fd, view, offset)
                view, offset = view[written:], offset + written
        elif data:
            self._send((_DATA, len(data)), data)

    def finish(self, tally):
        self._send((_DONE, dict(tally, done=time.time() - self.started_at)))


# A GPU's share of -t from which auto gives it two mapping processes: one process with this many threads
# loses much of them to its interpreter lock, and its postprocessing moves into worker processes
# (post_processes.PROCESSES_MIN_WORKERS), which cost more than a second mapping process does (docs/gpu.md,
# "Mapping processes": one GPU at -t 64, 5 M pairs, one process against two).
SPLIT_THREADS = 48


def wanted(processes, device_spec, threads):
    """Whether a run goes through :func:`map_in_processes`: ``--processes`` above one, or auto with several
    devices named or with SPLIT_THREADS threads or more (one or two processes per device; one device may
    still be one process: :func:`processes_and_devices` decides); decided without opening a device."""
    from .device import is_multi_spec

    return processes != 1 and (processes != "auto" or is_multi_spec(device_spec) or threads >= SPLIT_THREADS)


def processes_and_devices(processes, device_spec, memory_cap, threads=1):
    """``(n, [(device spec, memory cap, processes on that device) per mapping process])`` for ``--processes``,
    ``--device`` and ``-t``. auto: per device of ``--device`` (several for all or a list), one process, or two
    for a GPU whose share of ``threads`` reaches SPLIT_THREADS; a number: at most one process per core.
    Processes beyond the devices share them in turn, each with an equal part of ``memory_cap`` (without a cap,
    of the device's memory: :func:`_shared_cap`)."""
    from .device import device_indices, device_info, is_multi_spec

    indices = device_indices(device_spec) if is_multi_spec(device_spec) else None
    if processes == "auto":
        d = len(indices) if indices is not None else 1
        split = threads // d >= SPLIT_THREADS and \
            device_info(device_spec if indices is None else str(indices[0])).type == "GPU"
        n = d * (2 if split else 1)
    else:
        # no more than the cores this process may run on: each mapping process keeps at least one busy
        n = worker_processes(int(processes))
    if indices is None:
        return n, [(device_spec, None if memory_cap is None else memory_cap // n, n)] * n
    if n < len(indices):
        # fewer processes than devices: each runs several devices, as one process runs them all
        return n, [(",".join(str(d) for d in indices[i::n]), memory_cap, 1) for i in range(n)]
    sharing = [sum(1 for j in range(n) if j % len(indices) == i % len(indices)) for i in range(n)]
    return n, [(str(indices[i % len(indices)]), None if memory_cap is None else memory_cap // sharing[i],
                sharing[i]) for i in range(n)]


def _shared_cap(spec, sharing):
    """The memory cap of one of ``sharing`` processes on the device ``spec`` when the run gave none: an equal
    part of the device's memory, so that together they fit it as one process would."""
    from .device import device_info

    return device_info(spec).global_mem // sharing


def threads_of(threads, n, i):
    """Mapping process ``i``'s share of ``-t threads`` over ``n`` processes (at least one each)."""
    return max(1, threads // n + (1 if i < threads % n else 0))


def _error_message(e):
    """(kind, text) of an exception of a mapping process, as the CLI would print it."""
    if isinstance(e, PeanutError):
        return "peanut", str(e)
    if isinstance(e, MemoryError):
        return "peanut", "out of memory"
    if type(e).__module__.startswith("pyopencl"):
        return "peanut", f"OpenCL device error ({type(e).__name__}): {' '.join(str(e).split())[:300]}"
    return "bug", "".join(traceback.format_exception(e))


def _mapping_process(conn, index, count, started_at, logs, sharing, kwargs):
    """The body of mapping process ``index``: map_reads with a ShardLink; any error goes to the pipe."""
    die_with_parent()
    # Ctrl-C reaches the whole process group; the writing process alone handles it and ends this one
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    link = ShardLink(conn, index, count, started_at)
    try:
        from .device import DeviceOpening

        run = kwargs["run"]
        if sharing > 1 and run.memory_cap is None:
            kwargs["run"] = run = replace(run, memory_cap=_shared_cap(kwargs["device_spec"], sharing))
        # the device comes up while the mapping modules load and the index opens, as in cli.cmd_map
        opening = DeviceOpening(kwargs["device_spec"], run.memory_cap)
        try:
            from .mapping import map_reads

            map_reads(log=link.log if logs else None, shard=link, devices=opening, **kwargs)
        finally:
            opening.join()
        status = 0
    except BaseException as e:  # noqa: BLE001 - reported by the writing process
        status = 1
        try:
            link._send((_ERROR,) + _error_message(e))
        except OSError:
            pass
    conn.close()
    # everything this process had to say is said: skip the interpreter's and the OpenCL driver's teardown,
    # which the writing process would otherwise wait for
    sys.stderr.flush()
    os._exit(status)


class _Child:
    def __init__(self, i, process, conn):
        self.i, self.process, self.conn = i, process, conn
        self.tally = None

    def receive(self):
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(timeout=5)
            code = self.process.exitcode
            raise PeanutError(f"mapping process {self.i + 1} ended without finishing its batches (exit status "
                              f"{code if code is not None else 'unknown'})") from None


def _merge(tallies):
    """One tally (mapping._pipeline) of the tallies of all mapping processes."""
    def add(dicts):
        out = {}
        for d in dicts:
            for key, value in d.items():
                out[key] = out.get(key, 0) + value
        return out

    first = [t["first_batch"] for t in tallies if t["first_batch"] is not None]
    details = dict(tallies[0]["details"])
    for key in ("rescue_windows", "rescued_hits"):
        if key in details:
            details[key] = sum(t["details"][key] for t in tallies)
    return {"reads": sum(t["reads"] for t in tallies), "counts": add(t["counts"] for t in tallies),
            "stages": add(t["stages"] for t in tallies), "device_parts": add(t["device_parts"] for t in tallies),
            "stats": add(t["stats"] for t in tallies), "first_batch": min(first) if first else None,
            "details": details}


def map_in_processes(index_path, reads_path, opts, output=None, run=None, device_spec=None, read_group=None,
                     reference=None, command_line=None, log=None, mates=None, interleaved=False,
                     insert_size=None, output_format=None, hit_only=False):
    """map_reads (mapping.py) in ``run.processes`` mapping processes; returns the summary. One process is
    map_reads itself."""
    from . import sam
    from .input_streams import display_name, readable_again

    check(opts)
    check(run)
    n, assigned = processes_and_devices(run.processes, device_spec, run.memory_cap, run.threads)
    streamed = [p for p in (reads_path, mates) if p is not None and not readable_again(p)]
    if n > 1 and streamed:
        # every mapping process reads the whole input; a stream can be read only once
        if log:
            log(f"{display_name(streamed[0])} is a stream (standard input, a pipe): one mapping process, not {n}")
        n = 1
    common = dict(index_path=index_path, reads_path=reads_path, opts=opts, read_group=read_group,
                  reference=reference, command_line=command_line, mates=mates, interleaved=interleaved,
                  insert_size=insert_size, hit_only=hit_only)
    if n == 1:
        from .mapping import map_reads

        return map_reads(output=output, run=run, device_spec=device_spec, log=log, output_format=output_format,
                         **common)
    from .mapping import check_reference, open_index, prepare_output, summarize

    prepare_output(index_path, reads_path, mates, reference, output, output_format, log)
    t_start = time.perf_counter()
    started_at = time.time()
    if log:
        shares = sorted({threads_of(run.threads, n, i) for i in range(n)})
        specs = [spec for spec, _, _ in assigned]
        where = (f"all on device {specs[0]}" if specs[0] is not None else "all on the default device") \
            if len(set(specs)) == 1 else "on devices " + ", ".join(specs)
        log(f"-t {run.threads}: {n} mapping processes with {' or '.join(map(str, shares))} of the threads each, "
            f"{where}")
    context = multiprocessing.get_context("spawn")
    children, finished = [], False
    try:
        # the processes start first: each takes about a second to import, open its device and load the index
        for i, (spec, cap, sharing) in enumerate(assigned):
            parent_end, child_end = context.Pipe()
            share = replace(run, threads=threads_of(run.threads, n, i), memory_cap=cap, processes=1)
            # the mapping processes encode (SAM text or BAM records) for the format this process writes
            kwargs = dict(common, run=share, device_spec=spec, output_format=sam.output_format(output, output_format),
                          reference=None)  # checked once, here
            process = context.Process(target=_mapping_process, name=f"peanut-map-{i + 1}",
                                      args=(child_end, i, n, started_at, log is not None and i == 0, sharing,
                                            kwargs))
            process.start()
            child_end.close()
            children.append(_Child(i, process, parent_end))
        index = open_index(index_path)
        try:
            if reference is not None:
                check_reference(index, reference, index_path)
            rg_line = sam.parse_read_group(read_group)[0] if read_group else None
            header = sam.sam_header(index.names, index.lengths, md5s=index.md5s, read_group=rg_line,
                                    program_command_line=command_line)
        finally:
            index.close()
        with sam.open_output(output, header, fmt=output_format, threads=run.threads, hit_only=hit_only) as out:
            tallies = _receive(children, out, log)
            if sum(t["reads"] for t in tallies) == 0:
                raise PeanutError(f"{display_name(reads_path)}: empty file (no reads)")
        finished = True
    finally:
        for child in children:
            child.conn.close()
            if not finished:
                # after an error the others may sit in a pipe that is no longer read
                child.process.kill()
                child.process.join()
        # after a run the processes end on their own (os._exit once they sent their tally); multiprocessing
        # reaps them later, so their exit does not hold up the summary
    from .map_paired import PairedRun
    from .map_single import SingleEndRun

    paired = mates is not None or interleaved
    part_summary = PairedRun.summary if paired else SingleEndRun.summary
    if log:
        first = [t["first_batch"] for t in tallies if t["first_batch"] is not None]
        done = [t["done"] for t in tallies]
        log(f"mapping processes: the first batch on their devices after {min(first, default=0):.1f}-"
            f"{max(first, default=0):.1f} s, done after {min(done):.1f}-{max(done):.1f} s")
    return summarize(_merge(tallies), part_summary, time.perf_counter() - t_start, log)


def _handle(child, message, log):
    """A message that may come at any time: a log line (True), an error (raised); else False."""
    kind = message[0]
    if kind == _LOG:
        if log:
            log(message[1])
        return True
    if kind == _ERROR:
        _, what, text = message
        if what == "bug":
            raise RuntimeError(f"mapping process {child.i + 1} failed:\n{text}")
        raise PeanutError(text)
    return False


def _receive(children, out, log):
    """Agree on the batch size, then write batch k's records from process k mod n until the input ends;
    returns every process's tally."""
    sizes = []
    for child in children:
        while True:
            message = child.receive()
            if _handle(child, message, log):
                continue
            if message[0] != _BATCH_SIZE:
                raise RuntimeError(f"mapping process {child.i + 1}: {message[0]!r} before the batch size")
            sizes.append(message[1])
            break
    target = out.direct_target()
    for child in children:
        child.conn.send((min(sizes), target))
    progress = Progress(log)
    n, k = len(children), 0
    place = [None if target is None else target[1]]  # where the next records go, where written directly
    while True:
        child = children[k % n]
        if not _take_batch(child, out, progress, log, place):
            break
        k += 1
    if target is not None:
        out.moved_to(place[0])
    for child in children:
        while child.tally is None:
            message = child.receive()
            if _handle(child, message, log):
                continue
            if message[0] != _DONE:
                raise RuntimeError(f"mapping process {child.i + 1} sent {message[0]!r} after the input ended")
            child.tally = message[1]
    return [child.tally for child in children]


def _take_batch(child, out, progress, log, place):
    """Write ``child``'s next batch, or give it the offsets where it writes it itself (``place[0]``: the
    next); False if it has none (it sent its tally)."""
    while True:
        message = child.receive()
        if _handle(child, message, log):
            continue
        kind = message[0]
        if kind == _PLACE:
            child.conn.send(place[0])
            place[0] += message[1]
        elif kind == _DATA:
            out.write_encoded(child.conn.recv_bytes())
        elif kind == _END:
            progress.advance(message[1])
            return True
        elif kind == _DONE:
            child.tally = message[1]
            return False
        else:
            raise RuntimeError(f"mapping process {child.i + 1}: unexpected {kind!r}")


__all__ = ["map_in_processes", "wanted", "ShardLink", "BatchEnd", "processes_and_devices", "threads_of"]
