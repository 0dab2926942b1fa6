"""Blocks of records written into one output file at given offsets, on threads of their own.

Several mapping processes fill one SAM file at the offsets the writing process hands out in input order
(shards.py). Two things would make them take turns: a process that waits for its own write to end before it
asks for the next offset, and ``pwrite``, which on Linux's local file systems holds the file's inode lock for
the whole copy, so that writers of one file copy one at a time however many there are (docs/gpu.md, "Where
several GPUs stop scaling"). So a block is queued and written by a writer thread, and where the file system
is one whose reserved blocks cannot run out under a shared mapping (tmpfs, ext4, xfs), a block's range is
first reserved with ``fallocate`` (a full disk is an error there, not a SIGBUS) and then copied through a
shared mapping of the range, which takes no inode lock. Elsewhere, and where a mapping cannot be made
(standard output opened write-only, say), blocks are written with ``pwrite``.
"""
import ctypes
import errno
import functools
import mmap
import os
import queue
import threading

import numpy as np

# file systems on which fallocate reserves the blocks that a later write through a mapping fills (no copy on
# write, no server that may refuse later): only there a full disk cannot surface as SIGBUS mid-copy
MAPPED_FILE_SYSTEMS = frozenset({"tmpfs", "ext4", "xfs"})
# writer threads of one RangeWriter: copies into a shared mapping of one file scale with the writers
# (benchmarks/write_rate.py); two keep a run's copies apart from its postprocessing threads' work
WRITER_THREADS = 2
# madvise's MADV_POPULATE_WRITE (Linux 5.14): a mapping's write faults taken in one call; older Pythons lack the name
POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23 if os.uname().sysname == "Linux" else None)
QUEUED_BLOCKS = 4  # per writer thread: blocks handed over and not yet written (bounds the memory they hold)


def file_system_type(fd):
    """The type of the file system holding the open file ``fd`` (as /proc/self/mountinfo names it), or None."""
    try:
        dev = os.fstat(fd).st_dev
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    found = None
    for line in lines:
        mount, sep, rest = line.partition(" - ")
        fields = mount.split()
        if sep and len(fields) > 2 and fields[2] == wanted and rest.split():
            found = rest.split()[0]  # the last match: a later mount of one device hides an earlier one
    return found


@functools.cache
def _fallocate():
    """libc's fallocate, looked up at the first use (not at import: every `peanut` command imports this
    module), from the process's own symbols (no search for the library); None where it is missing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.fallocate64 if hasattr(libc, "fallocate64") else libc.fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    function.restype = ctypes.c_int
    return function


def reserve(fd, offset, length):
    """Reserve ``length`` bytes of ``fd`` at ``offset`` (the file grows to cover them): True, or False where the
    file system cannot (glibc's posix_fallocate would emulate it by writing, which is not wanted here);
    OSError for a full disk and the like."""
    fallocate = _fallocate()
    if fallocate is None:
        return False
    if fallocate(fd, 0, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENODEV):
        return False
    raise OSError(err, os.strerror(err))


def write_at(fd, data, offset):
    """All of ``data`` into ``fd`` at ``offset`` with pwrite."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def copy_mapped(fd, data, offset):
    """``data`` into ``fd`` at ``offset`` through a shared mapping of that range (reserved beforehand). NumPy
    copies without the interpreter lock, so the process's other threads go on meanwhile."""
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    with mmap.mmap(fd, offset - start + len(data), offset=start) as m:
        if POPULATE_WRITE is not None:
            try:
                m.madvise(POPULATE_WRITE)  # the write faults in one call instead of one per page
            except OSError:
                pass  # a kernel older than 5.14
        target = np.frombuffer(m, dtype=np.uint8)
        np.copyto(target[offset - start:], np.frombuffer(data, dtype=np.uint8))
        del target  # the mapping cannot close while an array still points into it


class RangeWriter:
    """``write(offset, data)`` queues a block for ``threads`` writer threads; ``close()`` waits for every block
    and raises the first error (an OSError of the file), as does a ``write`` after one happened. ``mapped``:
    copy through shared mappings where the file system allows it; worth it only where several writers (of
    this and other processes) fill one file, since one writer's pwrite is faster than its copies through
    page faults."""

    def __init__(self, fd, threads=WRITER_THREADS, mapped=True):
        self.fd = fd
        self.mapped = mapped and _fallocate() is not None and file_system_type(fd) in MAPPED_FILE_SYSTEMS
        self._queue = queue.Queue(QUEUED_BLOCKS * threads)
        self._error = None
        self._threads = [threading.Thread(target=self._run, name=f"range-writer-{i + 1}", daemon=True)
                         for i in range(threads)]
        for t in self._threads:
            t.start()

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is None:
                try:
                    self._write(*item)
                except OSError as e:
                    self._error = e

    def _write(self, offset, data):
        if self.mapped:
            if reserve(self.fd, offset, len(data)):
                try:
                    copy_mapped(self.fd, data, offset)
                    return
                except (OSError, ValueError):
                    pass  # no shared mapping of this file (opened write-only, say): written as below
            self.mapped = False
        write_at(self.fd, data, offset)

    def write(self, offset, data):
        if self._error is not None:
            raise self._error
        if data:
            self._queue.put((offset, data))

    def close(self):
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()
        if self._error is not None:
            raise self._error
