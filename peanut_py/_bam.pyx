# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""SAM lines to BAM records (SAM v1.6, section 4.2), without the interpreter lock.

The records are those the SAM text holds, field for field: what `samtools view -b` would write for the same
lines (integer tags in the smallest type that holds them, as htslib chooses).  The text is peanut-py's own
output, so a line that does not parse is a bug, reported as ValueError with the line's number.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t
from libc.stdlib cimport free, realloc, strtod
from libc.string cimport memchr, memcmp, memcpy, memset

import numpy as np

cdef uint8_t SEQ_CODE[256]
cdef uint8_t CIGAR_CODE[256]


cdef void _tables() noexcept:
    cdef int i
    cdef bytes seq = b"=ACMGRSVTWYHKDBN"
    cdef bytes ops = b"MIDNSHP=X"
    for i in range(256):
        SEQ_CODE[i] = 15
        CIGAR_CODE[i] = 255
    for i in range(16):
        SEQ_CODE[seq[i]] = i
        SEQ_CODE[ord(chr(seq[i]).lower())] = i
    for i in range(9):
        CIGAR_CODE[ops[i]] = i


_tables()


cdef class RefNames:
    """The reference names of a header, for the lookup of a name's index (binary search, no GIL)."""

    cdef bytes _text
    cdef object _offsets, _ids
    cdef const char *t
    cdef const int64_t *off
    cdef const int32_t *ids
    cdef Py_ssize_t n

    def __init__(self, names):
        encoded = [name.encode() if isinstance(name, str) else bytes(name) for name in names]
        order = sorted(range(len(encoded)), key=lambda i: encoded[i])
        self._text = b"".join(encoded[i] for i in order)
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(encoded[i]) for i in order], out=offsets[1:])
        self._offsets = offsets
        self._ids = np.asarray(order, dtype=np.int32)
        self.t = self._text
        self.n = len(encoded)
        self._point()

    cdef void _point(self):
        cdef int64_t[::1] o = self._offsets
        cdef int32_t[::1] d = self._ids
        self.off = &o[0]
        self.ids = &d[0] if self.n else NULL

    cdef int32_t find(self, const char *s, Py_ssize_t length) noexcept nogil:
        cdef Py_ssize_t lo = 0, hi = self.n, mid, m
        cdef int64_t a, b
        cdef int c
        while lo < hi:
            mid = (lo + hi) >> 1
            a = self.off[mid]
            b = self.off[mid + 1]
            m = b - a if b - a < length else length
            c = memcmp(self.t + a, s, m)
            if c == 0:
                c = -1 if b - a < length else (1 if b - a > length else 0)
            if c == 0:
                return self.ids[mid]
            if c < 0:
                lo = mid + 1
            else:
                hi = mid
        return -2


cdef struct Out:
    char *data
    Py_ssize_t n
    Py_ssize_t cap


cdef int _reserve(Out *o, Py_ssize_t more) noexcept nogil:
    cdef Py_ssize_t cap
    cdef char *p
    if o.n + more <= o.cap:
        return 0
    cap = o.cap * 2 if o.cap else 1 << 16
    while cap < o.n + more:
        cap *= 2
    p = <char *> realloc(o.data, cap)
    if p == NULL:
        return -1
    o.data = p
    o.cap = cap
    return 0


cdef inline void _u8(Out *o, uint8_t v) noexcept nogil:
    o.data[o.n] = <char> v
    o.n += 1


cdef inline void _u16(Out *o, uint16_t v) noexcept nogil:
    memcpy(o.data + o.n, &v, 2)
    o.n += 2


cdef inline void _u32(Out *o, uint32_t v) noexcept nogil:
    memcpy(o.data + o.n, &v, 4)
    o.n += 4


cdef inline int64_t _int(const char *s, Py_ssize_t n, bint *ok) noexcept nogil:
    """A decimal integer filling s[0:n] exactly: an optional sign, then 1 to 18 digits (what a SAM field of
    peanut-py's holds; more digits could overflow, so they count as malformed)."""
    cdef Py_ssize_t i = 0
    cdef int64_t v = 0
    cdef bint negative = False
    cdef uint8_t d
    if n > 0 and (s[0] == b'-' or s[0] == b'+'):
        negative = s[0] == b'-'
        i = 1
    if n - i < 1 or n - i > 18:
        ok[0] = False
        return 0
    while i < n:
        d = <uint8_t> s[i] - 48
        if d > 9:
            ok[0] = False
            return 0
        v = v * 10 + d
        i += 1
    return -v if negative else v


