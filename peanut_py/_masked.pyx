# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The bases of each read under a masked (over-frequent) q-gram of either strand: mapq.MaskedQgrams.coverage's
hot loop, one rolling pass over the bases without the interpreter lock."""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

import numpy as np

cdef uint64_t GOLDEN = 2654435761


cdef uint64_t SLOT_MULTIPLIER = 0x9E3779B97F4A7C15  # 2^64 / golden ratio: spreads values over the slots


cdef inline Py_ssize_t _slot(uint64_t v, int slot_bits) noexcept nogil:
    return <Py_ssize_t> ((v * SLOT_MULTIPLIER) >> (64 - slot_bits))


def value_slots(const uint64_t[::1] values, int slot_bits):
    """An open-addressing table of ``values`` (distinct) for masked_coverage: 2^slot_bits int32 slots holding an
    index into ``values`` or -1, each value in the first free slot from its hash on (linear probing). Needs
    fewer values than slots."""
    cdef Py_ssize_t n = values.shape[0], i, k, mask = (<Py_ssize_t> 1 << slot_bits) - 1
    if not 0 < slot_bits < 31 or n >= mask + 1:
        raise ValueError(f"{n} values do not fit 2^{slot_bits} slots")
    out = np.full(mask + 1, -1, dtype=np.int32)
    cdef int32_t[::1] slots = out
    with nogil:
        for i in range(n):
            k = _slot(values[i], slot_bits)
            while slots[k] >= 0:
                k = (k + 1) & mask
            slots[k] = <int32_t> i
    return out


cdef inline bint _masked(uint64_t v, const uint64_t *table, const uint64_t *values, const int32_t *slots,
                         int slot_bits, int shift, bint wide) noexcept nogil:
    # the hash of MaskedQgrams' table, in the values' own width, screens (one bit per hash value, so that the
    # table stays in a core's cache); the open-addressing slots decide
    cdef uint64_t h
    cdef Py_ssize_t k, mask = (<Py_ssize_t> 1 << slot_bits) - 1
    if wide:
        h = (v * GOLDEN) >> shift
    else:
        h = (<uint32_t> (<uint32_t> v * <uint32_t> GOLDEN)) >> shift
    if not (table[h >> 6] >> (h & 63)) & 1:
        return False
    k = _slot(v, slot_bits)
    while slots[k] >= 0:
        if values[slots[k]] == v:
            return True
        k = (k + 1) & mask
    return False


cdef inline int64_t _read_coverage(const uint8_t[::1] codes, Py_ssize_t a, Py_ssize_t b, int q, uint64_t mask,
                                  const uint64_t *table, const uint64_t *vals, const int32_t *slots, int slot_bits,
                                  int shift, bint reverse, bint wide) noexcept nogil:
    """masked_coverage of the read codes[a:b]."""
    cdef uint64_t fwd = 0, rev = 0
    cdef Py_ssize_t j, run = 0
    cdef int64_t covered_to = 0, total = 0
    cdef uint8_t c
    for j in range(a, b):
        c = codes[j]
        if c > 3:
            run = 0
            continue
        fwd = ((fwd << 2) | c) & mask
        if reverse:
            rev = (rev >> 2) | (<uint64_t> (3 - c) << (2 * (q - 1)))
        run += 1
        if run >= q and (_masked(fwd, table, vals, slots, slot_bits, shift, wide)
                         or (reverse and _masked(rev, table, vals, slots, slot_bits, shift, wide))):
            # the window covers bases j - q + 1 .. j
            if covered_to < j - q + 1:
                covered_to = j - q + 1
            total += j + 1 - covered_to
            covered_to = j + 1
    return total


def masked_coverage(const uint8_t[::1] codes, const int64_t[::1] offsets, const uint64_t[::1] table,
                    const uint64_t[::1] values, const int32_t[::1] slots, int q, int hash_bits, bint reverse=True):
    """Per read ``codes[offsets[i]:offsets[i + 1]]`` (A0 C1 G2 T3, others 4): its bases covered by a window
    of q ACGT bases whose value, or with ``reverse`` its reverse complement's, is in ``values`` (sorted).
    ``table``: 2^hash_bits bits (bit h & 63 of word h >> 6), set at the hashes of ``values``; ``slots``:
    value_slots(values, bits), a power of two of them.
    ``reverse=False`` with values closed under reverse complement gives the same coverage with one lookup
    per window instead of two."""
    cdef Py_ssize_t n_reads = offsets.shape[0] - 1, i
    cdef int64_t[::1] out = np.zeros(max(n_reads, 0), dtype=np.int64)
    cdef bint wide = 2 * q > 32
    cdef int shift = (64 if wide else 32) - hash_bits
    cdef uint64_t mask = (<uint64_t> 1 << (2 * q)) - 1 if q < 32 else <uint64_t> -1
    cdef Py_ssize_t n_values = values.shape[0]
    cdef const uint64_t *vals = &values[0] if n_values else NULL
    cdef int slot_bits = 0
    if n_values == 0:
        return np.asarray(out)
    while (<Py_ssize_t> 1 << slot_bits) < slots.shape[0]:
        slot_bits += 1
    if (<Py_ssize_t> 1 << slot_bits) != slots.shape[0]:
        raise ValueError("slots: not a power of two of them")
    with nogil:
        for i in range(n_reads):
            # a constant ``wide``: each width compiles to its own loop
            if wide:
                out[i] = _read_coverage(codes, offsets[i], offsets[i + 1], q, mask, &table[0], vals, &slots[0],
                                        slot_bits, shift, reverse, True)
            else:
                out[i] = _read_coverage(codes, offsets[i], offsets[i + 1], q, mask, &table[0], vals, &slots[0],
                                        slot_bits, shift, reverse, False)
    return np.asarray(out)
