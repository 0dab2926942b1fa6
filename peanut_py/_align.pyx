# cython: cdivision=True, initializedcheck=False
"""Banded affine-gap (Gotoh) alignment with traceback: CIGAR, NM, MD and AS, free of the GIL.

The algorithm, its boundary conditions and every tie-breaking rule are specified in docs/alignment.md;
kernels/affine.cl must reproduce this file bit for bit, so any change here is a change of that spec.
Scores are int32; NEG_INF is far enough below every reachable score that unreachable cells never tie
with reachable ones (the parameter and length limits checked in Python guarantee that).
"""
from collections import namedtuple

import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

cdef enum:
    NEG_INF = -1073741824           # -2**30
    VALID_MIN = -536870912          # -2**29: scores above this come from real paths

cdef enum:                          # BAM op codes
    OP_M = 0
    OP_I = 1
    OP_D = 2
    OP_S = 4

cdef enum:                          # where H came from (traceback states)
    SRC_START = 0
    SRC_DIAG = 1
    SRC_E = 2
    SRC_F = 3

cdef enum:                          # traceback byte: which predecessors H equals, and whether E and F extended
    TB_DIAG = 1
    TB_E = 2
    TB_E_EXT = 4
    TB_F_EXT = 8
    TB_START = 16

cdef enum:
    ROW_ARRAYS = 6                  # F, D, HV, E, E extended, F extended: one band row each

cdef enum:
    LENGTH_LIMIT = 65535            # read and window length limit (keeps int32 scores far from overflow)

MAX_LENGTH = LENGTH_LIMIT
MAX_PENALTY = 1000   # limit for every scoring parameter

Alignment = namedtuple("Alignment", "pos ref_end read_begin read_end score nm cigar cigar_string md")
Alignment.__doc__ = """One alignment. pos/ref_end: global 0-based reference interval [pos, ref_end) of the aligned
part (pos = -1: no alignment); read_begin/read_end: aligned read interval; score: AS; nm: NM;
cigar: uint32 array in BAM encoding (len << 4 | op, op 0=M 1=I 2=D 4=S); cigar_string, md: SAM strings."""

BatchAlignments = namedtuple("BatchAlignments", "pos ref_end read_begin read_end score nm cigar cigar_offsets")
BatchAlignments.__doc__ = """Flat results of align_batch for n pairs: pos, ref_end (int64[n], global, pos = -1 means
no alignment), read_begin, read_end, score, nm (int32[n]); cigar (uint32, BAM encoding) with pair p's ops in
cigar[cigar_offsets[p]:cigar_offsets[p + 1]] (cigar_offsets int64[n + 1])."""

_OP_CHARS = "MIDNSHP=X"


cdef inline int32_t column_score(uint8_t a, uint8_t b, const Scoring *sc) noexcept nogil:
    """s(a, b) of docs/alignment.md ("Scoring"): the dynamic program and the terminal-gap pass share it."""
    if a == 4 or b == 4:
        return -sc.ambig
    return sc.A if a == b else -sc.B


cdef void work_init(AlignWork *w) noexcept nogil:
    w.H = NULL
    w.F = NULL
    w.tb = NULL
    w.tb_cap = 0
    w.row_cap = 0


cdef void work_free(AlignWork *w) noexcept nogil:
    free(w.H)
    free(w.F)
    free(w.tb)
    work_init(w)


cdef int work_reserve(AlignWork *w, int32_t width, size_t cells) noexcept nogil:
    cdef void *p
    if width + 1 > w.row_cap:
        p = realloc(w.H, (width + 1) * sizeof(int32_t))
        if p == NULL:
            return -1
        w.H = <int32_t *> p
        # F and, behind it, the row scratch of dp_row: D, HV, E and the two gap-extension flags
        p = realloc(w.F, ROW_ARRAYS * (width + 1) * sizeof(int32_t))
        if p == NULL:
            return -1
        w.F = <int32_t *> p
        w.row_cap = width + 1
    if cells > w.tb_cap:
        p = realloc(w.tb, cells)
        if p == NULL:
            return -1
        w.tb = <uint8_t *> p
        w.tb_cap = cells
    return 0


cdef inline void set_unaligned(AlignResult *out) noexcept nogil:
    out.ref_begin = -1
    out.ref_end = -1
    out.read_begin = 0
    out.read_end = 0
    out.score = 0
    out.nm = 0
    out.n_cigar = 0


cdef enum:
    REACH_BIG = 1 << 28         # a penalty above every budget (window edge): stops a reach scan
    REACH_MAX_WIDTH = 64        # bands wider than this are left to the DP by the reach check
    REACH_MAX_BUDGET = 32       # so are penalties whose budgets exceed this


cdef inline int32_t column_penalty(uint8_t a, uint8_t b, const Scoring *sc) noexcept nogil:
    # what a column costs against a match: A - s(a, b). Without branches: on the diagonals beside the read's,
    # which the reach check scans, matches and mismatches alternate at random. Codes are 0..4, and only N (4)
    # has bit 2 set
    cdef int32_t amb = ((a | b) >> 2) & 1, mis = a != b
    return amb * (sc.A + sc.ambig) + (1 - amb) * mis * (sc.A + sc.B)


cdef extern from *:
    uint64_t BYTE_LOW_BITS "0x0101010101010101ULL"      # bit 0 of each byte of a 64-bit word
    uint64_t BYTE_N_BITS "0x0404040404040404ULL"        # bit 2 of each byte: set in code 4 (N) only


cdef inline bint words_match(const uint8_t *read, const uint8_t *ref) noexcept nogil:
    """Whether the eight columns read[0:8] against ref[0:8] are all matches of bases (no N)."""
    cdef uint64_t a, b
    memcpy(&a, read, 8)
    memcpy(&b, ref, 8)
    return a == b and not (a & BYTE_N_BITS)


cdef inline void words_penalty(const uint8_t *read, const uint8_t *ref, int32_t *n_mis, int32_t *n_amb) noexcept nogil:
    """Of the eight columns read[0:8] against ref[0:8] (codes 0..4): how many mismatch (two different bases)
    and how many hold an N (code 4, the only code with bit 2 set), byte-parallel in one 64-bit word each."""
    cdef uint64_t a, b, x, amb, diff
    memcpy(&a, read, 8)
    memcpy(&b, ref, 8)
    x = a ^ b                                           # at most 7 per byte: shifts spill only into bits 6, 7
    amb = ((a | b) >> 2) & BYTE_LOW_BITS
    diff = (x | (x >> 1) | (x >> 2)) & BYTE_LOW_BITS
    # the byte sums, each byte 0 or 1, gather in the top byte
    n_amb[0] = <int32_t> ((amb * BYTE_LOW_BITS) >> 56)
    n_mis[0] = <int32_t> (((diff & ~amb) * BYTE_LOW_BITS) >> 56)


cdef inline void words_flags(const uint8_t *read, const uint8_t *ref, uint64_t *mis, uint64_t *amb) noexcept nogil:
    """words_penalty's per-column flags for read[0:8] against ref[0:8]: bit 0 of byte i of ``mis`` is set
    where column i mismatches (two different bases), of ``amb`` where it holds an N."""
    cdef uint64_t a, b, x
    memcpy(&a, read, 8)
    memcpy(&b, ref, 8)
    x = a ^ b
    amb[0] = ((a | b) >> 2) & BYTE_LOW_BITS
    mis[0] = (x | (x >> 1) | (x >> 2)) & BYTE_LOW_BITS & ~amb[0]


cdef inline void fill_reach(int32_t *reach, int32_t max_budget) noexcept nogil:
    # prefix_reach / suffix_reach set reach[r] only where r is the first budget of those ending at one column
    # (or past the read's end); the others, -1 still, end at the same column as the budget below them
    cdef int32_t r, t, last = reach[0]
    for r in range(1, max_budget + 1):
        t = reach[r]
        last = t if t >= 0 else last       # carried in a register, not reloaded from reach[r - 1]
        reach[r] = last


cdef inline int32_t reach_step(const uint8_t *read, const uint8_t *ref, int32_t n, int32_t q, int32_t j, bint local,
                                const Scoring *sc, int32_t clip_cost, int32_t *u, int32_t *v) noexcept nogil:
    """One column of a reach scan (read[q] against ref[j], REACH_BIG outside the window): u, the penalty without
    a clip, and v, with the read's end up to here soft-clipped at ``clip_cost`` (clip + A per clipped base),
    both saturating at REACH_BIG; returns the scan's penalty so far, min(u, v)."""
    cdef int32_t c = column_penalty(read[q], ref[j], sc) if 0 <= j < n else REACH_BIG
    u[0] = u[0] + c if u[0] + c < REACH_BIG else REACH_BIG
    if local:
        v[0] = v[0] + c if v[0] + c < REACH_BIG else REACH_BIG
        if clip_cost < v[0]:
            v[0] = clip_cost
    return u[0] if u[0] < v[0] else v[0]


