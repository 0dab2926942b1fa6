"""mapq.py's functions, computed without the GIL by the private _mapq, against the vectorised NumPy
expressions they replace (written out below as the reference), value for value: random inputs with the
rounding edges of MAPQ, empty chunks, reads without hits or rivals, ties, and values beyond the tables that
the private module reads (which then grow)."""
import numpy as np
import pytest

from peanut_py import mapq
from peanut_py.filtration import guaranteed_errors
from peanut_py.mapq import (CLOSE_RIVAL_IDENTITY, CROWD_CAP, CROWD_MIN, CROWD_SCALE, CROWD_ZERO, MAPQ_COEF_LEN,
                            MAPQ_MAX, MASKED_FAMILY_SHARE, PAIR_MAPQ_BOOST, UNSEEN_EXTRA_EDITS, close_rival,
                            guarantee_table, mapq_model, pair_mapq, unseen_rival_score)
from peanut_py.options import Scoring

SCORINGS = [Scoring(), Scoring(match=2, mismatch=8, gap_open=3, gap_extend=1)]


def close_rival_numpy(score, sub, n_sub, scoring):
    sub = np.asarray(sub)
    return (np.asarray(n_sub) >= 1) & (sub >= 0) & (sub >= np.asarray(score) - (scoring.match + scoring.mismatch))


