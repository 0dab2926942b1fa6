"""The MAPQ model (peanut_py/mapq.py) against a scalar transcription of BWA-MEM's default formula, its
behaviour on small fixed cases, and the count of close rivals it is fed (postprocess.next_stratum_sizes)."""
import math

import numpy as np
import pytest

from peanut_py.mapq import MAPQ_COEF_LEN, MAPQ_MAX, close_rival_gap, mapq_model
from peanut_py.options import Scoring
from peanut_py.postprocess import next_stratum_sizes
from peanut_py.ranking import rank_hits

SCORING = Scoring()
Q = 16


def mapq_reference(score, sub, n_sub, length, q=Q, s=SCORING):
    """BWA-MEM's mem_approx_mapq_se with mapQ_coef_len = 50, one read at a time."""
    sub = max(sub, q * s.match)
    if sub >= score or score <= 0:
        return 0
    length = max(length, 1)
    identity = 1.0 - (length * s.match - score) / (s.match + s.mismatch) / length
    f = 1.0 if length < MAPQ_COEF_LEN else math.log(MAPQ_COEF_LEN) / math.log(max(length, 2))
    f *= identity * identity
    mapq = math.floor(6.02 * (score - sub) / s.match * f * f + 0.499)
    mapq -= math.floor(4.343 * math.log(n_sub + 1) + 0.499)
    return min(max(mapq, 0), MAPQ_MAX)


def test_the_model_equals_the_reference_on_random_inputs():
    rng = np.random.default_rng(7)
    n = 20000
    length = rng.integers(20, 301, n)
    score = np.minimum(length, rng.integers(0, 320, n))
    sub = np.where(rng.random(n) < 0.3, -1, score - rng.integers(-5, 80, n))
    n_sub = rng.integers(0, 6, n)
    got = mapq_model(score, sub, n_sub, length, Q, SCORING)
    want = [mapq_reference(*args) for args in zip(score.tolist(), sub.tolist(), n_sub.tolist(), length.tolist())]
    assert got.tolist() == want


def one(score, sub, n_sub=0, length=100):
    return int(mapq_model([score], [sub], [n_sub], [length], Q, SCORING)[0])


def test_behaviour_on_fixed_cases():
    # a perfect 100 bp read without a rival: the cap
    assert one(100, -1) == MAPQ_MAX
    # an equally good rival: 0, however long the read
    assert one(100, 100) == 0 and one(150, 150, length=150) == 0
    # one mismatch between the best and the runner-up (score gap 5) on 100 bp: BWA gives 22
    assert one(100, 95) == 22
    # wider gaps give more, up to the cap; close rivals take some of it back
    assert one(100, 95) < one(100, 90) < one(100, 85) == MAPQ_MAX
    assert one(100, 90, n_sub=0) > one(100, 90, n_sub=1) > one(100, 90, n_sub=4)
    # the same gap means less on a read of low identity, and less on a longer read
    assert one(70, 62, length=100) < one(100, 92, length=100)
    assert one(150, 140, length=150) < one(100, 90, length=100)
    # a missing rival counts as a chance hit of one q-gram
    assert one(30, -1, length=30) == one(30, Q, length=30)


def test_close_rival_gap_is_one_mismatch_or_one_short_gap():
    assert close_rival_gap(SCORING) == max(SCORING.match + SCORING.mismatch, SCORING.gap_open + SCORING.gap_extend)
    assert close_rival_gap(Scoring(match=2, mismatch=8, gap_open=3, gap_extend=1)) == 10


def test_next_stratum_sizes_against_brute_force():
    rng = np.random.default_rng(3)
    n_reads, n_hits = 300, 2000
    rs = np.sort(rng.integers(0, 2 * n_reads, n_hits)).astype(np.uint32)
    start = rng.integers(0, 10**6, n_hits).astype(np.uint32)
    dist = rng.integers(0, 5, n_hits).astype(np.int32)
    order, ptr, _ = rank_hits(rs, start, dist, n_reads, first_read=0)
    per_read = [dist[order[ptr[r]:ptr[r + 1]]] for r in range(n_reads)]
    n_best = np.array([int((d == d.min()).sum()) if len(d) else 0 for d in per_read])
    got = next_stratum_sizes(order, ptr, dist, n_best)
    want = [int((d == d.min() + 1).sum()) if len(d) else 0 for d in per_read]
    assert got.tolist() == want
    assert next_stratum_sizes(np.zeros(0, np.int64), np.zeros(4, np.int64), dist[:0], np.zeros(3)).tolist() == [0, 0, 0]
