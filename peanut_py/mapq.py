"""The MAPQ model: BWA-MEM's shape fed with peanut's hits, for single reads and for mates of a pair."""
import numpy as np

from ._masked import masked_coverage, value_slots

MAPQ_MAX = 60  # the largest MAPQ reported (BWA's)
PAIR_MAPQ_BOOST = 40  # a pinned mate's MAPQ rises to at most its own + 40 (BWA)


# Aligned lengths up to this keep the full score gap; longer alignments scale it by log(len) / log(this)
# (BWA-MEM's mapQ_coef_len, its default): a rival hit of a long read is likelier to differ by chance.
MAPQ_COEF_LEN = 50
# A rival that filtration may miss has this many edits beyond the q-gram lemma's guarantee. The guarantee is a
# worst case: the filtration finds most hits several edits beyond it (selection.py validates rivals up to
# DELTA edits beyond the best), so a rival closer than this would mostly have been seen. On the tuning genomes
# (docs/benchmarks.md, "MAPQ accuracy") two edits held reads with a high error rate below MAPQ 60 (6 errors
# in 100 bases gave about 20), five kept them at 60 with no more wrong reads at MAPQ >= 20, and six let wrong
# reads through; reads over masked q-grams are covered by their shorter guarantee (unseen_rival_score).
UNSEEN_EXTRA_EDITS = 5
# Close rivals (hits one mismatch from the best, ``n_sub``) mark a repeat family, of which the filtration sees
# only the members within its reach: the read's one-mismatch lead over them is worth less than the score gap
# says, for an error in the read at the base where a rival differs makes that rival the best hit. With
# CROWD_MIN or more close rivals MAPQ is capped at CROWD_CAP, below a cut-off of 10, where bwa puts such reads
# (0 to 8); with CROWD_ZERO or more it is 0. On the tuning genomes 0.6 % of the reads with 2 to 19 close
# rivals were wrong (3 % with three times the error rate), and 7 % of those with 20 or more.
CROWD_MIN = 2
CROWD_CAP = 9
CROWD_ZERO = 25
# A best hit with a close rival and an identity at or below this (two mismatches or more per 100 bases) has
# errors enough that one more at the differing base is likely: MAPQ at most CROWD_CAP.
CLOSE_RIVAL_IDENTITY = 0.98
# A read with a close rival and at least this share of its bases under masked q-grams: the mask hides the rest
# of the family from the filtration, so the seen rivals are no bound on the unseen ones; MAPQ 0.
MASKED_FAMILY_SHARE = 0.8


def close_rival_gap(scoring):
    """Rivals scoring within this of the best count as competing hits (``n_sub``): one mismatch or one
    short gap (BWA-MEM's sub_n window)."""
    return max(scoring.match + scoring.mismatch, scoring.gap_open + scoring.gap_extend)


def unseen_rival_score(read_len, q, step, scoring, covered=None, extra_edits=UNSEEN_EXTRA_EDITS):
    """Per read length: the best score a rival hit may have that filtration is not guaranteed to find,
    ``extra_edits`` edits beyond the q-gram lemma's guarantee (filtration.guaranteed_errors), each edit a
    mismatch. ``covered``: per read, its bases covered by masked q-grams (MaskedQgrams.coverage). A masked
    q-gram gives no vote, so c covered bases in one run leave the read the q-grams of a read c - q + 1 bases
    shorter, and the guarantee is that of the shorter read (a read of 100 bases at q = 16, step 1: 5 edits;
    3 with 50 bases covered; none with 84 or more)."""
    from .filtration import guaranteed_errors

    n = np.asarray(read_len, dtype=np.int64)
    if covered is None:
        n_eff = n
    else:
        c = np.rint(np.asarray(covered, dtype=np.float64)).astype(np.int64)
        n_eff = np.clip(np.where(c > 0, n - c + q - 1, n), 0, n)
    e_g = np.array([guaranteed_errors(int(x), q, step) for x in range(int(n.max(initial=0)) + 1)], dtype=np.int64)
    return n * scoring.match - (e_g[n_eff] + extra_edits) * (scoring.match + scoring.mismatch)


def mapq_model(score, sub, n_sub, aligned_len, q, scoring, unseen=None, covered=None, read_len=None):
    """MAPQ of primary hits (vectorised): BWA-MEM's default model.

    ``sub`` is the best score of any other hit of the read (or -1 when there is none); a missing rival is
    treated as a chance match of one q-gram (q * match), the least our filtration can find. Equal best hits
    give 0; otherwise ``6.02 * (score - sub) / match * f**2``, with ``f = identity**2`` times
    ``log(MAPQ_COEF_LEN) / log(aligned length)`` beyond MAPQ_COEF_LEN bases, less ``4.343 * ln(n_sub + 1)``
    for ``n_sub`` close rivals. A best hit with a close rival (one scoring within a mismatch of it) is then
    capped: at CROWD_CAP with CROWD_MIN or more of them or at an identity of CLOSE_RIVAL_IDENTITY or less, and
    to 0 with CROWD_ZERO or more, or with MASKED_FAMILY_SHARE of the read (``read_len``) under masked q-grams
    (``covered``, bases per read). See docs/output.md, "MAPQ", for the calibration.
    """
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
        mapq = np.floor(6.02 * (score - sub) / match * f * f + 0.499)
    mapq = mapq - np.floor(4.343 * np.log(np.asarray(n_sub, dtype=np.float64) + 1) + 0.499)
    mapq = np.where((sub >= score) | (score <= 0), 0, mapq)
    mapq = np.clip(mapq, 0, MAPQ_MAX)
    n_sub = np.asarray(n_sub, dtype=np.int64)
    close = close_rival(score, raw_sub, n_sub, scoring)
    capped = close & ((n_sub >= CROWD_MIN) | (identity <= CLOSE_RIVAL_IDENTITY))
    mapq = np.where(capped, np.minimum(mapq, CROWD_CAP), mapq)
    zero = close & (n_sub >= CROWD_ZERO)
    if covered is not None and read_len is not None:
        zero |= close & (np.asarray(covered, dtype=np.float64) >= MASKED_FAMILY_SHARE * np.asarray(read_len))
    return np.where(zero, 0, mapq).astype(np.int32)


