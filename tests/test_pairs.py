"""Paired-end model (pairs.py, insert_size.py) on hand-computed cases, and mate rescue (rescue.py +
peanut_py/kernels/rescue.cl): the device's alignment of every rescue window must equal a plain-Python dynamic
program exactly."""
import math
import random
from types import SimpleNamespace

import numpy as np
import pyopencl.array as cla
import pytest

import pair_oracle
from device_inputs import COMPLEMENT, read_buffer
from peanut_py import insert_size as isz
from peanut_py import mapq, pairs, rescue
from peanut_py.errors import PeanutError
from peanut_py.options import MapOptions, Scoring

OPTS = MapOptions()
SCORING = OPTS.scoring
CONTIG_GAP = 1024
NEG = -(1 << 30)


# --- insert size ----------------------------------------------------------------------------------------------


def test_estimate_insert_size_by_hand():
    # 20 inserts: 19 around 300 and one outlier. n = 20: p25 = q[int(5.499)] = q[5], p75 = q[int(15.499)] = q[15]
    q = [280, 285, 290, 292, 295, 296, 298, 299, 300, 300, 301, 302, 303, 305, 306, 308, 310, 315, 320, 5000]
    est = isz.estimate_insert_size(q)
    p25, p75 = 296, 308
    iqr = p75 - p25
    kept = [x for x in q if p25 - 2 * iqr <= x <= p75 + 2 * iqr]  # 272..332: the outlier 5000 is trimmed
    assert len(kept) == 19
    mean = sum(kept) / len(kept)
    std = math.sqrt(sum((x - mean) ** 2 for x in kept) / len(kept))
    assert est.mean == pytest.approx(mean) and est.std == pytest.approx(std)
    # bounds: p25 - 3 IQR = 260 vs mean - 4 std, p75 + 3 IQR = 344 vs mean + 4 std: the wider of each
    assert est.low == min(int(p25 - 3 * iqr + 0.499), int(mean - 4 * std + 0.499))
    assert est.high == max(int(p75 + 3 * iqr + 0.499), int(mean + 4 * std + 0.499))
    assert est.n == 20 and est.source == "estimated"
    # order of the sample does not matter
    assert isz.estimate_insert_size(list(reversed(q))) == est


def test_estimate_insert_size_needs_ten_pairs_and_low_at_least_one():
    assert isz.estimate_insert_size([300] * 9) is None
    est = isz.estimate_insert_size([300] * 10)
    assert (est.mean, est.std, est.low, est.high) == (300.0, 0.0, 300, 300)
    wide = isz.estimate_insert_size([10, 20, 30, 40, 50, 60, 70, 80, 90, 400])
    assert wide.low == 1


def test_parse_insert_size():
    i = isz.parse_insert_size("300")
    assert (i.mean, i.std, i.low, i.high, i.source) == (300.0, 30.0, 180, 420, "user")
    i = isz.parse_insert_size("250,25")
    assert (i.low, i.high) == (150, 350)
    i = isz.parse_insert_size("250,25,600")
    assert (i.low, i.high) == (150, 600)
    i = isz.parse_insert_size("250,25,600,100")
    assert (i.low, i.high) == (100, 600)
    assert isz.parse_insert_size("10,10").low == 1  # mean - 4 std < 1
    for bad in ("", "x", "300,", "1,2,3,4,5", "-5", "300,20,100,200", "nan"):
        with pytest.raises(PeanutError):
            isz.parse_insert_size(bad)


# --- concordance, TLEN, flags ----------------------------------------------------------------------------------


INS = isz.InsertSize(300.0, 30.0, 180, 420)


