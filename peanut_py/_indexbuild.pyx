# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Hot loops of the reference index build: 2-bit packing, the rolling q-gram scan and the ambiguity bitmap.

The scan runs twice per build (once to count q-grams per bucket, once per round to scatter them), reading the
contig from its packed words and its exception intervals, so the build never needs a byte per base in memory.
"""
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t


def pack_codes(const uint8_t[::1] codes, uint32_t[::1] words):
    """words[i >> 4] |= (codes[i] & 3) << 2*(i & 15); code 4 (non-ACGT) packs as 0. words: ceil(n/16), zeroed."""
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef uint32_t w = 0
    with nogil:
        for i in range(n):
            w |= (<uint32_t>(codes[i] & 3)) << (2 * (i & 15))
            if (i & 15) == 15:
                words[i >> 4] = w
                w = 0
        if n & 15:
            words[n >> 4] = w


cdef void _scan(const uint32_t[::1] words, int64_t length, int64_t offset,
                const int64_t[::1] exc_start, const int64_t[::1] exc_end,
                int q, int64_t step, int shift, int64_t[::1] counts,
                uint64_t[::1] keys, int64_t[::1] cursor, int64_t b_lo, int64_t b_hi, bint scatter) noexcept nogil:
    cdef uint64_t vmask = (<uint64_t>1 << (2 * q)) - 1
    cdef uint64_t v = 0, b
    cdef int64_t i, p, j, run = 0, e = 0
    cdef int64_t n_exc = exc_start.shape[0]
    # ns: start of the next exception interval at or after i (length when none is left)
    cdef int64_t ns = exc_start[0] if n_exc > 0 else length
    for i in range(length):
        if i >= ns:
            while e < n_exc and i >= exc_end[e]:
                e += 1
            ns = exc_start[e] if e < n_exc else length
            if i >= ns:  # inside a non-ACGT run: no q-gram may cover this base
                run = 0
                continue
        v = ((v << 2) | ((words[i >> 4] >> (2 * (i & 15))) & 3)) & vmask
        run += 1
        if run >= q:
            p = i - q + 1
            if step == 1 or p % step == 0:
                b = v >> shift
                if not scatter:
                    counts[b] += 1
                elif b_lo <= <int64_t>b < b_hi:
                    j = cursor[b]
                    keys[j] = (v << 32) | <uint64_t>(offset + p)
                    cursor[b] = j + 1


def count_buckets(const uint32_t[::1] words, int64_t length, const int64_t[::1] exc_start,
                  const int64_t[::1] exc_end, int q, int64_t step, int shift, int64_t[::1] counts):
    """counts[v >> shift] += 1 for every indexed q-gram value v of one contig (all-ACGT, p % step == 0)."""
    cdef uint64_t[::1] no_keys = None
    cdef int64_t[::1] no_cursor = None
    with nogil:
        _scan(words, length, 0, exc_start, exc_end, q, step, shift, counts, no_keys, no_cursor, 0, 0, False)


def scatter_keys(const uint32_t[::1] words, int64_t length, int64_t offset, const int64_t[::1] exc_start,
                 const int64_t[::1] exc_end, int q, int64_t step, int shift,
                 uint64_t[::1] keys, int64_t[::1] cursor, int64_t b_lo, int64_t b_hi):
    """For every indexed q-gram (value v, global position g) with b_lo <= v >> shift < b_hi:
    keys[cursor[b]++] = v << 32 | g. Positions arrive in increasing order, so each bucket stays sorted by g."""
    cdef int64_t[::1] no_counts = None
    with nogil:
        _scan(words, length, offset, exc_start, exc_end, q, step, shift, no_counts, keys, cursor, b_lo, b_hi, True)


def fill_bitmap(const int64_t[::1] starts, const int64_t[::1] ends, uint32_t[::1] bits):
    """Set bit g & 31 of bits[g >> 5] for every g in the half-open intervals [starts[k], ends[k])."""
    cdef Py_ssize_t k
    cdef int64_t g, s, e
    with nogil:
        for k in range(starts.shape[0]):
            s = starts[k]
            e = ends[k]
            g = s
            while g < e and (g & 31):
                bits[g >> 5] |= (<uint32_t>1) << (g & 31)
                g += 1
            while g + 32 <= e:
                bits[g >> 5] = 0xFFFFFFFF
                g += 32
            while g < e:
                bits[g >> 5] |= (<uint32_t>1) << (g & 31)
                g += 1


def unpack_codes(const uint32_t[::1] words, int64_t first, uint8_t[::1] out):
    """out[i] = 2-bit code of global position first + i (words[0] holds positions 16 * (first >> 4) ...)."""
    cdef Py_ssize_t i, n = out.shape[0]
    cdef int64_t g
    with nogil:
        for i in range(n):
            g = first + i - ((first >> 4) << 4)
            out[i] = (words[g >> 4] >> (2 * (g & 15))) & 3
