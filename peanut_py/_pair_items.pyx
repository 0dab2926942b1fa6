# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The per-chunk bookkeeping of paired-end postprocessing without the GIL (wrapped by pair_items.py).

A chunk's pairs are placed from each read's candidate hits (its best ``max_pair_hits`` kept hits) and their
concordant FR combinations; the hits that are aligned (the *items*) are, per read, ranks 0..n_align-1
(primary, reported hits, XS) and every candidate of a combination, in (read, rank) order.  The functions
here build those items, collect the combinations' scores for the pair choice, and turn the choice into
each read's primary and other reported items and the inputs of the MAPQ model.  Each runs its loops in one
``with nogil`` block, so that a thread pool postprocessing several chunks at once takes the interpreter lock
a few times per chunk instead of once per NumPy step.  tests/test_pair_items.py checks every function
against the NumPy steps it replaced.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memcpy

from peanut_py._search cimport first_above

ctypedef fused mapq_t:
    int32_t
    int64_t

cdef enum:
    # reverse hits are looked up by (read << _KEY_SHIFT) | end: global coordinates are below 2^32
    _KEY_SHIFT = 33


cdef struct RevKey:
    int64_t key
    int64_t index


cdef int _compare_rev(const void *pa, const void *pb) noexcept nogil:
    # by key, then by index: the order of a stable sort by key
    cdef const RevKey *a = <const RevKey *> pa
    cdef const RevKey *b = <const RevKey *> pb
    if a.key != b.key:
        return -1 if a.key < b.key else 1
    return -1 if a.index < b.index else (1 if a.index > b.index else 0)


cdef struct Combinations:
    int64_t n
    int64_t cap
    int64_t *fwd
    int64_t *rev
    int64_t *insert


cdef int _push(Combinations *c, int64_t f, int64_t r, int64_t insert) noexcept nogil:
    """Append one combination; -1 when memory runs out."""
    cdef int64_t cap
    cdef int64_t *p
    if c.n == c.cap:
        cap = 2 * c.cap if c.cap > 0 else 1024
        p = <int64_t *> realloc(c.fwd, cap * sizeof(int64_t))
        if p == NULL:
            return -1
        c.fwd = p
        p = <int64_t *> realloc(c.rev, cap * sizeof(int64_t))
        if p == NULL:
            return -1
        c.rev = p
        p = <int64_t *> realloc(c.insert, cap * sizeof(int64_t))
        if p == NULL:
            return -1
        c.insert = p
        c.cap = cap
    c.fwd[c.n] = f
    c.rev[c.n] = r
    c.insert[c.n] = insert
    c.n += 1
    return 0


cdef void _free_combinations(Combinations *c) noexcept nogil:
    free(c.fwd)
    free(c.rev)
    free(c.insert)


cdef inline int64_t _lower_key(const RevKey *keys, int64_t n, int64_t x) noexcept nogil:
    """The first position whose key is >= x."""
    cdef int64_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid].key < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline int64_t _upper_key(const RevKey *keys, int64_t n, int64_t x) noexcept nogil:
    """The first position whose key is > x."""
    cdef int64_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid].key <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef int _combinations(int64_t n, const int64_t *read, const int64_t *strand, const int64_t *start,
                       const int64_t *end, const int64_t *contig, int64_t low, int64_t high,
                       Combinations *out) noexcept nogil:
    """pairs.concordant_combinations on hits 0..n-1: for each forward hit in index order, the mate's reverse
    hits ending in [start + low, start + high] (clamped at 0) by end, then index, on the same contig.
    -1 when memory runs out."""
    cdef int64_t i, t, n_rev = 0, mate, lo, hi, r
    for i in range(n):
        if strand[i] == 1:
            n_rev += 1
    cdef RevKey *keys = <RevKey *> malloc((n_rev if n_rev > 0 else 1) * sizeof(RevKey))
    if keys == NULL:
        return -1
    t = 0
    for i in range(n):
        if strand[i] == 1:
            keys[t].key = (read[i] << _KEY_SHIFT) | end[i]
            keys[t].index = i
            t += 1
    qsort(keys, n_rev, sizeof(RevKey), _compare_rev)
    for i in range(n):
        if strand[i] != 0:
            continue
        mate = read[i] ^ 1
        lo = start[i] + low
        hi = start[i] + high
        lo = _lower_key(keys, n_rev, (mate << _KEY_SHIFT) | (lo if lo > 0 else 0))
        hi = _upper_key(keys, n_rev, (mate << _KEY_SHIFT) | (hi if hi > 0 else 0))
        for t in range(lo, hi):
            r = keys[t].index
            if contig[i] == contig[r]:
                if _push(out, i, r, end[r] - start[i]) < 0:
                    free(keys)
                    return -1
    free(keys)
    return 0


