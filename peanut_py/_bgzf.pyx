# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""BGZF block framing (SAM v1.6, section 4.1) without the interpreter lock: the gzip header with its BC field,
the deflated body, the CRC-32 and the length of the input.

bgzf.py deflates each block through ISA-L's Python binding, which must hold the interpreter lock between
calls; everything else about a block is done here, for many blocks in one call, so that a compression thread
takes the lock back once per block and once per task instead of once per call into zlib.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uint8_t, uint32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

# gzip header of a BGZF block up to its BSIZE field: magic, deflate, FEXTRA, mtime 0, no extra flags, OS
# unknown, XLEN 6, the BC subfield of 2 bytes
cdef const char *HEADER = b"\x1f\x8b\x08\x04\x00\x00\x00\x00\x00\xff\x06\x00BC\x02\x00"
cdef enum:
    HEADER_SIZE = 16
    FRAME_SIZE = 26  # the header, BSIZE, and the footer (CRC-32, ISIZE)

cdef uint32_t CRC[16][256]


cdef void _crc_tables() noexcept:
    """Slicing-by-16 tables of the reflected CRC-32 (polynomial 0xEDB88320) that gzip uses."""
    cdef uint32_t c
    cdef int i, k
    for i in range(256):
        c = i
        for k in range(8):
            c = (c >> 1) ^ (<uint32_t> 0xEDB88320 if c & 1 else 0)
        CRC[0][i] = c
    for i in range(256):
        for k in range(1, 16):
            CRC[k][i] = (CRC[k - 1][i] >> 8) ^ CRC[0][CRC[k - 1][i] & 0xFF]


_crc_tables()


cdef inline uint32_t _le32(const uint8_t *p) noexcept nogil:
    return <uint32_t> p[0] | (<uint32_t> p[1] << 8) | (<uint32_t> p[2] << 16) | (<uint32_t> p[3] << 24)


cdef uint32_t _crc32(const uint8_t *p, size_t n) noexcept nogil:
    cdef uint32_t c = ~(<uint32_t> 0), a, b, d, e
    while n >= 16:
        a = _le32(p) ^ c
        b = _le32(p + 4)
        d = _le32(p + 8)
        e = _le32(p + 12)
        c = (CRC[15][a & 0xFF] ^ CRC[14][(a >> 8) & 0xFF] ^ CRC[13][(a >> 16) & 0xFF] ^ CRC[12][a >> 24]
             ^ CRC[11][b & 0xFF] ^ CRC[10][(b >> 8) & 0xFF] ^ CRC[9][(b >> 16) & 0xFF] ^ CRC[8][b >> 24]
             ^ CRC[7][d & 0xFF] ^ CRC[6][(d >> 8) & 0xFF] ^ CRC[5][(d >> 16) & 0xFF] ^ CRC[4][d >> 24]
             ^ CRC[3][e & 0xFF] ^ CRC[2][(e >> 8) & 0xFF] ^ CRC[1][(e >> 16) & 0xFF] ^ CRC[0][e >> 24])
        p += 16
        n -= 16
    while n:
        c = CRC[0][(c ^ p[0]) & 0xFF] ^ (c >> 8)
        p += 1
        n -= 1
    return ~c


cdef inline void _put16(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF


cdef inline void _put32(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = v >> 24


def crc32(data):
    """The gzip CRC-32 of ``data`` (a bytes-like object), as zlib.crc32 gives it."""
    cdef const uint8_t[::1] view = memoryview(data).cast("B") if len(data) else memoryview(b"\0").cast("B")
    cdef size_t n = len(data)
    cdef uint32_t c
    with nogil:
        c = _crc32(&view[0], n)
    return c


def frame_blocks(blocks, bodies):
    """The BGZF blocks holding ``blocks`` (bytes-like objects of at most 65,280 bytes each), deflated as
    ``bodies`` (raw deflate, bytes), one after the other."""
    cdef Py_ssize_t n_blocks = len(blocks), i, got = 0, total = 0, at = 0, size, length
    cdef Py_buffer *views
    cdef const char **body_data
    cdef Py_ssize_t *body_size
    cdef bytes out, body
    cdef uint8_t *dst
    if len(bodies) != n_blocks:
        raise ValueError(f"{len(bodies)} deflated bodies for {n_blocks} blocks")
    views = <Py_buffer *> malloc(max(n_blocks, 1) * sizeof(Py_buffer))
    body_data = <const char **> malloc(max(n_blocks, 1) * sizeof(char *))
    body_size = <Py_ssize_t *> malloc(max(n_blocks, 1) * sizeof(Py_ssize_t))
    try:
        if views == NULL or body_data == NULL or body_size == NULL:
            raise MemoryError()
        for i in range(n_blocks):
            PyObject_GetBuffer(blocks[i], &views[i], PyBUF_SIMPLE)
            got += 1
            body = bodies[i]
            body_data[i] = PyBytes_AS_STRING(body)
            body_size[i] = len(body)
            if views[i].len > 0xFF00 or FRAME_SIZE + body_size[i] > 65536:
                raise ValueError(f"block {i} ({views[i].len} bytes, {body_size[i]} deflated) does not fit a "
                                 "BGZF block")
            total += FRAME_SIZE + body_size[i]
        out = PyBytes_FromStringAndSize(NULL, total)
        dst = <uint8_t *> PyBytes_AS_STRING(out)
        # ``bodies`` and the buffers held keep every input alive while the lock is released
        with nogil:
            for i in range(n_blocks):
                length = views[i].len
                size = FRAME_SIZE + body_size[i]
                memcpy(dst + at, HEADER, HEADER_SIZE)
                _put16(dst + at + HEADER_SIZE, <uint32_t> (size - 1))
                memcpy(dst + at + HEADER_SIZE + 2, body_data[i], body_size[i])
                _put32(dst + at + size - 8, _crc32(<const uint8_t *> views[i].buf, length))
                _put32(dst + at + size - 4, <uint32_t> length)
                at += size
        return out
    finally:
        for i in range(got):
            PyBuffer_Release(&views[i])
        free(views)
        free(body_data)
        free(body_size)
