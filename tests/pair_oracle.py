"""Plain Python pair placement (BWA-MEM's mem_pair + mem_sam_pe decision, one pair at a time, and a chunk's
placement as Postprocessor did it before _pair_choice.pyx), pair scores, FLAG and TLEN: the reference that
peanut_py's Cython pair choice and SAM records are tested against."""
import math
from dataclasses import dataclass

import numpy as np

from peanut_py.mapq import MAPQ_MAX
from peanut_py.pairs import PEN_UNPAIRED


def insert_log_penalty(insert, insert_size, match=1):
    """BWA's pair-score term ``.721 * log(2 * erfc(|z| / sqrt 2)) * match``: log4 of the two-sided normal
    tail probability of the insert (0 at the mean, negative away from it)."""
    std = max(insert_size.std, 1e-9)
    z = abs(insert - insert_size.mean) / std
    p = 2.0 * math.erfc(z * math.sqrt(0.5))
    return 0.721 * math.log(max(p, 1e-300)) * match


def raw_mapq(diff, match=1):
    return int(6.02 * diff / match + 0.499)


def pair_score(score_a, score_b, insert, insert_size, match=1):
    """BWA's score of a concordant pair: the mates' alignment scores plus :func:`insert_log_penalty`."""
    return int(score_a + score_b + insert_log_penalty(insert, insert_size, match) + 0.499)


@dataclass
class PairChoice:
    """Placement of one pair: ``a``/``b`` index into each mate's ranked hit list (-1: none); ``paired``: the
    best concordant pair beat the best unpaired placement; ``q_pe``: its MAPQ (-1 when not paired)."""

    a: int
    b: int
    paired: bool
    q_pe: int = -1
    score: int = 0


def choose_pair(combos, score_un, scoring, has_a=True, has_b=True):
    """Best placement of a pair (BWA's mem_pair + mem_sam_pe decision).

    ``combos``: the pair's concordant combinations as (pair score, rank of mate 1's hit, rank of mate 2's
    hit) (see :func:`pair_score`); ``score_un``: the mates' own best scores summed, less PEN_UNPAIRED. The
    best combination (ties: best-ranked hit of mate 1, then of mate 2) wins when it beats ``score_un``;
    otherwise each mate keeps its best hit (rank 0; -1 for a mate without hits). Pair MAPQ:
    ``6.02 * (best - max(second best, score_un))``, less 4.343 ln(n_sub + 1) for the runner-ups within one
    mismatch or gap of the second best, as BWA.
    """
    unpaired = PairChoice(0 if has_a else -1, 0 if has_b else -1, False, score=score_un)
    if not combos:
        return unpaired
    combos = sorted(combos, key=lambda t: (-t[0], t[1], t[2]))
    best = combos[0][0]
    if best <= score_un:
        return unpaired
    sub = combos[1][0] if len(combos) > 1 else 0
    tmp = max(scoring.match + scoring.mismatch, scoring.gap_open + scoring.gap_extend)
    n_sub = sum(1 for t in combos[1:] if sub - t[0] <= tmp)
    q_pe = raw_mapq(best - max(sub, score_un), scoring.match)
    if n_sub > 0:
        q_pe -= int(4.343 * math.log(n_sub + 1) + 0.499)
    q_pe = min(max(q_pe, 0), MAPQ_MAX)
    return PairChoice(combos[0][1], combos[0][2], True, q_pe, best)


def reference_choose_pairs(pair, rank_a, rank_b, score_a, score_b, insert, own, insert_size, opts):
    """The placement loop of Postprocessor.process_pairs before _pair_choice.pyx: pair_choice.choose_pairs's
    arguments and results, one pair at a time with :func:`pair_score` and :func:`choose_pair`."""
    n_reads = len(own)
    combos = {}
    for p, ra, rb, sa, sb, ins in zip(*(np.asarray(a).tolist() for a in (pair, rank_a, rank_b, score_a, score_b,
                                                                           insert))):
        combos.setdefault(p, []).append((pair_score(sa, sb, ins, insert_size, opts.match), ra, rb))
    chosen = np.zeros(n_reads, dtype=np.int64)
    paired = np.zeros(n_reads // 2, dtype=bool)
    q_pe = np.full(n_reads // 2, -1, dtype=np.int64)
    own_l = np.asarray(own).tolist()
    for p, cs in combos.items():
        c = choose_pair(cs, own_l[2 * p] + own_l[2 * p + 1] - PEN_UNPAIRED, opts)
        chosen[2 * p], chosen[2 * p + 1], paired[p], q_pe[p] = c.a, c.b, c.paired, c.q_pe
    return chosen, paired, q_pe


def template_length(pos_a, end_a, pos_b, end_b):
    """SAM TLEN of two mates mapped to one contig (mate a is mate 1): ``(tlen_a, tlen_b)``.

    ``pos``/``end``: 0-based first and one-past-last mapped reference base (clipped bases excluded). The
    magnitude is rightmost end - leftmost start; the leftmost mate (smaller POS; mate 1 on a tie) is
    positive and the other negative (SAM v1.6, section 1.4 item 9).
    """
    length = max(end_a, end_b) - min(pos_a, pos_b)
    return (length, -length) if pos_a <= pos_b else (-length, length)


def pair_flags(first, mapped, mate_mapped, reverse, mate_reverse, proper):
    """FLAG of one mate's primary record (SAM v1.6): 0x1, 0x2 only if ``proper`` (concordant, both mapped),
    0x4 / 0x8 for an unmapped read / mate, 0x10 / 0x20 for a mapped read / mate on the reverse strand,
    0x40 for mate 1, 0x80 for mate 2."""
    flag = 0x1 | (0x40 if first else 0x80)
    if proper and mapped and mate_mapped:
        flag |= 0x2
    if not mapped:
        flag |= 0x4
    if not mate_mapped:
        flag |= 0x8
    if mapped and reverse:
        flag |= 0x10
    if mate_mapped and mate_reverse:
        flag |= 0x20
    return flag