def test_fr_insert_and_concordance():
    # forward mate at [1000, 1100), reverse mate at [1200, 1300): insert = 1300 - 1000
    assert pairs.fr_insert(0, 1000, 1100, 1, 1200, 1300) == 300
    assert pairs.fr_insert(1, 1200, 1300, 0, 1000, 1100) == 300  # either mate may be the forward one
    assert pairs.fr_insert(0, 1000, 1100, 0, 1200, 1300) == 0  # same strand: not FR
    # RF (reverse mate left of the forward one): negative insert, never concordant
    assert pairs.fr_insert(1, 1000, 1100, 0, 1200, 1300) == 1100 - 1200
    c = pairs.concordant
    assert c(INS, 0, 0, 1000, 1100, 0, 1, 1200, 1300)
    assert not c(INS, 0, 0, 1000, 1100, 1, 1, 1200, 1300)  # other contig
    assert not c(INS, 0, 0, 1000, 1100, 0, 0, 1200, 1300)  # FF
    assert not c(INS, 0, 1, 1000, 1100, 0, 0, 1200, 1300)  # RF
    assert c(INS, 0, 0, 1000, 1100, 0, 1, 1080, 1180)  # insert 180 = low: inside
    assert not c(INS, 0, 0, 1000, 1100, 0, 1, 1079, 1179)  # 179
    assert c(INS, 0, 0, 1000, 1100, 0, 1, 1320, 1420) and not c(INS, 0, 0, 1000, 1100, 0, 1, 1321, 1421)
    assert not c(None, 0, 0, 1000, 1100, 0, 1, 1200, 1300)
    # vectorised
    got = c(INS, np.array([0, 0]), np.array([0, 1]), np.array([1000, 1000]), np.array([1100, 1100]),
            np.array([0, 0]), np.array([1, 1]), np.array([1200, 1200]), np.array([1300, 1300]))
    assert got.tolist() == [True, False]


def test_template_length_by_hand():
    # mate 1 at POS 101 (0-based 100) 50 bases; mate 2 at 0-based 300..400: template 100..400 = 300 bases
    assert pair_oracle.template_length(100, 150, 300, 400) == (300, -300)
    assert pair_oracle.template_length(300, 400, 100, 150) == (-300, 300)
    # overlapping mates, mate 2 contained in mate 1: leftmost start 100, rightmost end 200
    assert pair_oracle.template_length(100, 200, 120, 180) == (100, -100)
    # same POS: mate 1 is the positive one, the signs still differ
    assert pair_oracle.template_length(100, 150, 100, 201) == (101, -101)


def test_pair_flags_by_hand():
    f = pair_oracle.pair_flags
    assert f(True, True, True, False, True, True) == 99  # 1 + 2 + 32 + 64
    assert f(False, True, True, True, False, True) == 147  # 1 + 2 + 16 + 128
    assert f(True, True, True, False, True, False) == 97  # not concordant: no 0x2
    assert f(True, True, False, True, True, True) == 1 + 8 + 16 + 64  # mate unmapped: no 0x2, no 0x20
    assert f(False, False, True, True, True, False) == 1 + 4 + 32 + 128  # unmapped read: no 0x10
    assert f(True, False, False, False, False, False) == 77
    assert f(False, False, False, False, False, False) == 141


def test_insert_log_penalty():
    # BWA's term is log4(2 * tail): +0.5 at the mean, falling away from it
    assert pair_oracle.insert_log_penalty(300, INS) == pytest.approx(0.721 * math.log(2))
    z = 2.0
    assert pair_oracle.insert_log_penalty(360, INS) == pytest.approx(0.721 * math.log(2 * math.erfc(z / math.sqrt(2))))
    assert pair_oracle.insert_log_penalty(240, INS) == pair_oracle.insert_log_penalty(360, INS)


def test_pair_score():
    # mates scoring 90 and 100 at the mean insert: 190 + 0.721 ln 2 rounded as BWA rounds
    assert pair_oracle.pair_score(90, 100, 300, INS) == 190
    # two standard deviations away: 190 + 0.721 ln(2 erfc(sqrt 2)) = 190 - 2.31 -> 188
    expected = int(190 + 0.721 * math.log(2 * math.erfc(math.sqrt(2))) + 0.499)
    assert pair_oracle.pair_score(90, 100, 360, INS) == expected
    assert pair_oracle.pair_score(90, 100, 360, INS) == 188


