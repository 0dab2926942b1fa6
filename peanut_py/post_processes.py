"""Postprocessing in worker processes, so that one process's interpreter lock does not bound how many cores
the chunks of a batch can use.

Each worker opens the index itself (its 2-bit genome is mapped from the file, so the workers share the page
cache) and builds its own :class:`postprocess.Postprocessor`.  A batch and its device result are written
once to a shared-memory segment (pickle protocol 5, the arrays out of band); a chunk's call carries only the
segment's name and the chunk's bounds, and the chunk's SAM text comes back over the worker's own pipe.  The
pipeline's pool threads each wait on one worker, so the steps fit ``pipeline.run_pipeline`` unchanged, and
the output is byte-identical to the threads' (the same functions on the same chunks).

Workers are started by a fork server (a fresh interpreter, not a fork of this process, whose OpenCL driver
state and threads must not be copied); they ignore SIGINT and SIGTERM (the main process handles them and stops
the workers) and die with their parent.
"""
import multiprocessing as mp
import os
import pickle
import queue
import signal
import threading
from collections import OrderedDict
from functools import partial
from multiprocessing import shared_memory

from .errors import PeanutError

WORKERS = ("auto", "threads", "processes")
# --workers auto: processes from this many postprocessing workers on. Threads share one interpreter lock, but
# a chunk takes it only for a few dozen short steps (the per-read work runs in nogil Cython), and threads need
# no copy of the batch to shared memory nor the text back through pipes: with 30 workers threads were faster
# (docs/gpu.md, "Worker processes"). With 62, before the per-read work left the lock, processes were faster;
# that is not measured since, so many workers keep them
PROCESSES_MIN_WORKERS = 48
# batches a worker keeps attached: chunks of the batch after the current one may reach it first
ATTACHED_BATCHES = 2
_ALIGN = 64


def use_processes(workers, n_workers, align_on):
    """Whether postprocessing runs in worker processes: ``workers`` "processes", or "auto" with at least
    PROCESSES_MIN_WORKERS workers when the final alignment runs on the CPU (with the device aligner the
    pool's work is small and runs between the batch's device calls, which stay in this process)."""
    if workers not in WORKERS:
        raise ValueError(f"workers must be one of {WORKERS}, not {workers!r}")
    if align_on != "cpu" or workers == "threads":
        return False
    return workers == "processes" or n_workers >= PROCESSES_MIN_WORKERS


def worker_processes(n_workers):
    """Processes for ``n_workers`` postprocessing workers: one each, but no more than the cores this process
    may run on (``-t`` far beyond them would start thousands of interpreters)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(n_workers, cores))


class SharedBatch:
    """A batch and its device result in one shared-memory segment, unlinked when its last chunk is done."""

    def __init__(self, objects, n_chunks, on_close=None):
        buffers = []
        self.meta = pickle.dumps(objects, protocol=5, buffer_callback=buffers.append)
        views = [b.raw() for b in buffers]
        self.layout, size = [], 0
        for view in views:
            size = -(-size // _ALIGN) * _ALIGN
            self.layout.append((size, view.nbytes))
            size += view.nbytes
        self._shm = shared_memory.SharedMemory(create=True, size=max(size, 1))
        self.name = self._shm.name
        for (offset, n), view in zip(self.layout, views):
            self._shm.buf[offset:offset + n] = view
        self._left = n_chunks
        self._lock = threading.Lock()
        self._on_close = on_close

    @property
    def handle(self):
        """What a worker needs to attach: (segment name, pickled skeleton, (offset, size) per buffer)."""
        return self.name, self.meta, self.layout

    def chunk_done(self):
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self.close()

    def close(self):
        """Unlink the segment (workers that still map it keep their pages until they let go)."""
        with self._lock:
            shm, self._shm = self._shm, None
        if shm is not None:
            shm.close()
            shm.unlink()
            if self._on_close is not None:
                self._on_close(self)


class WorkerProcesses:
    """``n`` postprocessing processes, each serving chunk calls over its own pipe; ``call`` may be used from
    several threads at once (each takes an idle worker)."""

    def __init__(self, n, index_path, opts):
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["peanut_py.post_processes", "peanut_py.postprocess", "peanut_py.reference"])
        self._idle = queue.SimpleQueue()
        self._workers = []
        self._live = set()
        self._live_lock = threading.Lock()
        self.n = n
        for i in range(n):
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_serve, args=(child, index_path, opts), name=f"peanut-post-{i}",
                                  daemon=True)
            process.start()
            child.close()
            self._workers.append((process, parent))
            self._idle.put(parent)

    def share(self, objects, n_chunks):
        """``objects`` (picklable; NumPy arrays go to the segment) shared for ``n_chunks`` calls."""
        shared = SharedBatch(objects, n_chunks, on_close=self._forget)
        with self._live_lock:
            self._live.add(shared)
        return shared

    def _forget(self, shared):
        with self._live_lock:
            self._live.discard(shared)

    def call(self, shared, method, *args):
        """``Postprocessor.method(batch, result, *args)`` in a worker on the shared (batch, result): its
        (text, n_reads, stats)."""
        _no_sigpipe_in_this_thread()
        conn = self._idle.get()
        try:
            conn.send((shared.handle, method, args))
            reply = conn.recv()
            if reply[0] == "error":
                raise _worker_error(reply)
            return (conn.recv_bytes(), reply[1], *reply[2])
        except (EOFError, OSError) as e:
            raise PeanutError("a postprocessing worker process ended unexpectedly (killed, or out of memory?)") from e
        finally:
            self._idle.put(conn)
            shared.chunk_done()

    def close(self):
        """Stop the workers (the end of their pipe: nothing is written to a worker that may be gone, which
        would raise SIGPIPE) and unlink every segment still shared."""
        for _, conn in self._workers:
            conn.close()
        for process, _ in self._workers:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
        with self._live_lock:
            live = list(self._live)
        for shared in live:
            shared.close()


class ProcessPostprocessor:
    """A Postprocessor whose CPU-aligned chunk steps run in worker processes; everything else (the rescue's
    offsets, two-phase steps, counts) is the wrapped postprocessor's."""

    def __init__(self, post, workers):
        self._post = post
        self.workers = workers

    def __getattr__(self, name):
        return getattr(self._post, name)

    def chunk_steps(self, batch, result, n_chunks):
        bounds = self._post.chunk_bounds(batch, result, n_chunks)
        shared = self.workers.share((batch, result), len(bounds))
        return [partial(self.workers.call, shared, "process", *b) for b in bounds]

    def pair_chunk_steps(self, batch, result, n_chunks, insert_size):
        bounds = self._post.chunk_bounds(batch, result, n_chunks, paired=True)
        shared = self.workers.share((batch, result), len(bounds))
        return [partial(self.workers.call, shared, "process_pairs", *b, insert_size) for b in bounds]