cdef void prefix_reach(const uint8_t *read, int32_t m, const uint8_t *ref, int32_t n, int32_t d, bint local,
                       const Scoring *sc, int32_t max_budget, int32_t *reach) noexcept nogil:
    """reach[r] for r = 0..max_budget: the largest x such that read[0:x] aligns ungapped on diagonal d (base
    q against ref[d + q]), its first bases soft-clipped or not (local), at a penalty of at most r against
    m*A (clipped bases cost A each, plus ``clip``). The penalty only grows with x, so one scan fills every r.
    reach[max_budget + 1] is scratch space."""
    cdef int32_t x = 0, r, u = 0, v = REACH_BIG, now, before = 0, clip_v
    for r in range(max_budget + 1):
        reach[r] = -1
    while x < m:
        # eight matches in a row leave u as it is and v at most at its first column's clip, so the penalty
        # does not rise and no budget ends there
        if x + 8 <= m and 0 <= d + x and d + x + 8 <= n and words_match(read + x, ref + d + x):
            if local:
                clip_v = sc.clip + sc.A * (x + 1)
                v = clip_v if clip_v < v else v
            x += 8
            continue
        # v: read[0:x+1] with a clipped prefix, the clip ending anywhere up to x+1
        now = reach_step(read, ref, n, x, d + x, local, sc, sc.clip + sc.A * (x + 1), &u, &v)
        # budgets before .. now - 1 end at x: the first of them takes x here, the others copy it below; where
        # none ends (now == before), x goes to the spare slot max_budget + 1. No branch on it: on diagonals
        # beside the read's, most columns but not all end a budget
        reach[before if now > before else max_budget + 1] = x
        before = now
        if before > max_budget:
            break
        x += 1
    if before <= max_budget:
        reach[before] = m
    fill_reach(reach, max_budget)


cdef void suffix_reach(const uint8_t *read, int32_t m, const uint8_t *ref, int32_t n, int32_t d, bint local,
                       const Scoring *sc, int32_t max_budget, int32_t *reach) noexcept nogil:
    """prefix_reach's mirror: reach[r] is the smallest y such that read[y:m] aligns ungapped on diagonal d,
    its last bases soft-clipped or not (local), at a penalty of at most r; reach[max_budget + 1] is scratch."""
    cdef int32_t y = m - 1, r, u = 0, v = REACH_BIG, now, before = 0, clip_v
    for r in range(max_budget + 1):
        reach[r] = -1
    while y >= 0:
        if y >= 7 and 0 <= d + y - 7 and d + y + 1 <= n and words_match(read + y - 7, ref + d + y - 7):
            if local:
                clip_v = sc.clip + sc.A * (m - y)
                v = clip_v if clip_v < v else v
            y -= 8
            continue
        now = reach_step(read, ref, n, y, d + y, local, sc, sc.clip + sc.A * (m - y), &u, &v)
        reach[before if now > before else max_budget + 1] = y + 1
        before = now
        if before > max_budget:
            break
        y -= 1
    if before <= max_budget:
        reach[before] = 0
    fill_reach(reach, max_budget)


cdef void prefix_reach_at(const uint8_t *read, int32_t m, const uint8_t *ref, int32_t n, int32_t d, bint local,
                          const Scoring *sc, int32_t top, int32_t low, int32_t *at_top, int32_t *at_low) noexcept nogil:
    """prefix_reach's reach[top] and reach[low] (low <= top) only, without filling the budgets between: the
    same scan, stopped where the penalty passes top, and reach[low] counted as the number of columns whose
    prefix stays within low (the penalty only grows, so they are the first ones)."""
    cdef int32_t x = 0, c, i, u = 0, v = REACH_BIG, now = 0, n_low = 0, clip_v
    cdef int32_t tab[4]                 # a column's penalty by its flags: match, mismatch, N
    cdef uint64_t mis, amb, flags
    tab[0], tab[1], tab[2], tab[3] = 0, sc.A + sc.B, sc.A + sc.ambig, 0
    while x < m:
        if x + 8 <= m and 0 <= d + x and d + x + 8 <= n:
            # eight columns inside the window: their penalties from two 64-bit words, no load per column
            words_flags(read + x, ref + d + x, &mis, &amb)
            if not (mis | amb):
                if local:
                    clip_v = sc.clip + sc.A * (x + 1)
                    v = clip_v if clip_v < v else v
                n_low += 8 if now <= low else 0      # eight matches: the penalty stays at now
                x += 8
                continue
            # no column here is outside the window, so no saturation: v is at most the clip's cost, and u (which
            # may hold REACH_BIG from columns before the window) grows only while v stays within top, for a
            # number of columns that top bounds, by at most 2 * MAX_PENALTY each
            flags = mis | (amb << 1)
            for i in range(8):
                c = tab[flags & 3]
                flags >>= 8
                u += c
                if local:
                    clip_v = sc.clip + sc.A * (x + 1)
                    v = v + c if v + c < clip_v else clip_v
                now = u if u < v else v
                if now > top:
                    break
                n_low += now <= low
                x += 1
            if now > top:
                break
            continue
        now = reach_step(read, ref, n, x, d + x, local, sc, sc.clip + sc.A * (x + 1), &u, &v)
        if now > top:
            break
        n_low += now <= low
        x += 1
    at_top[0] = x
    at_low[0] = n_low


cdef void suffix_reach_at(const uint8_t *read, int32_t m, const uint8_t *ref, int32_t n, int32_t d, bint local,
                          const Scoring *sc, int32_t top, int32_t low, int32_t *at_top, int32_t *at_low) noexcept nogil:
    """suffix_reach's reach[top] and reach[low] only, as prefix_reach_at."""
    cdef int32_t y = m - 1, c, i, u = 0, v = REACH_BIG, now = 0, n_low = 0, clip_v
    cdef int32_t tab[4]                 # a column's penalty by its flags: match, mismatch, N
    cdef uint64_t mis, amb, flags
    tab[0], tab[1], tab[2], tab[3] = 0, sc.A + sc.B, sc.A + sc.ambig, 0
    while y >= 0:
        if y >= 7 and 0 <= d + y - 7 and d + y + 1 <= n:
            words_flags(read + y - 7, ref + d + y - 7, &mis, &amb)
            if not (mis | amb):
                if local:
                    clip_v = sc.clip + sc.A * (m - y)
                    v = clip_v if clip_v < v else v
                n_low += 8 if now <= low else 0
                y -= 8
                continue
            flags = mis | (amb << 1)
            for i in range(8):                          # from the block's last column (top byte) down
                c = tab[(flags >> 56) & 3]
                flags <<= 8
                u += c
                if local:
                    clip_v = sc.clip + sc.A * (m - y)
                    v = v + c if v + c < clip_v else clip_v
                now = u if u < v else v
                if now > top:
                    break
                n_low += now <= low
                y -= 1
            if now > top:
                break
            continue
        now = reach_step(read, ref, n, y, d + y, local, sc, sc.clip + sc.A * (m - y), &u, &v)
        if now > top:
            break
        n_low += now <= low
        y -= 1
    at_top[0] = y + 1
    at_low[0] = m - n_low


cdef int32_t segment_penalty(const uint8_t *read, const uint8_t *ref, int32_t n, int32_t d, int32_t a, int32_t b,
                             const Scoring *sc, int32_t limit) noexcept nogil:
    """The penalty of read[a:b] ungapped on diagonal d, or more than ``limit`` once it exceeds it."""
    cdef int32_t q = a, total = 0, n_mis, n_amb
    if d + a < 0 or d + b > n:
        return REACH_BIG if b > a else 0
    while q + 8 <= b:                                   # eight columns at a time
        words_penalty(read + q, ref + d + q, &n_mis, &n_amb)
        total += n_mis * (sc.A + sc.B) + n_amb * (sc.A + sc.ambig)
        if total > limit:
            return total
        q += 8
    while q < b:
        total += column_penalty(read[q], ref[d + q], sc)
        if total > limit:
            return total
        q += 1
    return total


cdef inline int32_t gap_penalty(int32_t shift, const Scoring *sc) noexcept nogil:
    # a gap moving the alignment from diagonal d to d + shift: a deletion of shift reference bases, or for
    # shift < 0 an insertion of -shift read bases, which also lose their match
    return sc.O + shift * sc.E if shift > 0 else sc.O - shift * (sc.A + sc.E)


