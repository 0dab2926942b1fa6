// Buffer helpers of the device layer (device.py).

// Zeroes words [0, n) of a in equal runs, one per work-item (the caller picks the number of work-items).  On a
// CPU device clEnqueueFillBuffer fills on one thread, so a large fresh buffer (the bitmap I of the q-group
// index) is first touched by one core; this kernel spreads that work over all cores.
__kernel void zero_words(__global uint *a, const ulong n)
{
    const ulong span = (n + get_global_size(0) - 1) / get_global_size(0);
    const ulong lo = get_global_id(0) * span;
    const ulong hi = min(lo + span, n);
    for (ulong i = lo; i < hi; i++)
        a[i] = 0;
}
