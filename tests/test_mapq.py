"""The MAPQ model (peanut_py/mapq.py) against a scalar transcription of BWA-MEM's default formula, its
behaviour on small fixed cases, what it is fed (postprocess.next_stratum_sizes, the unseen rival's score, the
bases of reads under masked q-grams against brute force) and the pair boost."""
import math

import numpy as np
import pytest

from peanut_py.filtration import guaranteed_errors
from peanut_py.mapq import (CLOSE_RIVAL_IDENTITY, CROWD_CAP, CROWD_MIN, CROWD_SCALE, CROWD_ZERO, MAPQ_COEF_LEN,
                            MAPQ_MAX, MASKED_FAMILY_SHARE, PAIR_MAPQ_BOOST, UNSEEN_EXTRA_EDITS, MaskedQgrams,
                            close_rival, close_rival_gap, mapq_model, pair_mapq, reverse_complement_values,
                            unseen_rival_score, value_slots)
from peanut_py.options import Scoring
from peanut_py.postprocess import next_stratum_sizes
from peanut_py.ranking import rank_hits

SCORING = Scoring()
Q = 16


def mapq_reference(score, sub, n_sub, length, q=Q, s=SCORING, unseen=None):
    """BWA-MEM's mem_approx_mapq_se with mapQ_coef_len = 50, one read at a time; ``unseen`` (a rival the
    filtration may have missed) raises sub as BWA's minimum seed score does; then the caps for a close rival
    (one scoring within a mismatch of the best): scaled into 1 .. CROWD_CAP (CROWD_SCALE) with CROWD_MIN of
    them or a low identity, 0 with CROWD_ZERO."""
    raw_sub = sub
    sub = max(sub, q * s.match, -1 if unseen is None else unseen)
    if sub >= score or score <= 0:
        return 0
    close = n_sub >= 1 and raw_sub >= 0 and raw_sub >= score - (s.match + s.mismatch)
    length = max(length, 1)
    identity = 1.0 - (length * s.match - score) / (s.match + s.mismatch) / length
    f = 1.0 if length < MAPQ_COEF_LEN else math.log(MAPQ_COEF_LEN) / math.log(max(length, 2))
    f *= identity * identity
    mapq = math.floor(6.02 * (score - sub) / s.match * f * f + 0.499)
    mapq -= math.floor(4.343 * math.log(n_sub + 1) + 0.499)
    mapq = min(max(mapq, 0), MAPQ_MAX)
    if close and n_sub >= CROWD_ZERO:
        return 0
    if close and (n_sub >= CROWD_MIN or identity <= CLOSE_RIVAL_IDENTITY):
        graded = min(math.floor(mapq * CROWD_CAP / CROWD_SCALE + 0.499), CROWD_CAP)
        return 1 if graded < 1 and mapq >= 1 else graded
    return mapq


def test_the_model_equals_the_reference_on_random_inputs():
    rng = np.random.default_rng(7)
    n = 20000
    length = rng.integers(20, 301, n)
    score = np.minimum(length, rng.integers(0, 320, n))
    sub = np.where(rng.random(n) < 0.3, -1, score - rng.integers(-5, 80, n))
    n_sub = rng.integers(0, 6, n) * rng.integers(1, 8, n)
    got = mapq_model(score, sub, n_sub, length, Q, SCORING)
    want = [mapq_reference(*args) for args in zip(score.tolist(), sub.tolist(), n_sub.tolist(), length.tolist())]
    assert got.tolist() == want
    unseen = score - rng.integers(-10, 60, n)
    got = mapq_model(score, sub, n_sub, length, Q, SCORING, unseen=unseen)
    want = [mapq_reference(*args, unseen=u) for *args, u in
            zip(score.tolist(), sub.tolist(), n_sub.tolist(), length.tolist(), unseen.tolist())]
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


def test_a_crowd_of_close_rivals_caps_mapq():
    # one rival a mismatch away: the formula (22 less 3 for the rival)
    assert one(100, 95, n_sub=1) == 19
    # two or more: a repeat family, scaled below 10 (22 less 5 for two rivals: 17 * 9 / 22 -> 7), falling with
    # the count of rivals but not below 1; 25 or more: 0
    assert CROWD_CAP == 9 and one(100, 95, n_sub=CROWD_MIN) == 7
    crowd = [one(100, 95, n_sub=k) for k in range(CROWD_MIN, CROWD_ZERO)]
    assert crowd == sorted(crowd, reverse=True) and crowd[0] > crowd[-1] >= 1
    assert one(100, 95, n_sub=CROWD_ZERO - 1) == 3 and one(100, 95, n_sub=CROWD_ZERO) == 0
    # rivals two mismatches away are no crowd: the formula alone
    assert one(100, 90, n_sub=3) == 43 - 6
    # on a 150 bp read the lead weighs less (18 less 5: 13 * 9 / 22 -> 5)
    assert one(150, 145, n_sub=CROWD_MIN, length=150) == 5


