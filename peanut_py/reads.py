"""Reads in: FASTQ or FASTA (plain, gzip, bzip2, xz or zstd; detected by magic bytes) into ``ReadBatch``es.

FASTQ is read in big blocks and parsed by _fastq.pyx without the GIL, into columns (no Python object per
read). _fastq.pyx takes only the strict common form; at the first record it is not sure about, that file goes
on with dnaio (cutadapt's Cython parser: it validates every record and reports line numbers) from that
record, so odd files (``\\r\\n``, ...) are read and malformed ones fail exactly as they always did. FASTA is
read by the block parser below, which splits whole blocks at ``\\n>`` with C-level bytes methods.
The fallback's and FASTA's sequence letters are checked, uppercased and turned into base codes per batch with
NumPy lookup tables. docs/io.md explains the choices (parser, empty files, blank lines at the end, long
reads, '.' and '-').
"""
import bz2
import importlib
import lzma
import os
import re
import stat
import zlib
from collections import deque
from itertools import islice
from typing import Iterator, List, Optional

import dnaio
import numpy as np
from xopen import xopen

from . import _fastq
from .errors import InputError

# False: every FASTQ record goes through dnaio (the old path, kept as the tests' reference)
FAST_FASTQ = True

# Base codes of docs/architecture.md: A0 C1 G2 T3, any other letter (N, IUPAC) 4. Bytes that are neither
# letters nor '.'/'-' (old spellings of N) map to INVALID, so one max() over a batch finds them.
INVALID = 5
_CODE = np.full(256, INVALID, dtype=np.uint8)
for _c in range(ord("A"), ord("Z") + 1):
    _CODE[_c] = _CODE[_c + 32] = 4
for _i, _c in enumerate(b"ACGT"):
    _CODE[_c] = _CODE[_c + 32] = _i
_CODE[ord(".")] = _CODE[ord("-")] = 4

# Uppercase; '.' and '-' become N so that every SEQ written later is valid SAM.
_UPPER = bytes.maketrans(b"abcdefghijklmnopqrstuvwxyz.-", b"ABCDEFGHIJKLMNOPQRSTUVWXYZNN")
_UPPER_LUT = np.frombuffer(_UPPER, dtype=np.uint8)

