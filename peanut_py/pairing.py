"""The paired-end model: insert-size distribution, FR concordance, pair scores, pair MAPQ, flags and TLEN.

Everything here is host-side arithmetic on validated hits (global padded coordinates, see
docs/architecture.md); mate rescue on the device is in ``rescue.py`` and the SAM records in ``report.py``.
The model follows BWA-MEM (mem_pestat, mem_pair, mem_sam_pe), fed with peanut's edit-distance hits;
docs/paired.md explains it.

Conventions:
- A pair's mates are reads ``2p`` (mate 1) and ``2p + 1`` (mate 2) of a batch.
- Orientation is FR (Illumina paired-end): one mate on the forward strand, the other on the reverse strand,
  the reverse mate's 3' end (its rightmost reference base) right of the forward mate's leftmost base.
- **Insert** of a forward hit ``[s_f, e_f)`` and a reverse hit ``[s_r, e_r)`` on one contig:
  ``e_r - s_f``, the template length from the forward mate's first base to the reverse mate's last. It is
  computed on the validated (semi-global, unclipped) hits, so clipping does not move it. A pair is
  **concordant** when the strands differ, the contig is the same and ``low <= insert <= high``.
"""
import math
from dataclasses import dataclass

import numpy as np

from .errors import PeanutError
from .postprocess import expand, rank_hits

# BWA-MEM's estimator constants (bwamem_pair.c)
OUTLIER_BOUND = 2.0  # inserts outside [p25 - 2 IQR, p75 + 2 IQR] do not enter mean and std
MAPPING_BOUND = 3.0  # concordant bounds: [p25 - 3 IQR, p75 + 3 IQR], widened to mean +- 4 std
MAX_STDDEV = 4.0
MIN_PAIRS = 10  # fewer usable pairs: no estimate (pairing off, as BWA does)
MAX_SAMPLE_INSERT = 10_000  # BWA's max_ins: longer inserts never enter the sample
ESTIMATE_PAIRS = 10_000  # the insert size is estimated from the first this many pairs of the input
UNIQUE_RATIO = 0.8  # a mate is unique when its runner-up's score is at most 0.8 of its best (BWA's MIN_RATIO)
PEN_UNPAIRED = 17  # BWA's -U: the score penalty for reporting the mates unpaired
MAX_PAIR_HITS = 64  # hits per mate considered for pairing (best first by edit distance)
PAIR_MAPQ_BOOST = 40  # a pinned mate's MAPQ rises to at most its own + 40 (BWA)
MAPQ_MAX = 60


@dataclass(frozen=True)
class InsertSize:
    """The insert-size distribution: mean and std (normal model) and the concordant bounds [low, high]."""

    mean: float
    std: float
    low: int
    high: int
    n: int = 0  # pairs it was estimated from (0 for user-given values)
    source: str = "estimated"  # estimated | user

    def describe(self):
        if self.source == "user":
            origin = "given with -I"
        else:
            origin = f"estimated from {self.n:,} uniquely mapped FR pairs"
        return (f"insert size (FR): mean {self.mean:.1f}, std {self.std:.1f}, concordant {self.low}..{self.high} "
                f"({origin})")


def _bwa_int(x):
    """(int)(x + .499) as BWA writes it: C truncation toward zero."""
    return int(x + 0.499)


def estimate_insert_size(inserts):
    """BWA-MEM's estimate (mem_pestat) from a sample of FR inserts; ``None`` with fewer than MIN_PAIRS.

    Quartiles p25/p75 (BWA's index rounding), mean and std of the inserts within [p25 - 2 IQR, p75 + 2 IQR],
    bounds [p25 - 3 IQR, p75 + 3 IQR] widened to at least mean +- 4 std, low at least 1.
    """
    q = np.sort(np.asarray(inserts, dtype=np.int64))
    n = len(q)
    if n < MIN_PAIRS:
        return None
    p25 = int(q[int(0.25 * n + 0.499)])
    p75 = int(q[int(0.75 * n + 0.499)])
    iqr = p75 - p25
    low = max(_bwa_int(p25 - OUTLIER_BOUND * iqr), 1)
    high = _bwa_int(p75 + OUTLIER_BOUND * iqr)
    kept = q[(q >= low) & (q <= high)].astype(np.float64)
    mean = float(kept.mean())
    std = float(np.sqrt(np.mean((kept - mean) ** 2)))
    low = _bwa_int(p25 - MAPPING_BOUND * iqr)
    high = _bwa_int(p75 + MAPPING_BOUND * iqr)
    if low > mean - MAX_STDDEV * std:
        low = _bwa_int(mean - MAX_STDDEV * std)
    if high < mean + MAX_STDDEV * std:
        high = _bwa_int(mean + MAX_STDDEV * std)
    return InsertSize(mean, std, max(low, 1), high, n=n, source="estimated")


