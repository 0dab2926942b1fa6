"""_pair_items.pyx (the per-chunk bookkeeping of paired-end postprocessing without the GIL) against the NumPy steps of
Postprocessor.plan_pairs it replaced, written out here as references: equal arrays on random chunks and on edge cases
(no hits, one mate without hits, ties, no insert size, more candidates than MAX_PAIR_HITS), and equal SAM text of
real pairs through a Postprocessor whose plan_pairs is the NumPy one."""
import random

import numpy as np
import pytest

from test_sam_records import map_pair_batch, mapped_example, mapped_split, pair_files  # noqa: F401 (fixtures)
from peanut_py import pairs
from peanut_py.insert_size import InsertSize
from peanut_py.mapq import close_rival, mapq_model, pair_mapq
from peanut_py.options import MapOptions
from peanut_py.pair_choice import choose_pairs
from peanut_py.pair_items import (ChosenItems, PairItems, chosen_items, combination_scores, pair_items,
                                  raised_where, without_ties)
from peanut_py.postprocess import Postprocessor
from peanut_py.ranking import rank_hits, strata_counts
from peanut_py.reads import read_pair_batches

_KEY = 1 << 32  # (read, rank) -> read * _KEY + rank


# --- the NumPy references ---------------------------------------------------------------------------------------

def repeat_ranks(counts):
    """(owner, rank within owner) of counts[i] entries per owner i."""
    counts = np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(len(counts)), counts)
    first = np.cumsum(counts) - counts
    return owner, np.arange(len(owner)) - first[owner]


def reference_concordant_combinations(read, strand, start, end, contig, insert_size):
    read, strand, start, end, contig = (np.asarray(a, dtype=np.int64) for a in (read, strand, start, end, contig))
    empty = np.zeros(0, dtype=np.int64)
    if insert_size is None or len(read) == 0:
        return empty, empty, empty
    fwd = np.flatnonzero(strand == 0)
    rev = np.flatnonzero(strand == 1)
    keys = (read[rev] << 33) | end[rev]
    srt = np.argsort(keys, kind="stable")
    rev, keys = rev[srt], keys[srt]
    mate = read[fwd] ^ 1
    lo = np.searchsorted(keys, (mate << 33) | np.maximum(start[fwd] + insert_size.low, 0), side="left")
    hi = np.searchsorted(keys, (mate << 33) | np.maximum(start[fwd] + insert_size.high, 0), side="right")
    owner, rank = repeat_ranks(hi - lo)
    f = fwd[owner]
    r = rev[lo[owner] + rank]
    same = contig[f] == contig[r]
    f, r = f[same], r[same]
    return f, r, end[r] - start[f]