def test_concordant_combinations_by_hand():
    # candidate hits: (read, strand, start, end, contig)
    cand = [
        (0, 0, 1000, 1100, 0),  # 0: mate 1 forward
        (0, 0, 1050, 1150, 0),  # 1: mate 1 forward, 50 bp right
        (1, 1, 1200, 1300, 0),  # 2: mate 2 reverse: inserts 300 with 0, 250 with 1
        (1, 1, 5000, 5100, 0),  # 3: mate 2 reverse, far away
        (2, 1, 2000, 2100, 0),  # 4: pair 2, mate 1 reverse
        (3, 0, 1800, 1900, 0),  # 5: mate 2 forward: insert 300 with 4
        (3, 0, 1800, 1900, 1),  # 6: the same on another contig: never concordant
        (1, 0, 1300, 1400, 0),  # 7: mate 2 forward: same strand as hit 0, and no reverse hit of mate 1
    ]
    read, strand, start, end, contig = (np.array(c) for c in zip(*cand))
    f, r, ins = pairs.concordant_combinations(read, strand, start, end, contig, INS)
    assert list(zip(f.tolist(), r.tolist(), ins.tolist())) == [(0, 2, 300), (1, 2, 250), (5, 4, 300)]
    assert all(len(x) == 0 for x in pairs.concordant_combinations(read, strand, start, end, contig, None))


def test_choose_pair_by_hand():
    # the single concordant pair (190) beats the unpaired placement (183): MAPQ 6.02 * 7
    c = pair_oracle.choose_pair([(190, 1, 0)], 183, SCORING)
    assert (c.a, c.b, c.paired, c.q_pe, c.score) == (1, 0, True, pair_oracle.raw_mapq(7), 190)
    assert c.q_pe == 42
    # not better than the unpaired placement: each mate keeps its best hit (rank 0)
    c = pair_oracle.choose_pair([(183, 1, 0)], 183, SCORING)
    assert (c.a, c.b, c.paired, c.q_pe) == (0, 0, False, -1)
    assert pair_oracle.choose_pair([], 100, SCORING, has_b=False).b == -1
    # two equal pairs (a segmental duplication): MAPQ 0, the best-ranked hits win the tie
    c = pair_oracle.choose_pair([(195, 1, 1), (195, 0, 0)], 178, SCORING)
    assert (c.a, c.b, c.paired, c.q_pe) == (0, 0, True, 0)
    # runner-ups within max(A + B, O + E) = 7 of the second best count: 190 and 188, not 180
    c = pair_oracle.choose_pair([(200, 0, 0), (190, 1, 1), (188, 2, 2), (180, 3, 3)], 150, SCORING)
    assert c.q_pe == pair_oracle.raw_mapq(10) - int(4.343 * math.log(3) + 0.499) == 55


def test_pair_mapq_pins_an_ambiguous_mate():
    # mate alone ambiguous (0), pinned by a pair with q_pe 60: 0 + 40 cap; a confident mate keeps its own
    assert mapq.pair_mapq([0, 60], 60).tolist() == [40, 60]
    assert mapq.pair_mapq([10, 3], 20).tolist() == [20, 20]
    assert mapq.pair_mapq([30], 0).tolist() == [30]


def test_insert_sample_uses_unique_fr_pairs_only():
    offsets = np.array([1024, 20000], dtype=np.int64)
    # pairs: 0 FR unique (insert 300); 1 FF; 2 mate 2 has two equal hits; 3 different contigs; 4 RF
    hits = [  # (rs, start, end, dist)
        (0, 2000, 2100, 0), (3, 2200, 2300, 1),
        (4, 3000, 3100, 0), (6, 3200, 3300, 0),
        (8, 4000, 4100, 0), (11, 4200, 4300, 0), (11, 7000, 7100, 0),
        (12, 5000, 5100, 0), (15, 21000, 21100, 0),
        (17, 6000, 6100, 0), (18, 6200, 6300, 0),
    ]
    rs, start, end, dist = (np.array(c) for c in zip(*hits))
    sample = isz.insert_sample(rs.astype(np.uint32), start, end, dist.astype(np.int32), np.full(10, 100),
                                   offsets, SCORING)
    assert sample.tolist() == [300]