def parse_insert_size(text):
    """``-I MEAN[,STD[,MAX[,MIN]]]`` as BWA reads it: STD defaults to 10 % of MEAN, MAX/MIN to MEAN +- 4 STD."""
    parts = text.split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise PeanutError(f"-I {text!r}: expected MEAN[,STD[,MAX[,MIN]]] (numbers)") from None
    if not 1 <= len(values) <= 4 or any(not math.isfinite(v) for v in values):
        raise PeanutError(f"-I {text!r}: expected MEAN[,STD[,MAX[,MIN]]] (one to four numbers)")
    mean = values[0]
    std = values[1] if len(values) > 1 else 0.1 * mean
    if mean <= 0 or std < 0:
        raise PeanutError(f"-I {text!r}: MEAN must be positive and STD not negative")
    high = _bwa_int(mean + MAX_STDDEV * std)
    low = max(_bwa_int(mean - MAX_STDDEV * std), 1)
    if len(values) > 2:
        high = _bwa_int(values[2])
    if len(values) > 3:
        low = _bwa_int(values[3])
    if low < 1 or high < low:
        raise PeanutError(f"-I {text!r}: need 1 <= MIN <= MAX (got MIN {low}, MAX {high})")
    return InsertSize(mean, std, low, high, n=0, source="user")


# --- concordance, scores ------------------------------------------------------------------------------------


def fr_insert(strand_a, start_a, end_a, strand_b, start_b, end_b):
    """Insert of two hits in FR orientation (vectorised): ``end(reverse) - start(forward)``; 0 when the
    strands are equal (no FR pair). Contigs are not checked here."""
    strand_a = np.asarray(strand_a)
    fwd_start = np.where(strand_a == 0, start_a, start_b).astype(np.int64)
    rev_end = np.where(strand_a == 0, end_b, end_a).astype(np.int64)
    return np.where(strand_a != np.asarray(strand_b), rev_end - fwd_start, 0)


def concordant(insert_size, contig_a, strand_a, start_a, end_a, contig_b, strand_b, start_b, end_b):
    """Whether two hits form a concordant FR pair (vectorised); never with ``insert_size`` None."""
    if insert_size is None:
        return np.zeros(np.shape(contig_a), dtype=bool)
    ins = fr_insert(strand_a, start_a, end_a, strand_b, start_b, end_b)
    return (
        (np.asarray(contig_a) == np.asarray(contig_b))
        & (np.asarray(strand_a) != np.asarray(strand_b))
        & (ins >= insert_size.low)
        & (ins <= insert_size.high)
    )


def insert_log_penalty(insert, insert_size, match=1):
    """BWA's pair-score term ``.721 * log(2 * erfc(|z| / sqrt 2)) * match``: log4 of the two-sided normal
    tail probability of the insert (0 at the mean, negative away from it)."""
    std = max(insert_size.std, 1e-9)
    z = abs(insert - insert_size.mean) / std
    p = 2.0 * math.erfc(z * math.sqrt(0.5))
    return 0.721 * math.log(max(p, 1e-300)) * match


def hit_score(length, dist, opts):
    """Alignment score estimated from an edit distance: every edit costs a match and a mismatch."""
    return opts.match * length - (opts.match + opts.mismatch) * dist


def raw_mapq(diff, match=1):
    return int(6.02 * diff / match + 0.499)


def pair_score(score_a, score_b, insert, insert_size, match=1):
    """BWA's score of a concordant pair: the mates' alignment scores plus :func:`insert_log_penalty`."""
    return int(score_a + score_b + insert_log_penalty(insert, insert_size, match) + 0.499)


