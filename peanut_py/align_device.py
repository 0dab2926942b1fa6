"""Final alignment on the device (kernels/affine.cl): a drop-in replacement for ``align.align_batch``.

``align_batch_device`` takes align_batch's arguments and returns the same ``BatchAlignments``, bit for bit
(docs/alignment.md, "Device kernel"); MD strings come from ``align.md_batch`` on that result. A batch is split
into launches whose scratch, inputs and outputs fit a memory budget; each launch runs the alignment kernel
(one work-item per pair), an exclusive scan of the op counts and a compaction of the ops into one flat array,
so only the compact results cross the bus.
"""
import threading

import numpy as np

from .align import BatchAlignments, align_batch, batch_arrays
from .scans import cigar_offsets

LAYOUTS = ("interleaved", "item")
BUDGET_FRACTION = 4  # default budget per launch: a quarter of the device's global memory (and <= max_alloc)

# pyopencl kernels set their arguments and enqueue in two steps: calls from several threads (the
# postprocessing pool) take turns for their device work. That work goes to the device's side queue with
# plain allocations, never to the main queue or its memory pool, which the mapping core's thread drives.
_launch_lock = threading.Lock()

_EMPTY = np.zeros(0, dtype=np.uint8)


def default_layout(device):
    """Scratch layout: cell-major (coalesced) on GPUs and accelerators, item-major on CPU devices."""
    return "item" if device.info.type == "CPU" else "interleaved"


