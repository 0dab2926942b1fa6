"""The per-read steps of single-end postprocessing and the hits' alignment windows, computed without the GIL
(private _single_end and _hit_windows), against the NumPy expressions they replace (written out below as the
reference), value for value: chunks ranked by rank_hits and strata_counts from random hits, with reads
without hits, unaligned hits, several best hits and scores below zero, and an empty chunk."""
import numpy as np
import pytest

from peanut_py import _hit_windows, _single_end
from peanut_py.postprocess import BAND_PAD, WINDOW_PAD, next_stratum_sizes
from peanut_py.ranking import expand, rank_hits, strata_counts


def next_stratum_sizes_numpy(order, ptr, dist, n_best):
    kept = np.diff(ptr)
    n_reads = len(kept)
    if len(order) == 0:
        return np.zeros(n_reads, dtype=np.int64)
    kept_read = np.repeat(np.arange(n_reads), kept)
    d = dist[order]
    best = np.zeros(n_reads, dtype=np.int64)
    best[kept > 0] = d[ptr[:-1][kept > 0]]
    within = np.bincount(kept_read[d <= best[kept_read] + 1], minlength=n_reads)
    return np.maximum(within - np.asarray(n_best, dtype=np.int64), 0)


def reported_hits_numpy(order, ptr, report, rs, start, end, r0):
    kept = np.diff(ptr)
    n_align = np.minimum(report + 1, kept)
    local_read, rank_in_read = expand(n_align)
    hit = order[ptr[local_read] + rank_in_read]
    return n_align, local_read + r0, (rs[hit] & 1).astype(bool), start[hit].astype(np.int64), end[hit].astype(np.int64)


def read_summary_numpy(n_align, report, n_best, order, ptr, dist, pos, score_of, read_begin, read_end, gap):
    n_reads = len(n_align)
    local_read, rank_in_read = expand(n_align)
    first = np.cumsum(n_align) - n_align
    has = (n_align > 0) & (report > 0)
    prim = first[has]
    prim_ok = pos[prim] >= 0
    score = np.full(n_reads, -1, dtype=np.int64)
    sub = np.full(n_reads, -1, dtype=np.int64)
    score[np.flatnonzero(has)[prim_ok]] = score_of[prim[prim_ok]]
    other = (rank_in_read > 0) & (pos >= 0)
    np.maximum.at(sub, local_read[other], score_of[other].astype(np.int64))
    close = (sub >= 0) & (sub >= score - gap)
    n_sub = np.where(n_best > 1, n_best - 1, np.maximum(next_stratum_sizes_numpy(order, ptr, dist, n_best), close))
    aligned_len = np.zeros(n_reads, dtype=np.int64)
    aligned_len[np.flatnonzero(has)[prim_ok]] = (read_end - read_begin)[prim[prim_ok]]
    return first, score, sub, n_sub, aligned_len, n_best > 1


def ranked_chunk(rng, n_reads, n_hits, r0, n_strata, max_hits):
    """A chunk of reads r0.. with random hits ranked as Postprocessor._ranked ranks them."""
    rs = np.sort(rng.integers(2 * r0, 2 * (r0 + n_reads), n_hits)).astype(np.uint32)
    start = rng.integers(0, 10**6, n_hits).astype(np.uint32)
    end = (start + rng.integers(50, 160, n_hits)).astype(np.uint32)
    dist = rng.integers(0, 4, n_hits).astype(np.int32)
    order, ptr, _ = rank_hits(rs, start, dist, n_reads, first_read=r0)
    report, n_best = strata_counts(order, ptr, dist, n_strata, max_hits)
    return rs, start, end, dist, order, ptr, report, n_best


@pytest.mark.parametrize("n_reads, n_hits, n_strata, max_hits", [
    (3000, 9000, 1, 5), (3000, 2000, 2, 3), (500, 6000, 100, 1000), (40, 0, 1, 5), (0, 0, 1, 5)])