cdef object _combination_arrays(Combinations *c):
    """The combinations as NumPy arrays (fwd, rev, insert), the buffers freed."""
    arrays = tuple(np.empty(c.n, dtype=np.int64) for _ in range(3))
    cdef int64_t[::1] f = arrays[0], r = arrays[1], ins = arrays[2]
    if c.n > 0:
        memcpy(&f[0], c.fwd, c.n * sizeof(int64_t))
        memcpy(&r[0], c.rev, c.n * sizeof(int64_t))
        memcpy(&ins[0], c.insert, c.n * sizeof(int64_t))
    _free_combinations(c)
    return arrays


def concordant_combinations(const int64_t[::1] read, const int64_t[::1] strand, const int64_t[::1] start,
                            const int64_t[::1] end, const int64_t[::1] contig, int64_t low, int64_t high):
    """All concordant FR combinations of hits (any order) of mates ``read`` and ``read ^ 1``: index arrays
    (fwd, rev) and the inserts, ordered by forward hit, then reverse end (pairs.concordant_combinations)."""
    cdef int64_t n = read.shape[0]
    if strand.shape[0] != n or start.shape[0] != n or end.shape[0] != n or contig.shape[0] != n:
        raise ValueError("concordant_combinations: hit arrays of different lengths")
    cdef Combinations c
    c.n = c.cap = 0
    c.fwd = c.rev = c.insert = NULL
    cdef int rc = 0
    if n > 0:
        with nogil:
            rc = _combinations(n, &read[0], &strand[0], &start[0], &end[0], &contig[0], low, high, &c)
    if rc < 0:
        _free_combinations(&c)
        raise MemoryError()
    return _combination_arrays(&c)


