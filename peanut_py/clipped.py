"""Local mode: a read without a whole-read hit is judged by its aligned part.

Validation (validation.py) keeps a hit only when the whole read strand reaches the identity threshold, which
is right for ``--semiglobal`` but loses, in local mode, every read whose alignment clips a long end: an
untrimmed adapter tail, a read-through pair whose insert is shorter than the reads, a read across the origin
of a circular genome or a contig end.  Filtration still finds their candidates (the aligned part carries
the votes), so for each read of a batch without a validated hit this step takes its strongest candidates
(``kernels/clipped.cl``: at least half the read's best votes, at most ``max_per_read``), aligns the whole
read strand locally against each candidate's window (the affine-gap dynamic program of mate rescue,
``kernels/rescue.cl``) and keeps the alignments whose score, counted as BWA-MEM's ``-T`` counts it, reaches
``min_score``.  They become ordinary hits of the read, with the projected reference interval of rescued
mates (rescue.rescued_hits) and, as their distance, the score they lose against a perfect match of the
whole read (in matches), so ranking, pairing, the final alignment and MAPQ treat them like any other hit.  Reads that have a validated hit are not touched: their output is
the same with and without this step.  docs/mapping.md, "Local mode", says what is reported and why.
"""
from dataclasses import dataclass

import numpy as np

from .hit_lists import weak_reads_and_flags
from .layout import MAX_READ_LENGTH
from .options import DEFAULT_MIN_IDENTITY, Scoring
from .ranking import gather_read_strands
from .rescue import RescueWindows, align_windows, rescued_hits
from .validation import max_errors_on_device, max_errors_table

MAX_PER_READ = 4  # candidates aligned per read without a validated hit (both strands together)
RATIO = (1, 2)  # ... each with at least this share of the read's best candidate's votes
DEFAULT_MIN_SCORE = 30  # BWA-MEM's -T


@dataclass(frozen=True)
class ClippedSearch:
    """The settings of the step: scoring of the alignment, the minimum score (``-T``), the identity that sizes
    the window around a candidate (validation's error bound), candidates per read and their votes ratio."""

    scoring: Scoring = Scoring()
    min_score: int = DEFAULT_MIN_SCORE
    min_identity: float = DEFAULT_MIN_IDENTITY
    max_per_read: int = MAX_PER_READ
    ratio: tuple = RATIO

    @classmethod
    def for_options(cls, opts):
        """The step for ``peanut map``'s MapOptions: local mode only (None with ``--semiglobal``)."""
        if not opts.local:
            return None
        return cls(scoring=opts.scoring, min_score=opts.min_score, min_identity=opts.min_identity)

    @property
    def min_kernel_score(self):
        """The rescue kernel's score includes a clipping penalty per clipped end; BWA-MEM's ``-T`` compares the
        score of the aligned part. A clipped read has at least one clipped end, so one penalty is given back:
        the bar is exactly ``-T`` for a read clipped at one end (adapter, read-through, contig end), ``-T``
        plus the penalty for one clipped at both ends."""
        return self.min_score - self.scoring.clip


def _mark_kernel(device):
    return device.kernels("clipped").mark_clipped


def _has_hit_kernel(device):
    return device.kernels("clipped").read_has_hit


def _align_kernel(device):
    """A kernel object of the rescue program for this step alone: paired runs launch the rescue kernel from
    their host stage thread at the same time, and a kernel object carries its arguments."""
    import pyopencl as cl

    return device.cached("clipped-align", lambda: cl.Kernel(device.program("rescue"), "rescue_align"))


def build_programs(device):
    """Build the step's programs ahead of the first batch (see ``DeviceStage.warm_up``)."""
    from .scans import where

    where(device)
    _mark_kernel(device)
    _has_hit_kernel(device)
    _align_kernel(device)


def _chosen(device, candidates, has_hit, max_per_read, ratio):
    """The candidates that the step aligns, as ``(indices, count)`` device arrays (uint32; the first ``count``
    indices, ascending, are the chosen ones), or None when there is no candidate: ``kernels/clipped.cl`` over
    the device ``candidates`` (sorted by rs) with ``has_hit`` (a device uint8 array, one flag per read of the
    buffer). Nothing is waited for: the caller downloads the count with what else it needs."""
    from .scans import where

    n = int(candidates.n)
    n_reads = has_hit.size
    if n == 0 or n_reads == 0:
        return None
    queue = device.queue
    chosen = device.empty(n, np.uint32)
    device.launch(_mark_kernel(device), n_reads, np.uint32(n_reads), np.uint32(n), candidates.rs.data,
                  candidates.votes.data, has_hit.data, np.uint32(max_per_read), np.uint32(ratio[0]),
                  np.uint32(ratio[1]), chosen.data)
    out = device.empty(n, np.uint32)
    count = device.empty(1, np.uint32)
    where(device)(chosen[:n], np.uint32(1), count, np.uint32(0), out, count, size=n, queue=queue)
    return out, count


