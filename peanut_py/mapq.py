"""The MAPQ model: BWA-MEM's shape fed with peanut's hits, for single reads and for mates of a pair."""
import numpy as np

from . import _mapq
from ._masked import masked_coverage, value_slots
from .layout import MAX_READ_LENGTH

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
# The capped reads' MAPQ is scaled into 1 .. CROWD_CAP (times CROWD_CAP / CROWD_SCALE, at least 1 where it was)
# instead of clipped at CROWD_CAP, so that they keep their order (more close rivals, a lower identity: lower)
# and a cut-off among them trades correct for wrong reads as bwa's MAPQ 1 to 9 does. CROWD_SCALE is about the
# MAPQ of a one-mismatch lead of a 100-base read at full identity (6.02 * 5 with bwa's scores, times the
# length factor log(50) / log(100) squared), so a lone close rival of such a read lands near CROWD_CAP.
CROWD_SCALE = 22.0
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


def _int64(values):
    return np.ascontiguousarray(values, dtype=np.int64)


def _flags(values):
    """Booleans as the uint8 the private module reads (a view where they are booleans already)."""
    return np.ascontiguousarray(values, dtype=np.bool_).view(np.uint8)


_NONE_INT64 = np.zeros(0, dtype=np.int64)
_NONE_FLAGS = np.zeros(0, dtype=np.uint8)
# the tables below start with every read length the mapper takes and grow (to a power of two) on demand
_TABLE_MIN = MAX_READ_LENGTH + 1
_guarantees = {}  # (q, step) -> guarantee per read length
_logs = {}  # "length" / "count" -> logarithms per integer


def _table_size(need):
    return max(_TABLE_MIN, 1 << max(int(need) - 1, 0).bit_length())


def guarantee_table(q, step, need=0):
    """filtration.guaranteed_errors per read length 0, 1, ... (at least ``need`` of them), int64, read-only;
    made once per (q, step) and size, not per chunk."""
    table = _guarantees.get((q, step))
    if table is None or len(table) < need:
        from .filtration import guaranteed_errors

        table = np.array([guaranteed_errors(n, q, step) for n in range(_table_size(need))], dtype=np.int64)
        table.flags.writeable = False
        _guarantees[(q, step)] = table
    return table


def _log_table(kind, need=0):
    """NumPy's logarithms the model takes, per integer x = 0, 1, ...: of max(x, 2) for an aligned length
    ("length"), of x + 1 for a count of close rivals ("count"); read-only. NumPy's own np.log on the same
    float64 values as the vectorised model, so that the private module's MAPQ equals it to the bit."""
    table = _logs.get(kind)
    if table is None or len(table) < need:
        x = np.arange(_table_size(need), dtype=np.float64)
        table = np.log(np.maximum(x, 2.0)) if kind == "length" else np.log(x + 1)
        table.flags.writeable = False
        _logs[kind] = table
    return table


_LOG_COEF_LEN = float(np.log(MAPQ_COEF_LEN))


def unseen_rival_score(read_len, q, step, scoring, covered=None, extra_edits=UNSEEN_EXTRA_EDITS):
    """Per read length: the best score a rival hit may have that filtration is not guaranteed to find,
    ``extra_edits`` edits beyond the q-gram lemma's guarantee (filtration.guaranteed_errors), each edit a
    mismatch. ``covered``: per read, its bases covered by masked q-grams (MaskedQgrams.coverage). A masked
    q-gram gives no vote, so c covered bases in one run leave the read the q-grams of a read c - q + 1 bases
    shorter, and the guarantee is that of the shorter read (a read of 100 bases at q = 16, step 1: 5 edits;
    3 with 50 bases covered; none with 84 or more). int64 per read."""
    n = _int64(read_len)
    if covered is None:
        c = _NONE_INT64
    else:
        c = np.asarray(covered)
        c = _int64(c if c.dtype.kind in "iu" else np.rint(c.astype(np.float64)))
    table = guarantee_table(q, step)
    while True:
        out, need = _mapq.unseen_rival_scores(n, c, table, q, scoring.match, scoring.mismatch, extra_edits)
        if out is not None:
            return out
        table = guarantee_table(q, step, need)


