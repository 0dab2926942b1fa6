"""The MAPQ model: BWA-MEM's shape fed with peanut's hits, for single reads and for mates of a pair."""
import numpy as np

MAPQ_MAX = 60  # the largest MAPQ reported (BWA's)
PAIR_MAPQ_BOOST = 40  # a pinned mate's MAPQ rises to at most its own + 40 (BWA)


def mapq_model(score, sub, n_sub, aligned_len, q, scoring):
    """MAPQ of primary hits (vectorised).

    ``sub`` is the best score of any other hit of the read (or -1 when there is none); a missing rival is
    treated as a chance match of one q-gram (q * match), the least our filtration can find. Equal best hits
    give 0; the gap between the best and the runner-up, scaled by the log of the aligned length, gives the
    rest; low identity and many runner-ups lower it, as in BWA. See docs/mapping.md for the calibration.
    """
    match, mismatch = scoring.match, scoring.mismatch
    score = np.asarray(score, dtype=np.float64)
    sub = np.maximum(np.asarray(sub, dtype=np.float64), q * match)
    length = np.maximum(np.asarray(aligned_len, dtype=np.float64), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mapq = 30.0 * (1.0 - sub / np.maximum(score, 1.0)) * np.log(length)
        identity = 1.0 - (length * match - score) / (match + mismatch) / length
    mapq = np.where(identity < 0.95, mapq * identity * identity, mapq)
    mapq = np.floor(mapq + 0.499) - np.floor(4.343 * np.log(np.asarray(n_sub, dtype=np.float64) + 1) + 0.499)
    mapq = np.where(sub >= score, 0, mapq)
    return np.clip(mapq, 0, MAPQ_MAX).astype(np.int32)


def pair_mapq(q_se, q_pe):
    """A mate's MAPQ in a chosen concordant pair: its own, raised towards the pair's by at most
    PAIR_MAPQ_BOOST (BWA)."""
    q_se = np.asarray(q_se, dtype=np.int64)
    return np.maximum(q_se, np.minimum(q_pe, q_se + PAIR_MAPQ_BOOST))