_COMPRESSION_MAGIC = ((b"\x1f\x8b", "gz"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zst"))
_COMPRESSION_NAME = {"gz": "gzip", "bz2": "bzip2", "xz": "xz", "zst": "zstd"}
_FASTA_BLOCK = 1 << 22
_FASTQ_BLOCK = 1 << 23
# dnaio's FastqReader reads 128 KiB at a time (more once a record does not fit). It raises on non-ASCII bytes
# and decompression failures per read, before yielding the complete records of what it read: the fast path
# holds back the reads that end that close to a failure, so the fallback fails after the same records.
_DNAIO_BUFFER = 128 * 1024
_CHUNK = 1 << 14  # records taken per step when only max_bases limits a batch
_UNLIMITED = 1 << 62
_BINARY = "binary data (a non-ASCII byte): not FASTQ or FASTA text"
# dnaio's complaint about whitespace after the last record; anything else stays an error.
_BLANK_TAIL = re.compile(r"^Premature end of file encountered\. The incomplete final record was: '(?:\\[rnt]| )*'$")


class ReadBatch:
    """A batch of reads, as columns. For pairs (``paired``) the reads alternate mate 1, mate 2.

    ``codes``: uint8, the base codes of all reads concatenated; ``offsets``: int64, n + 1: read i is
    ``codes[offsets[i]:offsets[i + 1]]``, and the same range of ``seq_text`` (uint8 text: uppercased letters,
    '.' and '-' read as N) and ``qual_text`` (uint8 text, Phred+33; None for FASTA); names (up to the first whitespace; for pairs without a
    trailing /1 or /2) in ``name_columns()``. ``first_record``: 1-based record number of the batch's first
    read in its file (both files for pairs). ``names``, ``seqs``, ``quals`` are lists made from the columns
    on first use (for tests and the reference SAM formatter; the mapper reads the columns).
    """

    def __init__(self, codes, offsets, first_record, paired, seq_text, qual_text, name_text, name_offsets):
        self.codes = codes
        self.offsets = offsets
        self.first_record = first_record
        self.paired = paired
        self.seq_text = seq_text
        self.qual_text = qual_text
        self._name_columns = (name_text, name_offsets)

    @property
    def n(self) -> int:
        return len(self.offsets) - 1

    @property
    def names(self) -> List[str]:
        cached = self.__dict__.get("_names")
        if cached is None:
            text, offsets = self._name_columns
            text = text.tobytes().decode("latin-1")
            bounds = offsets.tolist()
            cached = self.__dict__["_names"] = [text[a:b] for a, b in zip(bounds, bounds[1:])]
        return cached

    @property
    def seqs(self) -> List[bytes]:
        cached = self.__dict__.get("_seqs")
        if cached is None:
            cached = self.__dict__["_seqs"] = _cut(self.seq_text.tobytes(), self.offsets)
        return cached

    @property
    def quals(self) -> Optional[List[bytes]]:
        if self.qual_text is None:
            return None
        cached = self.__dict__.get("_quals")
        if cached is None:
            cached = self.__dict__["_quals"] = _cut(self.qual_text.tobytes(), self.offsets)
        return cached

    def name_columns(self):
        """The names as one uint8 text and int64 offsets (for the SAM formatter, samtext.pyx)."""
        return self._name_columns

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def _cut(text, offsets):
    bounds = offsets.tolist()
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


# --- opening and failures -------------------------------------------------------------------------------


def check_regular_file(path):
    """Refuse what cannot be read more than once: the reader opens a file again to sniff its format, to
    switch parsers and to locate an error, so a pipe, FIFO, process substitution or standard input would hang
    or lose records.  Missing files and directories are left to the opening, which names them."""
    if path == "-":
        raise InputError("-", "reading reads from standard input is not supported yet; write them to a file "
                         "(plain or compressed) and give its name")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise InputError(path, "is a pipe, FIFO or device, not a regular file: reading reads from a stream is not "
                         "supported yet; write them to a file (plain or compressed) and give its name")


def _open_binary(path):
    """Open `path` for reading, decompressing by magic bytes (the name's extension does not matter)."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
        for magic, fmt in _COMPRESSION_MAGIC:
            if head.startswith(magic):
                # threads=0: decompress in this process (isal/zlib-ng), so failures surface as exceptions here.
                return xopen(path, "rb", threads=0, format=fmt), fmt
        return open(path, "rb", buffering=1 << 20), None
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, not a reads file") from None
    except OSError as e:
        raise InputError(path, f"cannot open: {e.strerror or e}") from None


def _optional_attr(module, *names):
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    return next((getattr(mod, n) for n in names if hasattr(mod, n)), None)


_DECOMPRESSION_ERRORS = tuple(
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
    if compression == "gz":
        return zlib.decompressobj(31)
    if compression == "bz2":
        return bz2.BZ2Decompressor()
    if compression == "xz":
        return lzma.LZMADecompressor()
    cls = _optional_attr("compression.zstd", "ZstdDecompressor") or _optional_attr("backports.zstd", "ZstdDecompressor")
    return cls() if cls else None


def _intact_text_counts(path, compression):
    """(newlines, '\\n>' record starts) in the text that decompresses cleanly before the damage.

    The streaming reader reports damage only for a whole buffer; this finds the exact place, for the message.
    """
    newlines = headers = 0
    d = _decompressor(compression)
    if d is None:
        return None
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                return newlines, headers
            while chunk:
                try:
                    out = d.decompress(chunk)
                except _DECOMPRESSION_ERRORS:
                    return newlines, headers
                newlines += out.count(b"\n")
                headers += out.count(b"\n>")
                if d.eof:  # concatenated members (bgzip, cat a.gz b.gz): restart on what follows
                    chunk = d.unused_data
                    d = _decompressor(compression)
                else:
                    chunk = b""


def _first_non_ascii_line(path):
    """0-based line of the file's first non-ASCII byte (dnaio only knows which buffer held it)."""
    f, _ = _open_binary(path)
    lines = 0
    with f:
        while True:
            block = f.read(1 << 20)
            if not block:
                return None
            high = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) >= 128)
            if high.size:
                return lines + block.count(b"\n", 0, int(high[0]))
            lines += block.count(b"\n")


def _short(text, limit=100):
    """First line of a parser message, shortened: our errors are one line."""
    text = text.strip().split("\n")[0].replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- one file ------------------------------------------------------------------------------------------------


