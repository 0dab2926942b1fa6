"""_ranking.pyx (ranking.py: duplicate removal, strata, hit-rank) against a plain Python reference."""
import numpy as np
import pytest

from peanut_py.ranking import expand, gather_read_strands, rank_hits, strata_counts


def reference_rank(rs, start, dist, n_reads, first_read, window):
    order, ptr, rank = [], [0], []
    for r in range(first_read, first_read + n_reads):
        idx = [i for i in range(len(rs)) if rs[i] >> 1 == r]
        idx.sort(key=lambda i: (dist[i], start[i], rs[i] & 1))
        kept = []
        for i in idx:
            if not any((rs[k] & 1) == (rs[i] & 1) and abs(int(start[k]) - int(start[i])) <= window for k in kept):
                kept.append(i)
        for i in kept:
            rank.append(sum(dist[k] <= dist[i] for k in kept))
        order += kept
        ptr.append(len(order))
    return order, ptr, rank


def reference_strata(order, ptr, dist, n_strata, max_hits):
    report, best = [], []
    for r in range(len(ptr) - 1):
        ds = [dist[i] for i in order[ptr[r]:ptr[r + 1]]]
        levels = sorted(set(ds))
        allowed = levels if n_strata <= 0 else levels[:n_strata]
        report.append(min(sum(d in allowed for d in ds), max_hits))
        best.append(ds.count(levels[0]) if ds else 0)
    return report, best


@pytest.mark.parametrize("seed", range(30))
def test_matches_reference_on_random_hits(seed):
    rng = np.random.default_rng(seed)
    n_reads = int(rng.integers(1, 40))
    first = int(rng.integers(0, 5))
    n = int(rng.integers(0, 200))
    rs = np.sort(rng.integers(2 * first, 2 * (first + n_reads), n)).astype(np.uint32)
    # clustered starts so that duplicates (within the window) and near-duplicates both occur
    start = (rng.integers(0, 20, n) * 50 + rng.integers(0, 12, n)).astype(np.uint32)
    dist = rng.integers(0, 4, n).astype(np.int32)
    window = int(rng.integers(0, 10))
    order, ptr, rank = rank_hits(rs, start, dist, n_reads, first_read=first, dup_window=window)
    e_order, e_ptr, e_rank = reference_rank(rs, start, dist, n_reads, first, window)
    assert order.tolist() == e_order and ptr.tolist() == e_ptr and rank.tolist() == e_rank
    for n_strata in (1, 2, 0):
        for max_hits in (1, 3, 100):
            report, best = strata_counts(order, ptr, dist, n_strata, max_hits)
            e_report, e_best = reference_strata(e_order, e_ptr, dist, n_strata, max_hits)
            assert report.tolist() == e_report and best.tolist() == e_best


def test_order_is_independent_of_chunking():
    rng = np.random.default_rng(7)
    rs = np.sort(rng.integers(0, 200, 1000)).astype(np.uint32)
    start = rng.integers(0, 10**6, 1000).astype(np.uint32)
    dist = rng.integers(0, 5, 1000).astype(np.int32)
    whole, whole_ptr, whole_rank = rank_hits(rs, start, dist, 100)
    parts = []
    for r0, r1 in [(0, 13), (13, 60), (60, 100)]:
        lo, hi = np.searchsorted(rs >> 1, [r0, r1])
        o, _, rk = rank_hits(rs[lo:hi], start[lo:hi], dist[lo:hi], r1 - r0, first_read=r0)
        parts.append((o + lo, rk))
    assert np.concatenate([p[0] for p in parts]).tolist() == whole.tolist()
    assert np.concatenate([p[1] for p in parts]).tolist() == whole_rank.tolist()


def test_rejects_hits_outside_the_read_range():
    rs = np.array([0, 9], dtype=np.uint32)
    with pytest.raises(ValueError):
        rank_hits(rs, np.zeros(2, np.uint32), np.zeros(2, np.int32), 2)


@pytest.mark.parametrize("seed", range(4))
def test_gather_read_strands_matches_plain_reverse_complement(seed):
    """Random reads (with N and empty ones), picked in any order and repeated, on either strand."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, size=50)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    codes = rng.integers(0, 5, size=int(offsets[-1])).astype(np.uint8)
    read = rng.integers(0, 50, size=200).astype(np.int64)
    reverse = rng.integers(0, 2, size=200).astype(np.uint8)
    complement = {0: 3, 1: 2, 2: 1, 3: 0, 4: 4}
    expected = []
    for r, rev in zip(read, reverse):
        seq = list(codes[offsets[r]:offsets[r + 1]])
        expected.append([complement[c] for c in reversed(seq)] if rev else seq)
    out, out_offsets = gather_read_strands(codes, offsets, read, reverse)
    assert out_offsets.tolist() == np.concatenate([[0], np.cumsum([len(e) for e in expected])]).tolist()
    assert out.tolist() == [c for e in expected for c in e]


def test_gather_read_strands_rejects_reads_outside_the_batch():
    offsets = np.array([0, 3, 5], dtype=np.int64)
    codes = np.zeros(5, dtype=np.uint8)
    with pytest.raises(IndexError):
        gather_read_strands(codes, offsets, np.array([2], dtype=np.int64), np.zeros(1, dtype=np.uint8))


def test_expand_equals_repeat_and_ranks():
    rng = np.random.default_rng(5)
    for counts in (rng.integers(0, 6, 300), np.zeros(4, np.int64), np.array([], np.int64), np.array([7])):
        owner, rank = expand(counts)
        np.testing.assert_array_equal(owner, np.repeat(np.arange(len(counts)), counts))
        np.testing.assert_array_equal(rank, [k for c in counts for k in range(c)])
        assert owner.dtype == rank.dtype == np.int64
    with pytest.raises(ValueError):
        expand(np.array([1, -1]))
