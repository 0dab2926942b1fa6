# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""FASTQ blocks into columns without the GIL: the strict, common form only; reads.py falls back to dnaio.

``parse_block`` reads records of the form ``@name[ description]\\n SEQ \\n +[same header]\\n QUAL \\n`` from a
block of text. It checks the sequence (letters, '.' and '-': exactly what reads._CODE accepts) and the
qualities (33..126) and records per read where its name, sequence and qualities are. It stops at the first
record it is not sure about (``\\r``, blank lines, control characters, a ``+`` line that differs, lengths that
differ, ...): reads.py then hands that record and the rest of the file to dnaio, which either reads it or
names the error as it always has.

``gather`` copies the reads of a batch (slices of chunks, one or two mates' streams) into the columns of a
ReadBatch, uppercasing the sequences ('.' and '-' as N: reads._UPPER) and coding them (reads._CODE);
``first_mate_mismatch`` compares mate names. Only O(slices) work holds the GIL.
"""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcmp, memcpy

cnp.import_array()

# parse_block's stop reasons
cdef enum:
    S_INCOMPLETE = 0  # the data ends inside a record (or exactly after one): read more
    S_ODD = 1  # a record that is not in the strict form starts at the returned position
    S_FULL = 2  # the chunk's capacity is used up: call again from the returned position
INCOMPLETE, ODD, FULL = S_INCOMPLETE, S_ODD, S_FULL

cdef class Block:
    """Room for a block of file text and for the columns of the reads parsed from it. Chunks count
    themselves as its users; a Block without users may be filled again (reads._Source reuses its Blocks:
    fresh memory costs a page fault per page)."""

    cdef readonly object text  # uint8, size + 1 (room for a final newline the file lacks)
    cdef readonly Py_ssize_t size
    cdef readonly Py_ssize_t users
    cdef object columns  # int64 (5, cap + 1): name_pos, name_cum, seq_pos, seq_cum, rec_end
    cdef bint columns_free

    def __init__(self, Py_ssize_t size):
        self.size = size
        self.text = np.empty(size + 1, np.uint8)
        self.columns = np.empty((5, size // 32 + 65), np.int64)  # records of 32 bytes or more fit
        self.columns_free = True

    def refill(self):
        """Make the Block's room free again (only when it has no users)."""
        if self.users:
            raise ValueError("the Block is in use")
        self.columns_free = True


cdef class Chunk:
    """Reads parsed from one buffer: per read the positions of its name (up to the first space or tab), its
    sequence and the end of its record (the qualities end just before). ``raw``: built from Python lists by the
    fallback path (sequence not yet checked or uppercased, see reads._make_batch)."""

    cdef readonly object buf
    cdef readonly Py_ssize_t base  # offset of buf[0] in the decompressed file
    cdef readonly Py_ssize_t n
    cdef readonly bint raw
    cdef readonly object name_pos, name_cum, seq_pos, seq_cum, rec_end
    cdef Block owner
    cdef const uint8_t *b
    cdef int64_t *np_
    cdef int64_t *nc
    cdef int64_t *sp
    cdef int64_t *sc
    cdef int64_t *re

    def __init__(self, buf, Py_ssize_t base, name_pos, name_cum, seq_pos, seq_cum, rec_end, bint raw=False,
                 Block owner=None):
        """``name_cum``/``seq_cum``: n + 1 running sums of the name and sequence lengths; the qualities of
        read i are ``buf[rec_end[i] - 1 - len_i : rec_end[i] - 1]``; ``owner``: the Block of buf."""
        self.buf = np.ascontiguousarray(buf, dtype=np.uint8)
        if self.buf.size == 0:
            self.buf = np.zeros(1, np.uint8)
        self.base = base
        self.raw = raw
        self.name_pos = np.ascontiguousarray(name_pos, dtype=np.int64)
        self.name_cum = np.ascontiguousarray(name_cum, dtype=np.int64)
        self.seq_pos = np.ascontiguousarray(seq_pos, dtype=np.int64)
        self.seq_cum = np.ascontiguousarray(seq_cum, dtype=np.int64)
        self.rec_end = np.ascontiguousarray(rec_end, dtype=np.int64)
        self.n = self.name_pos.shape[0]
        if not (self.seq_pos.shape[0] == self.rec_end.shape[0] == self.n
                and self.name_cum.shape[0] >= self.n + 1 and self.seq_cum.shape[0] >= self.n + 1):
            raise ValueError("Chunk columns of different lengths")
        self.b = <const uint8_t *> cnp.PyArray_DATA(self.buf)
        self.np_ = <int64_t *> cnp.PyArray_DATA(self.name_pos)
        self.nc = <int64_t *> cnp.PyArray_DATA(self.name_cum)
        self.sp = <int64_t *> cnp.PyArray_DATA(self.seq_pos)
        self.sc = <int64_t *> cnp.PyArray_DATA(self.seq_cum)
        self.re = <int64_t *> cnp.PyArray_DATA(self.rec_end)
        if owner is not None:
            self.owner = owner
            owner.users += 1

    def __dealloc__(self):
        if self.owner is not None:
            self.owner.users -= 1

    def name(self, Py_ssize_t i):
        """Read i's name as str (for messages)."""
        cdef Py_ssize_t a = self.np_[i]
        return bytes(self.buf[a : a + self.nc[i + 1] - self.nc[i]]).decode("latin-1")


cdef inline bint _bad_seq(const uint8_t *b, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    """True if a byte of b[start:end] is neither a letter nor '.' or '-' (branch-free: it vectorises)."""
    cdef uint8_t bad = 0, c
    cdef Py_ssize_t i
    for i in range(start, end):
        c = b[i]
        bad |= ((<uint8_t> ((c | 0x20) - 97) < 26) | (c == 46) | (c == 45)) ^ 1
    return bad


cdef inline bint _bad_qual(const uint8_t *b, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    cdef uint8_t bad = 0
    cdef Py_ssize_t i
    for i in range(start, end):
        bad |= <uint8_t> (b[i] - 33) > 93
    return bad


cdef int _parse(const uint8_t *b, Py_ssize_t start, Py_ssize_t end, Py_ssize_t cap, int64_t *name_pos,
                int64_t *name_cum, int64_t *seq_pos, int64_t *seq_cum, int64_t *rec_end, Py_ssize_t *n_out,
                Py_ssize_t *pos_out, Py_ssize_t *maxrec) noexcept nogil:
    cdef Py_ssize_t q = start, n = 0, h, hend, name_end, s, send, slen, p, pend, plen, u, e, i
    cdef const uint8_t *nl
    cdef uint8_t c
    cdef bint bad
    cdef int status
    name_cum[0] = 0
    seq_cum[0] = 0
    while True:
        if n == cap:
            status = S_FULL
            break
        if q >= end:
            status = S_INCOMPLETE
            break
        if b[q] != 64:  # '@'
            status = S_ODD
            break
        # header: printable ASCII or tab; the name ends at the first space or tab (dnaio's record.id)
        h = q + 1
        nl = <const uint8_t *> memchr(b + h, 10, end - h)
        if nl == NULL:
            status = S_INCOMPLETE
            break
        hend = nl - b
        name_end = hend
        bad = False
        for i in range(h, hend):
            c = b[i]
            if c == 32 or c == 9:
                if name_end == hend:
                    name_end = i
            elif c < 32 or c > 126:
                bad = True
        if bad:
            status = S_ODD
            break
        # sequence
        s = hend + 1
        nl = <const uint8_t *> memchr(b + s, 10, end - s)
        if nl == NULL:
            status = S_INCOMPLETE
            break
        send = nl - b
        slen = send - s
        if _bad_seq(b, s, send):
            status = S_ODD
            break
        # '+' line: empty or the header repeated
        p = send + 1
        if p >= end:
            status = S_INCOMPLETE
            break
        if b[p] != 43:  # '+'
            status = S_ODD
            break
        nl = <const uint8_t *> memchr(b + p + 1, 10, end - p - 1)
        if nl == NULL:
            status = S_INCOMPLETE
            break
        pend = nl - b
        plen = pend - p - 1
        if plen != 0 and (plen != hend - h or memcmp(b + p + 1, b + h, plen) != 0):
            status = S_ODD
            break
        # qualities: as many as bases, then the line end
        u = pend + 1
        if u + slen >= end:
            status = S_INCOMPLETE
            break
        if _bad_qual(b, u, u + slen) or b[u + slen] != 10:
            status = S_ODD
            break
        e = u + slen + 1
        name_pos[n] = h
        name_cum[n + 1] = name_cum[n] + (name_end - h)
        seq_pos[n] = s
        seq_cum[n + 1] = seq_cum[n] + slen
        rec_end[n] = e
        if e - q > maxrec[0]:
            maxrec[0] = e - q
        n += 1
        q = e
    n_out[0] = n
    pos_out[0] = q
    return status


def parse_block(Block block, Py_ssize_t base, Py_ssize_t start, Py_ssize_t end):
    """Parse records of ``block.text[start:end]``; ``base``: the offset of the text in the file.

    Returns (Chunk or None when no record, position after the last record, status, longest record in bytes):
    status INCOMPLETE (the data ends inside or after a record), ODD (a record not in the strict form starts at
    the position) or FULL (the Block's room for columns is used up: call again from the position).
    """
    cdef const uint8_t[::1] view = block.text
    cdef Py_ssize_t cap
    if not (0 <= start <= end <= view.shape[0]):
        raise ValueError("bad range")
    if block.columns_free:
        block.columns_free = False
        cols = block.columns
        cap = cols.shape[1] - 1
    else:  # more short records than the Block has room for: these columns are the Chunk's own
        cap = (end - start) // 6 + 1  # a record takes 6 bytes at least
        cols = np.empty((5, cap + 1), np.int64)
    name_pos, name_cum, seq_pos, seq_cum, rec_end = cols
    cdef const uint8_t *b = &view[0]
    cdef int64_t *a1 = <int64_t *> cnp.PyArray_DATA(name_pos)
    cdef int64_t *a2 = <int64_t *> cnp.PyArray_DATA(name_cum)
    cdef int64_t *a3 = <int64_t *> cnp.PyArray_DATA(seq_pos)
    cdef int64_t *a4 = <int64_t *> cnp.PyArray_DATA(seq_cum)
    cdef int64_t *a5 = <int64_t *> cnp.PyArray_DATA(rec_end)
    cdef Py_ssize_t n = 0, pos = start, maxrec = 0
    cdef int status
    with nogil:
        status = _parse(b, start, end, cap, a1, a2, a3, a4, a5, &n, &pos, &maxrec)
    chunk = None
    if n:
        chunk = Chunk(block.text, base, name_pos[:n], name_cum[: n + 1], seq_pos[:n], seq_cum[: n + 1],
                      rec_end[:n], owner=block)
    return chunk, pos, status, maxrec


def first_non_ascii(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end):
    """Position of the first byte >= 128 in buf[start:end], or -1."""
    cdef Py_ssize_t i = start, j, k, found = -1
    cdef uint8_t acc
    if not (0 <= start <= end <= buf.shape[0]):
        raise ValueError("bad range")
    with nogil:
        while i < end and found < 0:
            j = i + 4096 if end - i > 4096 else end
            acc = 0
            for k in range(i, j):
                acc |= buf[k]
            if acc & 0x80:
                for k in range(i, j):
                    if buf[k] & 0x80:
                        found = k
                        break
            i = j
    return found


cdef inline Py_ssize_t _after_line(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Where the line from ``pos`` ends (after its newline), or -1 if it does not end before ``end``."""
    cdef const uint8_t *nl = <const uint8_t *> memchr(b + pos, 10, end - pos) if pos < end else NULL
    return -1 if nl == NULL else nl - b + 1


def count_records(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_records):
    """Up to ``max_records`` four-line records of ``buf[start:end]``, found by their line ends alone (a
    header line starting with '@', a sequence line, a line starting with '+', as many qualities as bases):
    the writing process's cut of a file into batches by byte range (input_ranges.py), which leaves every
    other check to the mapping process that parses the range in full.

    Returns (records, position after the last, status): FULL (``max_records`` found), INCOMPLETE (the text
    ends inside or right after a record) or ODD (no four-line record starts at the position).
    """
    cdef Py_ssize_t q = start, n = 0, s, p, u, length
    cdef const uint8_t *b
    cdef int status = S_FULL
    if not (0 <= start <= end <= buf.shape[0]):
        raise ValueError("bad range")
    if end == 0 or max_records <= 0:
        return 0, start, (S_INCOMPLETE if max_records > 0 else S_FULL)
    b = &buf[0]
    with nogil:
        while n < max_records:
            # each test leaves the status it stops with: the text ends (INCOMPLETE) or is odd (ODD)
            status = S_INCOMPLETE
            if q >= end:
                break
            if b[q] != 64:  # '@'
                status = S_ODD
                break
            s = _after_line(b, q + 1, end)  # the sequence line
            p = _after_line(b, s, end) if s >= 0 else -1  # the '+' line
            if p < 0 or p >= end:
                break
            if b[p] != 43:  # '+'
                status = S_ODD
                break
            u = _after_line(b, p + 1, end)  # the qualities
            length = p - 1 - s
            if u < 0 or u + length >= end:
                break
            if b[u + length] != 10:
                status = S_ODD
                break
            q = u + length + 1
            n += 1
            status = S_FULL
    return n, q, status


# --- slices of chunks -------------------------------------------------------------------------------------


cdef struct Span:
    const uint8_t *b
    const int64_t *name_pos
    const int64_t *name_cum
    const int64_t *seq_pos
    const int64_t *seq_cum
    const int64_t *rec_end
    Py_ssize_t i0
    Py_ssize_t i1


cdef struct Cursor:
    Span *spans
    Py_ssize_t nspans
    Py_ssize_t s
    Py_ssize_t i


cdef Span *_spans(list slices, Py_ssize_t *n_records) except NULL:
    """C view of a list of (Chunk, i0, i1); the list keeps the chunks alive."""
    cdef Py_ssize_t k, m = len(slices), total = 0
    cdef Span *spans = <Span *> malloc((m + 1) * sizeof(Span))
    cdef Chunk c
    if spans == NULL:
        raise MemoryError()
    try:
        for k in range(m):
            c, i0, i1 = slices[k]
            if not 0 <= i0 <= i1 <= c.n:
                raise ValueError("slice outside its chunk")
            spans[k].b = c.b
            spans[k].name_pos = c.np_
            spans[k].name_cum = c.nc
            spans[k].seq_pos = c.sp
            spans[k].seq_cum = c.sc
            spans[k].rec_end = c.re
            spans[k].i0 = i0
            spans[k].i1 = i1
            total += i1 - i0
    except BaseException:
        free(spans)
        raise
    n_records[0] = total
    return spans


cdef inline void _start(Cursor *c, Span *spans, Py_ssize_t nspans) noexcept nogil:
    c.spans = spans
    c.nspans = nspans
    c.s = 0
    c.i = spans[0].i0 if nspans else 0


cdef inline Span *_next(Cursor *c, Py_ssize_t *i) noexcept nogil:
    """The span and index of the cursor's next read (the caller knows there is one)."""
    while c.i >= c.spans[c.s].i1:
        c.s += 1
        c.i = c.spans[c.s].i0
    i[0] = c.i
    c.i += 1
    return &c.spans[c.s]


cdef inline Py_ssize_t _name(Span *sp, Py_ssize_t i, bint strip, const uint8_t **name) noexcept nogil:
    """Read i's name and its length, without a trailing /1 or /2 when ``strip`` (pairs)."""
    cdef Py_ssize_t n = sp.name_cum[i + 1] - sp.name_cum[i]
    cdef const uint8_t *p = sp.b + sp.name_pos[i]
    if strip and n >= 2 and p[n - 2] == 47 and (p[n - 1] == 49 or p[n - 1] == 50):
        n -= 2
    name[0] = p
    return n


def unit_lengths(list streams, Py_ssize_t per, Py_ssize_t units):
    """Bases per unit (int64) of one or two streams of slices: a unit is read i of each stream, or ``per``
    adjacent reads of one stream."""
    out = np.zeros(units, np.int64)
    cdef int64_t *o = <int64_t *> cnp.PyArray_DATA(out)
    cdef Span *spans
    cdef Cursor cur
    cdef Span *sp
    cdef Py_ssize_t n, k, i
    for slices in streams:
        spans = _spans(slices, &n)
        try:
            if n != units * per:
                raise ValueError("a stream of other than units * per reads")
            _start(&cur, spans, len(slices))
            with nogil:
                for k in range(n):
                    sp = _next(&cur, &i)
                    o[k // per] += sp.seq_cum[i + 1] - sp.seq_cum[i]
        finally:
            free(spans)
    return out


cdef inline void _copy_coded(uint8_t *dst, uint8_t *codes, const uint8_t *src, Py_ssize_t n) noexcept nogil:
    """dst = src uppercased ('.' and '-' as N; src passed _bad_seq) and codes = its base codes (A0 C1 G2 T3,
    other letters 4), branch-free so that it vectorises: bits 1-2 of A C G T are 0 1 3 2 (x ^ (x >> 1) makes
    them 0 1 2 3); a letter is one of A C G T if it is the letter its bits 1-2 stand for."""
    cdef Py_ssize_t j
    cdef uint8_t c, t, letter
    for j in range(n):
        c = src[j]
        c = (c & 0xDF) if <uint8_t> ((c | 0x20) - 97) < 26 else 78
        dst[j] = c
        t = (c >> 1) & 3
        letter = 65 if t == 0 else (67 if t == 1 else (71 if t == 3 else 84))
        codes[j] = (t ^ (t >> 1)) if letter == c else 4


def gather(list streams, bint strip, bint with_quals, bint with_codes):
    """The columns of a batch from one stream of slices, or two (mates 1 and 2, equally many reads: the batch
    alternates them). Returns uint8 arrays and int64 offsets: (name_text, name_offsets, seq_text, offsets,
    qual_text or None, codes or None); names lose a trailing /1 or /2 when ``strip``."""
    cdef Py_ssize_t n_streams = len(streams), k, j, n, total = 0, bases = 0, name_bytes = 0, i, slen, nlen
    cdef Py_ssize_t counts[2]
    cdef Span *spans[2]
    cdef uint8_t *nt
    cdef uint8_t *st
    cdef uint8_t *qt
    cdef uint8_t *ct
    cdef int64_t *no
    cdef int64_t *so
    cdef Cursor cur[2]
    cdef Span *sp
    cdef const uint8_t *name
    if not 1 <= n_streams <= 2:
        raise ValueError("one or two streams")
    spans[0] = spans[1] = NULL
    try:
        for k in range(n_streams):
            spans[k] = _spans(streams[k], &counts[k])
            for j in range(len(streams[k])):
                sp = &spans[k][j]
                bases += sp.seq_cum[sp.i1] - sp.seq_cum[sp.i0]
                name_bytes += sp.name_cum[sp.i1] - sp.name_cum[sp.i0]
            total += counts[k]
            _start(&cur[k], spans[k], len(streams[k]))
        if n_streams == 2 and counts[0] != counts[1]:
            raise ValueError("mate streams of different lengths")
        name_text = np.empty(max(name_bytes, 1), np.uint8)
        name_off = np.empty(total + 1, np.int64)
        offsets = np.empty(total + 1, np.int64)
        # NumPy arrays rather than bytes: NumPy asks for huge pages, which saves most page faults
        seq = np.empty(max(bases, 1), np.uint8)
        qual = np.empty(max(bases, 1), np.uint8) if with_quals else None
        codes = np.empty(bases, np.uint8) if with_codes else None
        nt = <uint8_t *> cnp.PyArray_DATA(name_text)
        no = <int64_t *> cnp.PyArray_DATA(name_off)
        so = <int64_t *> cnp.PyArray_DATA(offsets)
        st = <uint8_t *> cnp.PyArray_DATA(seq)
        qt = <uint8_t *> cnp.PyArray_DATA(qual) if with_quals else NULL
        ct = <uint8_t *> cnp.PyArray_DATA(codes) if with_codes else NULL
        with nogil:
            no[0] = 0
            so[0] = 0
            for k in range(total):
                sp = _next(&cur[k % n_streams], &i)
                nlen = _name(sp, i, strip, &name)
                memcpy(nt + no[k], name, nlen)
                no[k + 1] = no[k] + nlen
                slen = sp.seq_cum[i + 1] - sp.seq_cum[i]
                if ct != NULL:
                    _copy_coded(st + so[k], ct + so[k], sp.b + sp.seq_pos[i], slen)
                else:
                    memcpy(st + so[k], sp.b + sp.seq_pos[i], slen)
                if qt != NULL:
                    memcpy(qt + so[k], sp.b + sp.rec_end[i] - 1 - slen, slen)
                so[k + 1] = so[k] + slen
    finally:
        free(spans[0])
        free(spans[1])
    n = name_off[total]
    return (name_text[:n] if n else np.zeros(1, np.uint8), name_off, seq[:bases], offsets,
            None if qual is None else qual[:bases], codes)


def first_mate_mismatch(list stream1, stream2, bint strip=True):
    """First pair whose mate names differ (without /1 /2), -1 if none. Mates are read i of both streams, or
    reads 2i and 2i + 1 of ``stream1`` when ``stream2`` is None (interleaved)."""
    cdef Span *s1 = NULL
    cdef Span *s2 = NULL
    cdef Cursor c1, c2
    cdef Span *a
    cdef Span *b
    cdef Py_ssize_t n1, n2 = 0, pairs, k, i, j, la, lb, found = -1
    cdef const uint8_t *na
    cdef const uint8_t *nb
    try:
        s1 = _spans(stream1, &n1)
        _start(&c1, s1, len(stream1))
        if stream2 is None:
            pairs = n1 // 2
            _start(&c2, s1, len(stream1))  # unused
        else:
            s2 = _spans(stream2, &n2)
            _start(&c2, s2, len(stream2))
            if n1 != n2:
                raise ValueError("mate streams of different lengths")
            pairs = n1
        with nogil:
            for k in range(pairs):
                a = _next(&c1, &i)
                b = _next(&c1, &j) if s2 == NULL else _next(&c2, &j)
                la = _name(a, i, strip, &na)
                lb = _name(b, j, strip, &nb)
                if la != lb or memcmp(na, nb, la) != 0:
                    found = k
                    break
    finally:
        free(s1)
        free(s2)
    return found