class _Source:
    """One reads file; ``take(k)`` returns the next k records as slices of chunks, failures as InputError.

    FASTQ goes through _fastq.pyx block by block while its records are in the strict form; at the first one
    that is not (or a non-ASCII byte, or a failing read) the file goes on with dnaio from the first record
    not yet returned: dnaio reads the odd record, or fails as it always has, with the same record numbers.
    """

    def __init__(self, path, fast_fastq=None, block_size=None):
        self.path = os.fspath(path)
        self._fastq_block = _FASTQ_BLOCK if block_size is None else max(1, int(block_size))
        self._fasta_block = _FASTA_BLOCK if block_size is None else max(1, int(block_size))
        self.taken = 0  # records returned so far
        self._file = None
        self._records = None
        self.format = None
        check_regular_file(self.path)
        f, self.compression = _open_binary(self.path)
        try:
            first = f.read(1)
        except _DECOMPRESSION_ERRORS:
            raise self._decompression_error(0) from None
        finally:
            f.close()
        if first == b"":
            self.format = None  # an empty file holds zero reads (bwa accepts it too)
        elif first == b"@":
            self.format = "fastq"
        elif first == b">":
            self.format = "fasta"
        else:
            shown = repr(chr(first[0])) if 32 <= first[0] < 127 else f"byte 0x{first[0]:02x}"
            raise InputError(self.path, f"not FASTQ or FASTA: starts with {shown}, not '@' or '>'", 1)
        self._ended = self.format is None
        # the fast path's state
        self._fast = (FAST_FASTQ if fast_fastq is None else bool(fast_fastq)) and self.format == "fastq"
        self._pending = deque()  # [chunk, next read] parsed, not returned yet
        self._blocks = []  # _fastq.Blocks of this file, filled again once their reads are copied
        self._block, self._lo, self._hi, self._base = None, 0, 0, 0  # text after the last parsed record
        self._reading = True  # more blocks to read
        self._complete = False  # read and parsed to the end: nothing is left for dnaio
        self._limit = 0  # reads ending at or before this offset may be returned; None: all
        self._longest = 0  # longest record so far, in bytes

    @property
    def has_qualities(self):
        return self.format == "fastq"

    def close(self):
        self._ended = True
        self._records = None
        self._pending.clear()
        self._blocks, self._block = [], None
        if self._file is not None:
            self._file.close()
            self._file = None

    def take(self, k):
        """Up to k records as (list of (Chunk, i0, i1), count); fewer only at the end of the file."""
        slices, got = [], 0
        if not self._ended:
            try:
                if self._fast:
                    got = self._take_parsed(k, slices)
                if got < k and not self._fast:
                    got += self._take_records(k - got, slices, got)
            except BaseException:
                self.close()
                raise
            if got < k:
                self.close()
        self.taken += got
        return slices, got

    # the fast path

    def _take_parsed(self, k, slices):
        got = 0
        while True:
            while self._pending and got < k:
                entry = self._pending[0]
                chunk, i = entry
                end = chunk.n
                if self._limit is not None:
                    end = int(np.searchsorted(chunk.rec_end, self._limit - chunk.base, side="right"))
                m = min(k - got, end - i)
                if m > 0:
                    slices.append((chunk, i, i + m))
                    got += m
                    i = entry[1] = i + m
                if i < chunk.n:
                    break  # k reached, or the rest is held back
                self._pending.popleft()
            if got == k:
                return got
            if self._reading:
                self._read_block()
                continue
            if not (self._complete and not self._pending):
                # hand over to dnaio, from the first record not returned
                self._fast = False
                self._pending.clear()
                self._blocks, self._block = [], None
                if self._file is not None:
                    self._file.close()
                    self._file = None
            return got

    def _read_block(self):
        """Read the next block (after the unparsed rest of the last) and parse its complete records."""
        if self._file is None:
            self._file, _ = _open_binary(self.path)
        left = self._hi - self._lo
        size = max(self._fastq_block, 2 * left)  # a record longer than a block: double, as dnaio does
        block = next((b for b in self._blocks if not b.users and b is not self._block and b.size >= size), None)
        if block is None:
            block = _fastq.Block(size)
            self._blocks.append(block)
        block.refill()
        buf = block.text
        if left:
            buf[:left] = self._block.text[self._lo : self._hi]
        base = self._base + self._lo
        filled, eof, failed = left, False, False
        view = memoryview(buf)
        try:
            while filled < size:
                got = self._file.readinto(view[filled:size])
                if not got:
                    eof = True
                    break
                filled += got
        except Exception:  # decompression failure and the like: dnaio meets it again in the fallback
            failed = True
        finally:
            view.release()
        if eof and not failed and filled and buf[filled - 1] != 10:
            buf[filled] = 10  # dnaio adds the missing last newline too
            filled += 1
        pos = 0
        while True:
            chunk, pos, status, longest = _fastq.parse_block(block, base, pos, filled)
            self._longest = max(self._longest, longest)
            if chunk is not None:
                self._pending.append([chunk, 0])
            if status != _fastq.FULL:
                break
        # the parsed records are ASCII (parse_block checks every byte); a non-ASCII byte after them is where
        # dnaio fails, which the reads held back must not pass
        junk = _fastq.first_non_ascii(buf, pos, filled)
        if junk >= 0:
            filled = junk
        whole = eof and not failed and junk < 0
        self._block, self._lo, self._hi, self._base = block, pos, filled, base
        self._reading = not (eof or failed or junk >= 0 or status == _fastq.ODD)
        self._complete = whole and pos == filled
        # dnaio's read that fails started less than its buffer size before the failure: the reads ending
        # before that are the ones it returns first (it doubles its buffer for records that do not fit)
        hold = max(_DNAIO_BUFFER, 2 * self._longest) + 1024
        self._limit = None if whole else base + filled - hold

    # dnaio (and FASTA)

    def _take_records(self, k, slices, pending):
        """Up to k records the old way (lists of Python objects), after `pending` records of this take."""
        ids, seqs, quals = [], [], []
        try:
            if self._records is None:
                self._file, _ = _open_binary(self.path)
                if self.format == "fastq":
                    self._records = iter(dnaio.open(self._file, fileformat="fastq"))
                    skip = self.taken + pending  # returned by the fast path
                    if skip:
                        next(islice(self._records, skip - 1, skip), None)
                else:
                    self._records = self._fasta_records()
            ia, sa, qa = ids.append, seqs.append, quals.append
            if self.format == "fastq":
                for rec in islice(self._records, k):
                    # the name up to the first space or tab, as rec.id, which would also stop at a NUL
                    ia(_WORD_END.split(rec.name, 1)[0])
                    sa(rec.sequence)
                    qa(rec.qualities)
            else:
                for name, seq in islice(self._records, k):
                    ia(name)
                    sa(seq)
        except dnaio.FileFormatError as e:
            message = str(e.args[0]) if e.args else str(e)
            if not _BLANK_TAIL.match(message):
                self.close()
                raise self._fastq_error(message, e.line, pending + len(ids)) from None
            self.close()  # only blank lines after the last record (kseq/bwa accept them too)
        except UnicodeDecodeError:
            self.close()
            raise self._non_ascii_error(pending + len(ids)) from None
        except _DECOMPRESSION_ERRORS:
            self.close()
            raise self._decompression_error(pending + len(ids)) from None
        if ids:
            slices.append((_raw_chunk(ids, seqs, quals if self.format == "fastq" else None), 0, len(ids)))
        return len(ids)

    # failures

    def _decompression_error(self, pending):
        what = _COMPRESSION_NAME.get(self.compression, "compressed")
        counts = _intact_text_counts(self.path, self.compression)
        if counts is None:
            record = self.taken + pending + 1
        else:
            record = counts[0] // 4 + 1 if self.format != "fasta" else counts[1] + 1
        return InputError(self.path, f"truncated or corrupt {what} data: it breaks off at this record", record)

    def _fastq_error(self, message, line, pending):
        if line is None:
            if "Non-ASCII" in message:
                return self._non_ascii_error(pending)
            return InputError(self.path, f"invalid FASTQ: {_short(message)}", self.taken + pending + 1)
        record = line // 4 + 1  # dnaio reads only 4-line FASTQ, so the line fixes the record
        if message.startswith("Premature end of file"):
            text = f"truncated FASTQ record: the file ends at line {line + 1}"
        elif message.startswith("Length of sequence and qualities differ"):
            text = f"quality string length differs from sequence length (line {line + 1})"
        else:
            text = f"invalid FASTQ at line {line + 1}: {_short(message)}"
        return InputError(self.path, text, record)

    def _non_ascii_error(self, pending):
        line = _first_non_ascii_line(self.path)
        return InputError(self.path, _BINARY, self.taken + pending + 1 if line is None else line // 4 + 1)

    def _fasta_records(self):
        """(name, sequence bytes) per record: blocks split at '\\n>', line breaks deleted by bytes.translate."""
        f = self._file
        done = 0  # records yielded (in all takes)
        pending = b""  # text after a '>' whose record may continue in the next block
        start = True
        while True:
            block = f.read(self._fasta_block)
            if not block:
                break
            if start:
                block, start = block[1:], False  # the leading '>' seen by the sniffer
            data = pending + block
            if not block.isascii():
                pos = len(pending) + int(np.argmax(np.frombuffer(block, dtype=np.uint8) >= 128))
                raise InputError(self.path, _BINARY, done + 1 + data.count(b"\n>", 0, pos))
            cut = data.rfind(b"\n>")
            if cut < 0:
                pending = data
                continue
            pending = data[cut + 2 :]
            for rec in data[:cut].split(b"\n>"):
                done += 1
                yield _fasta_record(rec)
        if not start:
            yield _fasta_record(pending)


def _fasta_record(rec):
    header, _, seq = rec.partition(b"\n")
    fields = header.split(None, 1)
    return (fields[0].decode("ascii") if fields else ""), seq.translate(None, b"\r\n\t ")


# --- batches ------------------------------------------------------------------------------------------------


def _raw_chunk(names, seqs, quals):
    """A Chunk of the fallback's (or FASTA's) lists; its sequences are checked and uppercased by _make_batch."""
    n = len(names)
    name_text = "".join(names).encode("ascii")  # dnaio and the FASTA parser give ASCII only
    seq_text = "".join(seqs).encode("ascii") if n and isinstance(seqs[0], str) else b"".join(seqs)
    qual_text = b"" if quals is None else "".join(quals).encode("ascii")
    name_cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, names), dtype=np.int64, count=n), out=name_cum[1:])
    seq_cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, seqs), dtype=np.int64, count=n), out=seq_cum[1:])
    buf = np.frombuffer(name_text + seq_text + qual_text, dtype=np.uint8)
    seq_start = len(name_text)
    qual_end = seq_start + len(seq_text) + 1 + seq_cum[1:]  # the qualities of read i end 1 before
    return _fastq.Chunk(buf, 0, name_cum[:-1], name_cum, seq_start + seq_cum[:-1], seq_cum, qual_end, raw=True)


