"""Mate rescue on the device: align a mate against the window its confident mate allows (kernels/rescue.cl).

For every pair of a batch whose mate A has a confident hit (its best stratum holds at most MAX_ANCHORS hits;
each of them is an anchor) while mate B has no hit concordant with that anchor, B is aligned, on the strand
FR orientation requires, against the reference window that the insert-size bounds allow next to the
anchor. All windows of a batch go to the device in one launch over a small read buffer holding only the
mates to rescue. The kernel is the affine-gap dynamic program of the final alignment (docs/alignment.md;
local with clipping by default) over the whole window, so mates that q-gram filtration or the identity
filter cannot see -- q-grams masked as repeats, many errors, long runs of N, adapter or low-quality tails --
are found as BWA-MEM's Smith-Waterman rescue finds them. A rescued alignment scoring at least
RESCUE_MIN_SCORE becomes an ordinary hit of the mate: its start and end diagonals (from the kernel) give
the hit's projected reference interval, its score an equivalent edit distance; pairing (pairs.py) and the
final alignment (postprocess.py) then treat it as any other hit.
"""
from dataclasses import dataclass

import numpy as np

from .layout import MAX_READ_LENGTH
from .ranking import expand, gather_read_strands, rank_hits, strata_counts

MAX_ANCHORS = 4  # a mate with more equally good hits is not confident enough to anchor a rescue
RESCUE_MIN_SCORE = 12  # twice the best random score (docs/paired.md); BWA-MEM: 19 without clipping penalties
AMBIGUOUS_PENALTY = 1  # align.pyx's default for N / ambiguous bases
NEG_INF = -(1 << 30)
_KEY_SHIFT = 33  # (read << 33) | coordinate: global coordinates are below 2^32


@dataclass
class RescueWindows:
    """Windows to search, at most one per (mate, strand) and overlapping anchor windows merged, sorted by
    (read, strand, lo): the mate ``read`` on ``strand`` somewhere in the global reference interval [lo, hi)."""

    read: np.ndarray
    strand: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def n(self):
        return len(self.read)


def _empty_windows():
    return RescueWindows(*(np.zeros(0, dtype=np.int64) for _ in range(4)))


