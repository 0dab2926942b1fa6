"""hit_lists: the device stage's merge of new hits into validated ones and each read's best distance, checked
against plain NumPy (a stable sort of the concatenation; np.minimum.at) on random lists, exact equality."""
import numpy as np
import pytest

from peanut_py.hit_lists import HIT_DTYPES, merge_hits, weak_reads_and_flags


def _hits(rng, n, n_rs, sort):
    rs = rng.integers(0, n_rs, n).astype(np.uint32)
    if sort:
        rs = np.sort(rs)
    return (rs, rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32),
            rng.integers(0, 1 << 40, n).astype(np.int64), rng.integers(-5, 60, n).astype(np.int32))


def _reference(base, extra, keep=None):
    if keep is not None:
        base = tuple(a[keep] for a in base)
    order = np.argsort(np.concatenate([base[0], extra[0]]), kind="stable")
    return tuple(np.concatenate([np.asarray(b).astype(t), np.asarray(e).astype(t)])[order]
                 for b, e, t in zip(base, extra, HIT_DTYPES))


@pytest.mark.parametrize("seed", range(6))
def test_merge_hits_is_a_stable_sort_of_the_kept_and_new_hits(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n_rs = int(rng.integers(1, 50))
        na, nb = (int(x) for x in rng.integers(0, 300, 2))
        sort_a, sort_b = bool(rng.integers(0, 4)), bool(rng.integers(0, 4))  # mostly sorted, as the stage's
        base, extra = _hits(rng, na, n_rs, sort_a), _hits(rng, nb, n_rs, sort_b)
        for keep in (None, rng.random(na) < 0.7, np.zeros(na, bool), np.ones(na, bool)):
            got = merge_hits(base, extra, keep=keep)
            want = _reference(base, extra, keep)
            for g, w, t in zip(got, want, HIT_DTYPES):
                assert g.dtype == t and np.array_equal(g, w)


def test_merge_hits_keeps_base_first_within_a_read_strand():
    base = (np.array([1, 1, 3], np.uint32), np.array([10, 5, 7], np.uint32), np.array([20, 15, 17]),
            np.array([2, 1, 0], np.int32))
    extra = (np.array([0, 1, 3, 3], np.uint32), np.array([4, 99, 1, 2], np.uint32), np.array([9, 109, 11, 12]),
             np.array([3, 0, 5, 4], np.int32))
    rs, start, _, dist = merge_hits(base, extra, keep=np.array([True, False, True]))
    assert rs.tolist() == [0, 1, 1, 3, 3, 3] and start.tolist() == [4, 10, 99, 7, 1, 2]
    assert dist.tolist() == [3, 2, 0, 0, 5, 4]


@pytest.mark.parametrize("seed", range(6))
def test_weak_reads_and_flags_match_numpy(seed):
    """The fused flags of the local-mode step equal the NumPy formulation they replaced."""
    rng = np.random.default_rng(seed)
    n_reads = int(rng.integers(1, 300))
    n = int(rng.integers(0, 4 * n_reads))
    rs = rng.integers(0, 2 * n_reads, n).astype(np.uint32)  # in any order
    if seed % 2:
        rs = np.sort(rs)
    dist = rng.integers(-3, 40, n).astype(np.int32)
    lengths = rng.integers(0, 160, n_reads).astype(np.int64)
    table = (np.arange(161) // 5).astype(np.uint32)
    weak, has_hit, kept = weak_reads_and_flags(n_reads, rs, dist, lengths, table)
    best = np.full(n_reads, np.iinfo(np.int64).max)
    np.minimum.at(best, rs.astype(np.int64) >> 1, dist.astype(np.int64))
    want_weak = (best != np.iinfo(np.int64).max) & (best > table[lengths].astype(np.int64) // 2)
    want_has = np.zeros(n_reads, np.uint8)
    want_has[rs.astype(np.int64) >> 1] = 1
    want_has[want_weak] = 0
    assert np.array_equal(weak, want_weak)
    assert np.array_equal(has_hit, want_has)
    assert np.array_equal(kept, ~want_weak[rs.astype(np.int64) >> 1])
    if n >= 100:
        assert want_weak.any() and not want_weak.all()  # both kinds occur
    weak, has_hit, kept = weak_reads_and_flags(n_reads, rs[:0], dist[:0], lengths, table)  # no hits at all
    assert not weak.any() and not has_hit.any() and len(kept) == 0
    with pytest.raises(IndexError):
        weak_reads_and_flags(1, np.array([2], np.uint32), np.array([0], np.int32), np.array([10]), table)