def mapq_model_numpy(score, sub, n_sub, aligned_len, q, scoring, unseen=None, covered=None, read_len=None):
    match, mismatch = scoring.match, scoring.mismatch
    score = np.asarray(score, dtype=np.float64)
    raw_sub = np.asarray(sub, dtype=np.float64)
    sub = np.maximum(raw_sub, q * match)
    if unseen is not None:
        sub = np.maximum(sub, np.asarray(unseen, dtype=np.float64))
    length = np.maximum(np.asarray(aligned_len, dtype=np.float64), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        identity = 1.0 - (length * match - score) / (match + mismatch) / length
        f = np.where(length < MAPQ_COEF_LEN, 1.0, np.log(MAPQ_COEF_LEN) / np.log(np.maximum(length, 2.0)))
        f = f * identity * identity
        q_raw = np.floor(6.02 * (score - sub) / match * f * f + 0.499)
    q_raw = q_raw - np.floor(4.343 * np.log(np.asarray(n_sub, dtype=np.float64) + 1) + 0.499)
    q_raw = np.where((sub >= score) | (score <= 0), 0, q_raw)
    q_raw = np.clip(q_raw, 0, MAPQ_MAX)
    n_sub = np.asarray(n_sub, dtype=np.int64)
    close = close_rival_numpy(score, raw_sub, n_sub, scoring)
    capped = close & ((n_sub >= CROWD_MIN) | (identity <= CLOSE_RIVAL_IDENTITY))
    graded = np.minimum(np.floor(q_raw * CROWD_CAP / CROWD_SCALE + 0.499), CROWD_CAP)
    graded = np.where((graded < 1) & (q_raw >= 1), 1, graded)
    q_raw = np.where(capped, graded, q_raw)
    zero = close & (n_sub >= CROWD_ZERO)
    if covered is not None and read_len is not None:
        zero |= close & (np.asarray(covered, dtype=np.float64) >= MASKED_FAMILY_SHARE * np.asarray(read_len))
    return np.where(zero, 0, q_raw).astype(np.int32)


def unseen_rival_score_numpy(read_len, q, step, scoring, covered=None, extra_edits=UNSEEN_EXTRA_EDITS):
    n = np.asarray(read_len, dtype=np.int64)
    if covered is None:
        n_eff = n
    else:
        c = np.rint(np.asarray(covered, dtype=np.float64)).astype(np.int64)
        n_eff = np.clip(np.where(c > 0, n - c + q - 1, n), 0, n)
    e_g = np.array([guaranteed_errors(int(x), q, step) for x in range(int(n.max(initial=0)) + 1)], dtype=np.int64)
    return n * scoring.match - (e_g[n_eff] + extra_edits) * (scoring.match + scoring.mismatch)


def pair_mapq_numpy(q_se, q_pe, unseen_ties=None, close=None):
    q_se = np.asarray(q_se, dtype=np.int64)
    q_pe = np.asarray(q_pe, dtype=np.int64)
    raised = np.maximum(q_se, np.minimum(q_pe, q_se + PAIR_MAPQ_BOOST))
    if unseen_ties is not None:
        raised = np.where(unseen_ties, q_se, raised)
    return raised if close is None else np.where(np.asarray(close) & (q_pe == 0), 0, raised)


def model_inputs(rng, n, scoring, max_length=300):
    """Reads as the mapper sees them: aligned lengths around typical read lengths, scores near the length
    (identities around the CLOSE_RIVAL_IDENTITY cap), rivals often one mismatch away (close) or absent,
    counts of close rivals up to crowds, masked shares around MASKED_FAMILY_SHARE."""
    length = rng.integers(0, max_length + 1, n)
    errors = rng.integers(0, 12, n) * (rng.random(n) < 0.7)
    score = (length - errors) * scoring.match - errors * scoring.mismatch
    score = np.where(rng.random(n) < 0.05, rng.integers(-30, 40, n), score)
    gap = rng.choice([0, scoring.match + scoring.mismatch, 2 * (scoring.match + scoring.mismatch), 1, 30], n)
    sub = np.where(rng.random(n) < 0.3, -1, score - gap)
    n_sub = np.where(rng.random(n) < 0.5, 0, rng.integers(0, 40, n))
    read_len = length + rng.integers(0, 20, n)
    covered = np.where(rng.random(n) < 0.5, 0, rng.integers(0, read_len + 1))
    unseen = score - rng.integers(-10, 60, n)
    return score, sub, n_sub, length, unseen, covered, read_len


@pytest.mark.parametrize("scoring", SCORINGS, ids=["bwa", "other"])
def test_mapq_model_equals_numpy_on_random_reads(scoring):
    rng = np.random.default_rng(21)
    score, sub, n_sub, length, unseen, covered, read_len = model_inputs(rng, 200_000, scoring)
    for q in (11, 16):
        want = mapq_model_numpy(score, sub, n_sub, length, q, scoring, unseen=unseen, covered=covered,
                                read_len=read_len)
        got = mapq_model(score, sub, n_sub, length, q, scoring, unseen=unseen, covered=covered, read_len=read_len)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
        # every value of MAPQ and every branch is reached
        assert set(np.unique(want).tolist()) >= {0, CROWD_CAP, MAPQ_MAX} and len(np.unique(want)) > 40
        np.testing.assert_array_equal(mapq_model(score, sub, n_sub, length, q, scoring),
                                      mapq_model_numpy(score, sub, n_sub, length, q, scoring))
        np.testing.assert_array_equal(mapq_model(score, sub, n_sub, length, q, scoring, unseen=unseen),
                                      mapq_model_numpy(score, sub, n_sub, length, q, scoring, unseen=unseen))


def test_mapq_model_over_every_aligned_length_and_score():
    """Each aligned length 1..400 with every score from 0 to it and rivals 1..3 mismatches below: the
    logarithm of the length and the floors at their rounding edges."""
    s = Scoring()
    length = np.repeat(np.arange(1, 401), np.arange(1, 401) + 1)
    score = np.concatenate([np.arange(n + 1) for n in range(1, 401)])
    for gap in (5, 10, 15):
        for n_sub in (0, 1, 3):
            args = (score, score - gap, np.full(len(score), n_sub), length, 16, s)
            np.testing.assert_array_equal(mapq_model(*args), mapq_model_numpy(*args))


def test_mapq_model_ties_give_zero():
    s = Scoring()
    score, sub, n_sub, length = [100, 100, 100], [-1, 80, 95], [0, 0, 1], [100, 100, 100]
    plain = mapq_model(score, sub, n_sub, length, 16, s)
    assert plain.tolist() == mapq_model_numpy(score, sub, n_sub, length, 16, s).tolist() and min(plain) > 0
    assert mapq_model(score, sub, n_sub, length, 16, s, ties=[True, False, True]).tolist() == [0, plain[1], 0]


def test_mapq_model_of_an_empty_chunk():
    s = Scoring()
    empty = np.zeros(0, dtype=np.int64)
    got = mapq_model(empty, empty, empty, empty, 16, s, unseen=empty, covered=empty, read_len=empty,
                     ties=np.zeros(0, dtype=bool))
    assert got.dtype == np.int32 and got.shape == (0,)
    assert unseen_rival_score(empty, 16, 1, s, covered=empty).shape == (0,)
    assert close_rival(empty, empty, empty, s).shape == (0,)
    assert pair_mapq(empty, empty, empty.astype(bool), empty.astype(bool)).shape == (0,)


def test_mapq_model_beyond_its_log_tables():
    """Aligned lengths and counts of close rivals beyond the tables' first size: the tables grow and the
    values stay NumPy's."""
    s = Scoring()
    rng = np.random.default_rng(5)
    n = 2000
    length = rng.integers(1, 20_000, n)
    score = length - rng.integers(0, 40, n)
    sub = score - rng.integers(0, 30, n)
    n_sub = np.where(rng.random(n) < 0.5, rng.integers(0, 5000, n), 0)
    want = mapq_model_numpy(score, sub, n_sub, length, 16, s)
    np.testing.assert_array_equal(mapq_model(score, sub, n_sub, length, 16, s), want)
    assert len(mapq._log_table("length")) > int(length.max()) and len(mapq._log_table("count")) > int(n_sub.max())


def test_mapq_model_refuses_a_negative_count():
    with pytest.raises(ValueError):
        mapq_model([100], [90], [-1], [100], 16, Scoring())


def test_close_rival_equals_numpy():
    rng = np.random.default_rng(9)
    for s in SCORINGS:
        score, sub, n_sub, *_ = model_inputs(rng, 50_000, s)
        got = close_rival(score, sub, n_sub, s)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, close_rival_numpy(score, sub, n_sub, s))
        assert 0 < got.sum() < len(got)