def rescue_windows(rs, start, end, dist, lengths, insert_size, contig_offsets, contig_ends,
                   max_anchors=MAX_ANCHORS):
    """Host side of the rescue: which mates of a batch to search and where (vectorised).

    Reads alternate mate 1, mate 2; hits are those of the whole batch, ``rs`` sorted as validation emits
    them. An anchor on the forward strand at ``[s, e)`` wants its mate on the reverse strand ending in
    ``[s + low, s + high]``: window ``[s + low - m, s + high)`` (m: the mate's length); a reverse anchor
    wants a forward mate starting in ``[e - high, e - low]``: window ``[e - high, e - low + m)``. Windows are
    clipped to the anchor's contig. An anchor whose mate already has a hit there (a forward hit starting or
    a reverse hit ending inside the allowed range) needs no rescue."""
    n_reads = len(lengths)
    if insert_size is None or n_reads == 0 or len(rs) == 0:
        return _empty_windows()
    rs = np.ascontiguousarray(rs, dtype=np.uint32)
    dist = np.ascontiguousarray(dist, dtype=np.int32)
    order, ptr, _ = rank_hits(rs, np.ascontiguousarray(start, dtype=np.uint32), dist, n_reads)
    _, n_best = strata_counts(order, ptr, dist, 1, 1 << 30)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.asarray(contig_offsets, dtype=np.int64)
    ends = np.asarray(contig_ends, dtype=np.int64)

    # every kept hit, keyed for range counts: forward hits by start, reverse hits by end
    k_read = (rs[order] >> 1).astype(np.int64)
    k_strand = (rs[order] & 1).astype(np.int64)
    fwd_keys = np.sort((k_read[k_strand == 0] << _KEY_SHIFT) | start[order][k_strand == 0])
    rev_keys = np.sort((k_read[k_strand == 1] << _KEY_SHIFT) | end[order][k_strand == 1])

    # anchors: the best stratum of reads with 1..max_anchors best hits
    n_anchor = np.where((n_best >= 1) & (n_best <= max_anchors), n_best, 0).astype(np.int64)
    a_read, a_rank = expand(n_anchor)
    hit = order[ptr[a_read] + a_rank]
    fwd_anchor = (rs[hit] & 1) == 0
    contig = np.searchsorted(offsets, start[hit], side="right") - 1
    c_lo, c_hi = offsets[contig], ends[contig]
    mate = a_read ^ 1
    m = lengths[mate]
    low, high = insert_size.low, insert_size.high
    # where the mate's reverse end (forward anchor) or forward start (reverse anchor) may lie
    lo = np.maximum(np.where(fwd_anchor, start[hit] + low, end[hit] - high), c_lo)
    hi = np.minimum(np.where(fwd_anchor, start[hit] + high, end[hit] - low), c_hi)
    key_lo = (mate << _KEY_SHIFT) | np.maximum(lo, 0)
    key_hi = (mate << _KEY_SHIFT) | np.maximum(hi, 0)
    found = np.where(
        fwd_anchor,
        np.searchsorted(rev_keys, key_hi, side="right") - np.searchsorted(rev_keys, key_lo, side="left"),
        np.searchsorted(fwd_keys, key_hi, side="right") - np.searchsorted(fwd_keys, key_lo, side="left"),
    )
    w_lo = np.maximum(np.where(fwd_anchor, lo - m, lo), c_lo)
    w_hi = np.minimum(np.where(fwd_anchor, hi, hi + m), c_hi)
    need = (found == 0) & (lo <= hi) & (m > 0) & (w_lo < w_hi)
    w_read, w_strand = mate[need], np.where(fwd_anchor, 1, 0)[need]
    w_lo, w_hi = w_lo[need], w_hi[need]
    if len(w_read) == 0:
        return _empty_windows()
    # merge overlapping windows of one mate and strand (anchors close to each other)
    srt = np.lexsort((w_hi, w_lo, w_strand, w_read))
    w_read, w_strand, w_lo, w_hi = w_read[srt], w_strand[srt], w_lo[srt], w_hi[srt]
    new = np.ones(len(w_read), dtype=bool)
    reach = w_hi.copy()  # the merged window's end so far
    for i in range(1, len(w_read)):  # few windows per batch: a plain loop is clear and cheap
        if w_read[i] == w_read[i - 1] and w_strand[i] == w_strand[i - 1] and w_lo[i] <= reach[i - 1]:
            new[i] = False
            reach[i] = max(reach[i - 1], w_hi[i])
    group = np.cumsum(new) - 1
    merged_hi = np.zeros(int(group[-1]) + 1, dtype=np.int64)
    np.maximum.at(merged_hi, group, w_hi)
    return RescueWindows(w_read[new], w_strand[new], w_lo[new], merged_hi)


def _kernel(device):
    return device.kernels("rescue").rescue_align


def build_programs(device):
    """Build the rescue kernel ahead of the first batch (see ``DeviceStage.warm_up``); errors are left to it."""
    try:
        _kernel(device)
    except Exception:
        pass


# Work-items per rescue task on a GPU: rows of the read per work-item = ceil(m / GROUP) (kernels/rescue.cl).
RESCUE_GROUP = 64


def rescue_group_size(device, kernel):
    """Work-items per task: one on a CPU device (the plain column-by-column program, no barriers to pay),
    else up to RESCUE_GROUP as the kernel and the device allow."""
    if device.host_memory:
        return 1
    return device.work_group_size(kernel, RESCUE_GROUP)