cdef bint rivals_screened(const uint8_t *read, int32_t m, const uint8_t *ref, int32_t n, int32_t lo, int32_t W,
                          bint local, const Scoring *sc, int32_t pen, int32_t top) noexcept nogil:
    """True where no_rival_within's answer is True, decided from two budgets per diagonal: top (the largest
    any case needs) and, for two gaps, low = pen - 2 * (O + E) (the largest a pair of gaps leaves). A reach
    only grows (prefix) or falls (suffix) with the budget, so a stretch that covers what it must within the
    budget pen - gaps also does at top: every rival no_rival_within finds with its budgets is found here
    with top; and its two-gap test uses low already. False where this is not enough: no_rival_within then
    decides with every budget. Most reads with a unique placement end here, at a fraction of the cost."""
    cdef int32_t k, kk, s, ins, hit = 0, a, b, pmax, low, amax, bmin, ld1 = 0, li1 = 0, ld2 = 0, li2 = 0
    cdef int32_t k1 = 0, j1 = 0, M1 = -REACH_BIG, M2 = -REACH_BIG, N1 = REACH_BIG, N2 = REACH_BIG, best
    cdef int32_t p_top[REACH_MAX_WIDTH]
    cdef int32_t s_top[REACH_MAX_WIDTH]
    cdef int32_t p_low[REACH_MAX_WIDTH]
    cdef int32_t s_low[REACH_MAX_WIDTH]
    low = pen - 2 * (sc.O + sc.E) if pen >= 2 * (sc.O + sc.E) else top
    for k in range(W):
        prefix_reach_at(read, m, ref, n, lo + k, local, sc, top, low, &p_top[k], &p_low[k])
        suffix_reach_at(read, m, ref, n, lo + k, local, sc, top, low, &s_top[k], &s_low[k])
    # the longest deletion (ld) and insertion (li) within pen (1) and within pen - (O + E), one gap of a pair
    # (2); every shift a case below takes is at most that long
    for s in range(1, W):
        ld1 = s if gap_penalty(s, sc) <= pen else ld1
        li1 = s if gap_penalty(-s, sc) <= pen else li1
        ld2 = s if gap_penalty(s, sc) <= pen - (sc.O + sc.E) else ld2
        li2 = s if gap_penalty(-s, sc) <= pen - (sc.O + sc.E) else li2
    # one gap from diagonal k to k' = k + s needs p_top[k] + (inserted bases) >= s_top[k']. Only the two
    # largest p_top and the two smallest s_top can come closest (k != k'); usually not within li1
    for k in range(W):
        if p_top[k] > M1:
            M2, M1, k1 = M1, p_top[k], k
        elif p_top[k] > M2:
            M2 = p_top[k]
        if s_top[k] < N1:
            N2, N1, j1 = N1, s_top[k], k
        elif s_top[k] < N2:
            N2 = s_top[k]
    best = M1 - N1 if k1 != j1 else (M1 - N2 if M1 - N2 > M2 - N1 else M2 - N1)
    if best + li1 >= 0:
        for s in range(-li1, ld1 + 1):
            if s == 0:
                continue
            ins = -s if s < 0 else 0
            for k in range(0 if s > 0 else -s, W - s if s > 0 else W):
                hit |= p_top[k] + ins >= s_top[k + s]
        if hit:
            return False
    if local and pen - sc.clip - sc.A >= 0:
        pmax = (pen - sc.clip) // sc.A
        for k in range(W):
            a = s_top[k]
            b = m - p_top[k]
            if (a if a > 1 else 1) <= pmax or (b if b > 1 else 1) <= pmax:
                return False
    if pen >= 2 * (sc.O + sc.E):
        # no_rival_within's test of each diagonal k against every pair of gaps at once: the first gap from
        # k - L (deletion, a = reach) or k + L (insertion, a = reach + L), the second to k + L or k - L
        for k in range(W):
            amax = -1
            bmin = m + 1
            for kk in range(k - ld2 if k - ld2 > 0 else 0, k):
                amax = p_low[kk] if p_low[kk] > amax else amax
            for kk in range(k + 1, k + li2 + 1 if k + li2 + 1 < W else W):
                amax = p_low[kk] + kk - k if p_low[kk] + kk - k > amax else amax
            for kk in range(k + 1, k + ld2 + 1 if k + ld2 + 1 < W else W):
                bmin = s_low[kk] if s_low[kk] < bmin else bmin
            for kk in range(k - li2 if k - li2 > 0 else 0, k):
                bmin = s_low[kk] - (k - kk) if s_low[kk] - (k - kk) < bmin else bmin
            if amax < 0 or bmin > m:                    # no pair of gaps around k fits in the band
                continue
            if amax >= bmin or segment_penalty(read, ref, n, lo + k, amax, bmin, sc, low) <= low:
                return False
    return True


cdef bint no_rival_within(const uint8_t *read, int32_t m, const uint8_t *ref, int32_t n, int32_t band_lo,
                          int32_t band_hi, bint local, const Scoring *sc, int32_t pen) noexcept nogil:
    """Whether every gapped or soft-clipped alignment in the band costs more than ``pen`` against m*A (the
    penalty of an ungapped, unclipped alignment), for pen < 3 * (O + E), so that no such alignment has three
    gaps (docs/alignment.md, "Ungapped shortcut"). A gap of length L costs O + L*E as a deletion, O + L*(A+E)
    as an insertion; what is left of ``pen`` (the budget) bounds the penalty of each M stretch around the
    gaps: prefix_reach / suffix_reach say how far a diagonal's first and last stretch can go within a budget,
    and a middle stretch (two gaps) must cover what lies between them within it. A soft-clipped ungapped
    alignment pays clip + A per clipped base at one end. False where any such alignment may exist.
    rivals_screened, from two budgets per diagonal, decides most reads first; only where it proves nothing
    are the reaches for every budget computed."""
    cdef int32_t lo = band_lo if band_lo > -m else -m
    cdef int32_t hi = band_hi if band_hi < n else n
    cdef int32_t W = hi - lo + 1, k, top, r, pmax, s1, s2, g1, g2, a, b, n_shifts = 0, u, v, RB
    cdef int32_t rmax, n_pair, amax, bmin
    cdef int32_t reach1[REACH_MAX_WIDTH * (REACH_MAX_BUDGET + 2)]
    cdef int32_t reach2[REACH_MAX_WIDTH * (REACH_MAX_BUDGET + 2)]
    cdef int32_t shifts[2 * REACH_MAX_WIDTH]
    if W > REACH_MAX_WIDTH or sc.A <= 0 or pen >= 3 * (sc.O + sc.E):
        return False
    # the largest budget any case below needs: one gap, or a clip
    top = pen - (sc.O + sc.E)
    if local and pen - sc.clip - sc.A > top:
        top = pen - sc.clip - sc.A
    if top < 0:
        return True
    if top > REACH_MAX_BUDGET:
        return False
    if rivals_screened(read, m, ref, n, lo, W, local, sc, pen, top):
        return True
    RB = top + 2                            # reach1[k * RB + r]: diagonal lo + k, budget r (one spare slot)
    for k in range(W):
        prefix_reach(read, m, ref, n, lo + k, local, sc, top, &reach1[k * RB])
        suffix_reach(read, m, ref, n, lo + k, local, sc, top, &reach2[k * RB])
    # one gap: read[0:x] on diagonal d, the gap, read[x + (inserted bases):m] on d + shift
    for s1 in range(1 - W, W):
        g1 = gap_penalty(s1, sc) if s1 != 0 else pen + 1
        if g1 > pen:
            continue
        shifts[n_shifts] = s1
        n_shifts += 1
        r = pen - g1
        for k in range(W):
            if 0 <= k + s1 < W and reach1[k * RB + r] + (-s1 if s1 < 0 else 0) >= reach2[(k + s1) * RB + r]:
                return False
    # two gaps: diagonals d - s1, d and d + s2; the stretch on d covers read[a:b] at least. Every gap costs
    # at least O + E, so below twice that there is nothing to check
    if pen >= 2 * (sc.O + sc.E):
        # a gap of a pair costs at most pen - (O + E), and what is left for the stretches at most
        # rmax = pen - 2 * (O + E). reach1 only grows and reach2 only falls with the budget, so every pair's
        # [a, b) on diagonal k contains [amax, bmin): the largest a and the smallest b over the shifts, at
        # budget rmax; and the penalty of [a, b) is at least that of [amax, bmin). Where that exceeds rmax
        # (one segment_penalty per diagonal, not one per pair), no pair of gaps around k is within pen
        rmax = pen - 2 * (sc.O + sc.E)
        n_pair = 0
        for u in range(n_shifts):
            if gap_penalty(shifts[u], sc) <= pen - (sc.O + sc.E):
                shifts[n_pair] = shifts[u]
                n_pair += 1
        for k in range(W):
            amax = -1
            bmin = m + 1
            for u in range(n_pair):
                s1 = shifts[u]
                if 0 <= k - s1 < W:
                    a = reach1[(k - s1) * RB + rmax] + (-s1 if s1 < 0 else 0)
                    amax = a if a > amax else amax
                if 0 <= k + s1 < W:
                    b = reach2[(k + s1) * RB + rmax] - (-s1 if s1 < 0 else 0)
                    bmin = b if b < bmin else bmin
            if amax < 0 or bmin > m:                    # no pair of gaps around k fits in the band
                continue
            if amax < bmin and segment_penalty(read, ref, n, lo + k, amax, bmin, sc, rmax) > rmax:
                continue
            for u in range(n_pair):
                s1 = shifts[u]
                if not 0 <= k - s1 < W:
                    continue
                g1 = gap_penalty(s1, sc)
                for v in range(n_pair):
                    s2 = shifts[v]
                    g2 = gap_penalty(s2, sc)
                    if g1 + g2 > pen or not 0 <= k + s2 < W:
                        continue
                    r = pen - g1 - g2
                    a = reach1[(k - s1) * RB + r] + (-s1 if s1 < 0 else 0)
                    b = reach2[(k + s2) * RB + r] - (-s2 if s2 < 0 else 0)
                    if b <= a or segment_penalty(read, ref, n, lo + k, a, b, sc, r) <= r:
                        return False
    if local and pen - sc.clip - sc.A >= 0:
        r = pen - sc.clip - sc.A
        pmax = (pen - sc.clip) // sc.A      # the most bases a soft clip within pen can take
        for k in range(W):
            # p >= 1 clipped first bases, read[p:m] on the diagonal; or the last q >= 1 bases clipped
            a = reach2[k * RB + r]
            b = m - reach1[k * RB + r]
            if (a if a > 1 else 1) <= pmax or (b if b > 1 else 1) <= pmax:
                return False
    return True