def choose_candidates(device, candidates, has_hit, max_per_read=MAX_PER_READ, ratio=RATIO):
    """Indices (host int64, ascending) of the candidates that the step aligns (see :func:`_chosen`);
    ``has_hit``: host flags, one per read."""
    import pyopencl.array as cla

    flags = cla.to_device(device.queue, np.ascontiguousarray(has_hit, dtype=np.uint8), allocator=device.pool)
    chosen = _chosen(device, candidates, flags, max_per_read, ratio)
    if chosen is None:
        return np.zeros(0, dtype=np.int64)
    out, count = chosen
    m = int(count.get()[0])
    return out[:m].get().astype(np.int64) if m else np.zeros(0, dtype=np.int64)


def read_has_hit(device, hits, rs_start, n_reads, min_identity):
    """Per read of the buffer, on the device (uint8): a validated hit whose distance is at most half of
    validation's error bound for the read's length (``kernels/clipped.cl``, read_has_hit; the host's
    weak_reads_and_flags gives the same ``has_hit``). ``hits``: validation's ValidatedHits; ``rs_start``: the
    read buffer's read-strand starts (device)."""
    flags = device.empty(n_reads, np.uint8)
    table = max_errors_on_device(device, MAX_READ_LENGTH, min_identity)
    device.launch(_has_hit_kernel(device), n_reads, np.uint32(n_reads), np.uint32(hits.n), hits.rs.base_data,
                  hits.dist.base_data, rs_start.data, table.data, flags.data)
    return flags


def candidate_windows(rs, diag_lo, diag_hi, read_lengths, max_errors, contig_offsets, contig_ends):
    """The window of each candidate: its diagonals widened by validation's error bound ``max_errors[n]`` of
    its read's length n (``read_lengths[rs >> 1]``), ``[diag_lo - k, diag_hi + n + k)``, clipped to its
    contig (the last one starting at or before ``diag_hi + n - 1``, validation's rule). Candidates whose window
    is empty are left out. Returns RescueWindows (read, strand, lo, hi) in candidate order."""
    rs = np.asarray(rs, dtype=np.int64)
    n = np.asarray(read_lengths, dtype=np.int64)[rs >> 1]
    k = np.asarray(max_errors, dtype=np.int64)[n]
    lo = np.asarray(diag_lo, dtype=np.int64) - k
    hi = np.asarray(diag_hi, dtype=np.int64) + n + k
    offsets = np.asarray(contig_offsets, dtype=np.int64)
    ends = np.asarray(contig_ends, dtype=np.int64)
    contig = np.maximum(np.searchsorted(offsets, np.asarray(diag_hi, dtype=np.int64) + n - 1, side="right") - 1, 0)
    lo = np.maximum(lo, offsets[contig])
    hi = np.minimum(hi, ends[contig])
    keep = (lo < hi) & (n > 0)
    return RescueWindows(rs[keep] >> 1, rs[keep] & 1, lo[keep], hi[keep])


def weak_reads(n_reads, hit_rs, hit_dist, read_lengths, max_errors):
    """Per read: True where it has validated hits and the best of them has more than half of validation's
    error bound ``max_errors[n]`` (a read of length n, ``read_lengths``): such a whole-read hit is often a
    long clipped end forced into an edit-distance alignment, and the read is judged locally (see
    :func:`clipped_hits`)."""
    return weak_reads_and_flags(n_reads, hit_rs, hit_dist, read_lengths, max_errors)[0]