def pair_items(const uint32_t[::1] rs, const uint32_t[::1] start, const int64_t[::1] end,
               const int64_t[::1] order, const int64_t[::1] ptr, const int32_t[::1] report,
               const int64_t[::1] contig_offsets, bint has_insert, int64_t low, int64_t high,
               int64_t first_read, int64_t max_pair_hits):
    """A chunk's items and concordant combinations; pair_items.pair_items describes the arrays returned."""
    cdef int64_t n_reads = ptr.shape[0] - 1, n_kept = order.shape[0], n_hits = rs.shape[0]
    if n_reads < 0 or report.shape[0] != n_reads or start.shape[0] != n_hits or end.shape[0] != n_hits:
        raise ValueError("pair_items: arrays of different lengths")
    if ptr[0] != 0 or ptr[n_reads] != n_kept:
        raise ValueError("pair_items: read_ptr does not span order")
    if max_pair_hits < 0:
        raise ValueError("pair_items: max_pair_hits must not be negative")
    kept_a = np.empty(n_reads, dtype=np.int64)
    n_align_a = np.empty(n_reads, dtype=np.int64)
    item_ptr_a = np.zeros(n_reads + 1, dtype=np.int64)
    # a read's items are some of its kept hits
    per_item = [np.empty(n_kept, dtype=np.int64) for _ in range(5)]
    item_strand_a = np.empty(n_kept, dtype=np.uint8)
    cdef int64_t[::1] kept = kept_a, n_align = n_align_a, item_ptr = item_ptr_a
    cdef int64_t[::1] item_rank = per_item[0], item_hit = per_item[1], item_read = per_item[2]
    cdef int64_t[::1] item_start = per_item[3], item_end = per_item[4]
    cdef uint8_t[::1] item_strand = item_strand_a
    cdef int64_t r, k, c, h, n_cand = 0, nc, na, at = 0, cbase
    cdef int rc = 0
    cdef Combinations comb
    comb.n = comb.cap = 0
    comb.fwd = comb.rev = comb.insert = NULL
    cdef int64_t *cand = NULL  # per candidate: read, rank, strand, start, end, contig, item (7 columns)
    cdef uint8_t *need = NULL
    cdef int64_t *c_read
    cdef int64_t *c_rank
    cdef int64_t *c_strand
    cdef int64_t *c_start
    cdef int64_t *c_end
    cdef int64_t *c_contig
    cdef int64_t *c_item
    cdef int64_t *comb_cols = NULL  # per combination: fwd read, fwd rank, rev rank (3 columns)
    with nogil:
        for r in range(n_reads):
            kept[r] = ptr[r + 1] - ptr[r]
            n_align[r] = kept[r] if report[r] + 1 > kept[r] else report[r] + 1
            n_cand += kept[r] if kept[r] < max_pair_hits else max_pair_hits
        cand = <int64_t *> malloc((7 * n_cand + 1) * sizeof(int64_t))
        need = <uint8_t *> malloc(n_cand + 1)
        if cand == NULL or need == NULL:
            rc = -1
        else:
            c_read, c_rank, c_strand = cand, cand + n_cand, cand + 2 * n_cand
            c_start, c_end = cand + 3 * n_cand, cand + 4 * n_cand
            c_contig, c_item = cand + 5 * n_cand, cand + 6 * n_cand
            # candidates: each read's best max_pair_hits kept hits, in (read, rank) order
            c = 0
            for r in range(n_reads):
                nc = kept[r] if kept[r] < max_pair_hits else max_pair_hits
                for k in range(nc):
                    h = order[ptr[r] + k]
                    c_read[c] = r
                    c_rank[c] = k
                    c_strand[c] = rs[h] & 1
                    c_start[c] = start[h]
                    c_end[c] = end[h]
                    c_contig[c] = first_above(contig_offsets, c_start[c]) - 1
                    need[c] = 0
                    c += 1
            if has_insert and n_cand > 0:
                rc = _combinations(n_cand, c_read, c_strand, c_start, c_end, c_contig, low, high, &comb)
        if rc == 0:
            for c in range(comb.n):
                need[comb.fwd[c]] = 1
                need[comb.rev[c]] = 1
            # items: ranks 0..n_align-1, then the candidates of a combination ranked below them
            cbase = 0
            for r in range(n_reads):
                na = n_align[r]
                nc = kept[r] if kept[r] < max_pair_hits else max_pair_hits
                for k in range(na if na > nc else nc):
                    if k < na or need[cbase + k]:
                        h = order[ptr[r] + k]
                        item_rank[at] = k
                        item_hit[at] = h
                        item_read[at] = r + first_read
                        item_strand[at] = rs[h] & 1
                        item_start[at] = start[h]
                        item_end[at] = end[h]
                        if k < nc:
                            c_item[cbase + k] = at
                        at += 1
                    elif k < nc:
                        c_item[cbase + k] = -1
                item_ptr[r + 1] = at
                cbase += nc
            comb_cols = <int64_t *> malloc((3 * comb.n + 1) * sizeof(int64_t))
            if comb_cols == NULL:
                rc = -1
            else:
                for c in range(comb.n):
                    comb_cols[c] = c_read[comb.fwd[c]]
                    comb_cols[comb.n + c] = c_rank[comb.fwd[c]]
                    comb_cols[2 * comb.n + c] = c_rank[comb.rev[c]]
                    # the combination's candidates as items
                    comb.fwd[c] = c_item[comb.fwd[c]]
                    comb.rev[c] = c_item[comb.rev[c]]
        free(cand)
        free(need)
    if rc < 0:
        free(comb_cols)
        _free_combinations(&comb)
        raise MemoryError()
    cdef int64_t n_comb = comb.n
    comb_cols_a = np.empty((3, n_comb), dtype=np.int64)
    cdef int64_t[:, ::1] cols = comb_cols_a
    if n_comb > 0:
        memcpy(&cols[0, 0], comb_cols, 3 * n_comb * sizeof(int64_t))
    free(comb_cols)
    fwd_item, rev_item, insert = _combination_arrays(&comb)
    return (kept_a, n_align_a, item_ptr_a, per_item[0][:at], per_item[1][:at], per_item[2][:at],
            item_strand_a[:at].view(bool), per_item[3][:at], per_item[4][:at],
            fwd_item, rev_item, comb_cols_a[0], comb_cols_a[1], comb_cols_a[2], insert)


