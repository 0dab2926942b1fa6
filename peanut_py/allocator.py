"""The C allocator's settings of a mapping process.

The postprocessing threads allocate and free NumPy arrays of a chunk's size (hundreds of kilobytes to a few
megabytes) all the time. glibc's malloc serves such blocks with mmap and gives them back with munmap, and it
trims the heaps of the threads' arenas when their top grows free: every new array then faults its pages in
again, and with many threads the page faults and unmappings queue on the process's memory-map lock (profiles
of the GPU runs show the pool's threads asleep inside their nogil steps). Telling malloc to keep large blocks
in its heaps and not to trim them makes a freed block's pages serve the next array of the same thread. The
memory kept is what a thread's largest chunk needed, a small share of a run's peak (the index dominates).
"""
import ctypes
import ctypes.util
import os

# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 30  # blocks below 1 GiB come from the heaps
# a heap's free top is given back only beyond 2 GiB (mallopt takes an int; a thread's heap never grows that
# large, so no thread's arena is trimmed)
TRIM_THRESHOLD = (1 << 31) - 1
# a user's own settings win (the environment variables glibc reads at start-up)
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")

_done = False


def keep_freed_memory():
    """Apply MMAP_THRESHOLD and TRIM_THRESHOLD once per process with glibc's mallopt; returns whether they
    were applied (False: another C library, a user setting in the environment, or an earlier call)."""
    global _done
    if _done or any(name in os.environ for name in USER_SETTINGS):
        return False
    _done = True
    libc = _glibc()
    if libc is None:
        return False
    ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    return ok


def _glibc():
    """The C library when it is glibc (it has mallopt and gnu_get_libc_version), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    except (OSError, AttributeError):
        return None
    return libc


__all__ = ["keep_freed_memory"]