def test_a_close_rival_of_a_read_with_errors_caps_mapq():
    # identity 0.98 (two mismatches in 100 bases) and a rival one mismatch worse: scaled (20 less 3: 17 -> 7)
    assert one(90, 85, n_sub=1) == 7
    # identity 0.992: the formula
    assert one(96, 91, n_sub=1) > CROWD_CAP
    # no close rival: the formula even at low identity
    assert one(90, 70, n_sub=0) > CROWD_CAP


def test_a_close_rival_over_masked_qgrams_gives_zero():
    def masked(covered, n_sub=1, sub=95):
        return int(mapq_model([100], [sub], [n_sub], [100], Q, SCORING, covered=[covered], read_len=[100])[0])
    share = int(MASKED_FAMILY_SHARE * 100)
    assert masked(share) == 0 and masked(share - 1) == 19
    # without a close rival the masked share alone does not give 0 (its unseen rival does what it does)
    assert masked(100, n_sub=0, sub=60) > 0


def test_close_rival_is_one_mismatch_and_counted():
    score, sub, n_sub = np.array([100, 100, 100, 100, 100]), np.array([95, 94, 95, -1, 100]), np.array([1, 1, 0, 1, 2])
    assert close_rival(score, sub, n_sub, SCORING).tolist() == [True, False, False, False, True]


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


def unseen_reference(n, covered, q=Q, step=1, s=SCORING):
    """One read: the score of a rival UNSEEN_EXTRA_EDITS mismatches beyond the guarantee of the read shortened
    by its covered bases less q - 1 (its unmasked q-grams)."""
    n_eff = n if covered == 0 else min(n, max(0, n - covered + q - 1))
    return n * s.match - (guaranteed_errors(n_eff, q, step) + UNSEEN_EXTRA_EDITS) * (s.match + s.mismatch)


def test_unseen_rival_score_against_reference():
    rng = np.random.default_rng(11)
    n = rng.integers(20, 251, 3000)
    covered = np.where(rng.random(3000) < 0.4, 0, rng.integers(0, 251, 3000) % (n + 1))
    for step in (1, 3):
        got = unseen_rival_score(n, Q, step, SCORING, covered=covered)
        assert got.tolist() == [unseen_reference(a, c, step=step) for a, c in zip(n.tolist(), covered.tolist())]
    assert unseen_rival_score(n, Q, 1, SCORING).tolist() == [unseen_reference(a, 0) for a in n.tolist()]
    # 100 bases at q = 16: 5 edits guaranteed, a rival of 10 mismatches (score 50); 50 bases covered: 3
    # guaranteed, 8 mismatches (60); all covered: none guaranteed, 4 mismatches (80)
    assert unseen_rival_score([100, 100, 100], Q, 1, SCORING, covered=[0, 50, 100]).tolist() == [50, 60, 80]


def test_masked_reads_get_less_mapq():
    """The same hit and seen rival: the more of the read lies under masked q-grams, the less MAPQ."""
    covered = np.array([0, 30, 60, 90, 100])
    unseen = unseen_rival_score(np.full(5, 100), Q, 1, SCORING, covered=covered)
    got = mapq_model(np.full(5, 85), np.full(5, 40), np.zeros(5), np.full(5, 100), Q, SCORING, unseen=unseen)
    assert got.tolist() == sorted(got.tolist(), reverse=True)
    assert got[0] == MAPQ_MAX and got[-1] <= 20


def test_pair_boost():
    q_se, q_pe = np.array([0, 10, 30, 0, 50]), np.array([60, 60, 45, 20, 60])
    assert pair_mapq(q_se, q_pe).tolist() == [PAIR_MAPQ_BOOST, 50, 45, 20, 60]
    # a mate whose unseen rival may score as well as its hit keeps its own MAPQ
    ties = np.array([True, False, True, False, False])
    assert pair_mapq(q_se, q_pe, ties).tolist() == [0, 50, 30, 20, 60]