def combination_scores(const int64_t[::1] kept, const int64_t[::1] item_ptr, const int64_t[::1] fwd_item,
                       const int64_t[::1] rev_item, const int64_t[::1] fwd_read, const int64_t[::1] fwd_rank,
                       const int64_t[::1] rev_rank, const int64_t[::1] insert, const int64_t[::1] pos,
                       const int32_t[::1] score):
    """Each read's own score and the aligned combinations; pair_items.combination_scores describes them."""
    cdef int64_t n_reads = kept.shape[0], n = fwd_item.shape[0], n_items = pos.shape[0]
    if item_ptr.shape[0] != n_reads + 1 or score.shape[0] != n_items or rev_item.shape[0] != n \
            or fwd_read.shape[0] != n or fwd_rank.shape[0] != n or rev_rank.shape[0] != n or insert.shape[0] != n:
        raise ValueError("combination_scores: arrays of different lengths")
    own_a = np.zeros(n_reads, dtype=np.int64)
    out_a = np.empty((6, n), dtype=np.int64)
    cdef int64_t[::1] own = own_a
    cdef int64_t[:, ::1] out = out_a
    cdef int64_t r, c, it, fi, vi, m = 0
    with nogil:
        for r in range(n_reads):
            if kept[r] > 0:
                it = item_ptr[r]
                if pos[it] >= 0:
                    own[r] = score[it]
        for c in range(n):
            fi = fwd_item[c]
            vi = rev_item[c]
            if pos[fi] >= 0 and pos[vi] >= 0:
                out[0, m] = fwd_read[c] // 2
                if fwd_read[c] % 2 == 0:  # mate 1 forward
                    out[1, m] = fwd_rank[c]
                    out[2, m] = rev_rank[c]
                else:
                    out[1, m] = rev_rank[c]
                    out[2, m] = fwd_rank[c]
                out[3, m] = score[fi]
                out[4, m] = score[vi]
                out[5, m] = insert[c]
                m += 1
    return (own_a, out_a[0, :m], out_a[1, :m], out_a[2, :m], out_a[3, :m], out_a[4, :m], out_a[5, :m])


cdef inline int64_t _item_of_rank(const int64_t[::1] item_rank, int64_t lo, int64_t hi, int64_t rank) noexcept nogil:
    """The item of ``rank`` among items lo..hi-1 (ranks ascending), -1 when none has it."""
    cdef int64_t mid, a = lo, b = hi
    while a < b:
        mid = (a + b) >> 1
        if item_rank[mid] < rank:
            a = mid + 1
        else:
            b = mid
    return a if a < hi and item_rank[a] == rank else -1