cdef bint ungapped_unique(const uint8_t *read, int32_t m, const uint8_t *ref, int32_t n,
                          int32_t band_lo, int32_t band_hi, bint local, const Scoring *sc,
                          uint32_t *cigar, AlignResult *out) noexcept nogil:
    """The dynamic program's result without the dynamic program, when it is provably an ungapped, unclipped
    alignment (docs/alignment.md, "Ungapped shortcut"); False leaves ``out`` alone.

    Every alignment scores at most A per aligned read base. One with a gap therefore scores at most
    m*A - (O+E), one that clips a read end (local) at most (m-1)*A - clip. An ungapped, unclipped alignment
    on diagonal d scores S = m*A - pen, pen the sum of its columns' penalties (A+B per mismatch, A+ambig per
    N). If S beats every other alignment in the band strictly, S is the unique optimum, every prefix of it is
    the unique best path to its cells (strictly above a fresh start), so the DP's end-cell rule and traceback
    return exactly it: pos d, CIGAR mM, NM its mismatches and N, AS S. Other full-length ungapped alignments
    are scored here; gapped and clipped ones are beaten outright when pen is below both bounds above, and
    otherwise, for pen < 3*(O+E), by no_rival_within. Most reads take this path, at a fraction of the DP's
    cost.
    """
    cdef int32_t bound = sc.O + sc.E
    cdef int32_t lo = band_lo if band_lo > 0 else 0
    cdef int32_t hi = band_hi if band_hi < n - m else n - m
    cdef int32_t pen_max, best, best_d = -1, best_nm = 0, d, q, s, rem, nm, mid, t, n_mis, n_amb
    cdef bint found = False, tie = False
    cdef uint8_t a, b
    if local and sc.A + sc.clip < bound:
        bound = sc.A + sc.clip
    if lo > hi or sc.A + sc.B <= 0:
        return False
    # the largest penalty either argument accepts
    pen_max = 3 * (sc.O + sc.E) - 1
    if bound - 1 > pen_max:
        pen_max = bound - 1
    if pen_max < 0:
        return False
    best = m * sc.A - pen_max                            # the least score accepted, then the best so far
    # from the band's middle (the hit's diagonal) outwards: the best diagonal, found early, lets the others
    # drop out at their first mismatches; the outcome does not depend on the order
    mid = (band_lo + band_hi) // 2
    mid = lo if mid < lo else (hi if mid > hi else mid)
    for t in range(2 * (hi - lo) + 1):
        d = mid + (t + 1) // 2 if t & 1 else mid - t // 2
        if d < lo or d > hi:
            continue
        s = 0
        nm = 0
        rem = m
        # eight columns at a time; s + rem * A only falls, so stopping at a word's end instead of at the
        # column where it drops below the best decides the same
        q = 0
        while q + 8 <= m:
            words_penalty(read + q, ref + d + q, &n_mis, &n_amb)
            s += sc.A * (8 - n_mis - n_amb) - sc.B * n_mis - sc.ambig * n_amb
            nm += n_mis + n_amb
            rem -= 8
            q += 8
            if s + rem * sc.A < best:                  # cannot reach (or tie) the best any more
                break
        if s + rem * sc.A < best:
            continue
        while q < m:
            a = read[q]
            b = ref[d + q]
            rem -= 1
            q += 1
            if a == 4 or b == 4:
                s -= sc.ambig
                nm += 1
            elif a == b:
                s += sc.A
            else:
                s -= sc.B
                nm += 1
            if s + rem * sc.A < best:
                break
        if s + rem * sc.A < best or rem > 0:
            continue
        if not found or s > best:
            found, tie, best, best_d, best_nm = True, False, s, d, nm
        else:
            tie = True                                   # s == best: the DP's tie rules would decide
    if not found or tie:
        return False
    if m * sc.A - best >= bound and not no_rival_within(read, m, ref, n, band_lo, band_hi, local, sc,
                                                        m * sc.A - best):
        return False
    out.ref_begin = best_d
    out.ref_end = best_d + m
    out.read_begin = 0
    out.read_end = m
    out.score = best
    out.nm = best_nm
    out.n_cigar = 1
    cigar[0] = (<uint32_t> m << 4) | OP_M
    return True


cdef inline uint8_t tb_source(uint8_t b) noexcept nogil:
    """Where H came from, by the priority fresh start > diagonal > deletion > insertion among its equals."""
    if b & TB_START:
        return SRC_START
    if b & TB_DIAG:
        return SRC_DIAG
    return SRC_E if b & TB_E else SRC_F


