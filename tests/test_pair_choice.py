"""_pair_choice.pyx (pair placement of a chunk without the GIL) against the Python loop it replaced in
Postprocessor.process_pairs (pair_oracle.reference_choose_pairs: pair_oracle.pair_score per concordant
combination, pair_oracle.choose_pair per pair). Equal on random combinations (ties, runner-ups, pairs that stay
unpaired, extreme inserts) and on the real pairs of tests/test_sam_records.py, which runs process_pairs with
this reference in place of pair_choice.choose_pairs."""
import math
import random

import numpy as np
import pytest

import pair_oracle
from pair_oracle import reference_choose_pairs
from peanut_py import insert_size as isz
from peanut_py.options import Scoring
from peanut_py.pair_choice import choose_pairs, pair_score


def random_chunk(rng, n_pairs, insert_size, score_range):
    """Concordant combinations of a chunk: grouped by pair, a few pairs without any, many equal scores."""
    rows = []
    for p in range(n_pairs):
        k = rng.choice([0, 0, 1, 1, 2, 3, 5, 12])
        hits = rng.sample([(a, b) for a in range(6) for b in range(6)], k)
        for a, b in hits:
            ins = int(rng.gauss(insert_size.mean, 3 * insert_size.std)) if rng.random() < 0.9 else \
                rng.choice([insert_size.low, insert_size.high, 10 ** 6])
            rows.append((p, a, b, rng.randint(*score_range), rng.randint(*score_range), ins))
    cols = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(6)]
    own = np.array([rng.randint(*score_range) if rng.random() < 0.7 else 0 for _ in range(2 * n_pairs)],
                   dtype=np.int64)
    return cols, own


@pytest.mark.parametrize("seed", range(6))
def test_choose_pairs_equals_the_python_placement(seed):
    rng = random.Random(seed)
    insert_size = isz.InsertSize(rng.uniform(150, 500), rng.choice([0.5, 35.7, 80.0]), 40, 900)
    opts = Scoring(match=rng.choice([1, 2]), mismatch=rng.choice([3, 4]), gap_open=rng.choice([5, 6]),
                      gap_extend=rng.choice([1, 2]))
    score_range = rng.choice([(90, 100), (0, 150), (140, 150)])  # narrow ranges: ties and runner-ups
    cols, own = random_chunk(rng, 400, insert_size, score_range)
    fast = choose_pairs(*cols, own, insert_size, opts)
    slow = reference_choose_pairs(*cols, own, insert_size, opts)
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # the inputs cover both outcomes and runner-up penalties
    assert fast[1].any() and not fast[1].all()
    assert len(set(fast[2][fast[1]].tolist())) > 3


def test_choose_pairs_without_combinations():
    own = np.arange(6, dtype=np.int64)
    empty = np.zeros(0, dtype=np.int64)
    chosen, paired, q_pe = choose_pairs(empty, empty, empty, empty, empty, empty, own, None, Scoring())
    assert chosen.tolist() == [0] * 6 and paired.tolist() == [False] * 3 and q_pe.tolist() == [-1] * 3


def test_choose_pairs_needs_grouped_pairs():
    one = np.ones(2, dtype=np.int64)
    with pytest.raises(ValueError, match="grouped by pair"):
        choose_pairs(np.array([1, 0], dtype=np.int64), one, one, one, one, one, np.zeros(4, dtype=np.int64),
                     isz.InsertSize(300.0, 30.0, 100, 500), Scoring())


def test_pair_score_equals_pairing():
    rng = random.Random(5)
    for _ in range(20000):
        mean, std = rng.uniform(50, 800), rng.choice([0.0, rng.uniform(0.01, 200)])
        insert = rng.choice([int(rng.gauss(mean, 4 * std + 1)), rng.randint(-10, 100000)])
        sa, sb, match = rng.randint(-20, 300), rng.randint(-20, 300), rng.randint(1, 3)
        expect = pair_oracle.pair_score(sa, sb, insert, isz.InsertSize(mean, std, 1, 2), match)
        assert pair_score(sa, sb, insert, isz.InsertSize(mean, std, 1, 2), match) == expect
    # far outside the distribution the tail probability underflows and is floored at 1e-300, as in Python
    assert pair_score(0, 0, 10 ** 6, isz.InsertSize(300.0, 10.0, 1, 2), 1) == int(0.721 * math.log(1e-300) + 0.499)