def align_windows(device, resident, text, rs_start, task_rs, lo, hi, opts, queue=None, group=None, kernel=None):
    """Run kernels/rescue.cl: per task (read strand ``task_rs``: host ``text[rs_start[rs]:rs_start[rs + 1]]``,
    global window [lo, hi)) the best alignment's score (NEG_INF: none), end cell (i, j) and start diagonal,
    as host int32 arrays.  ``queue`` (default the device's): the rescue stage of paired mapping runs beside
    the mapping core on the side queue; its buffers then come straight from the context, never from the
    core's memory pool, whose freed buffers may still be in use on the main queue. ``group``: work-items
    per task (default :func:`rescue_group_size`); the results do not depend on it. ``kernel``: a kernel object
    of the rescue program for a caller on another thread (default: this module's)."""
    import pyopencl as cl
    import pyopencl.array as cla

    n = len(task_rs)
    task_rs = np.ascontiguousarray(task_rs, dtype=np.uint32)
    rs_start = np.asarray(rs_start, dtype=np.int64)
    m = (rs_start[1:] - rs_start[:-1])[task_rs]
    queue = queue or device.queue
    allocator = device.pool if queue is device.queue else None
    kernel = kernel or _kernel(device)
    group = int(group or rescue_group_size(device, kernel))
    max_m = int(m.max()) if n else 0
    rows_cap = max(1, -(-max_m // group) * group)  # every work-item's block of rows fits

    def up(a, dtype):
        a = np.ascontiguousarray(a, dtype=dtype)
        return cla.to_device(queue, a if a.size else np.zeros(1, dtype), allocator=allocator)

    d_rs, d_lo, d_hi = up(task_rs, np.uint32), up(lo, np.uint32), up(hi, np.uint32)
    d_text, d_start = up(text, np.uint8), up(rs_start, np.uint32)
    outs = [cla.empty(queue, max(n, 1), np.int32, allocator=allocator) for _ in range(4)]
    if n:
        sc = opts.scoring
        kernel(queue, (n * group,), (group,), np.uint32(n), d_rs.data, d_lo.data, d_hi.data, resident.packed.data,
               resident.ambiguous.data, d_text.data, d_start.data,
               *(np.int32(v) for v in (sc.match, sc.mismatch, sc.gap_open, sc.gap_extend, AMBIGUOUS_PENALTY, sc.clip,
                                        1 if opts.local else 0)),
               np.int32(rows_cap), cl.LocalMemory(4 * 4 * rows_cap), cl.LocalMemory(4 * 8 * group),
               cl.LocalMemory(4 * 4 * group), *(o.data for o in outs))
    return tuple(o.get()[:n] for o in outs)


def rescued_hits(windows, lengths, score, end_i, end_j, start_diag, opts, contig_offsets, contig_ends,
                 min_score=RESCUE_MIN_SCORE, unit=None):
    """Kernel results -> hits ``(rs, ref_start, ref_end, dist)`` (sorted by rs) for alignments scoring at least
    ``min_score``. The interval projects the whole read along the alignment's start and end diagonals (kept
    inside the contig); ``dist`` is the edit distance with the same score estimate
    (pairs.hit_score): ``ceil((match * m - score) / unit)``, at least 0, with ``unit`` the score of one
    substitution, ``match + mismatch`` (default)."""
    keep = score >= min_score
    read, strand, lo = windows.read[keep], windows.strand[keep], windows.lo[keep]
    m = np.asarray(lengths, dtype=np.int64)[read]
    offsets = np.asarray(contig_offsets, dtype=np.int64)
    contig = np.searchsorted(offsets, lo, side="right") - 1
    c_lo, c_hi = offsets[contig], np.asarray(contig_ends, dtype=np.int64)[contig]
    start = np.clip(lo + start_diag[keep], c_lo, c_hi)
    end = np.clip(lo + (end_j[keep] - end_i[keep]).astype(np.int64) + m, c_lo, c_hi)
    unit = opts.scoring.match + opts.scoring.mismatch if unit is None else unit
    dist = np.maximum(-((score[keep].astype(np.int64) - opts.scoring.match * m) // unit), 0)
    rs = (2 * read + strand).astype(np.uint32)
    srt = np.argsort(rs, kind="stable")
    return rs[srt], start[srt].astype(np.uint32), end[srt].astype(np.uint32), dist[srt].astype(np.int32)


def batch_windows(rs, start, end, dist, lengths, insert_size, contig_offsets, contig_ends, pool=None, n_chunks=1):
    """:func:`rescue_windows` of a whole batch, computed in ``n_chunks`` ranges of pairs on ``pool`` (a
    concurrent.futures executor): every window concerns one pair, so the ranges' windows, concatenated in
    order, are exactly the batch's."""
    n_pairs = len(lengths) // 2
    n_chunks = max(1, min(int(n_chunks), n_pairs))
    if pool is None or n_chunks == 1 or insert_size is None or len(rs) == 0:
        return rescue_windows(rs, start, end, dist, lengths, insert_size, contig_offsets, contig_ends)
    rs = np.asarray(rs, dtype=np.uint32)
    start, end, dist = np.asarray(start), np.asarray(end), np.asarray(dist)
    bounds = 2 * np.linspace(0, n_pairs, n_chunks + 1).astype(np.int64)
    cuts = np.searchsorted(rs >> 1, bounds)

    def part(k):
        r0, r1, h0, h1 = bounds[k], bounds[k + 1], cuts[k], cuts[k + 1]
        w = rescue_windows(rs[h0:h1] - np.uint32(2 * r0), start[h0:h1], end[h0:h1], dist[h0:h1], lengths[r0:r1],
                           insert_size, contig_offsets, contig_ends)
        w.read = w.read + r0
        return w

    parts = list(pool.map(part, range(n_chunks)))
    return RescueWindows(*(np.concatenate([getattr(w, f) for w in parts]) for f in ("read", "strand", "lo", "hi")))


def rescue_batch(device, resident, batch, rs, start, end, dist, insert_size, opts, contig_offsets, contig_ends,
                 queue=None, pool=None, n_chunks=1):
    """Rescue the mates of one batch on the device (on ``queue``, see :func:`align_windows`; the windows in
    ``n_chunks`` ranges on ``pool``, see :func:`batch_windows`). Returns the rescued hits ``(rs, ref_start,
    ref_end, dist)`` (batch read-strand ids, sorted by rs) and the number of windows searched."""
    lengths = batch.lengths
    windows = batch_windows(rs, start, end, dist, lengths, insert_size, contig_offsets, contig_ends, pool, n_chunks)
    # a mate longer than the kernels take stays unmapped (see DeviceStage.map_batch)
    fits = np.asarray(lengths)[windows.read] <= MAX_READ_LENGTH
    if not fits.all():
        windows = RescueWindows(*(a[fits] for a in (windows.read, windows.strand, windows.lo, windows.hi)))
    if windows.n == 0:
        return (np.zeros(0, np.uint32), np.zeros(0, np.uint32), np.zeros(0, np.uint32), np.zeros(0, np.int32)), 0
    # the mates to rescue (each once, in batch order), forward then reverse complement: read strand 2 * k + s
    reads, local = np.unique(windows.read, return_inverse=True)
    text, rs_start = gather_read_strands(batch.codes, batch.offsets, np.repeat(reads, 2).astype(np.int64),
                                         np.tile(np.array([0, 1], dtype=np.uint8), len(reads)))
    task_rs = 2 * local + windows.strand
    score, end_i, end_j, start_diag = align_windows(device, resident, text, rs_start, task_rs, windows.lo,
                                                    windows.hi, opts, queue=queue)
    hits = rescued_hits(windows, lengths, score, end_i, end_j, start_diag, opts, contig_offsets, contig_ends)
    return hits, windows.n


__all__ = ["RescueWindows", "MAX_ANCHORS", "RESCUE_MIN_SCORE", "rescue_windows", "batch_windows", "align_windows",
           "rescued_hits", "rescue_batch"]