def default_budget(device):
    return max(1, min(device.max_alloc, device.global_mem // BUDGET_FRACTION))


def _kernels(device, A, B, O, E, ambig, clip, layout):
    key = ("affine", A, B, O, E, ambig, clip, layout)

    def build():
        prg = device.program("affine", MATCH=A, MISMATCH=B, GAP_OPEN=O, GAP_EXTEND=E, AMBIG=ambig, CLIP=clip,
                             INTERLEAVED=int(layout == "interleaved"))
        return prg.gotoh_banded, prg.compact_cigars

    return device.cached(key, build)


def _slots(m, W):
    """Per-pair slot sizes for a launch: traceback bytes, band-row ints, op uints (the launch's maxima)."""
    return max(1, int((m * W).max())), int(W.max()) + 1, 2 * int(m.max()) + 3


def _slot_bytes(tb_slot, row_slot, op_slot):
    return tb_slot + 8 * row_slot + 4 * op_slot


def _launch_ranges(m, n, W, budget):
    """Consecutive pair ranges [a, b) whose scratch (sized by the batch's maxima), inputs and outputs fit
    ``budget`` bytes; at least one pair per launch."""
    per_pair = _slot_bytes(*_slots(m, W)) + m + n + 4 * (2 * m + 3) + 96
    cum = np.concatenate([[0], np.cumsum(per_pair)])
    ranges, a, npairs = [], 0, m.size
    while a < npairs:
        b = int(np.searchsorted(cum, cum[a] + budget, side="right")) - 1
        b = min(max(b, a + 1), npairs)
        ranges.append((a, b))
        a = b
    return ranges


def align_batch_device(device, read_seq, read_offsets, ref_seq, ref_offsets, ref_global_start, band_lo, band_hi,
                       local, A=1, B=4, O=6, E=1, *, ambig=1, clip=5, memory_budget=None, layout=None,
                       launches=None):
    """``align.align_batch`` on ``device`` (a :class:`peanut_py.device.Device`): same arguments, checks, errors
    and result (``BatchAlignments``). ``memory_budget``: bytes one launch may use (default: a quarter of the
    device's global memory, at most its largest allocation); ``layout``: scratch layout, "interleaved"
    (cell-major) or "item" (item-major), by default chosen by device type. Both only affect speed.
    ``launches``: a list to which the number of pairs of each launch is appended (for tests), or None."""
    # the argument checks and conversions of align_batch, in its order, so bad input fails the same way
    rseq, fseq, roff, foff, gstart, blo, bhi, loc = batch_arrays(read_seq, read_offsets, ref_seq, ref_offsets,
                                                                 ref_global_start, band_lo, band_hi, local)
    npairs = roff.size - 1
    # scoring limits: align_batch itself on an empty batch, so the messages can never drift apart
    align_batch(_EMPTY, [0], _EMPTY, [0], 0, 0, 0, False, A, B, O, E, ambig=ambig, clip=clip)
    A, B, O, E, ambig, clip = (int(v) for v in (A, B, O, E, ambig, clip))
    layout = default_layout(device) if layout is None else layout
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    budget = default_budget(device) if memory_budget is None else min(int(memory_budget), device.max_alloc)

    if npairs == 0:
        return BatchAlignments(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int32),
                               np.empty(0, np.int32), np.empty(0, np.int32), np.empty(0, np.int32),
                               np.empty(0, np.uint32), np.zeros(1, np.int64))
    m = np.diff(roff)
    n = np.diff(foff)
    lo = np.maximum(blo.astype(np.int64), -m)  # the band clipped to the matrix, as align_core does
    hi = np.minimum(bhi.astype(np.int64), n)
    W = np.where((m > 0) & (lo <= hi), hi - lo + 1, 0)

    kernels = _kernels(device, A, B, O, E, ambig, clip, layout)
    ranges = _launch_ranges(m, n, W, budget)
    if launches is not None:
        launches.extend(b - a for a, b in ranges)
    parts = [_run_launch(device, kernels, a, b, rseq, roff, fseq, foff, gstart, blo, bhi, loc, m, W)
             for a, b in ranges]
    fields = [np.concatenate([p[k] for p in parts]) for k in range(6)]
    cigar = np.concatenate([p[6] for p in parts])
    cigar_offsets = np.zeros(npairs + 1, dtype=np.int64)
    base = 0
    for (a, b), p in zip(ranges, parts):
        cigar_offsets[a + 1:b + 1] = p[7][1:] + base
        base += int(p[7][-1])
    return BatchAlignments(*fields, cigar, cigar_offsets)


def _run_launch(device, kernels, a, b, rseq, roff, fseq, foff, gstart, blo, bhi, loc, m, W):
    """Pairs [a, b) in one launch: upload, align, scan, compact, download."""
    import pyopencl.array as cla

    count = b - a
    tb_slot, row_slot, op_slot = _slots(m[a:b], W[a:b])
    if tb_slot > device.max_alloc:
        raise MemoryError(f"alignment work buffers: pair {a} needs {tb_slot} bytes of traceback, more than "
                          f"the device's largest allocation ({device.max_alloc} bytes)")
    queue = device.side_queue()

    def up(x):
        x = np.ascontiguousarray(x)
        return cla.to_device(queue, x if x.size else np.zeros(1, x.dtype))

    def empty(size, dtype):
        return cla.empty(queue, max(int(size), 1), dtype)

    align_kernel, compact_kernel = kernels
    with _launch_lock:
        d_read, d_ref = up(rseq[roff[a]:roff[b]]), up(fseq[foff[a]:foff[b]])
        d_roff, d_foff = up(roff[a:b + 1] - roff[a]), up(foff[a:b + 1] - foff[a])
        d_gs, d_lo, d_hi, d_loc = up(gstart[a:b]), up(blo[a:b]), up(bhi[a:b]), up(loc[a:b])
        tb = empty(count * tb_slot, np.uint8)
        H = empty(count * row_slot, np.int32)
        F = empty(count * row_slot, np.int32)
        ops = empty(count * op_slot, np.uint32)
        outs = [empty(count, dt) for dt in (np.int64, np.int64, np.int32, np.int32, np.int32, np.int32)]
        n_ops = empty(count, np.uint32)
        overflow = cla.zeros(queue, 1, np.int32)
        offsets = empty(count + 1, np.int64)
        device.launch(align_kernel, count, np.uint32(count), d_read.data, d_roff.data, d_ref.data, d_foff.data,
                      d_gs.data, d_lo.data, d_hi.data, d_loc.data, np.uint64(tb_slot), np.uint32(row_slot),
                      np.uint32(op_slot), tb.data, H.data, F.data, ops.data, *(o.data for o in outs), n_ops.data,
                      overflow.data, queue=queue)
        cigar_offsets(device)(n_ops[:count], offsets, queue=queue)
        host_offsets = offsets.get()[:count + 1]
        if int(overflow.get()[0]):
            raise RuntimeError("align_core failed (-2)")  # an op slot too small; 2 m + 3 always suffices
        total = int(host_offsets[-1])
        cigar = empty(total, np.uint32)
        device.launch(compact_kernel, count, np.uint32(count), np.uint32(op_slot), ops.data, n_ops.data,
                      offsets.data, cigar.data, queue=queue)
        host = [o.get()[:count] for o in outs]
        return (*host, cigar.get()[:total], host_offsets)