def clipped_hits(device, resident, codes, offsets, hits, candidates, search, contig_offsets, contig_ends,
                 rs_start, lengths=None):
    """The step for one read buffer: ``(found, new, kept)``. ``hits``: validation's ValidatedHits (device);
    ``found``: those hits on the host ``(rs, ref_start, ref_end, dist)``; ``kept``: which of them stay (a bool
    mask); ``new``: the new hits ``(rs, ref_start, ref_end, dist)`` (sorted by rs, duplicates removed).
    Judged locally are the reads without a validated hit and the weak ones (:func:`weak_reads`): their
    strongest candidates (``kernels/clipped.cl``) and, for weak reads, their validated hits are aligned
    locally, and the validated hits of weak reads are replaced by these alignments, so that all hits of a
    read are ranked by one measure. ``codes``/``offsets``: the buffer's forward reads (``lengths``:
    np.diff(offsets), when the caller has it); ``rs_start``: the read buffer's read-strand starts on the
    device; ``candidates``: its filtration's candidates. The reads to align are chosen on the device
    (read_has_hit) before the validated hits come to the host, so that one wait brings both."""
    n_reads = len(offsets) - 1
    lengths = np.diff(np.asarray(offsets, dtype=np.int64)) if lengths is None else lengths
    chosen = None
    if n_reads:
        chosen = _chosen(device, candidates, read_has_hit(device, hits, rs_start, n_reads, search.min_identity),
                         search.max_per_read, search.ratio)
    arrays = [hits.rs, hits.ref_start, hits.ref_end, hits.dist] + ([chosen[1]] if chosen is not None else [])
    host = device.get_all(arrays, [hits.n] * 4 + [1] * (chosen is not None))
    found = tuple(host[:4])
    hit_rs, hit_start, hit_end, hit_dist = found
    table = max_errors_table(int(lengths.max()) if n_reads else 0, search.min_identity)
    kept = weak_reads_and_flags(n_reads, hit_rs, hit_dist, lengths, table)[2]
    empty = (np.zeros(0, np.uint32), np.zeros(0, np.uint32), np.zeros(0, np.uint32), np.zeros(0, np.int32))
    m = int(host[4][0]) if chosen is not None else 0
    if m == 0:
        rs = diag_lo = diag_hi = np.zeros(0, dtype=np.int64)
    else:
        import pyopencl.array as cla

        picked = chosen[0][:m]
        # the chosen candidates' fields taken on the device and downloaded with one wait
        rs, diag_lo, diag_hi = (a.astype(np.int64) for a in device.get_all(
            [cla.take(a, picked) for a in (candidates.rs, candidates.diag_lo, candidates.diag_hi)]))
    # a weak read's validated hits as candidates of their own: start and end diagonals of the hit
    own = ~kept
    own_rs = hit_rs[own].astype(np.int64)
    rs = np.concatenate([rs, own_rs])
    diag_lo = np.concatenate([diag_lo, hit_start[own].astype(np.int64)])
    diag_hi = np.concatenate([diag_hi, hit_end[own].astype(np.int64) - lengths[own_rs >> 1]])
    diag_hi = np.maximum(diag_lo, diag_hi)
    windows = candidate_windows(rs, diag_lo, diag_hi, lengths, table, contig_offsets, contig_ends)
    if windows.n == 0:
        return found, empty, kept
    # the read strands of the reads concerned (each once, in batch order): read strand 2 * k + s
    reads, local = np.unique(windows.read, return_inverse=True)
    text, rs_start_host = gather_read_strands(np.asarray(codes, dtype=np.uint8), np.asarray(offsets, dtype=np.int64),
                                              np.repeat(reads, 2).astype(np.int64),
                                              np.tile(np.array([0, 1], dtype=np.uint8), len(reads)))
    task_rs = 2 * local + windows.strand
    opts = _AlignOptions(search.scoring)
    score, end_i, end_j, start_diag = align_windows(device, resident, text, rs_start_host, task_rs, windows.lo,
                                                    windows.hi, opts, kernel=_align_kernel(device))
    # dist: the score lost against a perfect match of the whole read, in matches (BWA-MEM ranks local hits by
    # score; mate rescue's coarser unit, one substitution, would tie hits a few matches apart)
    new_hits = rescued_hits(windows, lengths, score, end_i, end_j, start_diag, opts, contig_offsets, contig_ends,
                            min_score=search.min_kernel_score, unit=search.scoring.match)
    return found, _unique_hits(new_hits), kept


@dataclass(frozen=True)
class _AlignOptions:
    """What rescue.align_windows and rescue.rescued_hits read from the map options: local alignment."""

    scoring: Scoring
    local: bool = True


def _unique_hits(hits):
    """Hits sorted by (rs, start, end, dist) without repeats: neighbouring candidates of a read strand often
    lead to the same best alignment."""
    rs, start, end, dist = hits
    if len(rs) == 0:
        return hits
    order = np.lexsort((dist, end, start, rs))
    rs, start, end, dist = rs[order], start[order], end[order], dist[order]
    new = np.ones(len(rs), dtype=bool)
    new[1:] = (rs[1:] != rs[:-1]) | (start[1:] != start[:-1]) | (end[1:] != end[:-1])
    return rs[new], start[new], end[new], dist[new]


__all__ = ["ClippedSearch", "MAX_PER_READ", "RATIO", "DEFAULT_MIN_SCORE", "build_programs", "choose_candidates",
           "read_has_hit", "candidate_windows", "weak_reads", "clipped_hits"]