_thread_state = threading.local()


def _no_sigpipe_in_this_thread():
    """Block SIGPIPE in the calling thread: a write to a worker that died fails with EPIPE here, instead of
    ending the whole process (the command line restores SIGPIPE's default action for `| head`)."""
    if not getattr(_thread_state, "sigpipe_blocked", False) and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
        _thread_state.sigpipe_blocked = True


def _worker_error(reply):
    _, error, text = reply
    if isinstance(error, BaseException):
        return error
    return RuntimeError(f"postprocessing worker: {text}")


# --- the worker side ------------------------------------------------------------------------------------------


def die_with_parent():
    """Linux: end this process (a postprocessing worker, a mapping process: shards.py) when its parent ends,
    however it ends."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Attached:
    """The batches a worker has attached, newest last; the oldest is let go beyond ATTACHED_BATCHES."""

    def __init__(self):
        self._batches = OrderedDict()

    def get(self, handle):
        name, meta, layout = handle
        hit = self._batches.get(name)
        if hit is not None:
            self._batches.move_to_end(name)
            return hit[1]
        shm = shared_memory.SharedMemory(name=name)
        buffers = [shm.buf[offset:offset + n] for offset, n in layout]
        objects = pickle.loads(meta, buffers=buffers)
        del buffers
        self._batches[name] = (shm, objects)
        while len(self._batches) > ATTACHED_BATCHES:
            _, (old, old_objects) = self._batches.popitem(last=False)
            del old_objects
            try:
                old.close()
            except BufferError:  # a view of it still alive; the mapping goes with the last one
                pass
        return objects


def _serve(conn, index_path, opts):
    # a signal to the process group is the main process's to handle: it stops the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent()
    from .genome import HostGenome
    from .postprocess import Postprocessor
    from .reference import ReferenceIndex

    index = ReferenceIndex(index_path)
    post = Postprocessor(index, HostGenome.from_index(index), opts)
    attached = _Attached()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        handle, method, args = message
        try:
            batch, result = attached.get(handle)
            text, n_reads, *stats = getattr(post, method)(batch, result, *args)
            reply = ("ok", n_reads, stats)
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller
            text, reply = None, ("error", e if _picklable(e) else None, f"{type(e).__name__}: {e}")
        try:
            conn.send(reply)
            if text is not None:
                conn.send_bytes(text)
        except OSError:  # the main process is gone
            break
    os._exit(0)


def _picklable(value):
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001
        return False
    return True


__all__ = ["WORKERS", "PROCESSES_MIN_WORKERS", "use_processes", "worker_processes", "SharedBatch", "WorkerProcesses",
           "ProcessPostprocessor"]