def chosen_items(const int64_t[::1] kept, const int64_t[::1] n_align, const int32_t[::1] report,
                 const int64_t[::1] item_ptr, const int64_t[::1] item_rank, const int64_t[::1] item_hit,
                 const uint8_t[::1] item_strand, const int64_t[::1] item_start, const int64_t[::1] item_end,
                 const int64_t[::1] chosen, const uint8_t[::1] paired, const int64_t[::1] q_pe,
                 const int64_t[::1] pos, const int32_t[::1] score, const int32_t[::1] read_begin,
                 const int32_t[::1] read_end, const int64_t[::1] contig, const int32_t[::1] dist,
                 const int64_t[::1] order, const int64_t[::1] ptr, const int64_t[::1] unseen,
                 bint has_insert, int64_t low, int64_t high):
    """The pair choice per read: primary and other reported items and the MAPQ model's inputs;
    pair_items.chosen_items describes them."""
    cdef int64_t n_reads = kept.shape[0], n_pairs = n_reads // 2, n_items = item_rank.shape[0]
    if n_reads % 2:
        raise ValueError("chosen_items: a chunk of pairs has an even number of reads")
    if n_align.shape[0] != n_reads or report.shape[0] != n_reads or item_ptr.shape[0] != n_reads + 1 \
            or chosen.shape[0] != n_reads or unseen.shape[0] != n_reads or ptr.shape[0] != n_reads + 1 \
            or paired.shape[0] != n_pairs or q_pe.shape[0] != n_pairs:
        raise ValueError("chosen_items: per-read or per-pair arrays of different lengths")
    if item_hit.shape[0] != n_items or item_strand.shape[0] != n_items or item_start.shape[0] != n_items \
            or item_end.shape[0] != n_items or pos.shape[0] != n_items or score.shape[0] != n_items \
            or read_begin.shape[0] != n_items or read_end.shape[0] != n_items or contig.shape[0] != n_items:
        raise ValueError("chosen_items: per-item arrays of different lengths")
    per_read = np.empty((7, n_reads), dtype=np.int64)
    flags_a = np.zeros((5, n_reads), dtype=np.uint8)
    proper_a = np.zeros(n_pairs, dtype=np.uint8)
    rep_ptr_a = np.zeros(n_reads + 1, dtype=np.int64)
    rep_item_a = np.empty(n_items, dtype=np.int64)
    cdef int64_t[::1] prim = per_read[0], score_r = per_read[1], sub = per_read[2], aligned_len = per_read[3]
    cdef int64_t[::1] n_sub = per_read[4], q_pe_read = per_read[5]
    cdef uint8_t[::1] mapped = flags_a[0], tied = flags_a[1], unseen_ties = flags_a[2], boost = flags_a[3]
    cdef uint8_t[::1] proper = proper_a
    cdef int64_t[::1] rep_ptr = rep_ptr_a, rep_item = rep_item_a
    cdef int64_t r, p, j, o_rank, it, base, ch, na, t, same, chosen_dist, pa, pb, ins, m = 0, bad = -1
    cdef bint both
    with nogil:
        for r in range(n_reads):
            base = item_ptr[r]
            na = n_align[r]
            ch = chosen[r]
            # the chosen hit: one of ranks 0..n_align-1, or a candidate of the chosen combination
            p = -1
            if kept[r] > 0:
                p = base + ch if 0 <= ch < na else _item_of_rank(item_rank, base + na, item_ptr[r + 1], ch)
                if p < 0:
                    bad = r
                    break
            prim[r] = p
            mapped[r] = 1 if p >= 0 and pos[p] >= 0 else 0
            score_r[r] = score[p] if mapped[r] else -1
            aligned_len[r] = read_end[p] - read_begin[p] if mapped[r] else 0
            # the others of ranks 0..n_align-1 (the chosen one left out): XS, and the reported ones in rank order
            sub[r] = -1
            for j in range(na - 1):
                o_rank = j + (1 if j >= ch else 0)
                it = base + o_rank
                if pos[it] >= 0:
                    if score[it] > sub[r]:
                        sub[r] = score[it]
                    if o_rank < report[r]:
                        rep_item[m] = it
                        m += 1
            rep_ptr[r + 1] = m
            # hits with the chosen hit's edit distance: ties make a mate ambiguous on its own
            same = 0
            if p >= 0:
                chosen_dist = dist[item_hit[p]]
                for t in range(ptr[r], ptr[r + 1]):
                    if dist[order[t]] == chosen_dist:
                        same += 1
            tied[r] = 1 if same > 1 else 0
            if same > 1:
                n_sub[r] = same - 1
            else:
                n_sub[r] = 1 if kept[r] > 1 else 0
            unseen_ties[r] = 1 if unseen[r] >= score_r[r] else 0
        if bad < 0:
            # pairs: proper = both mapped on a concordant combination (pairs.concordant); the pair's MAPQ
            # raises a mate's where the pair was placed by a combination and both are mapped
            for p in range(n_pairs):
                both = mapped[2 * p] and mapped[2 * p + 1]
                if both and has_insert:
                    pa = prim[2 * p]
                    pb = prim[2 * p + 1]
                    if contig[pa] == contig[pb] and item_strand[pa] != item_strand[pb]:
                        ins = item_end[pb] - item_start[pa] if item_strand[pa] == 0 else item_end[pa] - item_start[pb]
                        proper[p] = 1 if low <= ins <= high else 0
                boost[2 * p] = boost[2 * p + 1] = 1 if paired[p] and both else 0
                q_pe_read[2 * p] = q_pe_read[2 * p + 1] = q_pe[p]
    if bad >= 0:
        raise ValueError(f"chosen_items: the chosen rank {chosen[bad]} of read {bad} is not one of its items")
    return (per_read[0], flags_a[0].view(bool), per_read[1], per_read[2], per_read[3], per_read[4], flags_a[1],
            flags_a[2].view(bool), per_read[5], flags_a[3], proper_a.view(bool), rep_ptr_a, rep_item_a[:m])


def without_ties(const mapq_t[::1] mapq, const uint8_t[::1] tied):
    """MAPQ as int64, 0 where ``tied``."""
    cdef int64_t n = mapq.shape[0], r
    if tied.shape[0] != n:
        raise ValueError("without_ties: arrays of different lengths")
    out_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = out_a
    with nogil:
        for r in range(n):
            out[r] = 0 if tied[r] else mapq[r]
    return out_a


def raised_where(const uint8_t[::1] boost, const mapq_t[::1] raised, const int64_t[::1] mapq):
    """``raised`` where ``boost``, else ``mapq`` (int64)."""
    cdef int64_t n = mapq.shape[0], r
    if boost.shape[0] != n or raised.shape[0] != n:
        raise ValueError("raised_where: arrays of different lengths")
    out_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = out_a
    with nogil:
        for r in range(n):
            out[r] = raised[r] if boost[r] else mapq[r]
    return out_a
