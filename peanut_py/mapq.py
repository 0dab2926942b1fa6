"""The MAPQ model: BWA-MEM's shape fed with peanut's hits, for single reads and for mates of a pair."""
import numpy as np

MAPQ_MAX = 60  # the largest MAPQ reported (BWA's)
PAIR_MAPQ_BOOST = 40  # a pinned mate's MAPQ rises to at most its own + 40 (BWA)


# Aligned lengths up to this keep the full score gap; longer alignments scale it by log(len) / log(this)
# (BWA-MEM's mapQ_coef_len, its default): a rival hit of a long read is likelier to differ by chance.
MAPQ_COEF_LEN = 50
UNSEEN_EXTRA_EDITS = 2


def close_rival_gap(scoring):
    """Rivals scoring within this of the best count as competing hits (``n_sub``): one mismatch or one
    short gap (BWA-MEM's sub_n window)."""
    return max(scoring.match + scoring.mismatch, scoring.gap_open + scoring.gap_extend)


def unseen_rival_score(read_len, q, step, scoring):
    """Per read length: the best score a rival hit may have that filtration is not guaranteed to find, one
    edit beyond the q-gram lemma's guarantee (filtration.guaranteed_errors), each edit a mismatch."""
    from .filtration import guaranteed_errors

    n = np.asarray(read_len, dtype=np.int64)
    e_g = np.array([guaranteed_errors(int(x), q, step) for x in range(int(n.max(initial=0)) + 1)], dtype=np.int64)
    return n * scoring.match - (e_g[n] + UNSEEN_EXTRA_EDITS) * (scoring.match + scoring.mismatch)


def mapq_model(score, sub, n_sub, aligned_len, q, scoring, unseen=None):
    """MAPQ of primary hits (vectorised): BWA-MEM's default model.

    ``sub`` is the best score of any other hit of the read (or -1 when there is none); a missing rival is
    treated as a chance match of one q-gram (q * match), the least our filtration can find. Equal best hits
    give 0; otherwise ``6.02 * (score - sub) / match * f**2``, with ``f = identity**2`` times
    ``log(MAPQ_COEF_LEN) / log(aligned length)`` beyond MAPQ_COEF_LEN bases, less ``4.343 * ln(n_sub + 1)``
    for ``n_sub`` close rivals. See docs/output.md, "MAPQ", for the calibration.
    """
    match, mismatch = scoring.match, scoring.mismatch
    score = np.asarray(score, dtype=np.float64)
    sub = np.maximum(np.asarray(sub, dtype=np.float64), q * match)
    if unseen is not None:
        sub = np.maximum(sub, np.asarray(unseen, dtype=np.float64))
    length = np.maximum(np.asarray(aligned_len, dtype=np.float64), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        identity = 1.0 - (length * match - score) / (match + mismatch) / length
        f = np.where(length < MAPQ_COEF_LEN, 1.0, np.log(MAPQ_COEF_LEN) / np.log(np.maximum(length, 2.0)))
        f = f * identity * identity
        mapq = np.floor(6.02 * (score - sub) / match * f * f + 0.499)
    mapq = mapq - np.floor(4.343 * np.log(np.asarray(n_sub, dtype=np.float64) + 1) + 0.499)
    mapq = np.where((sub >= score) | (score <= 0), 0, mapq)
    return np.clip(mapq, 0, MAPQ_MAX).astype(np.int32)


def pair_mapq(q_se, q_pe):
    """A mate's MAPQ in a chosen concordant pair: its own, raised towards the pair's by at most
    PAIR_MAPQ_BOOST (BWA)."""
    q_se = np.asarray(q_se, dtype=np.int64)
    return np.maximum(q_se, np.minimum(q_pe, q_se + PAIR_MAPQ_BOOST))
