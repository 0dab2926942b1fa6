# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The bases of each read under a masked (over-frequent) q-gram of either strand: mapq.MaskedQgrams.coverage's
hot loop, one rolling pass over the bases without the interpreter lock."""
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

import numpy as np

cdef uint64_t GOLDEN = 2654435761


cdef inline bint _masked(uint64_t v, const uint8_t *table, const uint64_t *values, Py_ssize_t n, int shift,
                         bint wide) noexcept nogil:
    # the hash of MaskedQgrams' table, in the values' own width, screens; a binary search decides
    cdef uint64_t h
    cdef Py_ssize_t lo = 0, hi = n, mid
    if wide:
        h = (v * GOLDEN) >> shift
    else:
        h = (<uint32_t> (<uint32_t> v * <uint32_t> GOLDEN)) >> shift
    if not table[h]:
        return False
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo < n and values[lo] == v


def masked_coverage(const uint8_t[::1] codes, const int64_t[::1] offsets, const uint8_t[::1] table,
                    const uint64_t[::1] values, int q, int hash_bits, bint reverse=True):
    """Per read ``codes[offsets[i]:offsets[i + 1]]`` (A0 C1 G2 T3, others 4): its bases covered by a window
    of q ACGT bases whose value, or with ``reverse`` its reverse complement's, is in ``values`` (sorted).
    ``reverse=False`` with values closed under reverse complement gives the same coverage with one lookup
    per window instead of two."""
    cdef Py_ssize_t n_reads = offsets.shape[0] - 1, i, j, run
    cdef int64_t[::1] out = np.zeros(max(n_reads, 0), dtype=np.int64)
    cdef bint wide = 2 * q > 32
    cdef int shift = (64 if wide else 32) - hash_bits
    cdef uint64_t mask = (<uint64_t> 1 << (2 * q)) - 1 if q < 32 else <uint64_t> -1
    cdef uint64_t fwd, rev
    cdef uint8_t c
    cdef int64_t covered_to, total
    cdef Py_ssize_t n_values = values.shape[0]
    cdef const uint64_t *vals = &values[0] if n_values else NULL
    if n_values == 0:
        return np.asarray(out)
    with nogil:
        for i in range(n_reads):
            fwd = 0
            rev = 0
            run = 0
            covered_to = 0
            total = 0
            for j in range(offsets[i], offsets[i + 1]):
                c = codes[j]
                if c > 3:
                    run = 0
                    continue
                fwd = ((fwd << 2) | c) & mask
                rev = (rev >> 2) | (<uint64_t> (3 - c) << (2 * (q - 1)))
                run += 1
                if run >= q and (_masked(fwd, &table[0], vals, n_values, shift, wide)
                                 or (reverse and _masked(rev, &table[0], vals, n_values, shift, wide))):
                    # the window covers bases j - q + 1 .. j
                    if covered_to < j - q + 1:
                        covered_to = j - q + 1
                    total += j + 1 - covered_to
                    covered_to = j + 1
            out[i] = total
    return np.asarray(out)