# --- rescue: host side ----------------------------------------------------------------------------------------


def test_rescue_windows_by_hand():
    offsets, ends = np.array([1024]), np.array([100000])
    # pair 0 (reads 0, 1): mate 1 forward at [5000, 5100), mate 2 without hits -> mate 2 reverse, ending in
    #   [5000 + 180, 5000 + 420]: window [5080, 5420)
    # pair 1 (reads 2, 3): mate 1 forward at 20000, mate 2 reverse at [8000, 8100): not concordant, so each
    #   anchors a window for the other: read 3 reverse [20080, 20420); read 2 forward starting in
    #   [8100 - 420, 8100 - 180]: [7680, 8020)
    # pair 2 (reads 4, 5): concordant -> nothing; pair 3 (reads 6, 7): mate 1 has 5 equal hits -> no anchor
    hits = [(0, 5000, 5100, 0), (4, 20000, 20100, 0), (7, 8000, 8100, 0), (8, 30000, 30100, 0),
            (11, 30200, 30300, 0)]
    hits += [(12, 40000 + 1000 * k, 40100 + 1000 * k, 0) for k in range(5)]
    rs, start, end, dist = (np.array(c) for c in zip(*hits))
    w = rescue.rescue_windows(rs.astype(np.uint32), start, end, dist.astype(np.int32), np.full(8, 100), INS,
                              offsets, ends)
    got = list(zip(w.read.tolist(), w.strand.tolist(), w.lo.tolist(), w.hi.tolist()))
    assert got == [(1, 1, 5080, 5420), (2, 0, 7680, 8020), (3, 1, 20080, 20420)]


def test_rescue_windows_merge_and_clip():
    offsets, ends = np.array([1024]), np.array([6000])
    # two anchors of mate 1 at 2000 and 2050 (equal): overlapping windows for mate 2 merge into one;
    # an anchor near the contig end gets a window clipped at 6000
    hits = [(0, 2000, 2100, 0), (0, 2050, 2150, 0), (4, 5800, 5900, 0)]
    rs, start, end, dist = (np.array(c) for c in zip(*hits))
    w = rescue.rescue_windows(rs.astype(np.uint32), start, end, dist.astype(np.int32), np.full(4, 100), INS,
                              offsets, ends)
    got = list(zip(w.read.tolist(), w.strand.tolist(), w.lo.tolist(), w.hi.tolist()))
    assert got == [(1, 1, 2080, 2470)] + [(3, 1, 5880, 6000)]


# --- rescue: the kernel against a plain dynamic program ---------------------------------------------------------


