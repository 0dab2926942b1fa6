# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The per-read steps of a chunk of single-end reads (postprocess.py's plan and finish) without the GIL:
which hits are aligned, and from their alignments each read's primary score, XS, close rivals and aligned
length, the inputs of the MAPQ model. Wrapped by postprocess.py.

Per read the hits are ``order[ptr[i]:ptr[i + 1]]`` (ranking.rank_hits: best edit distance first, then
leftmost); the alignment problems of a chunk are its reads' hits of ranks 0..n_align[i]-1, read after read.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t


def reported_hits(const int64_t[::1] order, const int64_t[::1] ptr, const int32_t[::1] report,
                  const uint32_t[::1] rs, const uint32_t[::1] start, const uint32_t[::1] end, int64_t first_read):
    """Per read i of a chunk (batch index first_read + i): its reported hits and the best unreported one (for
    XS), n_align[i] = min(report[i] + 1, hits kept). Returns (n_align per read; per aligned hit, read after
    read: batch read index, strand (bool), reference start and end (int64))."""
    cdef Py_ssize_t n_reads = report.shape[0], i, r
    cdef int64_t n_hits = rs.shape[0]
    if ptr.shape[0] != n_reads + 1:
        raise ValueError("reported_hits: ptr needs one entry more than report")
    if start.shape[0] != n_hits or end.shape[0] != n_hits:
        raise ValueError("reported_hits: hit arrays of different lengths")
    # at most every ranked hit is aligned: one pass fills arrays of that size, returned cut to what it took
    cdef int64_t most = ptr[n_reads] - ptr[0] if n_reads > 0 else 0
    if most < 0 or (n_reads > 0 and (ptr[0] < 0 or ptr[n_reads] > order.shape[0])):
        raise ValueError("reported_hits: ptr is not a partition of order")
    n_align = np.empty(n_reads, dtype=np.int64)
    read = np.empty(most, dtype=np.int64)
    strand = np.empty(most, dtype=np.bool_)
    hit_start = np.empty(most, dtype=np.int64)
    hit_end = np.empty(most, dtype=np.int64)
    cdef int64_t[::1] na = n_align, rd = read, hs = hit_start, he = hit_end
    cdef uint8_t[::1] st = strand.view(np.uint8)
    cdef int64_t kept, m, hit, at = 0, bad = 0
    with nogil:
        for i in range(n_reads):
            kept = ptr[i + 1] - ptr[i]
            m = report[i] + 1
            if kept < m:
                m = kept
            if m < 0 or at + m > most:
                bad = 1
                break
            na[i] = m
            for r in range(m):
                hit = order[ptr[i] + r]
                if hit < 0 or hit >= n_hits:
                    bad = 1
                    break
                rd[at] = first_read + i
                st[at] = rs[hit] & 1
                hs[at] = start[hit]
                he[at] = end[hit]
                at += 1
            if bad:
                break
    if bad:
        raise ValueError("reported_hits: ptr and order do not rank the hits")
    return n_align, read[:at], strand[:at], hit_start[:at], hit_end[:at]


cdef inline int64_t _next_stratum(const int64_t[::1] order, const int64_t[::1] ptr, const int32_t[::1] dist,
                                  Py_ssize_t i, int64_t n_best) noexcept nogil:
    """Read i's hits whose edit distance is at most its best + 1, less n_best; at least 0."""
    cdef int64_t k, within = 0, best
    if ptr[i + 1] > ptr[i]:
        best = dist[order[ptr[i]]]
        for k in range(ptr[i], ptr[i + 1]):
            if dist[order[k]] <= best + 1:
                within += 1
    return within - n_best if within > n_best else 0


cdef int _check_ranking(const int64_t[::1] order, const int64_t[::1] ptr, const int32_t[::1] dist,
                        Py_ssize_t n_reads) noexcept nogil:
    """0 when ptr partitions order (n_reads + 1 non-decreasing entries) and order's hits index dist."""
    cdef Py_ssize_t i, k
    if ptr.shape[0] != n_reads + 1 or (n_reads > 0 and (ptr[0] < 0 or ptr[n_reads] > order.shape[0])):
        return 1
    for i in range(n_reads):
        if ptr[i + 1] < ptr[i]:
            return 1
    for k in range(ptr[0] if n_reads > 0 else 0, ptr[n_reads] if n_reads > 0 else 0):
        if order[k] < 0 or order[k] >= dist.shape[0]:
            return 1
    return 0


