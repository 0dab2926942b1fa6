"""The insert-size distribution of a run's pairs: BWA-MEM's estimate (mem_pestat) from the confidently unique
FR pairs at the start of the input, or the user's ``-I``; docs/paired.md explains it."""
import math
from dataclasses import dataclass

import numpy as np

from .errors import PeanutError
from .pairs import MAX_SAMPLE_INSERT, UNIQUE_RATIO, fr_insert, hit_score
from .ranking import rank_hits

# BWA-MEM's estimator constants (bwamem_pair.c)
OUTLIER_BOUND = 2.0  # inserts outside [p25 - 2 IQR, p75 + 2 IQR] do not enter mean and std
MAPPING_BOUND = 3.0  # concordant bounds: [p25 - 3 IQR, p75 + 3 IQR], widened to mean +- 4 std
MAX_STDDEV = 4.0
MIN_PAIRS = 10  # fewer usable pairs: no estimate (pairing off, as BWA does)
ESTIMATE_PAIRS = 10_000  # the insert size is estimated from the first this many pairs of the input


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
    if not math.isfinite(mean + MAX_STDDEV * std):
        raise PeanutError(f"-I {text!r}: MEAN + {MAX_STDDEV} STD is too large")
    high = _bwa_int(mean + MAX_STDDEV * std)
    low = max(_bwa_int(mean - MAX_STDDEV * std), 1)
    if len(values) > 2:
        high = _bwa_int(values[2])
    if len(values) > 3:
        low = _bwa_int(values[3])
    if low < 1 or high < low:
        raise PeanutError(f"-I {text!r}: need 1 <= MIN <= MAX (got MIN {low}, MAX {high})")
    return InsertSize(mean, std, low, high, n=0, source="user")


def unique_best(rs, start, dist, lengths, scoring, first_read=0):
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
    s1 = hit_score(lengths[has], dist[best_hit].astype(np.int64), scoring)
    ok = s1 > 0
    two = kept[has] > 1
    second = order[np.minimum(ptr[:-1][has] + 1, len(order) - 1)] if len(order) else best_hit
    s2 = np.where(two, hit_score(lengths[has], dist[second].astype(np.int64), scoring), -1)
    ok &= s2 <= UNIQUE_RATIO * s1
    best[np.flatnonzero(has)[ok]] = best_hit[ok]
    return best


def insert_sample(rs, start, end, dist, lengths, contig_offsets, scoring):
    """FR inserts of the pairs whose mates are both confidently unique (see :func:`unique_best`), on one
    contig, with 0 < insert <= MAX_SAMPLE_INSERT. Reads alternate mate 1, mate 2; ``rs`` sorted."""
    lengths = np.asarray(lengths, dtype=np.int64)
    best = unique_best(rs, start, dist, lengths, scoring)
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


def estimate_from_results(results, contig_offsets, scoring, n_pairs=ESTIMATE_PAIRS):
    """The insert size from the first ``n_pairs`` pairs of ``results`` [(batch, DeviceResult), ...] of the
    first batches, and the number of pairs sampled: ``(InsertSize or None, pairs)``."""
    parts, lengths, base, left = [], [], 0, 2 * n_pairs
    for batch, result in results:
        take = min(batch.n, left)
        if take <= 0:
            break
        cut = int(np.searchsorted(result.rs >> 1, take))
        parts.append((result.rs[:cut].astype(np.int64) + 2 * base, result.ref_start[:cut], result.ref_end[:cut],
                      result.dist[:cut]))
        lengths.append(batch.lengths[:take])
        base += take
        left -= take
    if not parts:
        return None, 0
    rs, start, end, dist = (np.concatenate([p[i] for p in parts]) for i in range(4))
    sample = insert_sample(rs, start, end, dist, np.concatenate(lengths), contig_offsets, scoring)
    return estimate_insert_size(sample), base // 2


def insert_size_stage(items, contig_offsets, scoring, given=None, log=None, known=False):
    """The pipeline stage that makes the insert size known (map_paired.py): a generator over the device's
    ``(batch, result)`` pairs in input order, yielding ``(batch, result, insert_size)``.

    With ``given`` (``-I``) it passes everything on at once.  Otherwise it holds the first batches back until
    they cover ESTIMATE_PAIRS pairs (or the input ends), estimates from them, then passes them and every later
    batch on with the estimate; the device meanwhile maps the next batches.  The estimate therefore comes
    from the same first pairs whatever the batch size or thread count.  With ``known``, ``given`` is taken as
    it is, None too, and nothing is logged (a mapping process of several: :func:`estimate_before_run`)."""
    if known:
        for batch, result in items:
            yield batch, result, given
        return
    insert_size = given
    if given is not None and log:
        log(given.describe())
    held, covered, estimated = [], 0, given is not None
    for batch, result in items:
        if estimated:
            yield batch, result, insert_size
            continue
        held.append((batch, result))
        covered += batch.n // 2
        if covered >= ESTIMATE_PAIRS:
            insert_size = _estimate(held, contig_offsets, scoring, log)
            estimated = True
            for b, r in held:
                yield b, r, insert_size
            held = []
    if not estimated and held:
        insert_size = _estimate(held, contig_offsets, scoring, log)
        for b, r in held:
            yield b, r, insert_size


def estimate_before_run(batches, stage, contig_offsets, scoring, log=None):
    """The insert size of the first ESTIMATE_PAIRS pairs, mapped on the device ``stage`` before the run:
    ``batches`` cut the input into batches of 2 * ESTIMATE_PAIRS reads, of which only the first is read. A
    mapping process of several (shards.py) maps only some batches, so each estimates on its own, from the
    same pairs as :func:`insert_size_stage` and with the same result."""
    try:
        first = next(iter(batches), None)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    if first is None:
        return None
    result = stage.map_batch_or_split(first.codes, first.offsets)
    return _estimate([(first, result)], contig_offsets, scoring, log)


def _estimate(held, contig_offsets, scoring, log):
    insert_size, sampled = estimate_from_results(held, contig_offsets, scoring)
    if log:
        if insert_size is None:
            log(f"insert size: fewer than {MIN_PAIRS} uniquely mapped FR pairs among the first {sampled:,} pairs; "
                "no pair is marked proper and mates are not rescued (give -I MEAN,STD to pair them)")
        else:
            log(f"{insert_size.describe()} of the first {sampled:,} pairs")
    return insert_size