def mapq_model(score, sub, n_sub, aligned_len, q, scoring, unseen=None, covered=None, read_len=None, ties=None):
    """MAPQ of primary hits (one per read, int32): BWA-MEM's default model.

    ``sub`` is the best score of any other hit of the read (or -1 when there is none); a missing rival is
    treated as a chance match of one q-gram (q * match), the least our filtration can find. Equal best hits
    give 0; otherwise ``6.02 * (score - sub) / match * f**2``, with ``f = identity**2`` times
    ``log(MAPQ_COEF_LEN) / log(aligned length)`` beyond MAPQ_COEF_LEN bases, less ``4.343 * ln(n_sub + 1)``
    for ``n_sub`` close rivals. A best hit with a close rival (one scoring within a mismatch of it) is then
    capped: scaled into 1 .. CROWD_CAP (CROWD_SCALE) with CROWD_MIN or more of them or at an identity of
    CLOSE_RIVAL_IDENTITY or less, and to 0 with CROWD_ZERO or more, or with MASKED_FAMILY_SHARE of the read
    (``read_len``) under masked q-grams (``covered``, bases per read). 0 where ``ties`` (the read has several
    best hits). See docs/output.md, "MAPQ", for the calibration. Scores, counts and lengths are integers; the
    private _mapq computes it without the GIL.
    """
    score, sub, n_sub, aligned_len = _int64(score), _int64(sub), _int64(n_sub), _int64(aligned_len)
    unseen = _NONE_INT64 if unseen is None else _int64(unseen)
    if covered is None or read_len is None:
        covered = read_len = _NONE_INT64
    else:
        covered, read_len = _int64(covered), _int64(read_len)
    ties = _NONE_FLAGS if ties is None else _flags(ties)
    log_length, log_count = _log_table("length"), _log_table("count")
    while True:
        mapq, need_length, need_count = _mapq.mapq_scores(
            score, sub, n_sub, aligned_len, unseen, covered, read_len, ties, log_length, log_count, _LOG_COEF_LEN,
            MAPQ_COEF_LEN, q, scoring.match, scoring.mismatch, MAPQ_MAX, CROWD_MIN, CROWD_CAP, CROWD_ZERO,
            CLOSE_RIVAL_IDENTITY, MASKED_FAMILY_SHARE, CROWD_SCALE)
        if mapq is not None:
            return mapq
        log_length, log_count = _log_table("length", need_length), _log_table("count", need_count)


def close_rival(score, sub, n_sub, scoring):
    """Per read: whether a rival hit scores within one mismatch of the best (``sub``: the best other hit's
    score, -1 without one) and is counted in ``n_sub`` (bool)."""
    return _mapq.close_rivals(_int64(score), _int64(sub), _int64(n_sub), scoring.match + scoring.mismatch).view(
        np.bool_)


def pair_mapq(q_se, q_pe, unseen_ties=None, close=None):
    """A mate's MAPQ in a chosen concordant pair: its own, raised towards the pair's by at most
    PAIR_MAPQ_BOOST (BWA). Not raised where ``unseen_ties``: a rival the filtration may have missed (masked
    q-grams, unseen_rival_score) could score as well as the mate's hit; it would be missed by the search for
    the pair as well, e.g. the same satellite one repeat unit away, so the pair cannot vouch for the mate.
    0 where ``close`` (the mate has a close rival, close_rival) and the pair's MAPQ is 0: another pair scores
    as well, and the likeliest one moves this mate to its close rival, whose lost mismatch the other mate's
    better hit makes up. int64 per mate; ``q_pe`` may be one value for all."""
    q_se, q_pe = _int64(q_se), _int64(q_pe)
    if q_pe.shape != q_se.shape:
        q_pe = _int64(np.broadcast_to(q_pe, q_se.shape))
    return _mapq.pair_mapqs(q_se, q_pe, _NONE_FLAGS if unseen_ties is None else _flags(unseen_ties),
                            _NONE_FLAGS if close is None else _flags(close), PAIR_MAPQ_BOOST)


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