def next_stratum_sizes(const int64_t[::1] order, const int64_t[::1] ptr, const int32_t[::1] dist,
                       const int64_t[::1] n_best):
    """Per read: its hits at most one edit distance worse than its best, less ``n_best``, at least 0."""
    cdef Py_ssize_t n_reads = n_best.shape[0], i
    out = np.zeros(n_reads, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef int bad
    with nogil:
        bad = _check_ranking(order, ptr, dist, n_reads)
        if not bad:
            for i in range(n_reads):
                o[i] = _next_stratum(order, ptr, dist, i, n_best[i])
    if bad:
        raise ValueError("next_stratum_sizes: ptr and order do not rank dist's hits")
    return out


def read_summary(const int64_t[::1] n_align, const int32_t[::1] report, const int32_t[::1] n_best,
                 const int64_t[::1] order, const int64_t[::1] ptr, const int32_t[::1] dist,
                 const int64_t[::1] pos, const int32_t[::1] score, const int32_t[::1] read_begin,
                 const int32_t[::1] read_end, int64_t close_gap):
    """Per read, from the alignments of its hits of ranks 0..n_align-1 (``pos`` < 0: not aligned): the
    problem index of its first hit; its primary's score (the first hit's, -1 where none is reported or it
    did not align) and aligned read length (0 there); the best score of its other aligned hits (``sub``,
    -1 without one); its close rivals ``n_sub``: n_best - 1 with several best hits, else its hits one edit
    distance worse, at least 1 where sub lies within ``close_gap`` of the score; whether it has several best
    hits (``ties``). Returns int64 arrays (first, score, sub, n_sub, aligned_len) and bool ties."""
    cdef Py_ssize_t n_reads = n_align.shape[0], i
    cdef Py_ssize_t n_problems = pos.shape[0]
    if report.shape[0] != n_reads or n_best.shape[0] != n_reads:
        raise ValueError("read_summary: per-read arrays of different lengths")
    if score.shape[0] != n_problems or read_begin.shape[0] != n_problems or read_end.shape[0] != n_problems:
        raise ValueError("read_summary: per-problem arrays of different lengths")
    first = np.empty(n_reads, dtype=np.int64)
    best = np.empty(n_reads, dtype=np.int64)
    sub = np.empty(n_reads, dtype=np.int64)
    n_sub = np.empty(n_reads, dtype=np.int64)
    aligned_len = np.empty(n_reads, dtype=np.int64)
    ties = np.empty(n_reads, dtype=np.bool_)
    cdef int64_t[::1] fv = first, bv = best, sv = sub, nv = n_sub, av = aligned_len
    cdef uint8_t[::1] tv = ties.view(np.uint8)
    cdef int64_t at = 0, j, s, b, rivals
    cdef int bad
    with nogil:
        bad = _check_ranking(order, ptr, dist, n_reads)
        if not bad:
            for i in range(n_reads):
                if n_align[i] < 0 or at + n_align[i] > n_problems:
                    bad = 1
                    break
                fv[i] = at
                b = -1
                av[i] = 0
                if n_align[i] > 0 and report[i] > 0 and pos[at] >= 0:
                    b = score[at]
                    av[i] = read_end[at] - read_begin[at]
                s = -1
                for j in range(at + 1, at + n_align[i]):
                    if pos[j] >= 0 and score[j] > s:
                        s = score[j]
                bv[i] = b
                sv[i] = s
                tv[i] = n_best[i] > 1
                if n_best[i] > 1:
                    nv[i] = n_best[i] - 1
                else:
                    rivals = _next_stratum(order, ptr, dist, i, n_best[i])
                    if rivals < 1 and s >= 0 and s >= b - close_gap:
                        rivals = 1
                    nv[i] = rivals
                at += n_align[i]
    if bad:
        raise ValueError("read_summary: n_align, ptr and order do not describe the problems")
    return first, best, sub, n_sub, aligned_len, ties