class ReferencePlan:
    """The candidates, combinations and (read, rank) keys of the items, as plan_pairs built them with NumPy."""

    def __init__(self, rs, start, end, order, ptr, report, offsets, insert_size, r0=0,
                 max_pair_hits=pairs.MAX_PAIR_HITS):
        self.rs, self.start, self.end, self.order, self.ptr, self.report = rs, start, end, order, ptr, report
        self.kept = kept = np.diff(ptr)
        n_cand = np.minimum(kept, max_pair_hits)
        self.c_read, self.c_rank = c_read, c_rank = repeat_ranks(n_cand)
        c_hit = order[ptr[c_read] + c_rank]
        c_start = start[c_hit].astype(np.int64)
        c_contig = np.searchsorted(offsets, c_start, side="right") - 1
        self.f, self.v, self.inserts = f, v, _ = reference_concordant_combinations(
            c_read, rs[c_hit] & 1, c_start, end[c_hit], c_contig, insert_size)
        self.n_align = n_align = np.minimum(report + 1, kept)
        a_read, a_rank = repeat_ranks(n_align)
        self.key = key = np.unique(np.concatenate([a_read * _KEY + a_rank, c_read[f] * _KEY + c_rank[f],
                                                   c_read[v] * _KEY + c_rank[v]]))
        self.i_read, self.i_rank = key // _KEY, key % _KEY
        self.hit = order[ptr[self.i_read] + self.i_rank]
        self.strand = (rs[self.hit] & 1).astype(bool)
        self.r0 = r0

    def combination_scores(self, pos, score):
        key, kept, c_read, c_rank, f, v = self.key, self.kept, self.c_read, self.c_rank, self.f, self.v
        n_reads = len(kept)
        ok = pos >= 0
        score_of = np.where(ok, score, 0).astype(np.int64)
        rank0 = np.minimum(np.searchsorted(key, np.arange(n_reads) * _KEY), len(key) - 1)
        own = np.where((kept > 0) & ok[rank0], score_of[rank0], 0)
        fi = np.searchsorted(key, c_read[f] * _KEY + c_rank[f])
        vi = np.searchsorted(key, c_read[v] * _KEY + c_rank[v])
        good = ok[fi] & ok[vi]
        f_read, f_rank, v_rank = c_read[f][good], c_rank[f][good], c_rank[v][good]
        mate1_fwd = f_read % 2 == 0
        return (own, f_read // 2, np.where(mate1_fwd, f_rank, v_rank), np.where(mate1_fwd, v_rank, f_rank),
                score_of[fi][good], score_of[vi][good], self.inserts[good])

    def chosen_items(self, chosen, paired, q_pe, pos, score, read_begin, read_end, contig, dist, unseen, insert_size):
        key, kept, n_align, report, hit, order = self.key, self.kept, self.n_align, self.report, self.hit, self.order
        rs, start, end = self.rs, self.start, self.end
        n_reads = len(kept)
        ok = pos >= 0
        has = kept > 0
        prim = np.where(has, np.searchsorted(key, np.arange(n_reads) * _KEY + chosen), -1)
        mapped = np.zeros(n_reads, dtype=bool)
        mapped[has] = ok[prim[has]]
        o_read, j = repeat_ranks(np.maximum(n_align - 1, 0))
        o_rank = j + (j >= chosen[o_read])
        o_item = np.searchsorted(key, o_read * _KEY + o_rank)
        score_r = np.full(n_reads, -1, dtype=np.int64)
        sub = np.full(n_reads, -1, dtype=np.int64)
        aligned_len = np.zeros(n_reads, dtype=np.int64)
        score_r[mapped] = score[prim[mapped]]
        aligned_len[mapped] = (read_end - read_begin)[prim[mapped]]
        o_ok = ok[o_item]
        np.maximum.at(sub, o_read[o_ok], score[o_item[o_ok]].astype(np.int64))
        chosen_dist = dist[hit[np.maximum(prim, 0)]]
        kept_read, _ = repeat_ranks(kept)
        same = np.bincount(kept_read[dist[order] == chosen_dist[kept_read]], minlength=n_reads).astype(np.int64)
        n_sub = np.where(same > 1, same - 1, np.clip(kept - 1, 0, 1))
        both = mapped[0::2] & mapped[1::2]
        proper = np.zeros(n_reads // 2, dtype=bool)
        if both.any():
            pa, pb = np.where(mapped, prim, 0)[0::2], np.where(mapped, prim, 0)[1::2]
            ha, hb = hit[pa], hit[pb]
            proper = both & pairs.concordant(insert_size, contig[pa], rs[ha] & 1, start[ha], end[ha],
                                             contig[pb], rs[hb] & 1, start[hb], end[hb])
        rep = o_ok & (o_rank < report[o_read])
        rep_ptr = np.zeros(n_reads + 1, dtype=np.int64)
        np.cumsum(np.bincount(o_read[rep], minlength=n_reads), out=rep_ptr[1:])
        return ChosenItems(prim, mapped, score_r, sub, aligned_len, n_sub, same > 1, unseen >= score_r,
                           np.repeat(q_pe, 2), np.repeat(paired & both, 2), proper, rep_ptr, o_item[rep])


# --- inputs ---------------------------------------------------------------------------------------------------------

INSERT = InsertSize(mean=300.0, std=30.0, low=180, high=420)
OFFSETS = np.array([0, 3000, 5200, 9000], dtype=np.int64)  # three contigs, a padding run past the last


def random_chunk(rng, n_pairs, max_hits=8, many=False, no_hits_mate=None):
    """Hits of a chunk of ``n_pairs`` pairs, clustered so that concordant combinations, contig borders, equal edit
    distances and duplicates occur; ``many``: some reads with more hits than MAX_PAIR_HITS; ``no_hits_mate``: 0 or 1,
    that mate of every pair has no hit."""
    rs, start, end, dist = [], [], [], []
    for p in range(n_pairs):
        centre = rng.randrange(0, 9000)
        for mate in (0, 1):
            if mate == no_hits_mate:
                continue
            n = rng.randrange(0, max_hits + 1)
            if many and rng.random() < 0.2:
                n = rng.randrange(60, 140)
            for _ in range(n):
                strand = rng.randrange(2)
                s = max(0, centre + rng.randrange(-500, 500)) if rng.random() < 0.8 else rng.randrange(0, 9000)
                rs.append(2 * (2 * p + mate) + strand)
                start.append(s)
                end.append(s + rng.randrange(90, 160))
                dist.append(rng.choice([0, 0, 1, 1, 2, 3, 5]))
    srt = np.argsort(np.asarray(rs, dtype=np.int64), kind="stable")
    return (np.asarray(rs, dtype=np.uint32)[srt], np.asarray(start, dtype=np.uint32)[srt],
            np.asarray(end, dtype=np.int64)[srt], np.asarray(dist, dtype=np.int32)[srt])


def ranked(rs, start, dist, n_reads, n_strata=2, max_hits=5):
    order, ptr, _ = rank_hits(rs, start, dist, n_reads)
    report, _ = strata_counts(order, ptr, dist, n_strata, max_hits)
    return order, ptr, report


def random_alignments(rng, n_items, unaligned=0.1, scores=(150, 150, 145, 140, 120, 60, -5)):
    """pos (-1 where not aligned), score (with ties), read_begin, read_end of n_items alignments."""
    pos = np.array([-1 if rng.random() < unaligned else rng.randrange(0, 9000) for _ in range(n_items)], np.int64)
    score = np.array([rng.choice(scores) for _ in range(n_items)], dtype=np.int32)
    begin = np.array([rng.randrange(0, 10) for _ in range(n_items)], dtype=np.int32)
    end = begin + np.array([rng.randrange(80, 141) for _ in range(n_items)], dtype=np.int32)
    return pos, score, begin, end


def assert_same(fast, slow):
    assert len(fast) == len(slow)
    for name, a, b in zip(getattr(fast, "_fields", range(len(fast))), fast, slow):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and np.array_equal(a.astype(np.int64), b.astype(np.int64)), name


def check_chunk(rng, rs, start, end, dist, n_reads, insert_size, max_pair_hits=pairs.MAX_PAIR_HITS, r0=0,
                unaligned=0.1, **alignments):
    """pair_items, combination_scores and chosen_items against the references on one chunk."""
    order, ptr, report = ranked(rs, start, dist, n_reads)
    items = pair_items(rs, start, end, order, ptr, report, OFFSETS, insert_size, first_read=r0,
                       max_pair_hits=max_pair_hits)
    ref = ReferencePlan(rs, start, end, order, ptr, report, OFFSETS, insert_size, r0, max_pair_hits)
    assert isinstance(items, PairItems)
    item_ptr = np.searchsorted(ref.key, np.arange(n_reads + 1) * _KEY)
    assert_same(items, (ref.kept, ref.n_align, report, item_ptr, ref.i_rank, ref.hit, ref.i_read + r0, ref.strand,
                        start[ref.hit], end[ref.hit], np.searchsorted(ref.key, ref.c_read[ref.f] * _KEY
                                                                      + ref.c_rank[ref.f]),
                        np.searchsorted(ref.key, ref.c_read[ref.v] * _KEY + ref.c_rank[ref.v]), ref.c_read[ref.f],
                        ref.c_rank[ref.f], ref.c_rank[ref.v], ref.inserts))
    assert items.item_strand.dtype == bool
    pos, score, begin, end_ = random_alignments(rng, items.n, unaligned, **alignments)
    contig = np.searchsorted(OFFSETS, items.item_start, side="right") - 1
    scores = combination_scores(items, pos, score)
    assert_same(scores, ref.combination_scores(pos, score))
    own, *combos = scores
    chosen, paired, q_pe = choose_pairs(*combos, own, insert_size, MapOptions().scoring)
    unseen = np.array([rng.choice([-1, 100, 140, 150, 160]) for _ in range(n_reads)], dtype=np.int64)
    aln = type("Aln", (), {"pos": pos, "score": score, "read_begin": begin, "read_end": end_})
    fast = chosen_items(items, chosen, paired, q_pe, aln, contig, dist, order, ptr, unseen, insert_size)
    slow = ref.chosen_items(chosen, paired, q_pe, pos, score, begin, end_, contig, dist, unseen, insert_size)
    assert_same(fast, slow)
    return items, scores, fast, paired


# --- tests ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_equal_to_numpy_on_random_chunks(seed):
    rng = random.Random(seed)
    n_pairs = rng.randrange(1, 120)
    chunk = random_chunk(rng, n_pairs, many=seed % 3 == 0)
    insert_size = None if seed == 5 else INSERT
    items, scores, chosen, paired = check_chunk(rng, *chunk, 2 * n_pairs, insert_size, r0=2 * rng.randrange(50))
    if insert_size is not None:  # the random chunks exercise what they should
        assert len(items.insert) > 0 and paired.any() and chosen.proper.any() and chosen.tied.any()
        assert len(chosen.rep_item) > 0 and (chosen.sub >= 0).any() and not chosen.mapped.all()


def test_few_candidates_and_many_hits():
    """max_pair_hits below n_align (items beyond the candidates) and reads with more hits than MAX_PAIR_HITS."""
    rng = random.Random(21)
    chunk = random_chunk(rng, 60, max_hits=12, many=True)
    for max_pair_hits in (0, 1, 3, pairs.MAX_PAIR_HITS):
        check_chunk(rng, *chunk, 120, INSERT, max_pair_hits=max_pair_hits)


def test_one_mate_without_hits_and_all_aligned_or_none():
    rng = random.Random(4)
    for mate in (0, 1):
        items, scores, chosen, paired = check_chunk(rng, *random_chunk(rng, 50, no_hits_mate=mate), 100, INSERT)
        assert len(items.insert) == 0 and not paired.any() and not chosen.proper.any()
        assert (chosen.prim[mate::2] == -1).all()
    for unaligned in (0.0, 1.0):
        check_chunk(rng, *random_chunk(rng, 50), 100, INSERT, unaligned=unaligned)


def test_ties_between_combinations():
    """Two pairs of mates with hits at equal edit distance and equal scores: ties in pair score and in dist."""
    rs = np.array([0, 0, 3, 3, 4, 4, 7, 7], dtype=np.uint32)  # mates 1 forward, mates 2 reverse
    start = np.array([1000, 2000, 1150, 2150, 4000, 4100, 4200, 4300], dtype=np.uint32)
    end = start.astype(np.int64) + 100
    dist = np.zeros(8, dtype=np.int32)
    rng = random.Random(1)
    items, scores, chosen, paired = check_chunk(rng, rs, start, end, dist, 4, INSERT, unaligned=0.0, scores=(150,))
    assert chosen.tied.all() and paired.all() and chosen.proper.all() and len(items.insert) == 2 + 4


def test_empty_chunks():
    """No hit in the chunk (plan_pairs then formats unmapped reads without aligning): empty items, and the finishing
    functions still give every read no primary."""
    empty32, empty64 = np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64)
    for n_reads in (0, 6):
        order, ptr, report = ranked(empty32, empty32, np.zeros(0, np.int32), n_reads)
        items = pair_items(empty32, empty32, empty64, order, ptr, report, OFFSETS, INSERT)
        ref = ReferencePlan(empty32, empty32, empty64, order, ptr, report, OFFSETS, INSERT)
        assert items.n == len(ref.key) == 0 and len(items.insert) == 0
        assert np.array_equal(items.item_ptr, np.zeros(n_reads + 1)) and np.array_equal(items.kept, ref.kept)
        aln = type("Aln", (), {"pos": empty64, "score": np.zeros(0, np.int32), "read_begin": np.zeros(0, np.int32),
                               "read_end": np.zeros(0, np.int32)})
        own, *combos = combination_scores(items, aln.pos, aln.score)
        assert np.array_equal(own, np.zeros(n_reads)) and all(len(c) == 0 for c in combos)
        chosen, paired, q_pe = choose_pairs(*combos, own, INSERT, MapOptions().scoring)
        c = chosen_items(items, chosen, paired, q_pe, aln, empty64, np.zeros(0, np.int32), order, ptr,
                         np.zeros(n_reads, np.int64), INSERT)
        assert (c.prim == -1).all() and not c.mapped.any() and (c.score == -1).all() and (c.sub == -1).all()
        assert len(c.rep_item) == 0 and np.array_equal(c.rep_ptr, np.zeros(n_reads + 1))
        assert len(c.proper) == n_reads // 2


