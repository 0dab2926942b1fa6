# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""SAM text of a chunk of single-end reads or pairs, written without the GIL.

The same records as the plain Python record builders of tests/sam_oracle.py (the reference it is tested
against): per read an unmapped record, or its primary hit with NM/MD/AS/XS and the
other reported hits either in BWA's XA tag or as 0x100 records; pairs add the mate fields (docs/paired.md).
Everything is read from flat arrays so that the postprocessing pool's threads format their chunks at the
same time.
"""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, strlen
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize

cnp.import_array()

# SAM flags (SAM v1.6, section 1.4), for nogil code and, through sam_records.py, for Python.
cdef enum:
    FLAG_PAIRED = 0x1
    FLAG_PROPER_PAIR = 0x2
    FLAG_UNMAPPED = 0x4
    FLAG_MATE_UNMAPPED = 0x8
    FLAG_REVERSE = 0x10
    FLAG_MATE_REVERSE = 0x20
    FLAG_READ1 = 0x40
    FLAG_READ2 = 0x80
    FLAG_SECONDARY = 0x100
    FLAG_SUPPLEMENTARY = 0x800

FLAGS = {
    "PAIRED": FLAG_PAIRED, "PROPER_PAIR": FLAG_PROPER_PAIR, "UNMAPPED": FLAG_UNMAPPED,
    "MATE_UNMAPPED": FLAG_MATE_UNMAPPED, "REVERSE": FLAG_REVERSE, "MATE_REVERSE": FLAG_MATE_REVERSE,
    "READ1": FLAG_READ1, "READ2": FLAG_READ2, "SECONDARY": FLAG_SECONDARY, "SUPPLEMENTARY": FLAG_SUPPLEMENTARY,
}

cdef const char *OP_CHARS = b"MIDNSHP=X"

# IUPAC complement of an uppercase letter, other bytes unchanged (the reverse strand's SEQ)
COMPLEMENT_TABLE = bytes.maketrans(b"ACGTRYKMBVDHSWN", b"TGCAYRMKVBHDSWN")
cdef uint8_t COMPLEMENT[256]
for _i, _c in enumerate(COMPLEMENT_TABLE):
    COMPLEMENT[_i] = _c


cdef struct Buf:
    char *p
    size_t n
    size_t cap
    int failed


cdef inline int grow(Buf *b, size_t extra) noexcept nogil:
    cdef size_t cap
    cdef char *q
    if b.n + extra <= b.cap:
        return 0
    cap = 2 * b.cap + extra + 4096
    q = <char *> realloc(b.p, cap)
    if q == NULL:
        b.failed = 1
        return -1
    b.p = q
    b.cap = cap
    return 0


cdef inline void put(Buf *b, const char *s, size_t n) noexcept nogil:
    if grow(b, n) == 0:
        memcpy(b.p + b.n, s, n)
        b.n += n


cdef inline void puts(Buf *b, const char *s) noexcept nogil:
    put(b, s, strlen(s))


cdef inline void putc(Buf *b, char c) noexcept nogil:
    if grow(b, 1) == 0:
        b.p[b.n] = c
        b.n += 1


cdef inline void put_int(Buf *b, int64_t v) noexcept nogil:
    cdef char tmp[24]
    cdef int k = 0
    cdef uint64_t u
    if v < 0:
        putc(b, b'-')
        u = <uint64_t> (-(v + 1)) + 1
    else:
        u = <uint64_t> v
    while True:
        tmp[k] = <char> (48 + u % 10)
        k += 1
        u //= 10
        if u == 0:
            break
    if grow(b, k) == 0:
        while k > 0:
            k -= 1
            b.p[b.n] = tmp[k]
            b.n += 1



cdef inline void put_cigar(Buf *b, const uint32_t *cigar, int64_t n) noexcept nogil:
    cdef int64_t i
    if n == 0:
        putc(b, b'*')
        return
    for i in range(n):
        put_int(b, cigar[i] >> 4)
        putc(b, OP_CHARS[cigar[i] & 0xf])


cdef struct Reads:
    const uint8_t *name
    const int64_t *name_off
    const uint8_t *seq
    const int64_t *seq_off
    const uint8_t *qual     # NULL for FASTA input
    const uint8_t *rg       # "\tRG:Z:id" or empty
    int64_t rg_len


cdef void put_seq_qual(Buf *b, const Reads *R, int64_t r, bint reverse, bint star) noexcept nogil:
    """SEQ \\t QUAL of read r: as read, reverse-complemented/reversed, or '*' (secondary, empty read)."""
    cdef int64_t s = R.seq_off[r], e = R.seq_off[r + 1], i
    if star or e == s:
        puts(b, b"*\t*")
        return
    if grow(b, 2 * (e - s) + 1) != 0:
        return
    if reverse:
        for i in range(e - 1, s - 1, -1):
            b.p[b.n] = COMPLEMENT[R.seq[i]]
            b.n += 1
    else:
        memcpy(b.p + b.n, R.seq + s, e - s)
        b.n += e - s
    b.p[b.n] = b'\t'
    b.n += 1
    if R.qual == NULL:
        b.p[b.n] = b'*'
        b.n += 1
    elif reverse:
        for i in range(e - 1, s - 1, -1):
            b.p[b.n] = R.qual[i]
            b.n += 1
    else:
        memcpy(b.p + b.n, R.qual + s, e - s)
        b.n += e - s


cdef inline void put_name(Buf *b, const Reads *R, int64_t r) noexcept nogil:
    cdef int64_t s = R.name_off[r], e = R.name_off[r + 1]
    if e == s:
        putc(b, b'*')
    else:
        put(b, <const char *> R.name + s, e - s)


cdef struct Refs:
    const uint8_t *name
    const int64_t *name_off
    const int64_t *offset   # first global coordinate of each contig


cdef inline void put_ref(Buf *b, const Refs *F, int64_t c) noexcept nogil:
    put(b, <const char *> F.name + F.name_off[c], F.name_off[c + 1] - F.name_off[c])


cdef struct Hits:
    # aligned items: strand, contig, global pos (-1: no alignment) and end, NM, AS, CIGAR (BAM encoding) and MD
    const uint8_t *strand
    const int64_t *contig
    const int64_t *pos
    const int64_t *ref_end  # NULL where not needed
    const int32_t *nm
    const int32_t *score
    const uint32_t *cigar
    const int64_t *cigar_off
    const uint8_t *md
    const int64_t *md_off


cdef inline void put_hit_cigar(Buf *b, const Hits *H, int64_t k) noexcept nogil:
    put_cigar(b, H.cigar + H.cigar_off[k], H.cigar_off[k + 1] - H.cigar_off[k])


cdef inline void _put_nm_md(Buf *b, const Hits *H, int64_t k) noexcept nogil:
    puts(b, b"\tNM:i:")
    put_int(b, H.nm[k])
    puts(b, b"\tMD:Z:")
    put(b, <const char *> H.md + H.md_off[k], H.md_off[k + 1] - H.md_off[k])


cdef inline void _put_as(Buf *b, const Hits *H, int64_t k) noexcept nogil:
    puts(b, b"\tAS:i:")
    put_int(b, H.score[k])


cdef inline void _put_hit_tags(Buf *b, const Hits *H, int64_t k) noexcept nogil:
    _put_nm_md(b, H, k)
    _put_as(b, H, k)


cdef inline void _put_xa_entry(Buf *b, const Refs *F, const Hits *H, int64_t k) noexcept nogil:
    """One ``chr,±pos,CIGAR,NM;`` entry of BWA's XA tag (report.xa_tag)."""
    cdef int64_t c = H.contig[k]
    put_ref(b, F, c)
    putc(b, b',')
    putc(b, b'-' if H.strand[k] else b'+')
    put_int(b, H.pos[k] - F.offset[c] + 1)
    putc(b, b',')
    put_hit_cigar(b, H, k)
    putc(b, b',')
    put_int(b, H.nm[k])
    putc(b, b';')


