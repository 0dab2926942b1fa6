# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Reference windows unpacked from the 2-bit packed sequence without the GIL (wrapped by genome.py)."""
import sys

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.string cimport memcpy

from peanut_py._hints cimport prefetch
from peanut_py._search cimport first_above

cnp.import_array()

# The four codes of the four bases packed in one byte, as the bytes of a uint32 (first base in the lowest bits
# of the byte and, on a little-endian host, in the first byte of the word): windows are unpacked a byte of
# the packed sequence at a time.
cdef uint32_t _FOUR[256]
cdef int _b
for _b in range(256):
    _FOUR[_b] = (_b & 3) | ((_b >> 2) & 3) << 8 | ((_b >> 4) & 3) << 16 | ((_b >> 6) & 3) << 24
cdef bint _LITTLE = sys.byteorder == "little"

# windows lie at random places of a genome far larger than the caches: each one's bases are fetched from
# memory this many windows ahead, so that the fetches overlap instead of stalling one after the other
cdef enum:
    PREFETCH_AHEAD = 8


def unpack_windows(const uint32_t[::1] words, const int64_t[::1] run_start, const int64_t[::1] run_end,
                   const int64_t[::1] starts, const int64_t[::1] lengths):
    """The base codes of the global windows ``[starts[i], starts[i] + lengths[i])`` concatenated, and int64
    offsets (n + 1).  A base is its 2-bit code from ``words`` (16 per word, low bits first), or 4 inside a run
    ``[run_start[k], run_end[k])`` (disjoint, sorted) and beyond the last word."""
    cdef Py_ssize_t n = starts.shape[0], n_runs = run_start.shape[0], i, k
    cdef int64_t n_bases = 16 * <int64_t> words.shape[0], total = 0, lo, hi, g, top, a, b
    if run_end.shape[0] != n_runs or lengths.shape[0] != n:
        raise ValueError("run_start/run_end and starts/lengths must have equal lengths")
    offsets_arr = np.zeros(n + 1, dtype=np.int64)
    cdef int64_t[::1] off = offsets_arr
    for i in range(n):
        if starts[i] < 0 or lengths[i] < 0:
            raise IndexError(f"window {i} [{starts[i]}, {starts[i] + lengths[i]}) starts before the genome")
        total += lengths[i]
        off[i + 1] = total
    out_arr = np.empty(total, dtype=np.uint8)
    if total == 0:
        return out_arr, offsets_arr
    cdef uint8_t[::1] out = out_arr
    cdef uint8_t *dst
    cdef const uint8_t *packed_bytes = <const uint8_t *> &words[0]
    with nogil:
        for i in range(n):
            if i + PREFETCH_AHEAD < n:
                a = starts[i + PREFETCH_AHEAD]
                b = a + lengths[i + PREFETCH_AHEAD]
                b = b if b < n_bases else n_bases
                if a < b:
                    while a < b:
                        prefetch(&packed_bytes[a >> 2])
                        a += 256                # 64 bytes of packed bases: one cache line
                    prefetch(&packed_bytes[(b - 1) >> 2])
            lo = starts[i]
            hi = lo + lengths[i]
            dst = &out[off[i]]
            top = hi if hi < n_bases else n_bases
            g = lo
            if _LITTLE:
                # byte k of the packed sequence holds bases 4k .. 4k + 3
                while g < top and (g & 3):
                    dst[g - lo] = (words[g >> 4] >> (2 * (g & 15))) & 3
                    g += 1
                while g + 4 <= top:
                    memcpy(dst + (g - lo), &_FOUR[packed_bytes[g >> 2]], 4)
                    g += 4
            while g < top:
                dst[g - lo] = (words[g >> 4] >> (2 * (g & 15))) & 3
                g += 1
            while g < hi:
                dst[g - lo] = 4
                g += 1
            k = first_above(run_end, lo)    # the first run ending beyond lo (disjoint sorted runs: ends ascend)
            while k < n_runs and run_start[k] < hi:
                a = run_start[k] if run_start[k] > lo else lo
                b = run_end[k] if run_end[k] < hi else hi
                while a < b:
                    dst[a - lo] = 4
                    a += 1
                k += 1
    return out_arr, offsets_arr