cdef inline int32_t _reg2bin(int64_t beg, int64_t end) noexcept nogil:
    # SAM v1.6, 5.3 (arithmetic shifts, as htslib computes it for beg = -1)
    end -= 1
    if beg >> 14 == end >> 14:
        return <int32_t> (((1 << 15) - 1) // 7 + (beg >> 14))
    if beg >> 17 == end >> 17:
        return <int32_t> (((1 << 12) - 1) // 7 + (beg >> 17))
    if beg >> 20 == end >> 20:
        return <int32_t> (((1 << 9) - 1) // 7 + (beg >> 20))
    if beg >> 23 == end >> 23:
        return <int32_t> (((1 << 6) - 1) // 7 + (beg >> 23))
    if beg >> 26 == end >> 26:
        return <int32_t> (((1 << 3) - 1) // 7 + (beg >> 26))
    return 0


cdef inline Py_ssize_t _field_end(const char *line, Py_ssize_t start, Py_ssize_t length) noexcept nogil:
    """Where the field starting at ``start`` ends: its tab, or the end of the line."""
    cdef const char *tab = <const char *> memchr(line + start, b'\t', length - start)
    return length if tab == NULL else tab - line


cdef int _tag(Out *o, const char *tag, Py_ssize_t tag_len) noexcept nogil:
    """One TG:T:VALUE field appended as a BAM tag; 0, or -1 (malformed)."""
    cdef const char *p = tag + 5
    cdef Py_ssize_t num = tag_len - 5
    cdef bint ok = True
    cdef int64_t v
    cdef char *end
    cdef float fv
    if tag_len < 5 or tag[2] != b':' or tag[4] != b':':
        return -1
    o.data[o.n] = tag[0]
    o.data[o.n + 1] = tag[1]
    o.n += 2
    if tag[3] == b'i':
        v = _int(p, num, &ok)
        if not ok:
            return -1
        # the smallest type that holds the value, as htslib chooses: a signed one after a minus sign ("-0")
        if p[0] == b'-':
            if v >= -128:
                _u8(o, b'c')
                _u8(o, <uint8_t> <int32_t> v)
            elif v >= -32768:
                _u8(o, b's')
                _u16(o, <uint16_t> <int32_t> v)
            elif v >= -<int64_t> 2147483648LL:
                _u8(o, b'i')
                _u32(o, <uint32_t> <int32_t> v)
            else:
                return -1
        elif v <= 255:
            _u8(o, b'C')
            _u8(o, <uint8_t> v)
        elif v <= 65535:
            _u8(o, b'S')
            _u16(o, <uint16_t> v)
        elif v <= <int64_t> 4294967295LL:
            _u8(o, b'I')
            _u32(o, <uint32_t> v)
        else:
            return -1
    elif tag[3] == b'Z' or tag[3] == b'H':
        _u8(o, <uint8_t> tag[3])
        memcpy(o.data + o.n, p, num)
        o.n += num
        _u8(o, 0)
    elif tag[3] == b'A':
        if num != 1:
            return -1
        _u8(o, b'A')
        _u8(o, <uint8_t> p[0])
    elif tag[3] == b'f':
        # the value ends at the tab or newline after it, where strtod stops
        fv = <float> strtod(p, &end)
        if end != p + num or num == 0:
            return -1
        _u8(o, b'f')
        memcpy(o.data + o.n, &fv, 4)
        o.n += 4
    else:  # B arrays: peanut-py writes none
        return -1
    return 0


cdef int _record(Out *o, const char *line, Py_ssize_t length, RefNames refs) noexcept nogil:
    """One SAM line (without its newline) appended as a BAM record; 0, or -1 (malformed) / -2 (no memory)."""
    cdef const char *f[11]
    cdef Py_ssize_t flen[11]
    cdef Py_ssize_t i, k, start = 0, tags, j, n_ops, l_seq, ref_len, start_rec, num
    cdef bint ok = True
    cdef int64_t pos, pnext, tlen, flag, mapq
    cdef int32_t ref_id, next_id
    cdef uint32_t block_size
    cdef uint8_t code, c, bad
    cdef const char *cig
    cdef const uint8_t *seq
    cdef const uint8_t *qual
    cdef uint8_t *dst
    for k in range(11):
        if start > length:  # the line ended before the eleventh field
            return -1
        i = _field_end(line, start, length)
        f[k] = line + start
        flen[k] = i - start
        start = i + 1
    # the rest of the line, after the QUAL field's tab, holds the tags
    tags = start
    flag = _int(f[1], flen[1], &ok)
    pos = _int(f[3], flen[3], &ok)
    mapq = _int(f[4], flen[4], &ok)
    pnext = _int(f[7], flen[7], &ok)
    tlen = _int(f[8], flen[8], &ok)
    if (not ok or flen[0] < 1 or flen[0] > 254 or flag < 0 or flag > 65535 or mapq < 0 or mapq > 255
            or pos < 0 or pos > 2147483647 or pnext < 0 or pnext > 2147483647
            or tlen < -2147483647 or tlen > 2147483647):
        return -1
    ref_id = -1 if flen[2] == 1 and f[2][0] == b'*' else refs.find(f[2], flen[2])
    if flen[6] == 1 and f[6][0] == b'*':
        next_id = -1
    elif flen[6] == 1 and f[6][0] == b'=':
        next_id = ref_id
    else:
        next_id = refs.find(f[6], flen[6])
    if ref_id == -2 or next_id == -2:
        return -1
    l_seq = 0 if flen[9] == 1 and f[9][0] == b'*' else flen[9]
    if not (flen[10] == 1 and f[10][0] == b'*') and flen[10] != l_seq:
        return -1
    # an upper bound: a CIGAR operation takes 4 bytes for at least one character, a tag grows by a byte at most
    # (XX:f:1 -> 7 bytes)
    if _reserve(o, 36 + flen[0] + 1 + 4 * flen[5] + (l_seq + 1) // 2 + l_seq + 2 * (length - tags + 8)) < 0:
        return -2
    start_rec = o.n
    # the fixed fields (32 bytes after block_size) are written once the CIGAR has given the bin
    o.n += 36
    memcpy(o.data + o.n, f[0], flen[0])
    o.n += flen[0]
    _u8(o, 0)
    # CIGAR: the operations, their count and the reference length, in one pass
    n_ops = 0
    ref_len = 0
    if not (flen[5] == 1 and f[5][0] == b'*'):
        cig = f[5]
        num = 0
        for j in range(flen[5]):
            c = <uint8_t> cig[j] - 48
            if c <= 9:
                num = num * 10 + c
                continue
            code = CIGAR_CODE[<uint8_t> cig[j]]
            if code == 255:
                return -1
            n_ops += 1
            if code == 0 or code == 2 or code == 3 or code == 7 or code == 8:
                ref_len += num
            _u32(o, (<uint32_t> num << 4) | code)
            num = 0
    if n_ops > 65535:
        return -1
    seq = <const uint8_t *> f[9]
    dst = <uint8_t *> o.data + o.n
    for j in range(l_seq >> 1):
        dst[j] = (SEQ_CODE[seq[2 * j]] << 4) | SEQ_CODE[seq[2 * j + 1]]
    if l_seq & 1:
        dst[l_seq >> 1] = SEQ_CODE[seq[l_seq - 1]] << 4
    o.n += (l_seq + 1) >> 1
    dst = <uint8_t *> o.data + o.n
    if l_seq and flen[10] == 1 and f[10][0] == b'*':
        memset(dst, 0xFF, l_seq)
    else:
        qual = <const uint8_t *> f[10]
        bad = 0
        for j in range(l_seq):
            bad |= qual[j] < 33
            dst[j] = qual[j] - 33
        if bad:
            return -1
    o.n += l_seq
    # tags: TG:T:VALUE separated by tabs
    i = tags
    while i < length:
        j = _field_end(line, i, length)
        if _tag(o, line + i, j - i) < 0:
            return -1
        i = j + 1
    block_size = <uint32_t> (o.n - start_rec - 4)
    o.n = start_rec
    _u32(o, block_size)
    _u32(o, <uint32_t> ref_id)
    _u32(o, <uint32_t> <int32_t> (pos - 1))
    _u8(o, <uint8_t> (flen[0] + 1))
    _u8(o, <uint8_t> mapq)
    _u16(o, <uint16_t> _reg2bin(pos - 1, pos - 1 + (ref_len if ref_len > 0 else 1)))
    _u16(o, <uint16_t> n_ops)
    _u16(o, <uint16_t> flag)
    _u32(o, <uint32_t> l_seq)
    _u32(o, <uint32_t> next_id)
    _u32(o, <uint32_t> <int32_t> (pnext - 1))
    _u32(o, <uint32_t> <int32_t> tlen)
    o.n = start_rec + 4 + block_size
    return 0


def sam_to_bam(text, RefNames refs):
    """The BAM records (each with its block_size) of ``text``: whole SAM lines, bytes, no header lines."""
    cdef const uint8_t[::1] view = memoryview(text).cast("B") if len(text) else memoryview(b"\n").cast("B")
    cdef const char *s = <const char *> &view[0]
    cdef const char *newline
    cdef Py_ssize_t n = len(text), i = 0, j, line_no = 0
    cdef int status = 0
    cdef Out out
    out.data = NULL
    out.n = 0
    out.cap = 0
    try:
        with nogil:
            # BAM records take less room than their SAM lines but for the shortest ones: one allocation
            # mostly
            if _reserve(&out, n + n // 8 + 4096) < 0:
                status = -2
            while i < n and status == 0:
                newline = <const char *> memchr(s + i, b'\n', n - i)
                j = n if newline == NULL else newline - s
                line_no += 1
                if j > i:
                    status = _record(&out, s + i, j - i, refs)
                i = j + 1
        if status == -2:
            raise MemoryError()
        if status != 0:
            raise ValueError(f"SAM line {line_no} of the block is not a record BAM can carry")
        return PyBytes_FromStringAndSize(out.data, out.n) if out.n else b""
    finally:
        free(out.data)
