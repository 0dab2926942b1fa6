# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The MAPQ model's per-read arithmetic (wrapped by mapq.py) without the GIL.

Each function does for a whole chunk what mapq.py's NumPy expressions did, with the same double expressions
in the same order, so that every MAPQ is the same integer. The logarithms come from tables that mapq.py
fills with NumPy's own ``np.log`` (its SIMD logarithm can differ from the C library's in the last bit), and
the q-gram lemma's guarantee per read length from a table filled by filtration.guaranteed_errors. A function
that meets a value beyond a table returns that value's index + 1 in ``need`` (and no result) so that the
wrapper can grow the table and call again. Products go through volatile doubles before an addition: NumPy
rounds each step, and a compiler allowed to fuse a multiply and an add (FMA) would round once.
"""
import numpy as np

from libc.math cimport floor
from libc.stdint cimport int32_t, int64_t, uint8_t


def unseen_rival_scores(const int64_t[::1] read_len, const int64_t[::1] covered, const int64_t[::1] guarantee,
                        int64_t q, int64_t match, int64_t mismatch, int64_t extra_edits):
    """Per read: ``read_len * match - (guarantee[n_eff] + extra_edits) * (match + mismatch)`` with n_eff the
    read's length less its ``covered`` bases plus q - 1 (where covered > 0), clipped to [0, read_len].
    ``covered`` may be empty (no masked bases). Returns (int64 scores, need): need > 0 when a length is
    beyond ``guarantee`` (then the scores are None)."""
    cdef Py_ssize_t n = read_len.shape[0], i
    cdef bint with_covered = covered.shape[0] > 0
    if with_covered and covered.shape[0] != n:
        raise ValueError("unseen_rival_scores: covered and read_len differ in length")
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef Py_ssize_t size = guarantee.shape[0]
    cdef int64_t length, n_eff, need = 0, negative = 0
    with nogil:
        for i in range(n):
            length = read_len[i]
            if length < 0:
                negative = 1
                break
            if length >= size:
                need = length + 1 if length + 1 > need else need
                continue
            n_eff = length
            if with_covered and covered[i] > 0:
                n_eff = length - covered[i] + q - 1
                if n_eff < 0:
                    n_eff = 0
                if n_eff > length:
                    n_eff = length
            o[i] = length * match - (guarantee[n_eff] + extra_edits) * (match + mismatch)
    if negative:
        raise ValueError("unseen_rival_scores: a negative read length")
    return (None, need) if need else (out, 0)


cdef inline bint _close(int64_t score, int64_t sub, int64_t n_sub, int64_t gap) noexcept nogil:
    return n_sub >= 1 and sub >= 0 and sub >= score - gap


def close_rivals(const int64_t[::1] score, const int64_t[::1] sub, const int64_t[::1] n_sub, int64_t gap):
    """Per read: n_sub >= 1 and 0 <= sub and sub >= score - gap (uint8, 0 or 1)."""
    cdef Py_ssize_t n = score.shape[0], i
    if sub.shape[0] != n or n_sub.shape[0] != n:
        raise ValueError("close_rivals: arrays of different lengths")
    out = np.empty(n, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    with nogil:
        for i in range(n):
            o[i] = _close(score[i], sub[i], n_sub[i], gap)
    return out


def mapq_scores(const int64_t[::1] score, const int64_t[::1] sub, const int64_t[::1] n_sub,
                const int64_t[::1] aligned_len, const int64_t[::1] unseen, const int64_t[::1] covered,
                const int64_t[::1] read_len, const uint8_t[::1] ties, const double[::1] log_length,
                const double[::1] log_count, double log_coef_len, int64_t coef_len, int64_t q, int64_t match,
                int64_t mismatch, int64_t mapq_max, int64_t crowd_min, int64_t crowd_cap, int64_t crowd_zero,
                double close_identity, double masked_share, double crowd_scale):
    """mapq.mapq_model per read. ``unseen`` empty: none; ``covered`` and ``read_len`` empty: no masked share;
    ``ties`` empty or per read: MAPQ 0 where set. ``log_length[L]`` = np.log(max(L, 2.0)),
    ``log_count[k]`` = np.log(k + 1.0). Returns (int32 MAPQ, need_length, need_count): a need > 0 names the
    table size a value asks for (then MAPQ is None)."""
    cdef Py_ssize_t n = score.shape[0], i
    cdef bint with_unseen = unseen.shape[0] > 0
    cdef bint with_masked = covered.shape[0] > 0 and read_len.shape[0] > 0
    cdef bint with_ties = ties.shape[0] > 0
    if sub.shape[0] != n or n_sub.shape[0] != n or aligned_len.shape[0] != n \
            or (with_unseen and unseen.shape[0] != n) or (with_ties and ties.shape[0] != n) \
            or (with_masked and (covered.shape[0] != n or read_len.shape[0] != n)):
        raise ValueError("mapq_scores: arrays of different lengths")
    out = np.empty(n, dtype=np.int32)
    cdef int32_t[::1] o = out
    cdef Py_ssize_t n_length = log_length.shape[0], n_count = log_count.shape[0]
    cdef int64_t need_length = 0, need_count = 0, negative = 0, aligned, rivals
    cdef double s, raw_sub, b, length, identity, f, mapq, graded, min_sub = <double> (q * match)
    cdef volatile double product
    cdef double d_match = <double> match, d_errors = <double> (match + mismatch)
    cdef bint close
    with nogil:
        for i in range(n):
            aligned = aligned_len[i] if aligned_len[i] > 1 else 1
            rivals = n_sub[i]
            if rivals < 0:
                negative = 1
                break
            if aligned >= n_length or rivals >= n_count:
                if aligned >= n_length and aligned + 1 > need_length:
                    need_length = aligned + 1
                if rivals >= n_count and rivals + 1 > need_count:
                    need_count = rivals + 1
                continue
            s = <double> score[i]
            raw_sub = <double> sub[i]
            # sub = max(raw_sub, q * match[, unseen]) as np.maximum
            b = raw_sub if raw_sub >= min_sub else min_sub
            if with_unseen and <double> unseen[i] > b:
                b = <double> unseen[i]
            length = <double> aligned
            product = length * d_match
            identity = 1.0 - (product - s) / d_errors / length
            if length < <double> coef_len:
                f = 1.0
            else:
                f = log_coef_len / log_length[aligned]
            f = f * identity
            f = f * identity
            product = 6.02 * (s - b) / d_match * f * f
            mapq = floor(product + 0.499)
            product = 4.343 * log_count[rivals]
            mapq = mapq - floor(product + 0.499)
            if b >= s or s <= 0:
                mapq = 0
            if mapq < 0:
                mapq = 0
            if mapq > <double> mapq_max:
                mapq = <double> mapq_max
            close = _close(score[i], sub[i], rivals, match + mismatch)
            if close and (rivals >= crowd_min or identity <= close_identity):
                # scaled into 1 .. crowd_cap rather than clipped at it: the order among such reads is kept
                graded = floor(mapq * <double> crowd_cap / crowd_scale + 0.499)
                if graded > <double> crowd_cap:
                    graded = <double> crowd_cap
                if graded < 1.0 and mapq >= 1.0:
                    graded = 1.0
                mapq = graded
            if close and (rivals >= crowd_zero
                          or (with_masked and <double> covered[i] >= masked_share * <double> read_len[i])):
                mapq = 0
            if with_ties and ties[i]:
                mapq = 0
            o[i] = <int32_t> mapq
    if negative:
        raise ValueError("mapq_scores: a negative count of close rivals")
    if need_length or need_count:
        return None, need_length, need_count
    return out, 0, 0


def pair_mapqs(const int64_t[::1] q_se, const int64_t[::1] q_pe, const uint8_t[::1] unseen_ties,
               const uint8_t[::1] close, int64_t boost):
    """mapq.pair_mapq per read: max(q_se, min(q_pe, q_se + boost)); q_se where ``unseen_ties``; 0 where
    ``close`` and q_pe == 0 (``unseen_ties``, ``close`` empty: none)."""
    cdef Py_ssize_t n = q_se.shape[0], i
    cdef bint with_ties = unseen_ties.shape[0] > 0, with_close = close.shape[0] > 0
    if q_pe.shape[0] != n or (with_ties and unseen_ties.shape[0] != n) or (with_close and close.shape[0] != n):
        raise ValueError("pair_mapqs: arrays of different lengths")
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef int64_t raised, cap
    with nogil:
        for i in range(n):
            cap = q_se[i] + boost
            raised = q_pe[i] if q_pe[i] < cap else cap
            if q_se[i] > raised:
                raised = q_se[i]
            if with_ties and unseen_ties[i]:
                raised = q_se[i]
            if with_close and close[i] and q_pe[i] == 0:
                raised = 0
            o[i] = raised
    return out
