# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A streamed q-gram table's chunk packed on the host before it crosses the bus: only the buckets that a read
buffer touches (wrapped by resident.py, ``ResidentReference.qgram_chunks``).  The loops run without the GIL,
so that several threads pack parts of one chunk side by side."""
cimport numpy as cnp
from libc.string cimport memcpy

from peanut_py._hints cimport lowest_set_bit, prefetch

cnp.import_array()

ctypedef cnp.uint32_t u32
ctypedef cnp.uint64_t u64
ctypedef cnp.int64_t i64

# A touched bucket's positions lie some hundred bytes past the previous one's, beyond what the hardware
# prefetcher follows: they are fetched this many touched buckets ahead, so that the fetches overlap.
cdef int AHEAD = 48

ctypedef fused starts_t:
    u32
    u64


cdef inline i64 _next_touched(const u32[::1] touched, i64 b, i64 b1) noexcept nogil:
    """The first touched bucket in [b, b1), b1 where none is: whole words of untouched buckets skipped."""
    cdef u32 word
    while b < b1:
        word = touched[b >> 5] >> (b & 31)
        if word:
            return min(b + lowest_set_bit(word), b1)
        b = (b | 31) + 1
    return b1


def _check(const u32[::1] touched, i64 n_buckets, i64 b0, i64 b1):
    if not 0 <= b0 <= b1 <= n_buckets:
        raise ValueError(f"buckets {b0} .. {b1} outside the table's {n_buckets}")
    if touched is not None and touched.shape[0] < (b1 + 31) >> 5:
        raise ValueError("touched: one bit per bucket")


def touched_positions(const starts_t[::1] starts, const u32[::1] touched, i64 b0, i64 b1):
    """Positions held by the buckets b0 <= b < b1 of the bucket table ``starts`` whose bit is set in
    ``touched`` (bit b & 31 of word b >> 5; all buckets where ``touched`` is None)."""
    _check(touched, starts.shape[0] - 1, b0, b1)
    if touched is None:
        return <i64>(starts[b1] - starts[b0])
    cdef i64 b, total = 0
    with nogil:
        b = _next_touched(touched, b0, b1)
        while b < b1:
            total += <i64>(starts[b + 1] - starts[b])
            b = _next_touched(touched, b + 1, b1)
    return total


def pack_touched(const starts_t[::1] starts, const u32[::1] positions, const u32[::1] touched, i64 b0, i64 b1,
                 i64 origin, u32[::1] out_starts, u32[::1] out_positions, i64 at):
    """Buckets b0 <= b < b1 of a chunk that begins at bucket ``origin``, packed: out_starts[b - origin] = ``at``
    plus the positions of the touched buckets in [b0, b) (an untouched bucket is left empty), and the
    positions of the touched buckets one after the other from out_positions[at] (None: starts only, of every
    bucket, for a chunk copied whole).  Returns ``at`` plus the positions written (or counted)."""
    _check(touched, starts.shape[0] - 1, b0, b1)
    if b0 < origin or b1 - origin > out_starts.shape[0]:
        raise ValueError("out_starts: one entry per bucket of the chunk")
    cdef bint every = touched is None, copy = out_positions is not None, short = False
    cdef i64 b = b0, b_next, p, lo, hi, end = at, room = out_positions.shape[0] if copy else 0
    cdef i64 ahead = b0, n_ahead = 0  # the prefetch cursor and the touched buckets in [b, ahead)
    cdef u32 *o_starts = &out_starts[0] if out_starts.shape[0] else NULL
    cdef u32 *o_pos = &out_positions[0] if copy and room else NULL
    cdef const u32 *pos = &positions[0] if copy and positions.shape[0] else NULL
    with nogil:
        while b < b1:
            if not every:
                b_next = _next_touched(touched, b, b1)
                while b < b_next:  # untouched buckets: empty
                    o_starts[b - origin] = <u32>end
                    b += 1
                if b == b1:
                    break
                if copy:
                    while n_ahead < AHEAD:
                        ahead = _next_touched(touched, ahead, b1)
                        if ahead == b1:
                            break
                        prefetch(&pos[starts[ahead]])
                        n_ahead += 1
                        ahead += 1
                    n_ahead -= 1
            o_starts[b - origin] = <u32>end
            lo, hi = <i64>starts[b], <i64>starts[b + 1]
            if copy:
                if end + hi - lo > room:
                    short = True
                    break
                memcpy(&o_pos[end], &pos[lo], (hi - lo) * sizeof(u32))
            end += hi - lo
            b += 1
    if short:
        raise ValueError("out_positions: too short for the touched buckets' positions")
    return end
