"""Every pyopencl prefix scan and radix sort of the device stages, built once per device (``Device.cached``).

Each ``GenericScanKernel`` is three OpenCL programs to build at start-up, so the stages share a few general
scans instead of owning one each.  A scan that needs kernel code of a stage includes its header
(``kernels/*.clh``) in its preamble, so that such code has one definition.
"""
import numpy as np

from .device import KERNEL_DIR
from .errors import PeanutError

# Key bits per radix-sort pass of filtration's interval merge.
RADIX_BITS = 3


def _scan_kernel(device, dtype, **kwargs):
    try:
        import mako.template  # noqa: F401  (pyopencl generates its scan kernels with Mako)
    except ImportError:
        raise PeanutError("pyopencl's scan kernels need the Mako package: pip install mako") from None
    from pyopencl.scan import GenericScanKernel

    return GenericScanKernel(device.context, dtype, options=["-I", str(KERNEL_DIR)], **kwargs)


def exclusive_sum(device):
    """uint32 counts -> exclusive prefix sum and a copy of it: ``(counts, starts, copy, size=n)``.

    With a closing count of 0 the last start is the total. The q-group index uses it for S and S' (S' and its
    fill cursor start out equal), filtration for its slot and candidate starts."""
    return device.cached("exclusive-sum", lambda: _scan_kernel(
        device, np.uint32,
        arguments="__global const uint *counts, __global uint *starts, __global uint *copy",
        input_expr="counts[i]", scan_expr="a + b", neutral="0",
        output_statement="starts[i] = prev_item; copy[i] = prev_item;",
    ))


def where(device):
    """Positions i with ``flag[i] == want``, in ascending order, and their number:
    ``(flag, want, map, use_map, out, count, size=n)`` writes ``out[k] = use_map ? map[i] : i`` for the k-th
    such i and ``count[0]`` = their number (``map`` is any uint32 array when ``use_map`` is 0)."""
    return device.cached("where", lambda: _scan_kernel(
        device, np.uint32,
        arguments="__global const uint *flag, const uint want, __global const uint *map, const uint use_map, "
        "__global uint *out, __global uint *count",
        input_expr="flag[i] == want ? 1 : 0", scan_expr="a + b", neutral="0",
        output_statement="if (prev_item != item) out[item - 1] = use_map ? map[i] : (uint)i; "
        "if (i + 1 == N) *count = item;",
    ))


def hit_offsets(device):
    """Filtration (Algorithm 2, line 6): where each kmer's hits go: uint64 ``(counts, offsets, total)``,
    the exclusive sum and the total."""
    return device.cached("hit-offsets", lambda: _scan_kernel(
        device, np.uint64,
        arguments="__global const ulong *counts, __global ulong *offsets, __global ulong *total",
        input_expr="counts[i]", scan_expr="a + b", neutral="0",
        output_statement="offsets[i] = prev_item; if (i == N - 1) total[0] = item;",
    ))


def interval_merge(device):
    """Filtration's merge of candidate intervals (only for a read strand with more raw hits than a window):
    a dict of ``running_hi``, ``interval_clusters``, ``keep_votes`` (the threshold of votes.clh) and
    ``sort_intervals`` (a RadixSort by (rs, lo)); 13 programs, built on first use only."""
    return device.cached("filtration-merge", lambda: _interval_merge(device))


def _interval_merge(device):
    from pyopencl.algorithm import RadixSort

    return {
        # Intervals sorted by (rs, lo): largest hi so far within the read strand, before entry i.
        "running_hi": _scan_kernel(
            device, np.uint32,
            arguments="__global const uint *rs, __global const uint *hi, __global uint *run_hi",
            input_expr="hi[i]", scan_expr="across_seg_boundary ? b : max(a, b)", neutral="0",
            is_segment_start_expr="i == 0 || rs[i] != rs[i - 1]",
            output_statement="run_hi[i] = prev_item;",
        ),
        "interval_clusters": _scan_kernel(
            device, np.uint32,
            arguments="__global const uint *rs, __global const uint *lo, __global const uint *run_hi, "
            "__global uint *first, __global uint *n_out, const uint gap",
            input_expr="(i == 0 || rs[i] != rs[i - 1] || (lo[i] > run_hi[i] && lo[i] - run_hi[i] > gap)) ? 1 : 0",
            scan_expr="a + b", neutral="0",
            output_statement="if (item != prev_item) first[prev_item] = i; if (i == N - 1) n_out[0] = item;",
        ),
        # The votes threshold applied to merged candidates, keeping their order.
        "keep_votes": _scan_kernel(
            device, np.uint32,
            arguments="__global const uint *rs, __global const uint *lo, __global const uint *hi, "
            "__global const uint *votes, __global const uint *rs_start, __global const uint *min_votes, "
            "__global const uint *masked_per_rs, const uint use_masked, "
            "__global uint *o_rs, __global uint *o_lo, __global uint *o_hi, __global uint *o_votes, "
            "__global uint *n_out",
            preamble='#include "votes.clh"\n',
            input_expr="votes[i] >= slot_threshold(rs_start, min_votes, masked_per_rs, use_masked, rs[i]) ? 1 : 0",
            scan_expr="a + b", neutral="0",
            output_statement="if (item != prev_item) { o_rs[prev_item] = rs[i]; o_lo[prev_item] = lo[i]; "
            "o_hi[prev_item] = hi[i]; o_votes[prev_item] = votes[i]; } if (i == N - 1) n_out[0] = item;",
        ),
        "sort_intervals": RadixSort(
            device.context,
            "__global uint *rs, __global uint *lo, __global uint *hi, __global uint *votes, const uint diag_bits",
            "(((ulong)rs[i]) << diag_bits) | lo[i]", ["rs", "lo", "hi", "votes"], bits_at_a_time=RADIX_BITS,
            key_dtype=np.uint64),
    }


def validation_compaction(device):
    """Validation: the kept candidates' results copied to consecutive slots, in order, with their candidate
    index and the count."""
    return device.cached("validation-compact", lambda: _scan_kernel(
        device, np.uint32,
        arguments=(
            "__global const uint *keep, __global const uint *rs, __global const int *dist, "
            "__global const uint *start, __global const uint *end, "
            "__global uint *o_rs, __global int *o_dist, __global uint *o_start, __global uint *o_end, "
            "__global uint *o_cand, __global uint *count"
        ),
        input_expr="keep[i]", scan_expr="a + b", neutral="0",
        output_statement="""
            if (prev_item != item) {
                const uint o = item - 1;
                o_rs[o] = rs[i]; o_dist[o] = dist[i]; o_start[o] = start[i]; o_end[o] = end[i];
                o_cand[o] = (uint)i;
            }
            if (i + 1 == N) *count = item;
        """,
    ))


def cigar_offsets(device):
    """Device alignment: inclusive scan of the per-pair CIGAR op counts into int64 offsets
    (``offsets[0] = 0``)."""
    return device.cached("affine_offsets", lambda: _scan_kernel(
        device, np.int64,
        arguments="__global const uint *n_ops, __global long *offsets",
        input_expr="(long)n_ops[i]", scan_expr="a + b", neutral="0",
        output_statement="offsets[i + 1] = item; if (i == 0) offsets[0] = 0;",
    ))
