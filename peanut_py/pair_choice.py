"""Pair choice: the placement of every pair of a chunk (BWA-MEM's mem_pair + mem_sam_pe decision) and its pair
MAPQ, computed without the GIL by the private ``_pair_choice``."""
import numpy as np

from . import _pair_choice
from .mapq import MAPQ_MAX
from .pairs import PEN_UNPAIRED


def choose_pairs(pair, rank_a, rank_b, score_a, score_b, insert, own, insert_size, scoring):
    """Placement of every pair of a chunk of ``n_reads = len(own)`` reads (mates 2p, 2p + 1).

    Concordant combinations c, grouped by pair (``pair[c]`` non-decreasing): the ranks of mate 1's and mate
    2's hits, the two hits' alignment scores and the insert.  ``own``: each read's own best score (0 without
    an aligned hit).  The best combination by :func:`pair_score` (ties: better-ranked hit of mate 1, then of
    mate 2) wins when it beats ``own[2p] + own[2p + 1] - PEN_UNPAIRED``.  Returns (chosen rank per read,
    paired per pair (bool), pair MAPQ per pair, -1 when not paired); pairs not paired keep rank 0."""
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    return _pair_choice.choose_pairs(
        i64(pair), i64(rank_a), i64(rank_b), i64(score_a), i64(score_b), i64(insert), i64(own),
        *((insert_size.mean, insert_size.std) if insert_size is not None else (0.0, 1.0)),
        scoring.match, scoring.mismatch, scoring.gap_open, scoring.gap_extend, PEN_UNPAIRED, MAPQ_MAX)


def pair_score(score_a, score_b, insert, insert_size, match):
    """BWA's score of a concordant pair: the mates' scores plus the log-probability term of the insert."""
    return _pair_choice.pair_score(score_a, score_b, insert, insert_size.mean, insert_size.std, match)


__all__ = ["choose_pairs", "pair_score"]
