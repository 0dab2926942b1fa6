"""`peanut map` in several mapping processes: each maps every n-th batch of the input with its own device
(or its share of one) and its own share of ``-t``, and writes its records into the output at the offsets this
process hands out in input order (or hands them to this process where the output cannot be written at
offsets: BAM, a pipe, a file opened for appending).

Why processes: within one process the device threads, the reader and the postprocessing threads take turns
at one interpreter lock for their Python steps between kernels and around the nogil loops, so a second GPU,
or more host cores, add little (docs/gpu.md, "Mapping processes"). Processes share nothing but the output.

How the batches are shared: the mapping processes agree on one batch size before the first batch; this
process then cuts uncompressed FASTQ files into batches by byte range (input_ranges.py, on a thread of its
own) and hands batch k to process k mod n, which reads and parses only those bytes
(reads._parts). Other inputs (compressed, FASTA) are parsed whole by every mapping process, which
keeps batch boundaries and record numbers the same in all of them, and each gathers and maps only batches
i, i + n, ... (reads._sharded). For pairs each process estimates the insert size from the same first pairs
(insert_size.estimate_before_run). This process takes batch k's records from process k mod n, in order;
output records do not depend on the batch they were mapped in, so the output is a run of one process's.
"""
import bisect
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import replace

from .errors import PeanutError, error_text
from .input_ranges import Assignment, can_cut, cut
from .options import check
from .pipeline import Progress
from .post_processes import die_with_parent, worker_processes
from .range_writes import RangeWriter

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

    def __init__(self, conn, index, count, started_at, assignments=None):
        self.conn, self.index, self.count, self.started_at = conn, index, count, started_at
        self._assignments = assignments  # the pipe of this process's byte ranges (None: every n-th batch)
        self._lock = threading.Lock()  # log lines come from several threads
        self._fd = None  # the output, where this process writes its records itself
        self._writer = None  # its RangeWriter
        self._output_name = None  # the output as the user named it, for errors

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
        batch_size, target, self._output_name = self.conn.recv()
        if target is not None:
            path = target[0]
            # the output file (its temporary name), or the standard output this process shares
            # read-write: a shared mapping of the file needs it (range_writes.py)
            self._fd = os.open(path, os.O_RDWR) if path is not None else sys.stdout.fileno()
            self._writer = RangeWriter(self._fd)
        return batch_size

    def batches(self, part, batch_size):
        """This process's batches of the run's ``part`` (map_single.SingleEndRun, map_paired.PairedRun)."""
        if self._assignments is None:
            return part.batches(batch_size, shard=(self.index, self.count))
        return part.batches(batch_size, assignments=self._assigned())

    def _assigned(self):
        while True:
            try:
                assignment = self._assignments.recv()
            except (EOFError, OSError):
                raise PeanutError("the writing process ended before the input did") from None
            if assignment is None:
                return
            yield Assignment(*assignment)

    def send(self, data):
        """The pipeline's writer: encoded records, or a BatchEnd. Records go into the output at the offset
        the writing process gives, or through the pipe."""
        if isinstance(data, BatchEnd):
            self._send((_END, data.n))
        elif data and self._fd is not None:
            # the offset comes at once; the copy is left to the writer threads, so that the writing process can
            # hand the next batch's offsets to the next process while this one still copies
            self._send((_PLACE, len(data)))
            offset = self.conn.recv()
            try:
                self._writer.write(offset, data)
            except OSError as e:
                raise self._write_error(e) from None
        elif data:
            self._send((_DATA, len(data)), data)

    def _write_error(self, e):
        return PeanutError(f"{self._output_name}: cannot write: {e.strerror or e}")

    def finish(self, tally):
        if self._writer is not None:
            try:
                self._writer.close()  # every record is in the file before the writing process hears of the end
            except OSError as e:
                raise self._write_error(e) from None
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
    from .device import device_info, is_multi_spec

    indices = _indices(device_spec) if is_multi_spec(device_spec) else None
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


