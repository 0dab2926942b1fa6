# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Postprocessing of validated hits (PEANUT section 3.4): duplicate removal, strata, hit-rank.

Input hits arrive grouped by read-strand id ``rs = 2 * read + strand`` (the order validation emits).
Everything here runs without the GIL so a thread pool can postprocess several chunks at once.
"""
import numpy as np

cimport numpy as cnp
from libc.stdlib cimport free, malloc

cnp.import_array()

ctypedef cnp.uint32_t u32
ctypedef cnp.int32_t i32
ctypedef cnp.int64_t i64


cdef inline bint _before(i32 *dist, u32 *start, u32 *strand, i64 a, i64 b) noexcept nogil:
    # Sort key of a hit within its read: best edit distance first, then leftmost, then forward strand,
    # so the order (and hence the primary hit) never depends on thread count or batch size.
    if dist[a] != dist[b]:
        return dist[a] < dist[b]
    if start[a] != start[b]:
        return start[a] < start[b]
    return strand[a] < strand[b]


def rank_hits(const u32[:] rs, const u32[:] ref_start, const i32[:] dist, Py_ssize_t n_reads,
              Py_ssize_t first_read=0, int dup_window=8):
    """Remove duplicate hits and order each read's hits into strata.

    ``rs`` must be non-decreasing (grouped by read). Reads are ``first_read .. first_read + n_reads - 1``.
    Two hits of one read are duplicates when they lie on the same strand and their reference starts are at
    most ``dup_window`` apart (clusters of q-gram hits around one locus); the better one (by the sort key
    above) is kept.

    Returns ``(order, read_ptr, hit_rank)``: ``order[read_ptr[r]:read_ptr[r+1]]`` are the indices of read
    ``first_read + r``'s kept hits, best first; ``hit_rank[k]`` is PEANUT's hit-rank of ``order[k]``, the
    number of kept hits of the read whose edit distance is at most its own.
    """
    cdef Py_ssize_t n = rs.shape[0]
    if ref_start.shape[0] != n or dist.shape[0] != n:
        raise ValueError("rs, ref_start and dist must have the same length")
    order_arr = np.empty(n, dtype=np.int64)
    ptr_arr = np.zeros(n_reads + 1, dtype=np.int64)
    rank_arr = np.empty(n, dtype=np.int32)
    cdef i64[:] order = order_arr
    cdef i64[:] ptr = ptr_arr
    cdef i32[:] rank = rank_arr
    cdef u32 *strand = <u32 *> malloc(max(n, 1) * sizeof(u32))
    cdef i32 *dcopy = <i32 *> malloc(max(n, 1) * sizeof(i32))
    cdef u32 *scopy = <u32 *> malloc(max(n, 1) * sizeof(u32))
    if strand == NULL or dcopy == NULL or scopy == NULL:
        free(strand); free(dcopy); free(scopy)
        raise MemoryError()
    cdef Py_ssize_t i, j, k, lo, hi, out = 0, kept_lo, r, read
    cdef i64 tmp
    cdef bint dup
    cdef long long diff
    try:
        with nogil:
            for i in range(n):
                strand[i] = rs[i] & 1
                dcopy[i] = dist[i]
                scopy[i] = ref_start[i]
            i = 0
            for r in range(n_reads):
                read = first_read + r
                ptr[r] = out
                lo = i
                while i < n and <Py_ssize_t> (rs[i] >> 1) == read:
                    i += 1
                hi = i
                # insertion sort of this read's hits (few per read) into order[out:]
                kept_lo = out
                for j in range(lo, hi):
                    order[out + j - lo] = j
                for j in range(1, hi - lo):
                    tmp = order[out + j]
                    k = j - 1
                    while k >= 0 and _before(dcopy, scopy, strand, tmp, order[out + k]):
                        order[out + k + 1] = order[out + k]
                        k -= 1
                    order[out + k + 1] = tmp
                # greedy duplicate removal in that order: keep a hit unless a kept, better hit is near it
                for j in range(hi - lo):
                    tmp = order[kept_lo + j]
                    dup = False
                    for k in range(ptr[r], out):
                        if strand[order[k]] == strand[tmp]:
                            diff = <long long> scopy[order[k]] - <long long> scopy[tmp]
                            if -dup_window <= diff <= dup_window:
                                dup = True
                                break
                    if not dup:
                        order[out] = tmp
                        out += 1
                # hit-rank: number of kept hits with distance <= own (ties share the larger rank)
                j = ptr[r]
                while j < out:
                    k = j
                    while k < out and dcopy[order[k]] == dcopy[order[j]]:
                        k += 1
                    for lo in range(j, k):
                        rank[lo] = <i32> (k - ptr[r])
                    j = k
            ptr[n_reads] = out
    finally:
        free(strand); free(dcopy); free(scopy)
    if i != n:
        raise ValueError("hits belong to reads outside first_read .. first_read + n_reads - 1, or rs is not sorted")
    return order_arr[:out], ptr_arr, rank_arr[:out]


def strata_counts(const i64[:] order, const i64[:] read_ptr, const i32[:] dist, int n_strata, int max_hits):
    """Number of hits to report per read: those in the best ``n_strata`` strata (all if n_strata <= 0),
    capped at ``max_hits``. Also returns, per read, the size of the best stratum."""
    cdef Py_ssize_t n_reads = read_ptr.shape[0] - 1, r, j, lo, hi
    report_arr = np.zeros(n_reads, dtype=np.int32)
    best_arr = np.zeros(n_reads, dtype=np.int32)
    cdef i32[:] report = report_arr
    cdef i32[:] best = best_arr
    cdef int strata, d
    with nogil:
        for r in range(n_reads):
            lo = read_ptr[r]
            hi = read_ptr[r + 1]
            if hi == lo:
                continue
            strata = 0
            d = -1
            j = lo
            while j < hi:
                if dist[order[j]] != d:
                    strata += 1
                    d = dist[order[j]]
                    if n_strata > 0 and strata > n_strata:
                        break
                if strata == 1:
                    best[r] += 1
                j += 1
            report[r] = <i32> min(j - lo, max_hits)
    return report_arr, best_arr