def test_chosen_rank_must_be_an_item():
    rng = random.Random(3)
    rs, start, end, dist = random_chunk(rng, 10, max_hits=3)
    order, ptr, report = ranked(rs, start, dist, 20)
    items = pair_items(rs, start, end, order, ptr, report, OFFSETS, INSERT)
    pos, score, begin, end_ = random_alignments(rng, items.n)
    aln = type("Aln", (), {"pos": pos, "score": score, "read_begin": begin, "read_end": end_})
    chosen = np.where(items.kept > 0, 10_000, 0)
    with pytest.raises(ValueError, match="not one of its items"):
        chosen_items(items, chosen, np.zeros(10, bool), np.full(10, -1), aln, np.zeros(items.n, np.int64), dist,
                     order, ptr, np.zeros(20, np.int64), INSERT)


@pytest.mark.parametrize("seed", range(6))
def test_concordant_combinations_equal_to_numpy_in_any_order(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    read = rng.integers(0, 30, n)
    strand = rng.integers(0, 2, n)
    start = rng.integers(0, 6000, n)
    end = start + rng.integers(50, 200, n)
    contig = np.searchsorted(OFFSETS, start, side="right") - 1
    ins = InsertSize(mean=200.0, std=50.0, low=int(rng.integers(-300, 100)), high=int(rng.integers(100, 600)))
    fast = pairs.concordant_combinations(read, strand, start, end, contig, ins)
    assert_same(fast, reference_concordant_combinations(read, strand, start, end, contig, ins))
    assert n < 50 or len(fast[0]) > 0


def test_mapq_helpers_equal_np_where():
    rng = np.random.default_rng(2)
    for dtype in (np.int32, np.int64):
        mapq = rng.integers(0, 61, 500).astype(dtype)
        tied, boost = rng.integers(0, 2, 500).astype(np.uint8), rng.integers(0, 2, 500).astype(np.uint8)
        raised = rng.integers(0, 61, 500).astype(dtype)
        untied = without_ties(mapq, tied)
        assert untied.dtype == np.int64 and np.array_equal(untied, np.where(tied > 0, 0, mapq))
        assert np.array_equal(raised_where(boost, raised, untied), np.where(boost > 0, raised, untied))
    assert len(without_ties(np.zeros(0, np.int32), np.zeros(0, np.uint8))) == 0


class NumpyPlanPostprocessor(Postprocessor):
    """Postprocessor with plan_pairs's bookkeeping in the NumPy steps above (the rest unchanged)."""

    def plan_pairs(self, batch, result, r0, r1, h0, h1, insert_size):
        n_reads, n_pairs = r1 - r0, (r1 - r0) // 2
        rs, start, end, dist, order, ptr, report, _ = self._ranked(result, r0, r1, h0, h1)
        ref = ReferencePlan(rs, start, end, order, ptr, report, self.offsets, insert_size, r0)
        problems = self.alignment_problems(batch, ref.i_read + r0, ref.strand, start[ref.hit], end[ref.hit])

        def finish(solved):
            if len(ref.key) == 0:
                none = np.full(n_reads, -1, dtype=np.int64)
                return self.format_pair_chunk(batch, r0, n_reads, none, np.zeros(n_reads + 1, dtype=np.int64),
                                              none[:0], None, None, None, None, np.zeros(n_reads, dtype=bool), none,
                                              none, np.zeros(n_pairs, dtype=bool))
            aln, md, contig = self.complete(problems, solved)
            own, *combos = ref.combination_scores(aln.pos, aln.score)
            chosen, paired, q_pe = self.place_pairs(*combos, own, insert_size)
            unseen, covered = self.unseen_rivals(batch, r0, r1)
            c = ref.chosen_items(chosen, paired, q_pe, aln.pos, aln.score, aln.read_begin, aln.read_end, contig,
                                 dist, unseen, insert_size)
            mapq = mapq_model(c.score, c.sub, c.n_sub, c.aligned_len, self.q, self.opts.scoring, unseen=unseen,
                              covered=covered, read_len=batch.lengths[r0:r1])
            mapq = np.where(c.tied, 0, mapq).astype(np.int64)
            close = close_rival(c.score, c.sub, c.n_sub, self.opts.scoring)
            mapq = np.where(c.boost, pair_mapq(mapq, c.q_pe, c.unseen_ties, close), mapq)
            return self.format_pair_chunk(batch, r0, n_reads, c.prim, c.rep_ptr, c.rep_item, ref.strand, contig,
                                          aln, md, c.mapped, c.sub, mapq, c.proper)

        return problems, finish


@pytest.mark.parametrize("opts, junk, split, with_insert_size", [
    (MapOptions(), False, False, True),
    (MapOptions(secondary=True, local=False), True, False, True),
    (MapOptions(mode="all", max_hits=20, min_identity=0.7), True, True, True),
    (MapOptions(), True, False, False),
], ids=["plain", "junk-semiglobal-secondary", "all-split", "no-insert-size"])
def test_same_text_as_the_numpy_plan(request, opts, junk, split, with_insert_size, tmp_path):
    """Real pairs (the example slice; mates replaced by random sequence, contigs cut) postprocessed with the Cython
    bookkeeping and with the NumPy one: the same SAM text and counts, chunk by chunk."""
    device, index, resident, genome = request.getfixturevalue("mapped_split" if split else "mapped_example")
    batch = next(read_pair_batches(*pair_files(tmp_path, "fastq", junk)))
    post = Postprocessor(index, genome, opts)
    result, insert_size = map_pair_batch(device, resident, post, batch, opts, with_insert_size)
    fast = [step() for step in post.pair_chunk_steps(batch, result, 3, insert_size)]
    slow = [step() for step in NumpyPlanPostprocessor(index, genome, opts).pair_chunk_steps(batch, result, 3,
                                                                                          insert_size)]
    assert fast == slow
    counts = [c for _, _, c in fast]
    assert sum(c["mapped"] for c in counts) > 3000
    assert (sum(c["proper"] for c in counts) > 2000) == with_insert_size
    assert (sum(c["mate_unmapped"] for c in counts) > 100) == junk