def reference_rescue(read, window, A=1, B=4, O=6, E=1, ambig=1, clip=5, local=True):
    """(score, end_i, end_j, start_diag) by the rules of peanut_py/kernels/rescue.cl, as plain full matrices."""
    m, W = len(read), len(window)
    go, ge = O + E, E
    H = [[NEG] * (W + 1) for _ in range(m + 1)]
    Ev = [[NEG] * (W + 1) for _ in range(m + 1)]
    F = [[NEG] * (W + 1) for _ in range(m + 1)]
    HD = [[0] * (W + 1) for _ in range(m + 1)]
    ED = [[0] * (W + 1) for _ in range(m + 1)]
    FD = [[0] * (W + 1) for _ in range(m + 1)]
    for j in range(W + 1):
        H[0][j], HD[0][j] = 0, j
    best = (NEG, -1, -1, 0)
    for i in range(1, m + 1):
        for j in range(W + 1):
            c = read[i - 1]
            if j > 0:
                b = window[j - 1]
                s = -ambig if (c == 4 or b == 4) else (A if c == b else -B)
                d, d_o = H[i - 1][j - 1] + s, HD[i - 1][j - 1]
            else:
                d, d_o = NEG, 0
            h_left, e_left = (H[i][j - 1], Ev[i][j - 1]) if j > 0 else (NEG, NEG)
            o_left, eo_left = (HD[i][j - 1], ED[i][j - 1]) if j > 0 else (0, 0)
            if e_left - ge > h_left - go:
                e, e_o = e_left - ge, eo_left
            else:
                e, e_o = h_left - go, o_left
            if F[i - 1][j] - ge > H[i - 1][j] - go:
                f, f_o = F[i - 1][j] - ge, FD[i - 1][j]
            else:
                f, f_o = H[i - 1][j] - go, HD[i - 1][j]
            h = max(d, e, f)
            if local:
                h = max(h, -clip)
            if local and h == -clip:
                o, start = j - i, True
            else:
                start = False
                o = d_o if h == d else (e_o if h == e else f_o)
            H[i][j], Ev[i][j], F[i][j], HD[i][j], ED[i][j], FD[i][j] = h, e, f, o, e_o, f_o
            if (local and not start) or (not local and i == m):
                t = h - (0 if i == m else clip) if local else h
                bt, bi, bj, _ = best
                if t > -(1 << 29) and (t > bt or (t == bt and (j < bj or (j == bj and i > bi)))):
                    best = (t, i, j, o)
    return best if best[1] >= 0 else (NEG, -1, -1, 0)


class Genome:
    """One contig in padded global coordinates, packed as resident.py packs it (codes, ambiguity bitmap)."""

    def __init__(self, seq):
        self.offset = CONTIG_GAP
        self.end = CONTIG_GAP + len(seq)
        total = (self.end + CONTIG_GAP + 63) // 64 * 64
        self.codes = np.zeros(total, dtype=np.uint8)
        self.codes[self.offset:self.end] = seq
        amb = np.zeros(total, dtype=bool)
        amb[self.offset:self.end] = np.asarray(seq) >= 4
        words = np.where(self.codes < 4, self.codes, 0).astype(np.uint64).reshape(-1, 16)
        self.packed = (words << (2 * np.arange(16, dtype=np.uint64))).sum(axis=1).astype(np.uint32)
        self.ambiguous = (amb.reshape(-1, 32).astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1)
        self.ambiguous = self.ambiguous.astype(np.uint32)

    def window(self, lo, hi):
        w = self.codes[lo:hi].copy()
        return w  # ambiguous bases are stored as 4 in codes


def mutate(rng, seq, rate):
    out = []
    for c in seq:
        x = rng.random()
        if x < rate / 3:
            out.append(rng.choice([b for b in range(4) if b != c]))
        elif x < 2 * rate / 3:
            continue
        elif x < rate:
            out += [c, rng.randrange(4)]
        else:
            out.append(c)
    return out