@pytest.mark.parametrize("step", [1, 3])
def test_unseen_rival_score_equals_numpy(step):
    rng = np.random.default_rng(30 + step)
    n = rng.integers(0, 400, 50_000)
    covered = np.where(rng.random(len(n)) < 0.4, 0, rng.integers(0, 420, len(n)))
    for s in SCORINGS:
        for q in (11, 16):
            want = unseen_rival_score_numpy(n, q, step, s, covered=covered)
            got = unseen_rival_score(n, q, step, s, covered=covered)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(unseen_rival_score(n, q, step, s), unseen_rival_score_numpy(n, q, step, s))
    # covered bases as floats are rounded, as before
    frac = covered + rng.random(len(n))
    np.testing.assert_array_equal(unseen_rival_score(n, 16, step, SCORINGS[0], covered=frac),
                                  unseen_rival_score_numpy(n, 16, step, SCORINGS[0], covered=frac))


def test_unseen_rival_score_beyond_its_guarantee_table():
    s = Scoring()
    n = np.array([5000, 12, 70_000, 0])
    covered = np.array([100, 0, 69_000, 0])
    np.testing.assert_array_equal(unseen_rival_score(n, 16, 1, s, covered=covered),
                                  unseen_rival_score_numpy(n, 16, 1, s, covered=covered))
    table = guarantee_table(16, 1)
    assert len(table) > 70_000 and not table.flags.writeable
    assert table[:300].tolist() == [guaranteed_errors(x, 16, 1) for x in range(300)]
    # one table per (q, step), kept: the next chunk takes it as it is
    assert guarantee_table(16, 1) is table


def test_pair_mapq_equals_numpy():
    rng = np.random.default_rng(12)
    n = 50_000
    q_se = rng.integers(0, 61, n)
    q_pe = np.where(rng.random(n) < 0.2, 0, rng.integers(0, 61, n))
    ties = rng.random(n) < 0.3
    close = rng.random(n) < 0.3
    for t, c in [(None, None), (ties, None), (None, close), (ties, close)]:
        np.testing.assert_array_equal(pair_mapq(q_se, q_pe, t, c), pair_mapq_numpy(q_se, q_pe, t, c))
    # one pair MAPQ for all
    np.testing.assert_array_equal(pair_mapq(q_se[:10], 30), pair_mapq_numpy(q_se[:10], 30))