def concordant_combinations(read, strand, start, end, contig, insert_size):
    """All concordant FR combinations of hits of mates ``read`` and ``read ^ 1`` (vectorised).

    Arrays describe candidate hits (any order): batch-local read index, strand, validated global
    ``[start, end)``, contig. Returns index arrays ``(fwd, rev)`` into them and the inserts, ordered by
    forward hit then reverse end. Every FR combination has exactly one forward hit, so looking up, for each
    forward hit, the mate's reverse hits ending in ``[start + low, start + high]`` finds all of them.
    """
    read = np.asarray(read, dtype=np.int64)
    strand = np.asarray(strand, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    contig = np.asarray(contig, dtype=np.int64)
    empty = np.zeros(0, dtype=np.int64)
    if insert_size is None or len(read) == 0:
        return empty, empty, empty
    fwd = np.flatnonzero(strand == 0)
    rev = np.flatnonzero(strand == 1)
    keys = (read[rev] << 33) | end[rev]
    srt = np.argsort(keys, kind="stable")
    rev, keys = rev[srt], keys[srt]
    mate = read[fwd] ^ 1
    lo = np.searchsorted(keys, (mate << 33) | np.maximum(start[fwd] + insert_size.low, 0), side="left")
    hi = np.searchsorted(keys, (mate << 33) | np.maximum(start[fwd] + insert_size.high, 0), side="right")
    owner, rank = expand(hi - lo)  # (np.repeat holds the GIL; expand does not)
    f = fwd[owner]
    r = rev[lo[owner] + rank]
    same = contig[f] == contig[r]
    f, r = f[same], r[same]
    return f, r, end[r] - start[f]


@dataclass
class PairChoice:
    """Placement of one pair: ``a``/``b`` index into each mate's ranked hit list (-1: none); ``paired``: the
    best concordant pair beat the best unpaired placement; ``q_pe``: its MAPQ (-1 when not paired)."""

    a: int
    b: int
    paired: bool
    q_pe: int = -1
    score: int = 0


def choose_pair(combos, score_un, opts, has_a=True, has_b=True):
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
    tmp = max(opts.match + opts.mismatch, opts.gap_open + opts.gap_extend)
    n_sub = sum(1 for t in combos[1:] if sub - t[0] <= tmp)
    q_pe = raw_mapq(best - max(sub, score_un), opts.match)
    if n_sub > 0:
        q_pe -= int(4.343 * math.log(n_sub + 1) + 0.499)
    q_pe = min(max(q_pe, 0), MAPQ_MAX)
    return PairChoice(combos[0][1], combos[0][2], True, q_pe, best)


def pair_mapq(q_se, q_pe):
    """A mate's MAPQ in a chosen concordant pair: its own, raised towards the pair's by at most +40 (BWA)."""
    q_se = np.asarray(q_se, dtype=np.int64)
    return np.maximum(q_se, np.minimum(q_pe, q_se + PAIR_MAPQ_BOOST))


# --- SAM fields -----------------------------------------------------------------------------------------------


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


# --- the sample for the estimate ------------------------------------------------------------------------------


def unique_best(rs, start, dist, lengths, opts, first_read=0):
    """Per read of a range: the index of its best hit when it is confidently unique, else -1.

    Unique: a best hit with a positive score (:func:`hit_score`) and no other kept hit scoring more than
    UNIQUE_RATIO of it (BWA's criterion for its insert-size sample). ``rs`` sorted, reads ``first_read ..``.
    """
    n_reads = len(lengths)
    rs = np.ascontiguousarray(rs, dtype=np.uint32)
    start = np.ascontiguousarray(start, dtype=np.uint32)
    dist = np.ascontiguousarray(dist, dtype=np.int32)
    order, ptr, _ = rank_hits(rs, start, dist, n_reads, first_read=first_read)
    kept = np.diff(ptr)
    best = np.full(n_reads, -1, dtype=np.int64)
    has = kept > 0
    best_hit = order[ptr[:-1][has]]
    lengths = np.asarray(lengths, dtype=np.int64)
    s1 = hit_score(lengths[has], dist[best_hit].astype(np.int64), opts)
    ok = s1 > 0
    two = kept[has] > 1
    second = order[np.minimum(ptr[:-1][has] + 1, len(order) - 1)] if len(order) else best_hit
    s2 = np.where(two, hit_score(lengths[has], dist[second].astype(np.int64), opts), -1)
    ok &= s2 <= UNIQUE_RATIO * s1
    best[np.flatnonzero(has)[ok]] = best_hit[ok]
    return best


def insert_sample(rs, start, end, dist, lengths, contig_offsets, opts):
    """FR inserts of the pairs whose mates are both confidently unique (see :func:`unique_best`), on one
    contig, with 0 < insert <= MAX_SAMPLE_INSERT. Reads alternate mate 1, mate 2; ``rs`` sorted."""
    lengths = np.asarray(lengths, dtype=np.int64)
    best = unique_best(rs, start, dist, lengths, opts)
    a, b = best[0::2], best[1::2]
    ok = (a >= 0) & (b >= 0)
    a, b = a[ok], b[ok]
    offsets = np.asarray(contig_offsets, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    strand = np.asarray(rs, dtype=np.int64) & 1
    ca = np.searchsorted(offsets, start[a], side="right")
    cb = np.searchsorted(offsets, start[b], side="right")
    ins = fr_insert(strand[a], start[a], end[a], strand[b], start[b], end[b])
    keep = (ca == cb) & (strand[a] != strand[b]) & (ins > 0) & (ins <= MAX_SAMPLE_INSERT)
    return ins[keep]


__all__ = [
    "InsertSize", "PairChoice", "estimate_insert_size", "parse_insert_size", "fr_insert", "concordant",
    "insert_log_penalty", "hit_score", "raw_mapq", "pair_score", "concordant_combinations", "choose_pair",
    "pair_mapq", "template_length", "pair_flags",
    "unique_best", "insert_sample", "ESTIMATE_PAIRS",
]