cdef inline void put_line_end(Buf *b, const Reads *R) noexcept nogil:
    put(b, <const char *> R.rg, R.rg_len)
    putc(b, b'\n')


cdef void _put_secondary(Buf *b, const Reads *R, const Refs *F, const Hits *H, int64_t r, int64_t k,
                        int64_t pair_bits, int64_t mate_contig, int64_t mate_start) noexcept nogil:
    """A 0x100 record of hit k of read r: MAPQ 0, SEQ/QUAL '*', NM/MD/AS; ``pair_bits`` are the pair flags it
    shares with the primary, and the mate's place (``mate_contig`` < 0: single-end, RNEXT '*')."""
    cdef int64_t c = H.contig[k]
    put_name(b, R, r)
    putc(b, b'\t')
    put_int(b, pair_bits | FLAG_SECONDARY | (FLAG_REVERSE if H.strand[k] else 0))
    putc(b, b'\t')
    put_ref(b, F, c)
    putc(b, b'\t')
    put_int(b, H.pos[k] - F.offset[c] + 1)
    puts(b, b"\t0\t")
    put_hit_cigar(b, H, k)
    if mate_contig < 0:
        puts(b, b"\t*\t0\t0\t")
    else:
        putc(b, b'\t')
        if mate_contig == c:
            putc(b, b'=')
        else:
            put_ref(b, F, mate_contig)
        putc(b, b'\t')
        put_int(b, mate_start + 1)
        puts(b, b"\t0\t")
    put_seq_qual(b, R, r, False, True)
    _put_hit_tags(b, H, k)
    put_line_end(b, R)