def test_a_tied_pair_gives_a_mate_with_a_close_rival_zero():
    # the pair's MAPQ is 0 (another pair scores as well): a mate with a close rival gets 0, whatever its own
    q_se, q_pe = np.array([19, 19, 19, 0]), np.array([0, 0, 5, 0])
    close = np.array([True, False, True, True])
    assert pair_mapq(q_se, q_pe, close=close).tolist() == [0, 19, 19, 0]
    assert pair_mapq(q_se, q_pe).tolist() == [19, 19, 19, 0]


def masked_coverage_brute(reads, masked, q):
    """Per read: its bases inside a q-base window (of the read, A0 C1 G2 T3 only) whose value or whose reverse
    complement's value is in ``masked``; values as index/FORMAT.md, the first base most significant."""
    masked = set(int(v) for v in masked)
    out = []
    for r in reads:
        covered = np.zeros(len(r), dtype=bool)
        for i in range(len(r) - q + 1):
            w = [int(x) for x in r[i:i + q]]
            if max(w) > 3:
                continue
            fwd = sum(c << 2 * (q - 1 - k) for k, c in enumerate(w))
            rev = sum((3 - c) << 2 * k for k, c in enumerate(w))
            if fwd in masked or rev in masked:
                covered[i:i + q] = True
        out.append(int(covered.sum()))
    return out


def reads_with_masked(rng, masked, q, n_reads, lengths, max_planted, p_n):
    """Random reads (lengths drawn from [lengths[0], lengths[1])) with up to max_planted - 1 masked q-grams
    planted in each, some as reverse complements, and an N in a share p_n of them."""
    reads = []
    for _ in range(n_reads):
        r = rng.integers(0, 4, int(rng.integers(*lengths)))
        for _ in range(int(rng.integers(0, max_planted))):
            v = int(masked[rng.integers(len(masked))])
            w = [(v >> 2 * (q - 1 - k)) & 3 for k in range(q)]
            if rng.random() < 0.5:
                w = [3 - c for c in w[::-1]]
            at = int(rng.integers(0, len(r) + 1))
            r = np.concatenate([r[:at], w, r[at:]])
        if len(r) and rng.random() < p_n:
            r[rng.integers(len(r))] = 4  # N
        reads.append(r.astype(np.uint8))
    return reads


@pytest.mark.parametrize("q", [5, 11, 16, 20])
def test_masked_coverage_against_brute_force(q):
    rng = np.random.default_rng(q)
    masked = np.unique(rng.integers(0, 4 ** q, 40, dtype=np.uint64))
    reads = reads_with_masked(rng, masked, q, 200, (0, 60), 3, 0.3)
    codes = np.concatenate(reads)
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in reads])))
    want = masked_coverage_brute(reads, masked, q)
    assert sum(want) > 0
    assert MaskedQgrams(masked, q).coverage(codes, offsets).tolist() == want
    # a slice of reads, with the offsets into the whole batch
    assert MaskedQgrams(masked, q).coverage(codes, offsets[50:121]).tolist() == want[50:120]
    assert MaskedQgrams(None, q).coverage(codes, offsets).tolist() == [0] * len(reads)


def test_value_slots_find_every_value_and_only_those():
    """The open-addressing table behind MaskedQgrams' hash screen, against a Python set: every value sits in
    the first free slot from its hash on, -1 elsewhere; lookups by the same probing find exactly the values,
    also where many share a slot (values crowded into one hash bucket) and at the table's wrap-around."""
    rng = np.random.default_rng(8)
    multiplier = 0x9E3779B97F4A7C15
    for n, bits, crowd in [(0, 4, False), (1, 4, False), (3000, 14, False), (500, 12, True), (15, 4, False)]:
        values = np.unique(rng.integers(0, 1 << 62, 4 * n + 1, dtype=np.uint64))[:n]
        if crowd:  # values whose hashes all land in the table's last slots: long probe runs that wrap around
            every = np.arange(1 << 20, dtype=np.uint64)
            values = every[(every * np.uint64(multiplier)) >> np.uint64(64 - bits) >= (1 << bits) - 2][:n]
        slots = value_slots(values, bits)
        assert slots.dtype == np.int32 and len(slots) == 1 << bits
        taken = slots[slots >= 0]
        assert sorted(taken.tolist()) == list(range(len(values)))
        mask = (1 << bits) - 1

        def lookup(v):
            k = ((v * multiplier) % (1 << 64)) >> (64 - bits)
            while slots[k] >= 0:
                if int(values[slots[k]]) == v:
                    return True
                k = (k + 1) & mask
            return False

        wanted = set(values.tolist())
        probes = (list(wanted) + rng.integers(0, 1 << 62, 300, dtype=np.uint64).tolist()
                  + [v + 1 for v in list(wanted)[:200]])
        assert [lookup(int(v)) for v in probes] == [int(v) in wanted for v in probes]
    with pytest.raises(ValueError):
        value_slots(np.arange(16, dtype=np.uint64), 4)


