# The binary search of an ascending int64 array that several Cython modules share: cimported, it is inlined
# into each one's loops without the GIL (no module of its own is built or imported at run time).
from libc.stdint cimport int64_t


cdef inline Py_ssize_t first_above(const int64_t[::1] ascending, int64_t x) noexcept nogil:
    """The index of the first value above x, len(ascending) when none is: how many are at most x
    (np.searchsorted(ascending, x, side="right"))."""
    cdef Py_ssize_t lo = 0, hi = ascending.shape[0], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if ascending[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo
