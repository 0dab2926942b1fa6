# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The placement of a chunk's pairs (BWA-MEM's mem_pair + mem_sam_pe decision) without the GIL.

``choose_pairs`` gives, for all pairs of a chunk at once, what the plain Python ``choose_pair`` of
tests/pair_oracle.py gives for one pair fed with its ``pair_score`` of each concordant combination
(tests/test_pair_choice.py checks that the results are equal).  Wrapped by pair_choice.py. The arithmetic
is written in the same order as there so that the floating-point results, and hence the integers, are the
same.
"""
import numpy as np

from libc.math cimport erfc, fabs, log, sqrt
from libc.stdint cimport int64_t, uint8_t


cpdef int64_t pair_score(int64_t score_a, int64_t score_b, int64_t insert, double mean, double std,
                         int64_t match) noexcept nogil:
    """BWA's score of a concordant pair: the mates' scores plus ``.721 * log(2 * erfc(|z| / sqrt 2)) * match``
    for the insert's z-score under the insert-size mean and std."""
    cdef double z, prob, penalty
    if std < 1e-9:
        std = 1e-9
    z = fabs(<double> insert - mean) / std
    prob = 2.0 * erfc(z * sqrt(0.5))
    if prob < 1e-300:
        prob = 1e-300
    penalty = 0.721 * log(prob) * <double> match
    return <int64_t> (<double> (score_a + score_b) + penalty + 0.499)


cdef inline bint _better(int64_t s, int64_t a, int64_t b, int64_t s0, int64_t a0, int64_t b0) noexcept nogil:
    """choose_pair's order: higher pair score, then the better-ranked hit of mate 1, then of mate 2."""
    if s != s0:
        return s > s0
    if a != a0:
        return a < a0
    return b < b0


def choose_pairs(const int64_t[::1] pair, const int64_t[::1] rank_a, const int64_t[::1] rank_b,
                 const int64_t[::1] score_a, const int64_t[::1] score_b, const int64_t[::1] insert,
                 const int64_t[::1] own, double mean, double std, int64_t match, int64_t mismatch,
                 int64_t gap_open, int64_t gap_extend, int64_t pen_unpaired, int64_t q_max):
    """Placement of every pair of a chunk of ``n_reads = len(own)`` reads (mates 2p, 2p + 1).

    Concordant combinations c (grouped by pair, ``pair[c]`` non-decreasing): the ranks of mate 1's and mate 2's
    hits, the two hits' alignment scores and the insert. ``own``: each read's own best score (0 without an
    aligned hit). Returns (chosen rank per read, paired per pair (bool), q_pe per pair (-1 when not paired)):
    as choose_pair with score_un = own[2p] + own[2p+1] - pen_unpaired, pair MAPQ capped at q_max; pairs not
    paired keep rank 0.
    """
    cdef int64_t n = pair.shape[0], n_reads = own.shape[0]
    if rank_a.shape[0] != n or rank_b.shape[0] != n or score_a.shape[0] != n or score_b.shape[0] != n \
            or insert.shape[0] != n:
        raise ValueError("choose_pairs: combination arrays of different lengths")
    chosen = np.zeros(n_reads, dtype=np.int64)
    paired = np.zeros(n_reads // 2, dtype=np.uint8)
    q_pe = np.full(n_reads // 2, -1, dtype=np.int64)
    if n == 0:
        return chosen, paired.view(bool), q_pe
    cdef int64_t[::1] ch = chosen, qv = q_pe
    cdef uint8_t[::1] pv = paired
    scores = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] s = scores
    cdef int64_t tmp = max(match + mismatch, gap_open + gap_extend)
    cdef int64_t pen = pen_unpaired
    cdef int64_t i, j, t, p, best, sub, score_un, n_sub, q, last = -1, bad = 0
    with nogil:
        for i in range(n):
            s[i] = pair_score(score_a[i], score_b[i], insert[i], mean, std, match)
        i = 0
        while i < n:
            p = pair[i]
            if p <= last or p < 0 or 2 * p + 1 >= n_reads:
                bad = 1
                break
            last = p
            j = i + 1
            while j < n and pair[j] == p:
                j += 1
            best = i
            for t in range(i + 1, j):
                if _better(s[t], rank_a[t], rank_b[t], s[best], rank_a[best], rank_b[best]):
                    best = t
            score_un = own[2 * p] + own[2 * p + 1] - pen
            if s[best] > score_un:
                # the runner-up: the best of the others (equal to the best on a tie)
                sub = 0
                if j - i > 1:
                    sub = s[i] if best != i else s[i + 1]
                    for t in range(i, j):
                        if t != best and s[t] > sub:
                            sub = s[t]
                n_sub = 0
                for t in range(i, j):
                    if t != best and sub - s[t] <= tmp:
                        n_sub += 1
                q = <int64_t> (6.02 * <double> (s[best] - (sub if sub > score_un else score_un)) / <double> match
                               + 0.499)
                if n_sub > 0:
                    q -= <int64_t> (4.343 * log(<double> (n_sub + 1)) + 0.499)
                ch[2 * p] = rank_a[best]
                ch[2 * p + 1] = rank_b[best]
                pv[p] = 1
                qv[p] = q if q < q_max else q_max
                if qv[p] < 0:
                    qv[p] = 0
            i = j
    if bad:
        raise ValueError("choose_pairs: combinations must be grouped by pair (pair non-decreasing, within the chunk)")
    return chosen, paired.view(bool), q_pe
