# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""SAM text of a chunk of single-end reads, written without the GIL.

The same records as ``Postprocessor._records`` followed by ``sam.format_records`` (kept as the reference in
tests/test_samtext.py): per read an unmapped record, or its primary hit with NM/MD/AS/XS and the other
reported hits either in BWA's XA tag or as 0x100 records. Everything is read from flat arrays so that
the postprocessing pool's threads format their chunks at the same time.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, strlen

cdef enum:
    FLAG_UNMAPPED = 0x4
    FLAG_REVERSE = 0x10
    FLAG_SECONDARY = 0x100

cdef const char *OP_CHARS = b"MIDNSHP=X"

# IUPAC complement of an uppercase letter (sam.reverse_complement); other bytes map to themselves
cdef uint8_t COMPLEMENT[256]
for _i in range(256):
    COMPLEMENT[_i] = _i
for _a, _b in zip(b"ACGTRYKMBVDHSWN", b"TGCAYRMKVBHDSWN"):
    COMPLEMENT[_a] = _b


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


def _flat_strings(strings):
    """(uint8 text, int64 offsets) of a list of str/bytes."""
    encoded = [s.encode() if isinstance(s, str) else bytes(s) for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    if encoded:
        np.cumsum([len(s) for s in encoded], out=offsets[1:])
    text = np.frombuffer(b"".join(encoded), dtype=np.uint8) if offsets[len(encoded)] else np.zeros(1, np.uint8)
    return text, offsets


def format_single_end(batch, ref_names, const int64_t[::1] contig_offsets, int64_t r0, int64_t n_reads,
                      const int32_t[::1] report, const int64_t[::1] first, const int64_t[::1] mapq,
                      const int64_t[::1] sub, const uint8_t[::1] strand, const int64_t[::1] contig,
                      const int64_t[::1] pos, const int32_t[::1] nm, const int32_t[::1] score,
                      const uint32_t[::1] cigar, const int64_t[::1] cigar_off, const uint8_t[::1] md,
                      const int64_t[::1] md_off, bint secondary, read_group_id=None):
    """SAM text (bytes) of reads r0 .. r0 + n_reads - 1 of ``batch`` and the counts (mapped, multi).

    Per read r (local index i = r - r0): ``report[i]`` hits are reported, the first at aligned item
    ``first[i]`` (the primary), the others after it (items with pos < 0 have no alignment and are skipped);
    ``mapq[i]``, ``sub[i]`` (XS, -1 for none). Per item k: strand, contig, global pos, nm, score, the CIGAR
    ``cigar[cigar_off[k]:cigar_off[k+1]]`` (BAM encoding) and the MD string ``md[md_off[k]:md_off[k+1]]``.
    """
    name_text, name_off = batch.name_columns()
    seq_text = batch.seq_text
    qual_text = batch.qual_text
    cdef const uint8_t[::1] nv = name_text
    cdef const int64_t[::1] nov = name_off
    cdef const uint8_t[::1] sv = np.frombuffer(seq_text, dtype=np.uint8) if len(seq_text) else np.zeros(1, np.uint8)
    cdef const int64_t[::1] sov = np.ascontiguousarray(batch.offsets, dtype=np.int64)
    cdef const uint8_t[::1] qv = (np.frombuffer(qual_text, dtype=np.uint8) if qual_text else np.zeros(1, np.uint8))
    rg = f"\tRG:Z:{read_group_id}".encode() if read_group_id else b""
    cdef const uint8_t[::1] rgv = np.frombuffer(rg, dtype=np.uint8) if rg else np.zeros(1, np.uint8)
    ref_text, ref_off = _flat_strings(ref_names)
    cdef const uint8_t[::1] rv = ref_text
    cdef const int64_t[::1] rov = ref_off
    cdef const uint32_t[::1] cv = cigar if cigar.shape[0] else np.zeros(1, np.uint32)
    cdef const uint8_t[::1] mv = md if md.shape[0] else np.zeros(1, np.uint8)

    cdef Reads R
    R.name = &nv[0]
    R.name_off = &nov[0]
    R.seq = &sv[0]
    R.seq_off = &sov[0]
    R.qual = &qv[0] if qual_text is not None else NULL
    R.rg = &rgv[0]
    R.rg_len = len(rg)
    cdef Buf b
    b.n = 0
    b.cap = <size_t> (n_reads * 256 + 4096)
    b.failed = 0
    b.p = <char *> malloc(b.cap)
    if b.p == NULL:
        raise MemoryError("SAM text buffer")
    cdef int64_t i, r, k, k0, j, c, mapped = 0, multi = 0, n_others
    cdef bint rev
    try:
        with nogil:
            for i in range(n_reads):
                r = r0 + i
                k0 = first[i]
                if report[i] == 0 or pos[k0] < 0:
                    put_name(&b, &R, r)
                    puts(&b, b"\t4\t*\t0\t0\t*\t*\t0\t0\t")
                    put_seq_qual(&b, &R, r, False, False)
                    put(&b, <const char *> R.rg, R.rg_len)
                    putc(&b, b'\n')
                    continue
                mapped += 1
                n_others = 0
                for k in range(k0 + 1, k0 + report[i]):
                    n_others += pos[k] >= 0
                multi += n_others > 0
                # the primary record
                c = contig[k0]
                rev = strand[k0] != 0
                put_name(&b, &R, r)
                putc(&b, b'\t')
                put_int(&b, FLAG_REVERSE if rev else 0)
                putc(&b, b'\t')
                put(&b, <const char *> &rv[0] + rov[c], rov[c + 1] - rov[c])
                putc(&b, b'\t')
                put_int(&b, pos[k0] - contig_offsets[c] + 1)
                putc(&b, b'\t')
                put_int(&b, mapq[i])
                putc(&b, b'\t')
                put_cigar(&b, &cv[0] + cigar_off[k0], cigar_off[k0 + 1] - cigar_off[k0])
                puts(&b, b"\t*\t0\t0\t")
                put_seq_qual(&b, &R, r, rev, False)
                _put_hit_tags(&b, k0, nm, score, mv, md_off)
                if sub[i] >= 0:
                    puts(&b, b"\tXS:i:")
                    put_int(&b, sub[i])
                if n_others and not secondary:
                    puts(&b, b"\tXA:Z:")
                    for k in range(k0 + 1, k0 + report[i]):
                        if pos[k] < 0:
                            continue
                        c = contig[k]
                        put(&b, <const char *> &rv[0] + rov[c], rov[c + 1] - rov[c])
                        putc(&b, b',')
                        putc(&b, b'-' if strand[k] else b'+')
                        put_int(&b, pos[k] - contig_offsets[c] + 1)
                        putc(&b, b',')
                        put_cigar(&b, &cv[0] + cigar_off[k], cigar_off[k + 1] - cigar_off[k])
                        putc(&b, b',')
                        put_int(&b, nm[k])
                        putc(&b, b';')
                put(&b, <const char *> R.rg, R.rg_len)
                putc(&b, b'\n')
                if not secondary:
                    continue
                for k in range(k0 + 1, k0 + report[i]):
                    if pos[k] < 0:
                        continue
                    c = contig[k]
                    put_name(&b, &R, r)
                    putc(&b, b'\t')
                    put_int(&b, FLAG_SECONDARY | (FLAG_REVERSE if strand[k] else 0))
                    putc(&b, b'\t')
                    put(&b, <const char *> &rv[0] + rov[c], rov[c + 1] - rov[c])
                    putc(&b, b'\t')
                    put_int(&b, pos[k] - contig_offsets[c] + 1)
                    puts(&b, b"\t0\t")
                    put_cigar(&b, &cv[0] + cigar_off[k], cigar_off[k + 1] - cigar_off[k])
                    puts(&b, b"\t*\t0\t0\t")
                    put_seq_qual(&b, &R, r, False, True)
                    _put_hit_tags(&b, k, nm, score, mv, md_off)
                    put(&b, <const char *> R.rg, R.rg_len)
                    putc(&b, b'\n')
        if b.failed:
            raise MemoryError("SAM text buffer")
        text = b.p[:b.n]
    finally:
        free(b.p)
    return text, int(mapped), int(multi)


cdef inline void _put_hit_tags(Buf *b, int64_t k, const int32_t[::1] nm, const int32_t[::1] score,
                               const uint8_t[::1] md, const int64_t[::1] md_off) noexcept nogil:
    puts(b, b"\tNM:i:")
    put_int(b, nm[k])
    puts(b, b"\tMD:Z:")
    put(b, <const char *> &md[0] + md_off[k], md_off[k + 1] - md_off[k])
    puts(b, b"\tAS:i:")
    put_int(b, score[k])