def close_rival(score, sub, n_sub, scoring):
    """Per read: whether a rival hit scores within one mismatch of the best (``sub``: the best other hit's
    score, -1 without one) and is counted in ``n_sub``."""
    sub = np.asarray(sub)
    return (np.asarray(n_sub) >= 1) & (sub >= 0) & (sub >= np.asarray(score) - (scoring.match + scoring.mismatch))


def pair_mapq(q_se, q_pe, unseen_ties=None, close=None):
    """A mate's MAPQ in a chosen concordant pair: its own, raised towards the pair's by at most
    PAIR_MAPQ_BOOST (BWA). Not raised where ``unseen_ties``: a rival the filtration may have missed (masked
    q-grams, unseen_rival_score) could score as well as the mate's hit; it would be missed by the search for
    the pair as well, e.g. the same satellite one repeat unit away, so the pair cannot vouch for the mate.
    0 where ``close`` (the mate has a close rival, close_rival) and the pair's MAPQ is 0: another pair scores
    as well, and the likeliest one moves this mate to its close rival, whose lost mismatch the other mate's
    better hit makes up."""
    q_se = np.asarray(q_se, dtype=np.int64)
    q_pe = np.asarray(q_pe, dtype=np.int64)
    raised = np.maximum(q_se, np.minimum(q_pe, q_se + PAIR_MAPQ_BOOST))
    if unseen_ties is not None:
        raised = np.where(unseen_ties, q_se, raised)
    return raised if close is None else np.where(np.asarray(close) & (q_pe == 0), 0, raised)


class MaskedQgrams:
    """The q-gram values an index masked as over-frequent (ascending), and which bases of reads they cover.

    It plays the part of BWA-MEM's ``frac_rep`` (the share of a read under seeds too frequent to follow): a
    masked q-gram gives no vote, so rivals there may be missed (unseen_rival_score)."""

    HASH_BITS = 20  # a table of 2^20 bits (128 KiB) screens the windows; only the flagged ones are looked up exactly

    def __init__(self, masked, q):
        self.q = int(q)
        # the hash multiplies in the values' own width (32 bits up to q = 16), as _masked.pyx does
        kind = np.uint32 if 2 * self.q <= 32 else np.uint64
        values = np.asarray(masked if masked is not None else [], dtype=kind)
        # a window is covered when it or its reverse complement is masked: with the reverse complements in
        # the set too, one lookup of the window decides
        values = np.unique(np.concatenate([values, reverse_complement_values(values, self.q)]))
        bits = 8 * np.dtype(kind).itemsize
        hashes = ((values * kind(2654435761)) >> kind(bits - self.HASH_BITS)).astype(np.uint64)
        self._table = np.zeros(1 << (self.HASH_BITS - 6), dtype=np.uint64)
        np.bitwise_or.at(self._table, (hashes >> np.uint64(6)).astype(np.intp),
                         np.uint64(1) << (hashes & np.uint64(63)))
        self._values = values.astype(np.uint64)
        # the exact lookup behind the table: open addressing, at most a quarter of the slots taken
        slot_bits = max(4, (4 * len(values) - 1).bit_length())
        self._slots = value_slots(self._values, slot_bits)

    def coverage(self, codes, offsets):
        """Per read (``codes[offsets[i]:offsets[i + 1]]``, base codes A0 C1 G2 T3, other letters 4): its bases
        covered by a masked q-gram of either strand (values as in index/FORMAT.md, first base most
        significant)."""
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if len(offsets) <= 1:
            return np.zeros(0, dtype=np.int64)
        return masked_coverage(np.ascontiguousarray(codes, dtype=np.uint8), offsets, self._table, self._values,
                               self._slots, self.q, self.HASH_BITS, reverse=False)


def reverse_complement_values(values, q):
    """The q-gram values (2 bits per base, first base most significant, A0 C1 G2 T3) of the reverse complements
    of ``values``, in the same unsigned dtype."""
    values = np.asarray(values)
    kind = values.dtype.type
    out = np.zeros_like(values)
    v = values.copy()
    for _ in range(int(q)):
        out = (out << kind(2)) | (kind(3) - (v & kind(3)))
        v = v >> kind(2)
    return out
