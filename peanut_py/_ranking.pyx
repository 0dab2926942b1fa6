# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Postprocessing of validated hits (PEANUT section 3.4): duplicate removal, strata, hit-rank.

Input hits arrive grouped by read-strand id ``rs = 2 * read + strand`` (the order validation emits).
Everything here runs without the GIL so a thread pool can postprocess several chunks at once.
"""
import numpy as np

cimport numpy as cnp
from libc.stdlib cimport free, malloc, qsort
from libc.string cimport memcpy, memmove

cnp.import_array()

ctypedef cnp.uint32_t u32
ctypedef cnp.int32_t i32
ctypedef cnp.int64_t i64


cdef struct HitKey:
    # Sort key of a hit within its read: best edit distance first, then leftmost, then forward strand,
    # so the order (and hence the primary hit) never depends on thread count or batch size.
    i32 dist
    u32 start
    u32 strand
    i64 index


cdef int _compare(const void *pa, const void *pb) noexcept nogil:
    cdef const HitKey *a = <const HitKey *> pa
    cdef const HitKey *b = <const HitKey *> pb
    if a.dist != b.dist:
        return -1 if a.dist < b.dist else 1
    if a.start != b.start:
        return -1 if a.start < b.start else 1
    if a.strand != b.strand:
        return -1 if a.strand < b.strand else 1
    return -1 if a.index < b.index else (1 if a.index > b.index else 0)


cdef Py_ssize_t _lower_bound(const u32 *values, Py_ssize_t n, u32 x) noexcept nogil:
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


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

    Reads in repeats can have thousands of hits, so sorting is O(h log h) (qsort) and the duplicate check
    binary-searches a sorted array of the kept starts of each strand instead of scanning all kept hits.
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
    cdef HitKey *keys = <HitKey *> malloc(max(n, 1) * sizeof(HitKey))
    # kept starts of the current read, one sorted array per strand
    cdef u32 *kept0 = <u32 *> malloc(max(n, 1) * sizeof(u32))
    cdef u32 *kept1 = <u32 *> malloc(max(n, 1) * sizeof(u32))
    if keys == NULL or kept0 == NULL or kept1 == NULL:
        free(keys); free(kept0); free(kept1)
        raise MemoryError()
    cdef Py_ssize_t i, j, k, lo, hi, out = 0, r, read, n0, n1, nk, pos
    cdef u32 *kept
    cdef u32 s
    cdef bint dup
    try:
        with nogil:
            i = 0
            for r in range(n_reads):
                read = first_read + r
                ptr[r] = out
                lo = i
                while i < n and <Py_ssize_t> (rs[i] >> 1) == read:
                    keys[i].dist = dist[i]
                    keys[i].start = ref_start[i]
                    keys[i].strand = rs[i] & 1
                    keys[i].index = i
                    i += 1
                hi = i
                if hi - lo > 1:
                    qsort(&keys[lo], hi - lo, sizeof(HitKey), _compare)
                # greedy duplicate removal in sorted order: keep a hit unless a kept (better) hit of the same
                # strand starts at most dup_window away
                n0 = n1 = 0
                for j in range(lo, hi):
                    s = keys[j].start
                    if keys[j].strand:
                        kept = kept1
                        nk = n1
                    else:
                        kept = kept0
                        nk = n0
                    pos = _lower_bound(kept, nk, s - dup_window if s >= <u32> dup_window else 0)
                    dup = pos < nk and <long long> kept[pos] <= <long long> s + dup_window
                    if dup:
                        continue
                    # no kept start in [s - dup_window, s + dup_window]: pos is also s's own place
                    memmove(&kept[pos + 1], &kept[pos], (nk - pos) * sizeof(u32))
                    kept[pos] = s
                    if keys[j].strand:
                        n1 += 1
                    else:
                        n0 += 1
                    order[out] = keys[j].index
                    out += 1
                # hit-rank: number of kept hits with distance <= own (ties share the larger rank)
                j = ptr[r]
                while j < out:
                    k = j
                    while k < out and dist[order[k]] == dist[order[j]]:
                        k += 1
                    for lo in range(j, k):
                        rank[lo] = <i32> (k - ptr[r])
                    j = k
            ptr[n_reads] = out
    finally:
        free(keys); free(kept0); free(kept1)
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


def gather_segments(const cnp.uint8_t[::1] source, const i64[::1] starts, const i64[::1] lengths):
    """``source[starts[i]:starts[i] + lengths[i]]`` for all i concatenated, and int64 offsets (n + 1): the
    reference windows the final alignment needs, copied without the GIL (its read strands come from
    :func:`gather_read_strands`)."""
    cdef Py_ssize_t n = starts.shape[0], i
    offsets_arr = np.zeros(n + 1, dtype=np.int64)
    cdef i64[::1] off = offsets_arr
    cdef i64 total = 0
    for i in range(n):
        if lengths[i] < 0 or starts[i] < 0 or starts[i] + lengths[i] > source.shape[0]:
            raise IndexError(f"segment {i} [{starts[i]}, {starts[i] + lengths[i]}) outside the source")
        total += lengths[i]
        off[i + 1] = total
    out_arr = np.empty(total, dtype=np.uint8)
    if total == 0:
        return out_arr, offsets_arr
    cdef cnp.uint8_t[::1] out = out_arr
    with nogil:
        for i in range(n):
            memcpy(&out[off[i]], &source[starts[i]], lengths[i])
    return out_arr, offsets_arr


def gather_read_strands(const cnp.uint8_t[::1] codes, const i64[::1] offsets, const i64[::1] read,
                        const cnp.uint8_t[::1] reverse):
    """Read ``read[i]`` of a batch (``codes`` cut at ``offsets``), reverse-complemented where ``reverse[i]``,
    for all i concatenated, and int64 offsets (n + 1).  Only the aligned reads are copied: a whole-batch
    reverse complement per chunk cost every postprocessing worker a pass over the batch."""
    cdef Py_ssize_t n = read.shape[0], i, n_reads = offsets.shape[0] - 1
    offsets_arr = np.zeros(n + 1, dtype=np.int64)
    cdef i64[::1] off = offsets_arr
    cdef i64 total = 0, a, b, k
    if reverse.shape[0] != n:
        raise ValueError("read and reverse differ in length")
    for i in range(n):
        if read[i] < 0 or read[i] >= n_reads:
            raise IndexError(f"read {read[i]} outside the batch of {n_reads}")
        total += offsets[read[i] + 1] - offsets[read[i]]
        off[i + 1] = total
    out_arr = np.empty(total, dtype=np.uint8)
    if total == 0:
        return out_arr, offsets_arr
    cdef cnp.uint8_t[::1] out = out_arr
    cdef cnp.uint8_t c
    with nogil:
        for i in range(n):
            a = offsets[read[i]]
            b = offsets[read[i] + 1]
            if not reverse[i]:
                memcpy(&out[off[i]], &codes[a], b - a)
            else:
                for k in range(b - a):
                    c = codes[b - 1 - k]
                    out[off[i] + k] = 3 - c if c < 4 else c
    return out_arr, offsets_arr


def expand(counts):
    """(owner, rank) for ``counts``: item i appears counts[i] times, with ranks 0..counts[i]-1, as int64 arrays
    (``np.repeat(np.arange(n), counts)`` and the ranks within each owner). NumPy's repeat holds the GIL for its
    whole loop, and the paired postprocessing calls this for every chunk on many threads at once."""
    cdef const i64[::1] c = np.ascontiguousarray(counts, dtype=np.int64)
    cdef Py_ssize_t n = c.shape[0], i
    cdef i64 total = 0, k, at = 0
    for i in range(n):
        if c[i] < 0:
            raise ValueError("negative count")
        total += c[i]
    owner_arr = np.empty(total, dtype=np.int64)
    rank_arr = np.empty(total, dtype=np.int64)
    if total == 0:
        return owner_arr, rank_arr
    cdef i64[::1] owner = owner_arr, rank = rank_arr
    with nogil:
        for i in range(n):
            for k in range(c[i]):
                owner[at] = i
                rank[at] = k
                at += 1
    return owner_arr, rank_arr