class _Part:
    """Reads taken but not yet copied: per stream a list of (Chunk, i0, i1). Two streams are the two files
    of pairs (read i of each is a pair); one stream holds `per` adjacent reads per unit."""

    __slots__ = ("streams", "per", "units")

    def __init__(self, streams, per, units):
        self.streams, self.per, self.units = streams, per, units

    def lengths(self):
        """Bases per unit (int64)."""
        return _fastq.unit_lengths(self.streams, self.per, self.units)

    def extend(self, other):
        for mine, theirs in zip(self.streams, other.streams):
            mine += theirs
        self.units += other.units
        return self

    def split(self, units):
        heads, tails = [], []
        for slices in self.streams:
            head, tail, m = [], [], units * self.per
            for c, i0, i1 in slices:
                t = min(max(m, 0), i1 - i0)
                if t:
                    head.append((c, i0, i0 + t))
                if i0 + t < i1:
                    tail.append((c, i0 + t, i1))
                m -= t
            heads.append(head)
            tails.append(tail)
        return _Part(heads, self.per, units), _Part(tails, self.per, self.units - units)

    def raw(self):
        return any(c.raw for slices in self.streams for c, _, _ in slices)


_WORD_END = re.compile("[ \t]")


def _strip_mate_suffixes(names):
    return [n[:-2] if n.endswith(("/1", "/2")) else n for n in names]


