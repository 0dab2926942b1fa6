"""Reads inputs opened once and read front to back: regular files, FIFOs, process substitutions ``<(...)``
and standard input (``-``).

Nothing here seeks or opens an input a second time, so a stream works as a file does: the compression is
recognised from the magic bytes read off the front of the input (and put back in front of the rest), and text
one parser has read but not used is handed to the next one in front of the rest of the input
(:class:`Prefixed`). Where an error is found is counted on the way (:class:`Counted`) instead of being looked
up in the file afterwards.
"""
import bz2
import fcntl
import importlib
import io
import lzma
import os
import stat
import sys
import zlib

import numpy as np

from .errors import InputError

STDIN = "-"
STDIN_NAME = "standard input"

COMPRESSION_MAGIC = ((b"\x1f\x8b", "gz"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zst"))
_MAGIC_LENGTH = max(len(magic) for magic, _ in COMPRESSION_MAGIC)
# Compressed bytes read per step: also the piece a damaged stream loses (the decompressors raise for a whole
# call), so the record named in the message is where the damage starts, give or take that much text.
_COMPRESSED_CHUNK = 1 << 20
_TEXT_STEP = 1 << 22  # decompressed bytes per step at most (a highly compressible input stays bounded)
# A pipe holds 64 KiB by default: a larger one lets its writer run ahead and halves the reads and wake-ups
_PIPE_SIZE = 1 << 20


def display_name(path):
    """How messages name an input: ``-`` is standard input."""
    path = os.fspath(path)
    return STDIN_NAME if path == STDIN else path


def _identity(path):
    """(device, inode, mode) of what ``path`` opens, or None where it cannot be looked at."""
    try:
        st = os.fstat(0) if path == STDIN else os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mode


def readable_again(path):
    """Whether ``path`` can be opened and read from the start more than once: a regular file (plain or
    compressed), not standard input, a FIFO or a process substitution <(...), which the first reader
    consumes (several mapping processes each read the input, or their parts of it: shards.py)."""
    path = os.fspath(path)
    if path == STDIN:
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True  # missing: the opening names it


def check_inputs(reads, mates=None):
    """Refuse, before any work, two inputs that would be one stream read twice: standard input as both READS
    and MATES, or one FIFO (or other stream) named for both. Each input is read once, front to back, so
    anything that is not a regular file is consumed by the first reader and the other would see nothing.
    Missing files and directories are left to the opening, which names them."""
    if mates is None:
        return
    reads, mates = os.fspath(reads), os.fspath(mates)
    if reads == STDIN and mates == STDIN:
        raise InputError(STDIN_NAME, "given as both READS and MATES, but it can be read only once; give the mates "
                         "as a file or a process substitution <(...), or interleave the pairs and use -p")
    first, second = _identity(reads), _identity(mates)
    if first is not None and first == second and not stat.S_ISREG(first[2]) and not stat.S_ISDIR(first[2]):
        raise InputError(display_name(mates), f"is the same stream as READS ({display_name(reads)}), which can be "
                         "read only once; give the mates separately, or interleave the pairs and use -p")


class Prefixed(io.RawIOBase):
    """``head`` bytes, then what ``source`` yields, or (with ``error``) that exception where the source would
    go on: a failure an earlier reader met in the source, raised again at the same place of the text."""

    def __init__(self, head, source, error=None):
        super().__init__()
        self._head = memoryview(bytes(head))
        self._source = source
        self._error = error

    def readable(self):
        return True

    def readinto(self, buffer):
        if len(self._head):
            n = min(len(buffer), len(self._head))
            memoryview(buffer).cast("B")[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        if self._error is not None:
            raise self._error
        return self._source.readinto(buffer)


class Counted(Prefixed):
    """A :class:`Prefixed` that counts the newlines it hands out and the line (0-based, counted from its
    start) of the first non-ASCII byte: dnaio reports those failures per buffer, these locate them."""

    def __init__(self, head, source, error=None):
        super().__init__(head, source, error)
        self.newlines = 0
        self.first_non_ascii_line = None

    def readinto(self, buffer):
        n = super().readinto(buffer)
        if n:
            data = memoryview(buffer).cast("B")[:n].tobytes()
            if self.first_non_ascii_line is None and not data.isascii():
                pos = int(np.argmax(np.frombuffer(data, dtype=np.uint8) >= 128))
                self.first_non_ascii_line = self.newlines + data.count(b"\n", 0, pos)
            self.newlines += data.count(b"\n")
        return n


def _optional_attr(module, *names):
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    return next((getattr(mod, n) for n in names if hasattr(mod, n)), None)


# isal and zlib-ng (which come with dnaio's xopen) inflate gzip faster than zlib
_INFLATE = _optional_attr("isal.isal_zlib", "decompressobj") or _optional_attr("zlib_ng.zlib_ng", "decompressobj")
_ZSTD = _optional_attr("compression.zstd", "ZstdDecompressor") or _optional_attr("backports.zstd", "ZstdDecompressor")


# What a damaged or truncated compressed input raises
DECOMPRESSION_ERRORS = tuple(
    [EOFError, OSError, zlib.error, lzma.LZMAError]
    + [
        e
        for e in (
            _optional_attr("isal.isal_zlib", "error"),
            _optional_attr("zlib_ng.zlib_ng", "error"),
            _optional_attr("backports.zstd", "ZstdError"),
            _optional_attr("compression.zstd", "ZstdError"),
        )
        if e is not None
    ]
)


def _decompressor(compression):
    """A fresh decompressor for one member (gzip), stream (bzip2, xz) or frame (zstd)."""
    if compression == "gz":
        return (_INFLATE or zlib.decompressobj)(31)
    if compression == "bz2":
        return bz2.BZ2Decompressor()
    if compression == "xz":
        return lzma.LZMADecompressor()
    return _ZSTD()


class Decompressed(io.RawIOBase):
    """The decompressed text of ``source``: members, streams or frames one after the other (bgzip,
    ``cat a.gz b.gz``). Everything that decompresses before a damage or a truncation is handed out first;
    the failure is raised after it, so the text counted up to the failure is the text intact."""

    def __init__(self, source, compression):
        super().__init__()
        self._source, self._compression = source, compression
        self._d = _decompressor(compression)
        self._input = b""  # compressed bytes read, not yet given to a decompressor
        self._draining = False  # the decompressor holds output of input it was given
        self._in_member = False  # inside a member: the input must not end here
        self._out = memoryview(b"")
        self._failure = None
        self._ended = False

    def readable(self):
        return True

    def readinto(self, buffer):
        while not len(self._out):
            if self._failure is not None:
                raise self._failure
            if self._ended:
                return 0
            self._step()
        n = min(len(buffer), len(self._out))
        memoryview(buffer).cast("B")[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _step(self):
        """Decompress the next piece of text, or note the end or the failure."""
        if not self._input and not self._draining:
            self._input = self._source.read(_COMPRESSED_CHUNK)
            if not self._input:
                if self._in_member:
                    self._failure = EOFError("compressed data ends before the end of its stream")
                self._ended = True
                return
        d, data = self._d, self._input
        self._in_member = True
        try:
            out = d.decompress(data, _TEXT_STEP)
        except DECOMPRESSION_ERRORS as e:
            self._failure = e
            return
        # zlib's objects hand back the input they did not use; the others keep it and say whether they want more
        self._input = getattr(d, "unconsumed_tail", b"")
        self._draining = not getattr(d, "needs_input", True)
        if d.eof:  # a member ends: what follows is the next one (or trailing garbage, an error there)
            self._input, self._draining, self._in_member = d.unused_data, False, False
            self._d = _decompressor(self._compression)
        self._out = memoryview(out)


def read_up_to(stream, size):
    """(up to ``size`` bytes of ``stream``, fewer only at its end or failure; the decompression failure met,
    or None). A pipe hands out what has been written so far; this reads on until ``size``."""
    parts, got = [], 0
    try:
        while got < size:
            part = stream.read(size - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
    except DECOMPRESSION_ERRORS as e:
        return b"".join(parts), e
    return b"".join(parts), None


class _Window(io.RawIOBase):
    """Bytes ``[offset, offset + length)`` of an open file (``length`` None: to its end) as a stream."""

    def __init__(self, raw, offset, length):
        super().__init__()
        raw.seek(offset)
        self._raw, self._left = raw, length

    def readable(self):
        return True

    def readinto(self, buffer):
        if self._left is None:
            return self._raw.readinto(buffer)
        view = memoryview(buffer).cast("B")[: self._left]
        n = self._raw.readinto(view) if len(view) else 0
        self._left -= n
        return n


class Input:
    """One reads input, opened once: ``text`` is its decompressed content as a binary stream (``readinto``,
    ``read``), ``compression`` 'gz', 'bz2', 'xz', 'zst' or None, ``name`` what messages call it.

    ``path`` '-' is standard input (left open when this closes). ``span`` (offset, length or None for the
    rest): only those bytes of an uncompressed file, read as they are (a mapping process's share of the
    input: input_ranges.py). Fails with InputError naming the input.
    """

    def __init__(self, path, span=None):
        self.path = os.fspath(path)
        self.name = display_name(self.path)
        self.compression = None
        self.text = None
        if span is not None:
            try:
                self._raw = open(self.path, "rb", buffering=0)
                self.text = _Window(self._raw, *span)
            except OSError as e:
                raise InputError(self.name, f"cannot read: {e.strerror or e}") from None
            return
        try:
            if self.path == STDIN:
                if sys.stdin is None:  # closed when Python started: descriptor 0 may be another file by now
                    raise InputError(STDIN_NAME, "is closed; give the reads on standard input or name a file")
                self._raw = open(0, "rb", buffering=0, closefd=False)
            else:
                self._raw = open(self.path, "rb", buffering=0)
        except FileNotFoundError:
            raise InputError(self.name, "no such file") from None
        except IsADirectoryError:
            raise InputError(self.name, "is a directory, not a reads file") from None
        except OSError as e:
            raise InputError(self.name, f"cannot open: {e.strerror or e}") from None
        try:
            self._widen_pipe()
            head = self._read_head()
            raw = Prefixed(head, self._raw)
            self.compression = next((fmt for magic, fmt in COMPRESSION_MAGIC if head.startswith(magic)), None)
            if self.compression is None:
                self.text = raw
            else:
                if self.compression == "zst" and _ZSTD is None:
                    raise InputError(self.name, "is zstd-compressed, but no zstd decompressor is installed "
                                     "(pip install backports.zstd)")
                self.text = Decompressed(raw, self.compression)
        except BaseException:
            self._raw.close()
            raise

    def _widen_pipe(self):
        try:
            if stat.S_ISFIFO(os.fstat(self._raw.fileno()).st_mode):
                fcntl.fcntl(self._raw.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        except (OSError, AttributeError):
            pass  # not Linux, or over the system's limit (/proc/sys/fs/pipe-max-size): the default size works

    def _read_head(self):
        """The first bytes (as many as the longest magic number): a pipe may hand them out one by one."""
        head = b""
        try:
            while len(head) < _MAGIC_LENGTH:
                more = self._raw.read(_MAGIC_LENGTH - len(head))
                if not more:
                    break
                head += more
        except OSError as e:
            raise InputError(self.name, f"cannot read: {e.strerror or e}") from None
        return head

    def close(self):
        try:
            if self.text is not None:
                self.text.close()
        finally:
            self._raw.close()
