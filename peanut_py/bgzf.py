"""BGZF (SAM v1.6, section 4.1): the block-compressed stream that BAM files are.

The stream is cut into blocks of BLOCK_SIZE bytes whatever is written in what pieces, so the file is the same
byte for byte whatever the threads or batch sizes of the run; the blocks are compressed independently, side
by side on a thread pool (the deflate call releases the interpreter lock), and written in order.
"""
import struct
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from ._bgzf import frame_blocks

try:  # Intel's ISA-L deflate, several times faster than zlib (installed with dnaio on x86-64)
    from isal import isal_zlib as _deflate

    LEVEL = 2
except ImportError:  # pragma: no cover - platforms without isal
    _deflate = zlib
    LEVEL = 6

# htslib's block size: the compressed block (with its 26 bytes of header and footer) must stay below 64 KiB
BLOCK_SIZE = 0xFF00
# blocks compressed by one task of the thread pool (about 1 MiB of input)
TASK_BLOCKS = 16
# the empty block every BGZF file ends with
EOF_BLOCK = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")


def _deflate_body(block):
    body = _deflate.compress(block, LEVEL, -15)
    if len(body) > BLOCK_SIZE:  # incompressible: stored, which a block of BLOCK_SIZE bytes leaves room for
        body = zlib.compress(block, 0, -15)
    return body


def compress_blocks(blocks):
    """The BGZF blocks holding ``blocks`` (bytes-like objects of at most BLOCK_SIZE bytes), one after the
    other.  Each block is deflated by one call that releases the interpreter lock; the headers, CRC-32s and
    footers of all blocks are made by one more such call (_bgzf.pyx), so that a compression thread waits for
    the lock once per deflate call rather than at every step of each block."""
    return frame_blocks(blocks, [_deflate_body(block) for block in blocks])


def compression_threads(threads):
    """Compression threads for a run of ``threads`` (-t): a quarter of them.  ISA-L compresses a few hundred
    MB/s per thread, so a quarter keeps up with the postprocessing, whose threads would otherwise have to share
    the cores with as many more."""
    return max(1, int(threads) // 4)


class BgzfWriter:
    """Bytes in, BGZF blocks out to ``sink(bytes)``, compressed on ``threads`` threads."""

    def __init__(self, sink, threads=1):
        self._sink = sink
        self._pending = b""
        self._threads = max(1, int(threads))
        self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="peanut-bgzf") \
            if self._threads > 1 else None
        self._queued = deque()

    def write(self, data):
        # the blocks are views of ``data`` but for the one it shares with the tail left over from the last
        # write, and the new tail: at most two blocks copied, whatever the size of ``data``
        # views of a mutable buffer could change before they are compressed
        view = memoryview(data if isinstance(data, bytes) else bytes(data)).cast("B")
        blocks = []
        at = 0
        if self._pending:
            at = BLOCK_SIZE - len(self._pending)
            if len(view) < at:
                self._pending += view
                return
            blocks.append(self._pending + view[:at])
            self._pending = b""
        whole = at + (len(view) - at) // BLOCK_SIZE * BLOCK_SIZE
        blocks += [view[a:a + BLOCK_SIZE] for a in range(at, whole, BLOCK_SIZE)]
        self._pending = bytes(view[whole:])
        # TASK_BLOCKS to a task, so that the pool's bookkeeping stays small beside the deflate calls
        for a in range(0, len(blocks), TASK_BLOCKS):
            self._compress(blocks[a:a + TASK_BLOCKS])

    def flush(self):
        """End the current block here (as htslib does after the BAM header) and write every block."""
        if self._pending:
            block, self._pending = self._pending, b""
            self._compress([block])
        while self._queued:
            self._sink(self._queued.popleft().result())

    def close(self):
        """Everything written, then the end-of-file block."""
        try:
            self.flush()
            self._sink(EOF_BLOCK)
        finally:
            self.abort()

    def abort(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._queued.clear()

    def _compress(self, blocks):
        if self._pool is None:
            self._sink(compress_blocks(blocks))
            return
        self._queued.append(self._pool.submit(compress_blocks, blocks))
        # a bounded queue: write out the oldest blocks once every thread has a few waiting
        while len(self._queued) > 4 * self._threads or (self._queued and self._queued[0].done()):
            self._sink(self._queued.popleft().result())


def bam_header(text, names, lengths):
    """The uncompressed BAM header: magic, the SAM header text and the reference dictionary."""
    text = text.encode() if isinstance(text, str) else bytes(text)
    parts = [b"BAM\x01", struct.pack("<i", len(text)), text, struct.pack("<i", len(names))]
    for name, length in zip(names, lengths):
        name = name.encode() if isinstance(name, str) else bytes(name)
        parts += [struct.pack("<i", len(name) + 1), name, b"\x00", struct.pack("<i", int(length))]
    return b"".join(parts)


__all__ = ["BLOCK_SIZE", "EOF_BLOCK", "compress_blocks", "compression_threads", "BgzfWriter", "bam_header"]