@pytest.mark.parametrize("q", [11, 16])
def test_masked_coverage_with_many_masked_values(q):
    """As test_masked_coverage_against_brute_force with thousands of masked q-grams, as a human chromosome's
    index has, so that the hash screen passes many windows on to the exact lookup."""
    rng = np.random.default_rng(60 + q)
    masked = np.unique(rng.integers(0, 4 ** q, 3000, dtype=np.uint64))
    reads = reads_with_masked(rng, masked, q, 300, (q, 150), 4, 0.2)
    codes = np.concatenate(reads)
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in reads])))
    want = masked_coverage_brute(reads, masked, q)
    assert sum(v > 0 for v in want) > 100
    assert MaskedQgrams(masked, q).coverage(codes, offsets).tolist() == want


@pytest.mark.parametrize("q", [1, 5, 16, 20, 32])
def test_reverse_complement_values_against_strings(q):
    """MaskedQgrams looks a window up once against the masked values and their reverse complements."""
    rng = np.random.default_rng(40 + q)
    kind = np.uint32 if 2 * q <= 32 else np.uint64
    ends = np.array([0, 4 ** q - 1], dtype=np.uint64)
    values = np.concatenate([ends, rng.integers(0, 4 ** q, 300, dtype=np.uint64)]).astype(kind)
    want = []
    for v in values.tolist():
        bases = [(v >> 2 * (q - 1 - k)) & 3 for k in range(q)]
        want.append(sum((3 - c) << 2 * (q - 1 - k) for k, c in enumerate(bases[::-1])))
    got = reverse_complement_values(values, q)
    assert got.dtype == values.dtype and got.tolist() == want
    assert reverse_complement_values(got, q).tolist() == values.tolist()


def sam_columns(path):
    """Per record of a SAM: (every field but MAPQ and the MQ tag, MAPQ)."""
    out = []
    for line in open(path):
        if line.startswith("@"):
            continue
        f = line.rstrip("\n").split("\t")
        out.append((tuple(f[:4] + f[5:11] + [t for t in f[11:] if not t.startswith("MQ:")]), int(f[4])))
    return out


@pytest.mark.parametrize("paired, mask", [(False, 20), (True, 3)], ids=["single", "paired"])
def test_masked_qgrams_only_lower_mapq(tmp_path, monkeypatch, paired, mask):
    """Real NA12878 reads on the bundled chr20 slice indexed with q-grams of more than ``mask`` copies masked: with
    the masked q-grams known to MAPQ, no read moves and no MAPQ rises, and reads over masked repeats fall."""
    from helpers import REPO, run_cli
    from peanut_py import postprocess
    from peanut_py.cli import main

    example = REPO / "index" / "example"
    index = tmp_path / "slice.h5"
    rc, _, err = run_cli("index", example / "chr20_slice.fa.gz", "-o", index, "-m", str(mask))
    assert rc == 0, err
    reads = [str(example / f"NA12878_chr20_slice_2000pairs_R{m}.fastq.gz") for m in ((1, 2) if paired else (1,))]

    def mapped(out):
        try:
            main(["map", str(index), *reads, "-o", str(out), "-t", "2"])
        except SystemExit as e:
            assert not e.code
        return sam_columns(out)

    with_masked = mapped(tmp_path / "with.sam")
    monkeypatch.setattr(postprocess.MaskedQgrams, "coverage", lambda self, codes, offsets: np.zeros(len(offsets) - 1))
    without = mapped(tmp_path / "without.sam")
    assert [r for r, _ in with_masked] == [r for r, _ in without]
    lower = sum(a < b for (_, a), (_, b) in zip(with_masked, without))
    assert all(a <= b for (_, a), (_, b) in zip(with_masked, without))
    assert lower > 0