def test_reported_hits_and_read_summary_equal_numpy(n_reads, n_hits, n_strata, max_hits):
    rng = np.random.default_rng(n_reads + n_hits + max_hits)
    r0 = 1000
    rs, start, end, dist, order, ptr, report, n_best = ranked_chunk(rng, n_reads, n_hits, r0, n_strata, max_hits)
    got = _single_end.reported_hits(order, ptr, report, rs, start, end, r0)
    want = reported_hits_numpy(order, ptr, report, rs, start, end, r0)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype or (g.dtype == np.int64 and w.dtype.kind == "i")
        np.testing.assert_array_equal(g, w)
    n_align = got[0]
    n_problems = int(n_align.sum())
    # alignments: a share unaligned (pos -1), scores of either sign, aligned lengths up to 150
    pos = np.where(rng.random(n_problems) < 0.15, -1, rng.integers(0, 10**6, n_problems))
    score = rng.integers(-20, 151, n_problems).astype(np.int32)
    read_begin = rng.integers(0, 20, n_problems).astype(np.int32)
    read_end = (read_begin + rng.integers(0, 131, n_problems)).astype(np.int32)
    for gap in (5, 7):
        got = _single_end.read_summary(n_align, report, n_best, order, ptr, dist, pos, score, read_begin, read_end,
                                       gap)
        want = read_summary_numpy(n_align, report, n_best, order, ptr, dist, pos, score, read_begin, read_end, gap)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        assert got[-1].dtype == np.bool_
    if n_hits:
        # the chunk reaches the branches: several best hits, close rivals, reads without hits or alignment
        first, best, sub, n_sub, aligned_len, ties = got
        assert ties.any() and (n_sub[~ties] > 0).any() and (best == -1).any() and (best >= 0).any()


def test_next_stratum_sizes_equal_numpy():
    rng = np.random.default_rng(4)
    for n_reads, n_hits in [(2000, 8000), (300, 100), (5, 0)]:
        rs, start, end, dist, order, ptr, report, n_best = ranked_chunk(rng, n_reads, n_hits, 0, 1, 5)
        want = next_stratum_sizes_numpy(order, ptr, dist, n_best)
        np.testing.assert_array_equal(next_stratum_sizes(order, ptr, dist, n_best), want)
        # an n_best below the reads' own best strata: the count is not clipped at n_best's
        low = np.maximum(n_best - 1, 0)
        np.testing.assert_array_equal(next_stratum_sizes(order, ptr, dist, low),
                                      next_stratum_sizes_numpy(order, ptr, dist, low))


def test_read_summary_refuses_inconsistent_counts():
    rng = np.random.default_rng(1)
    rs, start, end, dist, order, ptr, report, n_best = ranked_chunk(rng, 50, 200, 0, 1, 5)
    n_align = _single_end.reported_hits(order, ptr, report, rs, start, end, 0)[0]
    n = int(n_align.sum()) - 1  # one alignment fewer than the hits asked for
    with pytest.raises(ValueError):
        _single_end.read_summary(n_align, report, n_best, order, ptr, dist, np.zeros(n, np.int64),
                                 *(np.zeros(n, np.int32),) * 3, 5)
    with pytest.raises(ValueError):
        _single_end.reported_hits(order, ptr[:-1], report, rs, start, end, 0)


def hit_windows_numpy(hit_start, hit_end, read_off, offsets, ends):
    lengths = np.diff(read_off)
    contig = np.searchsorted(offsets, hit_start, side="right") - 1
    win_lo = np.maximum(hit_start - WINDOW_PAD, offsets[contig])
    win_hi = np.minimum(hit_end + WINDOW_PAD, ends[contig])
    d0 = hit_start - win_lo
    d1 = hit_end - lengths - win_lo
    band_lo = (np.minimum(d0, d1) - BAND_PAD).astype(np.int32)
    band_hi = (np.maximum(d0, d1) + BAND_PAD).astype(np.int32)
    return contig, win_lo, win_hi - win_lo, band_lo, band_hi


def test_hit_windows_equal_numpy():
    """Hits on five contigs (one of them shorter than a window), many at a contig's first or last bases."""
    rng = np.random.default_rng(6)
    lengths = np.array([1000, 20, 5000, 300, 10_000], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths + 7)[:-1])).astype(np.int64)
    ends = offsets + lengths
    n = 20_000
    c = rng.integers(0, len(lengths), n)
    at = rng.integers(0, lengths[c])
    at = np.where(rng.random(n) < 0.3, np.where(rng.random(n) < 0.5, 0, np.maximum(lengths[c] - 3, 0)), at)
    hit_start = offsets[c] + at
    hit_end = np.minimum(hit_start + rng.integers(1, 160, n), ends[c])
    read_len = np.maximum(hit_end - hit_start + rng.integers(-6, 7, n), 0)
    read_off = np.concatenate(([0], np.cumsum(read_len))).astype(np.int64)
    got = _hit_windows.hit_windows(hit_start, hit_end, read_off, offsets, ends, WINDOW_PAD, BAND_PAD)
    want = hit_windows_numpy(hit_start, hit_end, read_off, offsets, ends)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    empty = np.zeros(0, np.int64)
    assert all(len(a) == 0 for a in _hit_windows.hit_windows(empty, empty, np.zeros(1, np.int64), offsets, ends,
                                                             WINDOW_PAD, BAND_PAD))
    with pytest.raises(ValueError):  # a hit before the first contig
        _hit_windows.hit_windows(np.array([3]), np.array([9]), np.array([0, 6]), offsets + 5, ends + 5,
                                 WINDOW_PAD, BAND_PAD)