def _name_at(slices, i):
    """Read i of a stream's slices: its name without /1 or /2 (for messages)."""
    for c, i0, i1 in slices:
        if i < i1 - i0:
            return _strip_mate_suffixes([c.name(i0 + i)])[0]
        i -= i1 - i0
    raise IndexError(i)


# SAM v1.6, 1.4: QNAME is [!-?A-~]{1,254}, printable ASCII without '@' (an empty name is written as '*').
MAX_NAME_LENGTH = 254
_BAD_NAME_BYTE = np.ones(256, dtype=bool)
_BAD_NAME_BYTE[0x21:0x7F] = False
_BAD_NAME_BYTE[ord("@")] = True


def _check_names(name_text, name_off, locate):
    """Refuse read names that SAM cannot carry (too long, or a character QNAME forbids), naming the record."""
    lengths = np.diff(name_off)
    if lengths.size and lengths.max() > MAX_NAME_LENGTH:
        i = int(np.argmax(lengths > MAX_NAME_LENGTH))
        path, record = locate(i)
        head = name_text[name_off[i] : name_off[i] + 40].tobytes().decode("latin-1")
        raise InputError(path, f"read name '{head}...' has {int(lengths[i])} characters; SAM allows at most "
                         f"{MAX_NAME_LENGTH}", record)
    name_text = name_text[: name_off[-1]]  # gather() pads an all-empty name column with one byte
    if name_text.size:
        bad = _BAD_NAME_BYTE[name_text]
        if bad.any():
            pos = int(np.argmax(bad))
            i = int(np.searchsorted(name_off, pos, side="right")) - 1
            path, record = locate(i)
            name = name_text[name_off[i] : name_off[i + 1]].tobytes().decode("latin-1")
            raise InputError(path, f"read name {name!r} has the character {chr(name_text[pos])!r}, which SAM "
                             "forbids in read names (printable ASCII except '@')", record)