def _indices(spec):
    """The device indices of a multi-device ``--device``. A list of distinct indices is taken as it is, without
    listing the devices (about a second on a host with several GPUs, before any mapping process could start):
    each mapping process opens its own, and names it if it does not exist."""
    from .device import device_indices

    parts = [p.strip() for p in str(spec).split(",")]
    if all(p.isdigit() for p in parts) and len({int(p) for p in parts}) == len(parts):
        return [int(p) for p in parts]
    return device_indices(spec)


def _shared_cap(spec, sharing):
    """The memory cap of one of ``sharing`` processes on the device ``spec`` when the run gave none: an equal
    part of the device's memory, so that together they fit it as one process would."""
    from .device import device_info

    return device_info(spec).global_mem // sharing


def threads_of(threads, n, i):
    """Mapping process ``i``'s share of ``-t threads`` over ``n`` processes (at least one each)."""
    return max(1, threads // n + (1 if i < threads % n else 0))


def _error_message(e):
    """(kind, text, where) of an exception of a mapping process, ``text`` as the CLI would print it; ``where``:
    the read or pair where the batch that met an input error begins (InputError.batch_start), else None."""
    text = error_text(e)
    if text is None:
        return "bug", "".join(traceback.format_exception(e)), None
    return "peanut", text, getattr(e, "batch_start", None)


def _mapping_process(conn, assignments, index, count, started_at, logs, sharing, kwargs):
    """The body of mapping process ``index``: map_reads with a ShardLink; any error goes to the pipe."""
    die_with_parent()
    # Ctrl-C reaches the whole process group; the writing process alone handles it and ends this one
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    link = ShardLink(conn, index, count, started_at, assignments)
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
    def __init__(self, i, process, conn, ranges=None):
        self.i, self.process, self.conn, self.ranges = i, process, conn, ranges
        self.tally = None

    def receive(self):
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(timeout=5)
            code = self.process.exitcode
            raise PeanutError(f"mapping process {self.i + 1} ended without finishing its batches (exit status "
                              f"{code if code is not None else 'unknown'})") from None


class _Cutter(threading.Thread):
    """This process's thread that cuts the input into batches (input_ranges.cut) and sends batch k's byte
    ranges to mapping process k mod n; ``tail_at``: the number of the batch that is the input's tail (read
    in several batches by its process), once cut."""

    def __init__(self, paths, per_unit, paired):
        super().__init__(name="peanut-cut", daemon=True)
        self.paths, self.per_unit, self.paired = paths, per_unit, paired
        self.tail_at, self.error, self.children = None, None, []
        self.firsts = []  # the first read or pair of each batch cut so far

    def begin(self, children, batch_size):
        self.children = children
        # a batch of pairs holds batch_size reads, as in a run of one process (reads._batched)
        self.units = max(1, batch_size // 2) if self.paired else batch_size
        self.start()

    def batch_of(self, unit):
        """The number of the batch that holds read or pair ``unit`` (one that was cut)."""
        return bisect.bisect_right(self.firsts, unit) - 1

    def run(self):
        n = len(self.children)
        try:
            for k, assignment in enumerate(cut(self.paths, self.per_unit, self.units)):
                self.firsts.append(assignment.first)
                if assignment.tail:
                    self.tail_at = k
                self.children[k % n].ranges.send(tuple(assignment))
        except (BrokenPipeError, ConnectionResetError):
            pass  # a mapping process is gone: the reading side reports it
        except BaseException as e:  # noqa: BLE001 - raised by the reading side
            self.error = e
        finally:
            for child in self.children:
                try:
                    child.ranges.send(None)
                except OSError:
                    pass


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
        # the mapping processes read the input themselves (their byte ranges, or all of it); a stream can be
        # read only once
        if log:
            log(f"{display_name(streamed[0])} is a stream (standard input, a pipe): one mapping process, not {n}")
        n = 1
    paths = [reads_path] if mates is None else [reads_path, mates]
    cutting = n > 1 and can_cut(paths)
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
            f"{where}; " + ("each reads the batches this process cuts from the input" if cutting
                            else "each parses the whole input (compressed or FASTA) and maps every n-th batch"))
    context = multiprocessing.get_context("spawn")
    children, finished = [], False
    try:
        # the processes start first: each takes about a second to import, open its device and load the index
        for i, (spec, cap, sharing) in enumerate(assigned):
            parent_end, child_end = context.Pipe()
            ranges_in, ranges_out = context.Pipe(duplex=False) if cutting else (None, None)
            share = replace(run, threads=threads_of(run.threads, n, i), memory_cap=cap, processes=1)
            # the mapping processes encode (SAM text or BAM records) for the format this process writes
            kwargs = dict(common, run=share, device_spec=spec, output_format=sam.output_format(output, output_format),
                          reference=None)  # checked once, here
            process = context.Process(target=_mapping_process, name=f"peanut-map-{i + 1}",
                                      args=(child_end, ranges_in, i, n, started_at, log is not None and i == 0,
                                            sharing, kwargs))
            process.start()
            child_end.close()
            if ranges_in is not None:
                ranges_in.close()
            children.append(_Child(i, process, parent_end, ranges_out))
        index = open_index(index_path)
        try:
            if reference is not None:
                check_reference(index, reference, index_path)
            header = sam.index_header(index, read_group, command_line)
        finally:
            index.close()
        with sam.open_output(output, header, fmt=output_format, threads=run.threads, hit_only=hit_only) as out:
            cutter = _Cutter(paths, 2 if interleaved else 1, mates is not None or interleaved) if cutting else None
            tallies = _receive(children, out, log, cutter)
            if sum(t["reads"] for t in tallies) == 0:
                raise PeanutError(f"{display_name(reads_path)}: empty file (no reads)")
        finished = True
    finally:
        for child in children:
            child.conn.close()
            if child.ranges is not None:
                child.ranges.close()
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
        _, what, text, where = message
        if what == "bug":
            raise RuntimeError(f"mapping process {child.i + 1} failed:\n{text}")
        if where is not None:
            raise _InputFailure(text, where)
        raise PeanutError(text)
    return False


class _InputFailure(PeanutError):
    """A mapping process's input error in the batch that begins at read or pair ``where``."""

    def __init__(self, text, where):
        super().__init__(text)
        self.where = where


def _receive(children, out, log, cutter=None):
    """Agree on the batch size, then write batch k's records from process k mod n until the input ends
    (``cutter``: the _Cutter that hands out the batches, None where each process finds its own); returns
    every process's tally."""
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
        child.conn.send((min(sizes), target, out.path))
    if cutter is not None:
        cutter.begin(children, min(sizes))
    progress = Progress(log)
    n, k = len(children), 0
    place = [None if target is None else target[1]]  # where the next records go, where written directly
    # a process that met an input error ahead of the batch written now: (its batch's number, the error); the
    # batches before it are written on, so that the error reported is the file's first, as with one process
    ahead, failed = None, set()
    while ahead is None or k < ahead[0]:
        child = children[k % n]
        if child.i in failed:
            k += 1  # its batches before its error were read without one
            continue
        try:
            # the tail's batches all come from one process, until its end (it was cut before any came)
            if not _take_batch(child, out, progress, log, place, lambda: cutter is not None and cutter.tail_at == k):
                break
        except _InputFailure as e:
            at = cutter.batch_of(e.where)
            if at <= k:
                raise PeanutError(str(e)) from None
            failed.add(child.i)
            if ahead is None or at < ahead[0]:
                ahead = (at, PeanutError(str(e)))
            continue
        k += 1
    if ahead is not None:
        raise ahead[1]
    if cutter is not None:
        cutter.join()
        if cutter.error is not None:
            raise cutter.error
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


def _take_batch(child, out, progress, log, place, in_tail):
    """Write ``child``'s next batch, or give it the offsets where it writes it itself (``place[0]``: the
    next); in the input's tail (``in_tail()``), all its batches. False if it has none (it sent its tally)."""
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
            if not in_tail():
                return True
        elif kind == _DONE:
            child.tally = message[1]
            return False
        else:
            raise RuntimeError(f"mapping process {child.i + 1}: unexpected {kind!r}")


__all__ = ["map_in_processes", "wanted", "ShardLink", "BatchEnd", "processes_and_devices", "threads_of"]
