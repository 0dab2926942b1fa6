# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The device stage's host steps on lists of hits ``(rs, ref_start, ref_end, dist)``, without the GIL: the
device thread does them between its kernels while the postprocessing threads want the interpreter lock
(wrapped by hit_lists.py)."""
import numpy as np

cimport numpy as cnp

cnp.import_array()

ctypedef cnp.uint8_t u8
ctypedef cnp.uint32_t u32
ctypedef cnp.int32_t i32
ctypedef cnp.int64_t i64

cdef i64 NO_HIT = 0x7FFFFFFFFFFFFFFF


def is_sorted(const u32[::1] rs):
    """Whether ``rs`` never decreases."""
    cdef Py_ssize_t i, n = rs.shape[0]
    cdef bint ok = True
    with nogil:
        for i in range(1, n):
            if rs[i] < rs[i - 1]:
                ok = False
                break
    return ok


def merge_sorted(const u32[::1] a_rs, const u32[::1] a_start, const i64[::1] a_end, const i32[::1] a_dist,
                 const u8[::1] a_keep, const u32[::1] b_rs, const u32[::1] b_start, const i64[::1] b_end,
                 const i32[::1] b_dist):
    """The kept hits of list a (``a_keep[i]`` nonzero; all where ``a_keep`` is empty) and the hits of list b,
    both in non-decreasing rs, merged by rs: within one rs a's hits first, each list in its own order (what
    a stable sort of the concatenation by rs gives)."""
    cdef Py_ssize_t na = a_rs.shape[0], nb = b_rs.shape[0], i = 0, j = 0, k = 0, n_kept = 0
    cdef bint all_kept = a_keep.shape[0] == 0
    if not all_kept and a_keep.shape[0] != na:
        raise ValueError("a_keep: one flag per hit of list a")
    if all_kept:
        n_kept = na
    else:
        with nogil:
            for i in range(na):
                n_kept += a_keep[i] != 0
    cdef Py_ssize_t n = n_kept + nb
    out_rs = np.empty(n, np.uint32)
    out_start = np.empty(n, np.uint32)
    out_end = np.empty(n, np.int64)
    out_dist = np.empty(n, np.int32)
    cdef u32[::1] o_rs = out_rs, o_start = out_start
    cdef i64[::1] o_end = out_end
    cdef i32[::1] o_dist = out_dist
    i = 0
    with nogil:
        while True:
            while i < na and not all_kept and a_keep[i] == 0:
                i += 1
            if i < na and (j >= nb or a_rs[i] <= b_rs[j]):
                o_rs[k] = a_rs[i]
                o_start[k] = a_start[i]
                o_end[k] = a_end[i]
                o_dist[k] = a_dist[i]
                i += 1
            elif j < nb:
                o_rs[k] = b_rs[j]
                o_start[k] = b_start[j]
                o_end[k] = b_end[j]
                o_dist[k] = b_dist[j]
                j += 1
            else:
                break
            k += 1
    return out_rs, out_start, out_end, out_dist


def weak_read_flags(Py_ssize_t n_reads, const u32[::1] rs, const i32[::1] dist, const i64[::1] lengths,
                    const u32[::1] max_errors):
    """The local-mode step's flags in one pass (clipped.py): per read ``weak`` (it has hits and the best
    ``dist`` exceeds half of ``max_errors[lengths[read]]``) and ``has_hit`` (a hit, and not weak), per hit
    ``kept`` (its read is not weak). ``lengths``: one per read; ``max_errors``: indexed by a read length."""
    cdef Py_ssize_t i, n = rs.shape[0], r, n_table = max_errors.shape[0]
    if dist.shape[0] != n:
        raise ValueError("rs and dist: one entry per hit")
    if lengths.shape[0] != n_reads:
        raise ValueError("lengths: one per read")
    best_out = np.full(n_reads, NO_HIT, np.int64)
    weak_out = np.zeros(n_reads, np.uint8)
    has_out = np.zeros(n_reads, np.uint8)
    kept_out = np.empty(n, np.uint8)
    cdef i64[::1] best = best_out
    cdef u8[::1] weak = weak_out, has_hit = has_out, kept = kept_out
    cdef i64 length
    cdef bint bad = False
    with nogil:
        for i in range(n):
            r = rs[i] >> 1
            if r >= n_reads:
                bad = True
                break
            if dist[i] < best[r]:
                best[r] = dist[i]
        if not bad:
            for r in range(n_reads):
                if best[r] == NO_HIT:
                    continue
                length = lengths[r]
                if length < 0 or length >= n_table:
                    bad = True
                    break
                weak[r] = best[r] > <i64>(max_errors[length] // 2)
                has_hit[r] = not weak[r]
        if not bad:
            for i in range(n):
                kept[i] = not weak[rs[i] >> 1]
    if bad:
        raise IndexError("a hit's read or a read's length lies outside the lists")
    return weak_out.view(bool), has_out, kept_out.view(bool)