def _make_batch(part, first_record, paired, with_quals, locate):
    """The reads of a _Part -> ReadBatch; `locate(i)` gives (path, record) of read i for error messages."""
    raw = part.raw()
    name_text, name_off, joined, offsets, jq, codes = _fastq.gather(part.streams, paired, with_quals, not raw)
    _check_names(name_text, name_off, locate)
    if raw:  # the fallback's or FASTA's reads: check, code and uppercase them here
        codes = _CODE[joined]
        if codes.size and codes.max() == INVALID:
            pos = int(np.argmax(codes == INVALID))
            i = int(np.searchsorted(offsets, pos, side="right")) - 1
            path, record = locate(i)
            name = name_text[name_off[i] : name_off[i + 1]].tobytes().decode("latin-1")
            raise InputError(path, f"invalid character {chr(joined[pos])!r} in the sequence of read '{name}'", record)
        joined = _UPPER_LUT[joined]
        if jq is not None and jq.size and (jq.min() < 33 or jq.max() > 126):
            pos = int(np.argmax((jq < 33) | (jq > 126)))
            i = int(np.searchsorted(offsets, pos, side="right")) - 1
            path, record = locate(i)
            name = name_text[name_off[i] : name_off[i + 1]].tobytes().decode("latin-1")
            raise InputError(path, f"invalid quality character {chr(jq[pos])!r} in read '{name}'", record)
    return ReadBatch(codes, offsets, first_record, paired, joined, jq, name_text, name_off)


