# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The reference window and band of each hit's final alignment (postprocess.py's alignment_problems) without
the GIL. Wrapped by postprocess.py."""
import numpy as np

from libc.stdint cimport int32_t, int64_t

from peanut_py._search cimport first_above


def hit_windows(const int64_t[::1] hit_start, const int64_t[::1] hit_end, const int64_t[::1] read_off,
                const int64_t[::1] contig_start, const int64_t[::1] contig_end, int64_t window_pad,
                int64_t band_pad):
    """Per hit (validated global reference interval [hit_start, hit_end), read strand of length
    read_off[k + 1] - read_off[k]): its contig, the window [win_lo, win_lo + win_len) of that contig
    reaching ``window_pad`` beyond the hit, and the band of diagonals (relative to the window) reaching
    ``band_pad`` beyond those of the hit's two ends. Returns (contig, win_lo, win_len (int64), band_lo,
    band_hi (int32))."""
    cdef Py_ssize_t n = hit_start.shape[0], k, c
    if hit_end.shape[0] != n or read_off.shape[0] != n + 1:
        raise ValueError("hit_windows: arrays of different lengths")
    if contig_end.shape[0] != contig_start.shape[0]:
        raise ValueError("hit_windows: contig starts and ends differ in number")
    contig = np.empty(n, dtype=np.int64)
    win_lo = np.empty(n, dtype=np.int64)
    win_len = np.empty(n, dtype=np.int64)
    band_lo = np.empty(n, dtype=np.int32)
    band_hi = np.empty(n, dtype=np.int32)
    cdef int64_t[::1] cv = contig, lo = win_lo, ln = win_len
    cdef int32_t[::1] bl = band_lo, bh = band_hi
    cdef int64_t a, b, d0, d1, bad = 0
    with nogil:
        for k in range(n):
            c = first_above(contig_start, hit_start[k]) - 1   # the last contig starting at or before the hit
            if c < 0:
                bad = 1
                break
            cv[k] = c
            a = hit_start[k] - window_pad
            if a < contig_start[c]:
                a = contig_start[c]
            b = hit_end[k] + window_pad
            if b > contig_end[c]:
                b = contig_end[c]
            lo[k] = a
            ln[k] = b - a
            d0 = hit_start[k] - a
            d1 = hit_end[k] - (read_off[k + 1] - read_off[k]) - a
            bl[k] = <int32_t> ((d0 if d0 < d1 else d1) - band_pad)
            bh[k] = <int32_t> ((d0 if d0 > d1 else d1) + band_pad)
    if bad:
        raise ValueError("hit_windows: a hit starts before the first contig")
    return contig, win_lo, win_len, band_lo, band_hi
