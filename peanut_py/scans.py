"""The pyopencl prefix scans that the device steps share.

Each ``GenericScanKernel`` is three OpenCL programs to build, and every build is paid at start-up (about
25 ms each from the driver's cache, on PoCL and on NVIDIA alike), so the steps share a few general scans
instead of owning one each.
"""
import numpy as np


def exclusive_sum(device):
    """uint32 counts -> exclusive prefix sum and a copy of it: ``(counts, starts, copy, size=n)``.

    With a closing count of 0 the last start is the total. The q-group index uses it for S and S' (S' and its
    fill cursor start out equal), filtration for its slot and candidate starts."""
    from pyopencl.scan import GenericScanKernel

    return device.cached("exclusive-sum", lambda: GenericScanKernel(
        device.context, np.uint32,
        arguments="__global const uint *counts, __global uint *starts, __global uint *copy",
        input_expr="counts[i]", scan_expr="a + b", neutral="0",
        output_statement="starts[i] = prev_item; copy[i] = prev_item;",
    ))


def where(device):
    """Positions i with ``flag[i] == want``, in ascending order, and their number:
    ``(flag, want, map, use_map, out, count, size=n)`` writes ``out[k] = use_map ? map[i] : i`` for the k-th
    such i and ``count[0]`` = their number (``map`` is any uint32 array when ``use_map`` is 0)."""
    from pyopencl.scan import GenericScanKernel

    return device.cached("where", lambda: GenericScanKernel(
        device.context, np.uint32,
        arguments="__global const uint *flag, const uint want, __global const uint *map, const uint use_map, "
        "__global uint *out, __global uint *count",
        input_expr="flag[i] == want ? 1 : 0", scan_expr="a + b", neutral="0",
        output_statement="if (prev_item != item) out[item - 1] = use_map ? map[i] : (uint)i; "
        "if (i + 1 == N) *count = item;",
    ))