def rescue_cases(rng, genome_seq, n_cases):
    """Reads from the genome (either strand) with errors, N runs, junk tails, or pure junk; windows around
    their origin, at the contig ends, or random."""
    g = len(genome_seq)
    reads, tasks = [], []
    for k in range(n_cases):
        n = rng.choice([0, 1, 30, 50, 80, 101])
        p = rng.randrange(0, g - n - 1)
        r = mutate(rng, genome_seq[p:p + n], rng.choice([0.0, 0.03, 0.1, 0.25]))[:150]
        kind = rng.random()
        if kind < 0.15 and len(r) > 20:
            a = rng.randrange(len(r) - 10)
            run = rng.randrange(5, 40)
            r[a:a + run] = [4] * len(r[a:a + run])
        elif kind < 0.3 and len(r) > 20:
            cut = rng.randrange(len(r) // 2, len(r))
            r[cut:] = [rng.randrange(4) for _ in r[cut:]]
        elif kind < 0.35:
            r = [rng.randrange(5) for _ in range(len(r))]
        strand = rng.randrange(2)  # the read's strand `strand` matches the genome
        reads.append([int(COMPLEMENT[c]) for c in reversed(r)] if strand else r)
        placement = rng.random()
        if placement < 0.6:
            lo = CONTIG_GAP + max(0, p - rng.randrange(0, 300))
            hi = min(CONTIG_GAP + g, CONTIG_GAP + p + len(r) + rng.randrange(0, 300))
        elif placement < 0.8:
            lo, hi = CONTIG_GAP, CONTIG_GAP + rng.randrange(1, 400)
        elif placement < 0.9:
            lo, hi = CONTIG_GAP + g - rng.randrange(1, 400), CONTIG_GAP + g
        else:
            lo = CONTIG_GAP + rng.randrange(g - 50)
            hi = min(CONTIG_GAP + g, lo + rng.randrange(1, 500))
        tasks.append((2 * k + strand, lo, hi))
    return reads, tasks


def run_kernel(device, genome, reads, tasks, opts, group=None):
    q = device.queue
    buf, host = read_buffer(q, reads)  # forward, then reverse complement, as validation reads them
    res = SimpleNamespace(packed=cla.to_device(q, genome.packed), ambiguous=cla.to_device(q, genome.ambiguous))
    rs, lo, hi = (np.array(c, dtype=np.int64) for c in zip(*tasks))
    return (rescue.align_windows(device, res, buf.text.get(), buf.rs_start_host, rs, lo, hi, opts, group=group),
            host.strands)


# work-items per task: the device's default, the plain program (1), and wavefronts of blocks of rows that
# divide the reads unevenly (3), leave work-items without rows (64 > most reads here) or are GPU-sized (32)
@pytest.mark.parametrize("group", [None, 1, 3, 32, 64])
@pytest.mark.parametrize("local", [True, False])
def test_rescue_kernel_equals_reference(device, local, group):
    rng = random.Random(5 + local)
    seq = [rng.randrange(4) for _ in range(3000)]
    for a in range(400, 3000, 700):  # runs of ambiguous reference bases
        seq[a:a + rng.randrange(1, 12)] = [4] * 12
    seq = seq[:3000]
    genome = Genome(seq)
    reads, tasks = rescue_cases(rng, seq, 80)
    opts = MapOptions(local=local, scoring=Scoring(match=rng.choice([1, 2]), mismatch=4, gap_open=6, gap_extend=1, clip=5))
    (score, end_i, end_j, start_d), strands = run_kernel(device, genome, reads, tasks, opts, group)
    found = 0
    for t, (rs, lo, hi) in enumerate(tasks):
        want = reference_rescue(strands[rs].tolist(), genome.window(lo, hi).tolist(), A=opts.scoring.match,
                                B=opts.scoring.mismatch, O=opts.scoring.gap_open, E=opts.scoring.gap_extend,
                                clip=opts.scoring.clip, local=local)
        got = (int(score[t]), int(end_i[t]), int(end_j[t]), int(start_d[t]))
        if want[1] < 0:
            assert got[0] == NEG and got[1] == -1, t
        else:
            assert got == want, (t, rs, lo, hi)
            found += want[0] >= rescue.RESCUE_MIN_SCORE
    assert found >= 10  # the cases include real rescues, not only failures


def test_rescued_hits_project_the_read():
    opts = MapOptions()
    w = rescue.RescueWindows(np.array([1, 2]), np.array([1, 0]), np.array([5000, 7000]), np.array([5600, 7600]))
    lengths = np.array([100, 100, 100])
    # task 0: ends at cell (100, 300) (diagonal 200), starts on diagonal 195: a 5 bp insertion inside
    hits = rescue.rescued_hits(w, lengths, np.array([80, rescue.RESCUE_MIN_SCORE - 1]), np.array([100, 60]), np.array([300, 100]),
                               np.array([195, 40]), opts, np.array([1024]), np.array([100000]))
    rs, start, end, dist = hits
    assert rs.tolist() == [3]  # read 1, reverse strand; task 1 scores below RESCUE_MIN_SCORE
    assert start.tolist() == [5195] and end.tolist() == [5000 + 200 + 100]
    assert dist.tolist() == [4]  # ceil((100 - 80) / 5)