def _flat_strings(strings):
    """(uint8 text, int64 offsets) of a list of str/bytes."""
    encoded = [s.encode() if isinstance(s, str) else bytes(s) for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    if encoded:
        np.cumsum([len(s) for s in encoded], out=offsets[1:])
    text = np.frombuffer(b"".join(encoded), dtype=np.uint8) if offsets[len(encoded)] else np.zeros(1, np.uint8)
    return text, offsets


cdef const void *_data(list keep, a, dtype) except NULL:
    """The data of ``a`` as a contiguous array of ``dtype`` (one zero when empty), kept alive by ``keep``."""
    cdef cnp.ndarray arr = np.ascontiguousarray(a, dtype=dtype)
    if arr.size == 0:
        arr = np.zeros(1, dtype=dtype)
    keep.append(arr)
    return <const void *> cnp.PyArray_DATA(arr)


cdef int _columns(list keep, Reads *R, Refs *F, Hits *H, batch, read_group_id, ref_names, contig_offsets,
                  strand, contig, pos, ref_end, nm, score, cigar, cigar_off, md, md_off) except -1:
    """Point R, F and H at the batch's reads, the contigs and the aligned items (arrays held by ``keep``)."""
    name_text, name_off = batch.name_columns()
    R.name = <const uint8_t *> _data(keep, name_text, np.uint8)
    R.name_off = <const int64_t *> _data(keep, name_off, np.int64)
    seq_text = batch.seq_text
    R.seq = <const uint8_t *> _data(keep, np.frombuffer(seq_text, dtype=np.uint8), np.uint8)
    R.seq_off = <const int64_t *> _data(keep, batch.offsets, np.int64)
    qual_text = batch.qual_text
    R.qual = NULL
    if qual_text is not None:
        R.qual = <const uint8_t *> _data(keep, np.frombuffer(qual_text, dtype=np.uint8), np.uint8)
    rg = f"\tRG:Z:{read_group_id}".encode() if read_group_id else b""
    R.rg = <const uint8_t *> _data(keep, np.frombuffer(rg, dtype=np.uint8), np.uint8)
    R.rg_len = len(rg)
    ref_text, ref_off = _flat_strings(ref_names)
    F.name = <const uint8_t *> _data(keep, ref_text, np.uint8)
    F.name_off = <const int64_t *> _data(keep, ref_off, np.int64)
    F.offset = <const int64_t *> _data(keep, contig_offsets, np.int64)
    H.strand = <const uint8_t *> _data(keep, strand, np.uint8)
    H.contig = <const int64_t *> _data(keep, contig, np.int64)
    H.pos = <const int64_t *> _data(keep, pos, np.int64)
    H.ref_end = NULL
    if ref_end is not None:
        H.ref_end = <const int64_t *> _data(keep, ref_end, np.int64)
    H.nm = <const int32_t *> _data(keep, nm, np.int32)
    H.score = <const int32_t *> _data(keep, score, np.int32)
    H.cigar = <const uint32_t *> _data(keep, cigar, np.uint32)
    H.cigar_off = <const int64_t *> _data(keep, cigar_off, np.int64)
    H.md = <const uint8_t *> _data(keep, md, np.uint8)
    H.md_off = <const int64_t *> _data(keep, md_off, np.int64)
    return 0


cdef int _buf_init(Buf *b, size_t cap) except -1:
    b.n = 0
    b.cap = cap
    b.failed = 0
    b.p = <char *> malloc(b.cap)
    if b.p == NULL:
        raise MemoryError("SAM text buffer")
    return 0


cdef bytes _bytes_of(const char *p, Py_ssize_t n):
    """A bytes object holding p[:n], copied without the GIL (a chunk's text is megabytes, and many
    postprocessing workers would queue for the GIL)."""
    cdef bytes text = PyBytes_FromStringAndSize(NULL, n)
    cdef char *dst = PyBytes_AS_STRING(text)
    with nogil:
        memcpy(dst, p, n)
    return text


def format_single_end(batch, ref_names, contig_offsets, int64_t r0, int64_t n_reads,
                      const int32_t[::1] report, const int64_t[::1] first, const int64_t[::1] mapq,
                      const int64_t[::1] sub, strand, contig, pos, nm, score, cigar, cigar_off, md, md_off,
                      bint secondary, read_group_id=None):
    """SAM text (bytes) of reads r0 .. r0 + n_reads - 1 of ``batch`` and the counts (mapped, multi).

    Per read r (local index i = r - r0): ``report[i]`` hits are reported, the first at aligned item
    ``first[i]`` (the primary), the others after it (items with pos < 0 have no alignment and are skipped);
    ``mapq[i]``, ``sub[i]`` (XS, -1 for none). Per item k: strand, contig, global pos, nm, score, the CIGAR
    ``cigar[cigar_off[k]:cigar_off[k+1]]`` (BAM encoding) and the MD string ``md[md_off[k]:md_off[k+1]]``.
    """
    cdef list keep = []
    cdef Reads R
    cdef Refs F
    cdef Hits H
    _columns(keep, &R, &F, &H, batch, read_group_id, ref_names, contig_offsets, strand, contig, pos, None, nm,
             score, cigar, cigar_off, md, md_off)
    cdef Buf b
    _buf_init(&b, <size_t> (n_reads * 256 + 4096))
    cdef int64_t i, r, k, k0, c, mapped = 0, multi = 0, n_others
    cdef bint rev
    try:
        with nogil:
            for i in range(n_reads):
                r = r0 + i
                k0 = first[i]
                if report[i] == 0 or H.pos[k0] < 0:
                    put_name(&b, &R, r)
                    puts(&b, b"\t4\t*\t0\t0\t*\t*\t0\t0\t")
                    put_seq_qual(&b, &R, r, False, False)
                    put_line_end(&b, &R)
                    continue
                mapped += 1
                n_others = 0
                for k in range(k0 + 1, k0 + report[i]):
                    n_others += H.pos[k] >= 0
                multi += n_others > 0
                # the primary record
                c = H.contig[k0]
                rev = H.strand[k0] != 0
                put_name(&b, &R, r)
                putc(&b, b'\t')
                put_int(&b, FLAG_REVERSE if rev else 0)
                putc(&b, b'\t')
                put_ref(&b, &F, c)
                putc(&b, b'\t')
                put_int(&b, H.pos[k0] - F.offset[c] + 1)
                putc(&b, b'\t')
                put_int(&b, mapq[i])
                putc(&b, b'\t')
                put_hit_cigar(&b, &H, k0)
                puts(&b, b"\t*\t0\t0\t")
                put_seq_qual(&b, &R, r, rev, False)
                _put_hit_tags(&b, &H, k0)
                if sub[i] >= 0:
                    puts(&b, b"\tXS:i:")
                    put_int(&b, sub[i])
                if n_others and not secondary:
                    puts(&b, b"\tXA:Z:")
                    for k in range(k0 + 1, k0 + report[i]):
                        if H.pos[k] >= 0:
                            _put_xa_entry(&b, &F, &H, k)
                put_line_end(&b, &R)
                if not secondary:
                    continue
                for k in range(k0 + 1, k0 + report[i]):
                    if H.pos[k] >= 0:
                        _put_secondary(&b, &R, &F, &H, r, k, 0, -1, -1)
        if b.failed:
            raise MemoryError("SAM text buffer")
        text = _bytes_of(b.p, b.n)
    finally:
        free(b.p)
    return text, int(mapped), int(multi)


# --- pairs ----------------------------------------------------------------------------------------------------


cpdef int64_t pair_flags(bint first, bint mapped, bint mate_mapped, bint reverse, bint mate_reverse,
                         bint proper) noexcept nogil:
    """FLAG of one mate's primary record (SAM v1.6): 0x1, 0x2 only if ``proper`` and both mapped, 0x4 / 0x8
    for an unmapped read / mate, 0x10 / 0x20 for a mapped read / mate on the reverse strand, 0x40 / 0x80."""
    cdef int64_t flag = FLAG_PAIRED | (FLAG_READ1 if first else FLAG_READ2)
    if proper and mapped and mate_mapped:
        flag |= FLAG_PROPER_PAIR
    if not mapped:
        flag |= FLAG_UNMAPPED
    if not mate_mapped:
        flag |= FLAG_MATE_UNMAPPED
    if mapped and reverse:
        flag |= FLAG_REVERSE
    if mate_mapped and mate_reverse:
        flag |= FLAG_MATE_REVERSE
    return flag


cpdef int64_t template_length_a(int64_t pos_a, int64_t end_a, int64_t pos_b, int64_t end_b) noexcept nogil:
    """Mate 1's TLEN (SAM v1.6 item 9; mate 2's is its negation): rightmost end - leftmost start, positive
    when mate 1 is leftmost (smaller POS, or equal)."""
    cdef int64_t length = (end_a if end_a > end_b else end_b) - (pos_a if pos_a < pos_b else pos_b)
    return length if pos_a <= pos_b else -length


def format_pairs(batch, ref_names, contig_offsets, int64_t r0, int64_t n_reads,
                 const int64_t[::1] prim, const uint8_t[::1] mapped, const int64_t[::1] mapq,
                 const int64_t[::1] sub, const int64_t[::1] rep_ptr, const int64_t[::1] rep_item,
                 const uint8_t[::1] proper, strand, contig, pos, ref_end, nm, score, cigar, cigar_off, md, md_off,
                 bint secondary, read_group_id=None):
    """SAM text (bytes) of the pairs of reads r0 .. r0 + n_reads - 1 of ``batch`` (r0 and n_reads even; reads
    alternate mate 1, mate 2) and the counts (mapped, multi, proper, mate_unmapped) of the mapped reads.

    Per read (local index i): ``mapped[i]``, its primary item ``prim[i]``, ``mapq[i]``, ``sub[i]`` (XS, -1 for
    none) and its other reported items ``rep_item[rep_ptr[i]:rep_ptr[i+1]]`` (all aligned); per pair
    ``proper[p]``. Per item k as for :func:`format_single_end`, plus the global ``ref_end``. Records per pair:
    mate 1's primary (or unmapped) record, mate 2's, then the mates' 0x100 records with ``secondary``
    (docs/paired.md, "Flags and fields").
    """
    if n_reads % 2:
        raise ValueError("format_pairs needs whole pairs")
    cdef list keep = []
    cdef Reads R
    cdef Refs F
    cdef Hits H
    _columns(keep, &R, &F, &H, batch, read_group_id, ref_names, contig_offsets, strand, contig, pos, ref_end, nm,
             score, cigar, cigar_off, md, md_off)
    cdef Buf b
    _buf_init(&b, <size_t> (n_reads * 300 + 4096))
    cdef int64_t p, m, i, r, k, k0, c, t, n_mapped = 0, multi = 0, n_proper = 0, mate_unmapped = 0
    cdef int64_t item[2]
    cdef int64_t ctg[2]
    cdef int64_t start[2]
    cdef int64_t tlen[2]
    cdef int64_t flag[2]
    cdef int64_t place  # the mate whose position RNEXT/PNEXT give (the read itself when its mate is unmapped)
    cdef bint ok[2]
    cdef bint rev[2]
    try:
        with nogil:
            for p in range(n_reads // 2):
                for m in range(2):
                    i = 2 * p + m
                    ok[m] = mapped[i] != 0
                    rev[m] = False
                    if ok[m]:
                        k = prim[i]
                        item[m] = k
                        ctg[m] = H.contig[k]
                        start[m] = H.pos[k] - F.offset[ctg[m]]
                        rev[m] = H.strand[k] != 0
                tlen[0] = tlen[1] = 0
                if ok[0] and ok[1] and ctg[0] == ctg[1]:
                    tlen[0] = template_length_a(start[0], H.ref_end[item[0]] - F.offset[ctg[0]], start[1],
                                                H.ref_end[item[1]] - F.offset[ctg[1]])
                    tlen[1] = -tlen[0]
                for m in range(2):
                    i = 2 * p + m
                    r = r0 + i
                    flag[m] = pair_flags(m == 0, ok[m], ok[1 - m], rev[m], rev[1 - m], proper[p] != 0)
                    put_name(&b, &R, r)
                    putc(&b, b'\t')
                    put_int(&b, flag[m])
                    putc(&b, b'\t')
                    if not ok[m]:
                        # an unmapped read sits at its mate's position
                        if ok[1 - m]:
                            put_ref(&b, &F, ctg[1 - m])
                            putc(&b, b'\t')
                            put_int(&b, start[1 - m] + 1)
                            puts(&b, b"\t0\t*\t=\t")
                            put_int(&b, start[1 - m] + 1)
                            puts(&b, b"\t0\t")
                        else:
                            puts(&b, b"*\t0\t0\t*\t*\t0\t0\t")
                        put_seq_qual(&b, &R, r, False, False)
                        if ok[1 - m]:
                            puts(&b, b"\tMC:Z:")
                            put_hit_cigar(&b, &H, item[1 - m])
                        put_line_end(&b, &R)
                        continue
                    place = 1 - m if ok[1 - m] else m
                    k0 = item[m]
                    n_mapped += 1
                    n_proper += (flag[m] & FLAG_PROPER_PAIR) != 0
                    mate_unmapped += not ok[1 - m]
                    multi += rep_ptr[i + 1] > rep_ptr[i]
                    put_ref(&b, &F, ctg[m])
                    putc(&b, b'\t')
                    put_int(&b, start[m] + 1)
                    putc(&b, b'\t')
                    put_int(&b, mapq[i])
                    putc(&b, b'\t')
                    put_hit_cigar(&b, &H, k0)
                    putc(&b, b'\t')
                    if ctg[place] == ctg[m]:
                        putc(&b, b'=')
                    else:
                        put_ref(&b, &F, ctg[place])
                    putc(&b, b'\t')
                    put_int(&b, start[place] + 1)
                    putc(&b, b'\t')
                    put_int(&b, tlen[m])
                    putc(&b, b'\t')
                    put_seq_qual(&b, &R, r, rev[m], False)
                    _put_nm_md(&b, &H, k0)
                    if ok[1 - m]:
                        puts(&b, b"\tMC:Z:")
                        put_hit_cigar(&b, &H, item[1 - m])
                    _put_as(&b, &H, k0)
                    if sub[i] >= 0:
                        puts(&b, b"\tXS:i:")
                        put_int(&b, sub[i])
                    if rep_ptr[i + 1] > rep_ptr[i] and not secondary:
                        puts(&b, b"\tXA:Z:")
                        for t in range(rep_ptr[i], rep_ptr[i + 1]):
                            _put_xa_entry(&b, &F, &H, rep_item[t])
                    put_line_end(&b, &R)
                if not secondary:
                    continue
                # the mates' other hits as 0x100 records, with the primary's pair flags and mate fields
                for m in range(2):
                    if not ok[m]:
                        continue
                    i = 2 * p + m
                    r = r0 + i
                    place = 1 - m if ok[1 - m] else m
                    for t in range(rep_ptr[i], rep_ptr[i + 1]):
                        _put_secondary(&b, &R, &F, &H, r, rep_item[t], flag[m] & (
                            FLAG_PAIRED | FLAG_READ1 | FLAG_READ2 | FLAG_MATE_UNMAPPED | FLAG_MATE_REVERSE),
                            ctg[place], start[place])
        if b.failed:
            raise MemoryError("SAM text buffer")
        text = _bytes_of(b.p, b.n)
    finally:
        free(b.p)
    return text, int(n_mapped), int(multi), int(n_proper), int(mate_unmapped)