def _limits(max_reads, max_bases, unit):
    if max_reads is not None and max_reads < 1:
        raise ValueError("max_reads must be at least 1")
    if max_bases is not None and max_bases < 1:
        raise ValueError("max_bases must be at least 1")
    units = _UNLIMITED if max_reads is None else max(1, max_reads // unit)
    return units, _UNLIMITED if max_bases is None else max_bases


def _batched(take, unit, max_reads, max_bases):
    """Cut the _Parts that `take(k units)` returns into batches; yields (first unit number, _Part).

    A unit is a read or a pair (`unit` reads, adjacent). A batch holds at most `max_reads` reads and
    `max_bases` bases, except that a unit longer than `max_bases` forms a batch alone.
    """
    max_units, max_bases = _limits(max_reads, max_bases, unit)
    step = _CHUNK if max_units == _UNLIMITED or max_bases != _UNLIMITED else _UNLIMITED
    held = None  # the _Part buffered
    parts = []  # unit lengths (np.int64 arrays) of what is buffered
    buffered = bases = 0  # units and bases buffered
    first, ended = 1, False
    while True:
        while not ended and buffered < max_units and bases <= max_bases:
            want = min(max_units - buffered, step)
            part = take(want)
            ended = part.units < want
            lengths = part.lengths()
            parts.append(lengths)
            buffered += part.units
            bases += int(lengths.sum())
            held = part if held is None else held.extend(part)
        if not buffered:
            return
        lengths = parts[0] if len(parts) == 1 else np.concatenate(parts)
        cut = min(buffered, max_units)
        if bases > max_bases:
            cut = min(cut, max(1, int(np.searchsorted(np.cumsum(lengths), max_bases, side="right"))))
        if cut == buffered:
            yield first, held
            held = None
        else:
            head, held = held.split(cut)
            yield first, head
        parts = [lengths[cut:]]
        buffered -= cut
        bases = int(parts[0].sum())
        first += cut


def read_batches(path, max_reads=None, max_bases=None, *, fast_fastq=None, block_size=None) -> Iterator[ReadBatch]:
    """Single-end reads of `path` in batches of at most `max_reads` reads and `max_bases` bases.

    A read longer than `max_bases` forms a batch alone; an empty file yields no batch.
    `fast_fastq`: False reads FASTQ with dnaio only (None: ``FAST_FASTQ``); `block_size`: bytes read per
    block (None: 8 MiB for FASTQ, 4 MiB for FASTA). Neither changes the batches; tests compare both parsers
    and put block boundaries everywhere.
    """
    _limits(max_reads, max_bases, 1)
    src = _Source(path, fast_fastq, block_size)

    def take(k):
        slices, n = src.take(k)
        return _Part([slices], 1, n)

    try:
        for first, part in _batched(take, 1, max_reads, max_bases):
            yield _make_batch(part, first, False, src.has_qualities, lambda i: (src.path, first + i))
    finally:
        src.close()


def read_pair_batches(path1, path2, max_reads=None, max_bases=None, *, fast_fastq=None,
                      block_size=None) -> Iterator[ReadBatch]:
    """Paired-end reads from two files; batches alternate mate 1, mate 2 and never split a pair.

    `max_reads` counts reads (two per pair; at least one pair per batch); `first_record` is the record
    number of the batch's first pair in both files. `fast_fastq`, `block_size`: as for read_batches.
    """
    _limits(max_reads, max_bases, 2)
    src1, src2 = _Source(path1, fast_fastq, block_size), _Source(path2, fast_fastq, block_size)
    if src1.format and src2.format and src1.format != src2.format:
        raise InputError(src2.path, f"is {src2.format.upper()} but {src1.path} is {src1.format.upper()}", 1)

    def take(k):
        s1, n1 = src1.take(k)
        s2, n2 = src2.take(n1 if n1 < k else k)
        if n2 < n1:
            raise _unequal(src2.path, src1.path, src2.taken)
        if n1 < k and src2.take(1)[1]:
            raise _unequal(src1.path, src2.path, src1.taken)
        i = _fastq.first_mate_mismatch(s1, s2)
        if i >= 0:
            a, b = _name_at(s1, i), _name_at(s2, i)
            record = src1.taken - n1 + i + 1
            raise InputError(src1.path, f"mate names differ: '{a}' here but '{b}' in {src2.path}", record)
        return _Part([s1, s2], 1, n1)

    paths = (src1.path, src2.path)
    with_quals = src1.has_qualities and src2.has_qualities
    try:
        for first, part in _batched(take, 2, max_reads, max_bases):
            yield _make_batch(part, first, True, with_quals, lambda i: (paths[i % 2], first + i // 2))
    finally:
        src1.close()
        src2.close()


def _unequal(shorter, longer, k):
    return InputError(
        shorter, f"ends after {k} records but {longer} has more (the two files of pairs must be equally long)", k + 1
    )


def read_interleaved_batches(path, max_reads=None, max_bases=None, *, fast_fastq=None,
                             block_size=None) -> Iterator[ReadBatch]:
    """Paired-end reads from one interleaved file (mate 1, mate 2, mate 1, ...), as read_pair_batches.

    `first_record` is the record number (in the file) of the batch's first mate 1. `fast_fastq`,
    `block_size`: as for read_batches.
    """
    _limits(max_reads, max_bases, 2)
    src = _Source(path, fast_fastq, block_size)

    def take(k):
        slices, n = src.take(2 * k)
        if n % 2:
            raise InputError(src.path, "the last record has no mate (interleaved pairs need an even count)", src.taken)
        i = _fastq.first_mate_mismatch(slices, None)
        if i >= 0:
            a, b = _name_at(slices, 2 * i), _name_at(slices, 2 * i + 1)
            record = src.taken - n + 2 * i + 2
            message = f"mate names differ: '{a}' in record {record - 1} but '{b}' here"
            raise InputError(src.path, message, record)
        return _Part([slices], 2, n // 2)

    try:
        for first, part in _batched(take, 2, max_reads, max_bases):
            record = 2 * first - 1
            yield _make_batch(part, record, True, src.has_qualities, lambda i: (src.path, record + i))
    finally:
        src.close()
