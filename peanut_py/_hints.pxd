# Compiler hints that several Cython modules share: cimported, they are inlined into each one's loops (no
# module of its own is built or imported at run time).  GCC and Clang get the builtins; other compilers no
# prefetch hint and a plain loop for the lowest set bit.
cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define PEANUT_PREFETCH(address) __builtin_prefetch(address)
    #define PEANUT_CTZ(x) __builtin_ctz(x)
    #else
    #define PEANUT_PREFETCH(address) ((void)(address))
    static int PEANUT_CTZ(unsigned int x) { int n = 0; while (!(x & 1u)) { x >>= 1; ++n; } return n; }
    #endif
    """
    # load the cache line of ``address`` ahead of its use
    void prefetch "PEANUT_PREFETCH" (const void *address) nogil
    # the index of the lowest set bit of a nonzero word
    int lowest_set_bit "PEANUT_CTZ" (unsigned int x) nogil