cdef extern from *:
    # pointers to arrays that no other pointer of the function reaches, so that its loops can be vectorised
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define PEANUT_RESTRICT __restrict__
    #elif defined(_MSC_VER)
    #define PEANUT_RESTRICT __restrict
    #else
    #define PEANUT_RESTRICT
    #endif
    """
    ctypedef int32_t *i32_only "int32_t * PEANUT_RESTRICT"
    ctypedef uint8_t *u8_only "uint8_t * PEANUT_RESTRICT"


cdef inline int32_t dp_row(i32_only H, i32_only F, i32_only D, i32_only HV, i32_only E, i32_only E_EXT,
                           i32_only F_EXT, u8_only tbrow, const uint8_t *ref, int32_t before, const int32_t *srow,
                           int32_t k_lo, int32_t k_hi, bint first_at_zero, int32_t go, int32_t gext, bint local,
                           int32_t floor, int32_t *row_best) noexcept nogil:
    """One band row of align_core's dynamic program, cells k_lo..k_hi (cell k's column is j = before + k + 1,
    its reference base ref[before + k]; with ``first_at_zero`` cell k_lo is column j = 0, which has no
    diagonal predecessor). H[k] holds (i-1, j-1) on entry and (i, j) on return, H[k+1] and F[k+1] hold
    (i-1, j); tbrow[k] gets the traceback byte (TB_* bits). Returns the row's first highest cell above
    ``floor`` (a fresh start's value in local mode, where the fresh start also competes; VALID_MIN otherwise),
    or -1, and its value in row_best.

    Passes over the row, so that only the deletion chain (E, along the row), the one dependency from a cell
    to the next, runs cell by cell: the diagonal and insertion terms first (HV: H but for deletions), the
    chain, then H and the traceback bytes; the other passes are vectorised by the compiler. Called with a
    constant ``local``, so each mode compiles to its own loops."""
    cdef int32_t k, h, e = NEG_INF, up_open, up_ext, f, left_open, left_ext, hv
    cdef int32_t best = floor, best_k = -1
    if first_at_zero:
        D[k_lo] = NEG_INF
    for k in range(k_lo + first_at_zero, k_hi + 1):
        D[k] = H[k] + srow[ref[before + k]]
    for k in range(k_lo, k_hi + 1):
        up_open = H[k + 1] - go
        up_ext = F[k + 1] - gext
        f = up_ext if up_ext > up_open else up_open            # ties: open
        F_EXT[k] = up_ext > up_open
        F[k] = f
        hv = D[k] if D[k] > f else f
        if local:
            hv = hv if hv > floor else floor
        HV[k] = hv
    # E from HV instead of H (a shorter chain): where H is E's own value (above HV), a gap opened there costs
    # E - go <= E - gext, so E comes out the same. So does its extension flag for O > 0; for O = 0 the flag
    # says extended where H's says opened, and the traceback then reads the same D operations at the same
    # score either way (H there came from E, and opening costs nothing)
    left_open = NEG_INF - go
    for k in range(k_lo, k_hi + 1):
        left_ext = e - gext
        E_EXT[k] = left_ext > left_open
        e = left_ext if left_ext > left_open else left_open    # ties: open
        E[k] = e
        left_open = HV[k] - go
    for k in range(k_lo, k_hi + 1):
        h = HV[k] if HV[k] > E[k] else E[k]
        H[k] = h
        best = h if h > best else best
        if local:
            tbrow[k] = <uint8_t> ((h == D[k]) * TB_DIAG | (h == E[k]) * TB_E | E_EXT[k] * TB_E_EXT
                                  | F_EXT[k] * TB_F_EXT | (h == floor) * TB_START)
        else:
            tbrow[k] = <uint8_t> ((h == D[k]) * TB_DIAG | (h == E[k]) * TB_E | E_EXT[k] * TB_E_EXT
                                  | F_EXT[k] * TB_F_EXT)
    row_best[0] = best
    # the row's first (smallest j) highest cell
    if best > floor:
        best_k = k_lo
        while H[best_k] != best:
            best_k += 1
    return best_k


cdef int align_core(const uint8_t *read, int32_t m, const uint8_t *ref, int32_t n,
                    int32_t band_lo, int32_t band_hi, bint local, const Scoring *sc,
                    AlignWork *w, uint32_t *cigar, int32_t cigar_cap, AlignResult *out) noexcept nogil:
    cdef int32_t lo = band_lo if band_lo > -m else -m     # diagonals outside [-m, n] hold no cells
    cdef int32_t hi = band_hi if band_hi < n else n
    cdef int32_t W, i, j, k
    cdef int32_t start_value, end_pen, t, best_t, best_i, best_j, rc, k_lo, k_hi, row_best, row_k
    cdef int32_t go = sc.O + sc.E
    cdef int32_t gext = sc.E
    cdef int32_t srow[5]
    cdef int32_t *H
    cdef int32_t *F
    cdef int32_t *D
    cdef int32_t *HV
    cdef int32_t *E
    cdef int32_t *E_EXT
    cdef int32_t *F_EXT
    cdef uint8_t *tbrow

    set_unaligned(out)
    if m <= 0 or lo > hi:
        return 0
    if sc.shortcut and cigar_cap >= 1 and ungapped_unique(read, m, ref, n, band_lo, band_hi, local, sc, cigar, out):
        return 0
    W = hi - lo + 1
    if work_reserve(w, W, <size_t> (m + 1) * <size_t> W) != 0:
        return -1
    H = w.H
    F = w.F
    # dp_row's scratch rows behind F
    D = F + w.row_cap
    HV = D + w.row_cap
    E = HV + w.row_cap
    E_EXT = E + w.row_cap
    F_EXT = E_EXT + w.row_cap

    # row 0: the alignment may begin at any reference position inside the band (free reference start)
    for k in range(W):
        j = lo + k
        H[k] = 0 if (j >= 0 and j <= n) else NEG_INF
        F[k] = NEG_INF
    H[W] = NEG_INF
    F[W] = NEG_INF

    start_value = -sc.clip
    best_t = NEG_INF
    best_i = -1
    best_j = -1
    for i in range(1, m + 1):
        rc = read[i - 1]
        for k in range(5):
            srow[k] = column_score(rc, <uint8_t> k, sc)
        end_pen = 0 if i == m else sc.clip
        tbrow = w.tb + <size_t> i * W
        # band cells of this row inside the window [0, n]; the others are unreachable (those before j = 0 are
        # set now, those after j = n once the row is done)
        k_lo = -(i + lo) if i + lo < 0 else 0
        k_hi = n - (i + lo) if n - (i + lo) < W - 1 else W - 1
        for k in range(0, k_lo if k_lo < W else W):
            H[k] = NEG_INF
            F[k] = NEG_INF
            tbrow[k] = TB_START
        if k_lo > k_hi:
            row_k = -1
        elif local:
            row_k = dp_row(H, F, D, HV, E, E_EXT, F_EXT, tbrow, ref, i + lo - 1, srow, k_lo, k_hi,
                           i + lo + k_lo == 0, go, gext, True, start_value, &row_best)
        else:
            row_k = dp_row(H, F, D, HV, E, E_EXT, F_EXT, tbrow, ref, i + lo - 1, srow, k_lo, k_hi,
                           i + lo + k_lo == 0, go, gext, False, VALID_MIN, &row_best)
        # candidate end cells: the last row (semiglobal) or any non-empty alignment (local), i.e. h above a fresh
        # start. All cells of a row share i and end_pen, so the row's first highest cell is its best candidate
        # under the end-cell rule (higher t, then smaller j, then larger i), and rows come in ascending i
        if row_k >= 0 and (local or i == m):
            t = row_best - end_pen
            j = i + lo + row_k
            if t > best_t or (t == best_t and j <= best_j):
                best_t = t
                best_i = i
                best_j = j
        # cells past the window's end only after the row: the last cell above read H[k_hi + 1], F[k_hi + 1],
        # i.e. (i-1, n), the start of insertions in the window's last column
        for k in range(k_hi + 1 if k_hi >= 0 else 0, W):
            H[k] = NEG_INF
            F[k] = NEG_INF
            tbrow[k] = TB_START
    if best_i < 0:
        return 0
    return traceback(read, m, ref, lo, W, local, sc, w, best_i, best_j, cigar, cigar_cap, out)


cdef inline int push_op(uint32_t *cigar, int32_t cap, int32_t *n_ops, int op) noexcept nogil:
    # run-length encoding, ops arrive in reverse order
    if n_ops[0] > 0 and (cigar[n_ops[0] - 1] & 0xf) == <uint32_t> op:
        cigar[n_ops[0] - 1] += 16
        return 0
    if n_ops[0] >= cap:
        return -2
    cigar[n_ops[0]] = 16 | op
    n_ops[0] += 1
    return 0


cdef int traceback(const uint8_t *read, int32_t m, const uint8_t *ref, int32_t lo, int32_t W, bint local,
                   const Scoring *sc, AlignWork *w, int32_t end_i, int32_t end_j,
                   uint32_t *cigar, int32_t cap, AlignResult *out) noexcept nogil:
    cdef int32_t i = end_i, j = end_j, n_ops = 0, nm = 0, score = 0, k, state = 0, n_m = 0
    cdef uint8_t b, rc, fc, src
    cdef uint32_t tmp
    if cap < 1:
        return -2
    if m - end_i > 0:
        cigar[0] = <uint32_t> (m - end_i) << 4 | OP_S
        n_ops = 1
    while True:
        if state == 0 and i == 0:
            break               # row 0 (E and F never lead there)
        b = w.tb[<size_t> i * W + (j - i - lo)]
        if state == 0:          # in H
            src = tb_source(b)
            if src == SRC_START:
                break
            if src == SRC_DIAG:
                rc = read[i - 1]
                fc = ref[j - 1]
                if rc == 4 or fc == 4:
                    score -= sc.ambig
                    nm += 1
                elif rc == fc:
                    score += sc.A
                else:
                    score -= sc.B
                    nm += 1
                n_m += 1
                if push_op(cigar, cap, &n_ops, OP_M) != 0:
                    return -2
                i -= 1
                j -= 1
            else:
                state = src
                score -= sc.O    # the gap opened here (seen from the end) is paid once
        elif state == SRC_E:    # deletion: consumes reference
            score -= sc.E
            nm += 1
            if push_op(cigar, cap, &n_ops, OP_D) != 0:
                return -2
            j -= 1
            if not (b & TB_E_EXT):
                state = 0
        else:                   # insertion: consumes read
            score -= sc.E
            nm += 1
            if push_op(cigar, cap, &n_ops, OP_I) != 0:
                return -2
            i -= 1
            if not (b & TB_F_EXT):
                state = 0
    if n_m == 0:
        return 0                # only gaps: reported as no alignment
    if i > 0:
        if n_ops >= cap:
            return -2
        cigar[n_ops] = <uint32_t> i << 4 | OP_S
        n_ops += 1
    for k in range(n_ops // 2):
        tmp = cigar[k]
        cigar[k] = cigar[n_ops - 1 - k]
        cigar[n_ops - 1 - k] = tmp
    out.ref_begin = j
    out.ref_end = end_j
    out.read_begin = i
    out.read_end = end_i
    out.score = score
    out.nm = nm
    out.n_cigar = n_ops
    return 0


cdef int32_t write_uint(char *md, int32_t pos, int32_t v) noexcept nogil:
    cdef char buf[12]
    cdef int32_t nd = 0
    while True:
        buf[nd] = 48 + v % 10
        nd += 1
        v //= 10
        if v == 0:
            break
    while nd > 0:
        nd -= 1
        md[pos] = buf[nd]
        pos += 1
    return pos


cdef int32_t md_core(const uint8_t *read, const uint8_t *ref, int64_t ref_begin,
                     const uint32_t *cigar, int32_t n_cigar, char *md, int32_t md_cap) noexcept nogil:
    cdef const char *letters = b"ACGTN"
    cdef int64_t r = ref_begin
    cdef int32_t q = 0, pos = 0, run = 0, c, l, x
    cdef uint32_t op
    cdef uint8_t rc, fc
    for c in range(n_cigar):
        op = cigar[c] & 0xf
        l = cigar[c] >> 4
        if op == OP_M:
            x = 0
            while x < l:
                if x + 8 <= l and words_match(read + q, ref + r):     # eight matches extend the run
                    run += 8
                    q += 8
                    r += 8
                    x += 8
                    continue
                x += 1
                rc = read[q]
                fc = ref[r]
                if rc == fc and rc != 4:
                    run += 1
                else:
                    if pos + 13 > md_cap:
                        return -1
                    pos = write_uint(md, pos, run)
                    md[pos] = letters[fc if fc < 4 else 4]
                    pos += 1
                    run = 0
                q += 1
                r += 1
        elif op == OP_D:
            if pos + 12 + l > md_cap:
                return -1
            pos = write_uint(md, pos, run)
            md[pos] = 94   # '^'
            pos += 1
            for x in range(l):
                fc = ref[r]
                md[pos] = letters[fc if fc < 4 else 4]
                pos += 1
                r += 1
            run = 0
        else:           # I and S consume the read only
            q += l
    if pos + 12 > md_cap:
        return -1
    return write_uint(md, pos, run)


# ---------------------------------------------------------------- Python API


def cigar_string(cigar):
    """SAM CIGAR string of a BAM-encoded uint32 op array ("*" when empty)."""
    if len(cigar) == 0:
        return "*"
    return "".join(f"{int(c) >> 4}{_OP_CHARS[int(c) & 0xf]}" for c in cigar)


def cigar_tuples(cigar):
    """List of (op, length) with BAM op codes (0=M, 1=I, 2=D, 4=S), as pysam's cigartuples."""
    return [(int(c) & 0xf, int(c) >> 4) for c in cigar]


cdef Scoring make_scoring(A, B, O, E, ambig, clip, shortcut=True) except *:
    cdef Scoring sc
    for name, v in (("A", A), ("B", B), ("O", O), ("E", E), ("ambig", ambig), ("clip", clip)):
        if not 0 <= v <= MAX_PENALTY:
            raise ValueError(f"scoring parameter {name}={v} outside [0, {MAX_PENALTY}]")
    if O + E < 1:
        raise ValueError("a gap must cost something: O + E >= 1")
    sc.A, sc.B, sc.O, sc.E, sc.ambig, sc.clip = A, B, O, E, ambig, clip
    sc.shortcut = 1 if shortcut else 0
    return sc


# The input checks run as plain loops without the GIL: as NumPy expressions (max, diff, any) their dispatch
# and temporaries hold the GIL, which many postprocessing workers then queue for.

def _codes(x, what):
    a = np.ascontiguousarray(x, dtype=np.uint8)
    if a.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional")
    cdef const uint8_t[::1] v = a
    cdef Py_ssize_t i, n = a.size
    cdef uint8_t top = 0
    with nogil:
        for i in range(n):
            if v[i] > top:
                top = v[i]
    if top > 4:
        raise ValueError(f"{what} holds codes above 4")
    return a


def _offsets(x, total, what):
    o = np.ascontiguousarray(x, dtype=np.int64)
    if o.ndim != 1 or o.size < 1:
        raise ValueError(f"{what} must start at 0, be non-decreasing and end at the sequence length")
    cdef const int64_t[::1] v = o
    cdef Py_ssize_t i, n = o.size
    cdef int64_t step, longest = 0
    cdef bint ordered = v[0] == 0 and v[n - 1] == total
    with nogil:
        for i in range(1, n):
            step = v[i] - v[i - 1]
            if step < 0:
                ordered = False
            if step > longest:
                longest = step
    if not ordered:
        raise ValueError(f"{what} must start at 0, be non-decreasing and end at the sequence length")
    if longest > MAX_LENGTH:
        raise ValueError(f"{what}: a sequence is longer than {MAX_LENGTH}")
    return o


def align(read_codes, ref_codes, ref_global_start, band_lo, band_hi, local, A=1, B=4, O=6, E=1, *, ambig=1, clip=5,
          shortcut=True):
    """Align one read (codes 0..4) to a reference window (codes 0..4) starting at global position
    ref_global_start, within diagonals band_lo..band_hi (window position - read position, inclusive).
    local=True soft-clips read ends at `clip` each; local=False aligns the whole read. Returns Alignment.
    shortcut=False runs the dynamic program even where the ungapped shortcut applies (same result)."""
    read = _codes(read_codes, "read_codes")
    ref = _codes(ref_codes, "ref_codes")
    if read.size > MAX_LENGTH or ref.size > MAX_LENGTH:
        raise ValueError(f"read and window must be at most {MAX_LENGTH} bases")
    cdef Scoring sc = make_scoring(A, B, O, E, ambig, clip, shortcut)
    cdef const uint8_t[::1] rv = read
    cdef const uint8_t[::1] fv = ref
    cdef int32_t m = read.size, n = ref.size, lo = band_lo, hi = band_hi
    cdef bint loc = bool(local)
    cdef AlignWork w
    cdef AlignResult res
    cdef int rcode
    cdef int32_t md_len = 0
    cigar = np.zeros(2 * m + 3, dtype=np.uint32)
    cdef uint32_t[::1] cv = cigar
    md_buf = bytearray(3 * (n + 1) + 16)
    cdef char *mdp = md_buf
    cdef const uint8_t *rp = &rv[0] if m > 0 else NULL
    cdef const uint8_t *fp = &fv[0] if n > 0 else NULL
    work_init(&w)
    with nogil:
        rcode = align_core(rp, m, fp, n, lo, hi, loc, &sc, &w, &cv[0], 2 * m + 3, &res)
        work_free(&w)
        if rcode == 0 and res.ref_begin >= 0:
            md_len = md_core(rp, fp, res.ref_begin, &cv[0], res.n_cigar, mdp, 3 * (n + 1) + 16)
    if rcode == -1:
        raise MemoryError("alignment work buffers")
    if rcode != 0:
        raise RuntimeError(f"align_core failed ({rcode})")
    cigar = cigar[:res.n_cigar].copy()
    if res.ref_begin < 0:
        return Alignment(-1, -1, 0, 0, 0, 0, cigar, "*", "")
    return Alignment(int(ref_global_start) + res.ref_begin, int(ref_global_start) + res.ref_end,
                     res.read_begin, res.read_end, res.score, res.nm, cigar, cigar_string(cigar),
                     bytes(md_buf[:md_len]).decode("ascii"))


def ungapped_shortcut(read_codes, ref_codes, band_lo, band_hi, local, A=1, B=4, O=6, E=1, *, ambig=1, clip=5):
    """What the ungapped shortcut of align/align_batch decides for one pair: (window position, AS, NM) of the
    alignment it returns without the dynamic program (CIGAR mM), or None where the DP runs. For tests."""
    read = _codes(read_codes, "read_codes")
    ref = _codes(ref_codes, "ref_codes")
    cdef Scoring sc = make_scoring(A, B, O, E, ambig, clip)
    cdef const uint8_t[::1] rv = read if read.size else np.zeros(1, np.uint8)
    cdef const uint8_t[::1] fv = ref if ref.size else np.zeros(1, np.uint8)
    cdef uint32_t op = 0
    cdef AlignResult res
    if read.size == 0 or not ungapped_unique(&rv[0], read.size, &fv[0], ref.size, band_lo, band_hi, bool(local), &sc,
                                             &op, &res):
        return None
    return int(res.ref_begin), int(res.score), int(res.nm)


def batch_arrays(read_seq, read_offsets, ref_seq, ref_offsets, ref_global_start, band_lo, band_hi, local):
    """align_batch's inputs checked and converted (scalars broadcast): read and window codes (uint8), their
    offsets (int64), global window starts (int64), band bounds (int32) and local flags (uint8) per pair.
    Shared with the device kernel's wrapper (affine.py) so both reject bad input alike."""
    rseq = _codes(read_seq, "read_seq")
    fseq = _codes(ref_seq, "ref_seq")
    roff = _offsets(read_offsets, rseq.size, "read_offsets")
    foff = _offsets(ref_offsets, fseq.size, "ref_offsets")
    npairs = roff.size - 1
    if foff.size - 1 != npairs:
        raise ValueError("read_offsets and ref_offsets describe different numbers of pairs")
    gstart = np.ascontiguousarray(np.broadcast_to(ref_global_start, (npairs,)), dtype=np.int64)
    blo = np.ascontiguousarray(np.broadcast_to(band_lo, (npairs,)), dtype=np.int32)
    bhi = np.ascontiguousarray(np.broadcast_to(band_hi, (npairs,)), dtype=np.int32)
    loc = np.ascontiguousarray(np.broadcast_to(local, (npairs,)), dtype=np.uint8)
    return rseq, fseq, roff, foff, gstart, blo, bhi, loc


def align_batch(read_seq, read_offsets, ref_seq, ref_offsets, ref_global_start, band_lo, band_hi, local,
                A=1, B=4, O=6, E=1, *, ambig=1, clip=5, shortcut=True):
    """Align pair p = read_seq[read_offsets[p]:read_offsets[p+1]] to the window
    ref_seq[ref_offsets[p]:ref_offsets[p+1]] starting at global ref_global_start[p], band
    band_lo[p]..band_hi[p], mode local[p] (scalars broadcast). The loop runs without the GIL with this
    call's own work buffers, so several threads may call it at once. Returns BatchAlignments.
    shortcut=False runs the dynamic program even where the ungapped shortcut applies (same result)."""
    rseq, fseq, roff, foff, gstart, blo, bhi, loc = batch_arrays(read_seq, read_offsets, ref_seq, ref_offsets,
                                                                 ref_global_start, band_lo, band_hi, local)
    npairs = roff.size - 1
    cdef Scoring sc = make_scoring(A, B, O, E, ambig, clip, shortcut)
    pos = np.empty(npairs, dtype=np.int64)
    ref_end = np.empty(npairs, dtype=np.int64)
    read_begin = np.empty(npairs, dtype=np.int32)
    read_end = np.empty(npairs, dtype=np.int32)
    score = np.empty(npairs, dtype=np.int32)
    nm = np.empty(npairs, dtype=np.int32)
    cigar_offsets = np.zeros(npairs + 1, dtype=np.int64)
    max_m = int(np.diff(roff).max()) if npairs else 0

    cdef const uint8_t[::1] rv = rseq if rseq.size else np.zeros(1, np.uint8)
    cdef const uint8_t[::1] fv = fseq if fseq.size else np.zeros(1, np.uint8)
    cdef const int64_t[::1] ro = roff, fo = foff, gs = gstart
    cdef const int32_t[::1] lov = blo, hiv = bhi
    cdef const uint8_t[::1] locv = loc
    cdef int64_t[::1] posv = pos, endv = ref_end, cov = cigar_offsets
    cdef int32_t[::1] rbv = read_begin, rev = read_end, scv = score, nmv = nm
    cdef int64_t p, np_ = npairs, total = 0, cap_out = 0
    cdef int32_t scratch_cap = 2 * max_m + 3
    cdef AlignWork w
    cdef AlignResult res
    cdef int rcode = 0
    cdef uint32_t *scratch = NULL
    cdef uint32_t *flat = NULL
    cdef void *grown
    cdef uint32_t[::1] cgv

    work_init(&w)
    with nogil:
        scratch = <uint32_t *> malloc(scratch_cap * sizeof(uint32_t))
        cap_out = 4 * np_ + 16
        flat = <uint32_t *> malloc(cap_out * sizeof(uint32_t))
        if scratch == NULL or flat == NULL:
            rcode = -1
        p = 0
        while rcode == 0 and p < np_:
            rcode = align_core(&rv[0] + ro[p], <int32_t> (ro[p + 1] - ro[p]), &fv[0] + fo[p],
                               <int32_t> (fo[p + 1] - fo[p]), lov[p], hiv[p], locv[p] != 0, &sc, &w,
                               scratch, scratch_cap, &res)
            if rcode != 0:
                break
            if total + res.n_cigar > cap_out:
                cap_out = 2 * cap_out + res.n_cigar
                grown = realloc(flat, cap_out * sizeof(uint32_t))
                if grown == NULL:
                    rcode = -1
                    break
                flat = <uint32_t *> grown
            if res.n_cigar > 0:
                memcpy(flat + total, scratch, res.n_cigar * sizeof(uint32_t))
            total += res.n_cigar
            cov[p + 1] = total
            posv[p] = gs[p] + res.ref_begin if res.ref_begin >= 0 else -1
            endv[p] = gs[p] + res.ref_end if res.ref_begin >= 0 else -1
            rbv[p] = res.read_begin
            rev[p] = res.read_end
            scv[p] = res.score
            nmv[p] = res.nm
            p += 1
        work_free(&w)
        free(scratch)
    try:
        if rcode == -1:
            raise MemoryError("alignment work buffers")
        if rcode != 0:
            raise RuntimeError(f"align_core failed ({rcode})")
        cigar = np.empty(total, dtype=np.uint32)
        if total:
            cgv = cigar
            memcpy(&cgv[0], flat, total * sizeof(uint32_t))
    finally:
        free(flat)
    return BatchAlignments(pos, ref_end, read_begin, read_end, score, nm, cigar, cigar_offsets)


def md_batch(read_seq, read_offsets, ref_seq, ref_offsets, ref_global_start, result):
    """MD strings (list of str, "" for pairs without alignment) of align_batch's result on the same input."""
    text, offsets = md_flat(read_seq, read_offsets, ref_seq, ref_offsets, ref_global_start, result)
    raw = text.tobytes()
    bounds = offsets.tolist()         # a list: this module turns off negative indexing, so no offsets[:-1]
    return [raw[a:b].decode("ascii") for a, b in zip(bounds, bounds[1:])]


def md_flat(read_seq, read_offsets, ref_seq, ref_offsets, ref_global_start, result):
    """md_batch's strings as one uint8 text with int64 offsets (pair p: text[offsets[p]:offsets[p+1]],
    empty for pairs without alignment), built without the GIL."""
    rseq = _codes(read_seq, "read_seq")
    fseq = _codes(ref_seq, "ref_seq")
    roff = _offsets(read_offsets, rseq.size, "read_offsets")
    foff = _offsets(ref_offsets, fseq.size, "ref_offsets")
    npairs = roff.size - 1
    gstart = np.ascontiguousarray(np.broadcast_to(ref_global_start, (npairs,)), dtype=np.int64)
    rpos = np.ascontiguousarray(result.pos, dtype=np.int64)
    cig = np.ascontiguousarray(result.cigar, dtype=np.uint32)
    coff = np.ascontiguousarray(result.cigar_offsets, dtype=np.int64)
    if rpos.size != npairs or coff.size != npairs + 1:
        raise ValueError("result does not match the input's number of pairs")
    # an MD string has at most 3 characters per reference base of the window plus a closing number
    limits = 3 * np.diff(foff) + 16
    text = np.empty(max(int(limits.sum()), 1), dtype=np.uint8)
    offsets = np.zeros(npairs + 1, dtype=np.int64)
    cdef const uint8_t[::1] rv = rseq if rseq.size else np.zeros(1, np.uint8)
    cdef const uint8_t[::1] fv = fseq if fseq.size else np.zeros(1, np.uint8)
    cdef const uint32_t[::1] cv = cig if cig.size else np.zeros(1, np.uint32)
    cdef const int64_t[::1] ro = roff, fo = foff, gs = gstart, pv = rpos, co = coff
    cdef const int64_t[::1] lim = limits
    cdef uint8_t[::1] tv = text
    cdef int64_t[::1] ov = offsets
    cdef int64_t p, at = 0, n = npairs
    cdef int32_t length = 0
    with nogil:
        for p in range(n):
            if pv[p] >= 0:
                length = md_core(&rv[0] + ro[p], &fv[0] + fo[p], pv[p] - gs[p], &cv[0] + co[p],
                                 <int32_t> (co[p + 1] - co[p]), <char *> &tv[0] + at, <int32_t> lim[p])
                if length < 0:
                    break
                at += length
            ov[p + 1] = at
    if length < 0:
        raise RuntimeError("MD buffer too small")
    return text, offsets


cdef int32_t clip_one_pair(const uint8_t *read, int32_t m, const uint8_t *ref, uint32_t *cig, int32_t n_ops,
                           const Scoring *sc, int64_t *ref_begin, int64_t *ref_end, int32_t *read_begin,
                           int32_t *read_end, int32_t *score) noexcept nogil:
    """Clip terminal gaps in place (cig holds the ops without S); returns the new number of ops."""
    cdef int32_t first = 0, last = n_ops - 1, k, L, x, seg, cost, op
    cdef int64_t r
    cdef int32_t q
    # left end: M run, then one gap, then more alignment
    while last - first >= 2 and (cig[first] & 0xf) == OP_M and (cig[first + 1] & 0xf) in (OP_I, OP_D):
        k = cig[first] >> 4
        L = cig[first + 1] >> 4
        op = cig[first + 1] & 0xf
        seg = 0
        for x in range(k):
            seg += column_score(read[read_begin[0] + x], ref[ref_begin[0] + x], sc)
        cost = sc.O + L * sc.E
        if seg + (L * sc.A if op == OP_I else 0) > cost:
            break
        read_begin[0] += k + (L if op == OP_I else 0)
        ref_begin[0] += k + (L if op == OP_D else 0)
        score[0] += cost - seg
        first += 2
    # right end, mirrored
    while last - first >= 2 and (cig[last] & 0xf) == OP_M and (cig[last - 1] & 0xf) in (OP_I, OP_D):
        k = cig[last] >> 4
        L = cig[last - 1] >> 4
        op = cig[last - 1] & 0xf
        seg = 0
        for x in range(k):
            seg += column_score(read[read_end[0] - k + x], ref[ref_end[0] - k + x], sc)
        cost = sc.O + L * sc.E
        if seg + (L * sc.A if op == OP_I else 0) > cost:
            break
        read_end[0] -= k + (L if op == OP_I else 0)
        ref_end[0] -= k + (L if op == OP_D else 0)
        score[0] += cost - seg
        last -= 2
    if first > 0:
        for x in range(first, last + 1):
            cig[x - first] = cig[x]
    return last - first + 1


cdef int32_t clip_problem(const uint8_t *read, int32_t m, const uint8_t *ref, const uint32_t *src, int64_t n_src,
                          int64_t gstart, bint local, const Scoring *sc, int64_t *pos, int64_t *ref_end,
                          int32_t *read_begin, int32_t *read_end, int32_t *score, int32_t *nm,
                          uint32_t *ops) noexcept nogil:
    """One aligned pair's ops ``src`` rewritten into ``ops`` (room for its ops other than S, plus two): with
    ``local``, terminal gaps clipped (clip_one_pair) and the pair's fields (global ``pos``/``ref_end``)
    updated, NM recomputed where the clip moved an end; then the soft clips rebuilt from read_begin/read_end.
    Returns the number of ops written."""
    cdef int32_t n_ops = 0, mism, op, l, k, qb, qe, s
    cdef int64_t x, rb, re_, q, r
    cdef uint8_t a, b
    # copy without soft clips; they are rebuilt from read_begin/read_end
    for x in range(n_src):
        if (src[x] & 0xf) != OP_S:
            ops[n_ops] = src[x]
            n_ops += 1
    if local:
        rb = pos[0] - gstart
        re_ = ref_end[0] - gstart
        qb = read_begin[0]
        qe = read_end[0]
        s = score[0]
        n_ops = clip_one_pair(read, m, ref, ops, n_ops, sc, &rb, &re_, &qb, &qe, &s)
        if qb != read_begin[0] or qe != read_end[0]:
            pos[0] = gstart + rb
            ref_end[0] = gstart + re_
            read_begin[0] = qb
            read_end[0] = qe
            score[0] = s
            # NM of what is left: mismatching M columns plus gap lengths
            mism = 0
            q = qb
            r = rb
            for x in range(n_ops):
                op = ops[x] & 0xf
                l = ops[x] >> 4
                if op == OP_M:
                    for k in range(l):
                        a = read[q + k]
                        b = ref[r + k]
                        mism += a != b or a == 4 or b == 4
                    q += l
                    r += l
                elif op == OP_I:
                    mism += l
                    q += l
                else:
                    mism += l
                    r += l
            nm[0] = mism
    # soft clips back at both ends
    if read_begin[0] > 0:
        for x in range(n_ops, 0, -1):
            ops[x] = ops[x - 1]
        ops[0] = (<uint32_t> read_begin[0] << 4) | OP_S
        n_ops += 1
    if read_end[0] < m:
        ops[n_ops] = (<uint32_t> (m - read_end[0]) << 4) | OP_S
        n_ops += 1
    return n_ops


def clip_terminal_gaps(read_seq, read_offsets, ref_seq, ref_offsets, ref_global_start, result, local,
                       A=1, B=4, O=6, E=1, *, ambig=1, clip=5):
    """bwa-mem's rule for gaps near read ends, applied to align_batch's (or the device kernel's) result: in
    local mode, a gap whose flank between it and the read end does not pay for it (flank score < gap cost)
    is soft-clipped together with that flank, repeatedly at both ends (docs/alignment.md, "Terminal gaps").
    bwa gets there by bounding a gap's length by the score left to extend; the dynamic program alone would
    keep e.g. 7M5D93M (score 7 - 11 + 93 = 89) over 7S93M (93 - 5 clip = 88). Returns BatchAlignments
    with pos/ref_end/read_begin/read_end/score/CIGAR updated and NM recomputed; pairs with ``local`` false
    are unchanged."""
    rseq, fseq, roff, foff, gstart, _, _, loc = batch_arrays(read_seq, read_offsets, ref_seq, ref_offsets,
                                                             ref_global_start, 0, 0, local)
    cdef Scoring sc = make_scoring(A, B, O, E, ambig, clip)
    npairs = roff.size - 1
    pos = np.array(result.pos, dtype=np.int64)
    ref_end = np.array(result.ref_end, dtype=np.int64)
    read_begin = np.array(result.read_begin, dtype=np.int32)
    read_end = np.array(result.read_end, dtype=np.int32)
    score = np.array(result.score, dtype=np.int32)
    nm = np.array(result.nm, dtype=np.int32)
    src_cigar = np.ascontiguousarray(result.cigar, dtype=np.uint32)
    src_off = np.ascontiguousarray(result.cigar_offsets, dtype=np.int64)
    if any(a.size != npairs for a in (pos, ref_end, read_begin, read_end, score, nm)) or \
            src_off.size != npairs + 1:
        raise ValueError("result does not match the input's number of pairs")
    # every pair's ops other than S, plus its two soft clips at most
    cigar = np.empty(src_cigar.size + 2 * npairs + 1, dtype=np.uint32)
    cigar_offsets = np.zeros(npairs + 1, dtype=np.int64)
    cdef const uint8_t[::1] rv = rseq if rseq.size else np.zeros(1, np.uint8)
    cdef const uint8_t[::1] fv = fseq if fseq.size else np.zeros(1, np.uint8)
    cdef const int64_t[::1] ro = roff, fo = foff, gs = gstart, so = src_off
    cdef const uint8_t[::1] lv = loc
    cdef const uint32_t[::1] sc_v = src_cigar if src_cigar.size else np.zeros(1, np.uint32)
    cdef uint32_t[::1] cv = cigar
    cdef int64_t[::1] co = cigar_offsets, pv = pos, ev = ref_end
    cdef int32_t[::1] bv = read_begin, dv = read_end, sv = score, nv = nm
    cdef int64_t p, at = 0, n = npairs
    cdef int32_t n_ops
    with nogil:
        for p in range(n):
            n_ops = 0
            if pv[p] >= 0:
                n_ops = clip_problem(&rv[0] + ro[p], <int32_t> (ro[p + 1] - ro[p]), &fv[0] + fo[p],
                                     &sc_v[0] + so[p], so[p + 1] - so[p], gs[p], lv[p] != 0, &sc, &pv[p], &ev[p],
                                     &bv[p], &dv[p], &sv[p], &nv[p], &cv[0] + at)
            at += n_ops
            co[p + 1] = at
    return BatchAlignments(pos, ref_end, read_begin, read_end, score, nm, cigar[:at], cigar_offsets)


cdef bint alignment_fits(const uint32_t *cig, int64_t n_ops, int64_t m, int64_t n, int64_t ref_begin,
                         int64_t ref_end, int64_t read_begin, int64_t read_end) noexcept nogil:
    """Whether an alignment's ops (M, I, D and S only) span exactly its read interval [read_begin, read_end)
    and window interval [ref_begin, ref_end), both inside a read of m bases and a window of n, with no more
    soft-clipped bases than the read has left: then clipping and MD read nothing outside them."""
    cdef int64_t k, clipped = 0, read_span = 0, ref_span = 0, l
    cdef uint32_t op
    for k in range(n_ops):
        op = cig[k] & 0xf
        l = cig[k] >> 4
        if op == OP_M:
            read_span += l
            ref_span += l
        elif op == OP_I:
            read_span += l
        elif op == OP_D:
            ref_span += l
        elif op == OP_S:
            clipped += l
        else:
            return False
    return (0 <= read_begin <= read_end <= m and read_span == read_end - read_begin and clipped + read_span <= m
            and 0 <= ref_begin <= ref_end <= n and ref_span == ref_end - ref_begin)


cdef inline bint span_inside(const int64_t[::1] offsets, int64_t p, int64_t total) noexcept nogil:
    # item p's [offsets[p], offsets[p + 1]) lies in [0, total] and is at most LENGTH_LIMIT long
    return 0 <= offsets[p] <= offsets[p + 1] <= total and offsets[p + 1] - offsets[p] <= LENGTH_LIMIT


def alignments_with_md(const uint8_t[::1] read_seq, const int64_t[::1] read_offsets, const uint8_t[::1] ref_seq,
                       const int64_t[::1] ref_offsets, const int64_t[::1] ref_global_start, result, bint local,
                       A=1, B=4, O=6, E=1, *, ambig=1, clip=5):
    """clip_terminal_gaps (all pairs local, or none) and md_flat of align_batch's (or the device kernel's)
    result in one pass without the GIL: (BatchAlignments, (MD text, MD offsets)), the same as those two
    calls; without ``local`` the result itself comes back. For input made in this process: the arrays must
    already have the dtypes align_batch returns (uint8 codes, int64 offsets and starts, result's as
    BatchAlignments) and are not converted or scanned; lengths, each pair's offsets and each aligned pair's
    CIGAR against its read and window are checked as the loop meets them, so that nothing outside the
    arrays is read or written."""
    cdef Scoring sc = make_scoring(A, B, O, E, ambig, clip)
    cdef int64_t n = ref_global_start.shape[0]
    cdef const int64_t[::1] pos_in = result.pos, end_in = result.ref_end, co_in = result.cigar_offsets
    cdef const int32_t[::1] rb_in = result.read_begin, re_in = result.read_end, sc_in = result.score
    cdef const int32_t[::1] nm_in = result.nm
    cdef const uint32_t[::1] cig_in = result.cigar
    if read_offsets.shape[0] != n + 1 or ref_offsets.shape[0] != n + 1 or co_in.shape[0] != n + 1 or \
            pos_in.shape[0] != n or end_in.shape[0] != n or rb_in.shape[0] != n or re_in.shape[0] != n or \
            sc_in.shape[0] != n or nm_in.shape[0] != n:
        raise ValueError("alignments_with_md: the result and the problems differ in number")
    cdef int64_t r_total = read_seq.shape[0], f_total = ref_seq.shape[0], c_total = cig_in.shape[0]
    # an MD string has at most 3 characters per reference base of its window plus a closing number
    cdef int64_t text_cap = 3 * f_total + 16 * n + 16
    text = np.empty(text_cap, dtype=np.uint8)
    md_offsets = np.zeros(n + 1, dtype=np.int64)
    cdef uint8_t[::1] tv = text
    cdef int64_t[::1] mo = md_offsets
    # local: the clipped result, each pair's ops other than S plus its two soft clips at most
    cdef int64_t cig_cap = c_total + 2 * n + 1 if local else 1
    cdef int64_t[::1] pv, ev, co
    cdef int32_t[::1] bv, dv, sv, nv
    cdef uint32_t[::1] cv
    if local:
        pos, ref_end, cigar_offsets = np.empty(n, np.int64), np.empty(n, np.int64), np.zeros(n + 1, np.int64)
        read_begin, read_end = np.empty(n, np.int32), np.empty(n, np.int32)
        score, nm, cigar = np.empty(n, np.int32), np.empty(n, np.int32), np.empty(cig_cap, np.uint32)
        pv, ev, co, bv, dv, sv, nv, cv = pos, ref_end, cigar_offsets, read_begin, read_end, score, nm, cigar
    cdef const uint8_t *rp = &read_seq[0] if r_total else NULL
    cdef const uint8_t *fp = &ref_seq[0] if f_total else NULL
    cdef const uint32_t *cp = &cig_in[0] if c_total else NULL
    cdef const uint32_t *ops
    cdef int64_t p, at_text = 0, at_cig = 0, bad = -1, room, gs, c0, c1
    cdef int32_t n_ops, m, length
    with nogil:
        for p in range(n):
            gs = ref_global_start[p]
            c0 = co_in[p]
            c1 = co_in[p + 1]
            if local:
                pv[p] = pos_in[p]
                ev[p] = end_in[p]
                bv[p] = rb_in[p]
                dv[p] = re_in[p]
                sv[p] = sc_in[p]
                nv[p] = nm_in[p]
            if pos_in[p] >= 0:
                if not (span_inside(read_offsets, p, r_total) and span_inside(ref_offsets, p, f_total)
                        and 0 <= c0 <= c1 <= c_total
                        and alignment_fits(cp + c0, c1 - c0, read_offsets[p + 1] - read_offsets[p],
                                           ref_offsets[p + 1] - ref_offsets[p], pos_in[p] - gs, end_in[p] - gs,
                                           rb_in[p], re_in[p])
                        and (not local or at_cig + (c1 - c0) + 2 <= cig_cap)):
                    bad = p
                    break
                m = <int32_t> (read_offsets[p + 1] - read_offsets[p])
                if local:
                    n_ops = clip_problem(rp + read_offsets[p], m, fp + ref_offsets[p], cp + c0, c1 - c0, gs, True,
                                         &sc, &pv[p], &ev[p], &bv[p], &dv[p], &sv[p], &nv[p], &cv[0] + at_cig)
                    ops = &cv[0] + at_cig
                    at_cig += n_ops
                else:
                    n_ops = <int32_t> (c1 - c0)
                    ops = cp + c0
                room = text_cap - at_text
                length = md_core(rp + read_offsets[p], fp + ref_offsets[p], (pv[p] if local else pos_in[p]) - gs,
                                 ops, n_ops, <char *> &tv[0] + at_text, <int32_t> (room if room < (1 << 30) else 1 << 30))
                if length < 0:
                    bad = p
                    break
                at_text += length
            if local:
                co[p + 1] = at_cig
            mo[p + 1] = at_text
    if bad >= 0:
        raise ValueError(f"alignments_with_md: alignment {bad} does not fit its read and window")
    if not local:
        return result, (text, md_offsets)
    return BatchAlignments(pos, ref_end, read_begin, read_end, score, nm, cigar[:at_cig], cigar_offsets), \
        (text, md_offsets)
