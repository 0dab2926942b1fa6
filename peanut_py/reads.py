"""Reads in: FASTQ or FASTA (plain, gzip, bzip2, xz or zstd; detected by magic bytes) into ``ReadBatch``es.

FASTQ is parsed by dnaio (cutadapt's Cython parser: it validates every record and reports line numbers);
FASTA by the block parser below, which splits whole blocks at ``\\n>`` with C-level bytes methods.
Sequence letters are checked, uppercased and turned into base codes per batch with NumPy lookup tables.
docs/io.md explains the choices (parser, empty files, blank lines at the end, long reads, '.' and '-').
"""
import bz2
import importlib
import lzma
import os
import re
import zlib
from dataclasses import dataclass
from itertools import islice
from typing import Iterator, List, Optional

import dnaio
import numpy as np
from xopen import xopen

from .errors import InputError

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

_COMPRESSION_MAGIC = ((b"\x1f\x8b", "gz"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zst"))
_COMPRESSION_NAME = {"gz": "gzip", "bz2": "bzip2", "xz": "xz", "zst": "zstd"}
_FASTA_BLOCK = 1 << 22
_CHUNK = 1 << 14  # records taken per step when only max_bases limits a batch
_UNLIMITED = 1 << 62
_BINARY = "binary data (a non-ASCII byte): not FASTQ or FASTA text"
# dnaio's complaint about whitespace after the last record; anything else stays an error.
_BLANK_TAIL = re.compile(r"^Premature end of file encountered\. The incomplete final record was: '(?:\\[rnt]| )*'$")


# complement of the base codes A C G T N
_RC_CODE = np.array([3, 2, 1, 0, 4], dtype=np.uint8)


@dataclass
class ReadBatch:
    """A batch of reads. For pairs (``paired``) the reads alternate mate 1, mate 2."""

    names: List[str]  # up to the first whitespace; for pairs without a trailing /1 or /2
    seqs: List[bytes]  # uppercased letters ('.' and '-' read as N)
    quals: Optional[List[bytes]]  # Phred+33 strings, None for FASTA input
    codes: np.ndarray  # uint8, the base codes of all reads concatenated
    offsets: np.ndarray  # int64, n + 1: read i is codes[offsets[i]:offsets[i + 1]]
    first_record: int  # 1-based record number of the batch's first read in its file (both files for pairs)
    paired: bool = False
    joined_seqs: Optional[bytes] = None  # the seqs concatenated (read i at offsets[i]:offsets[i + 1])
    joined_quals: Optional[bytes] = None  # the quals concatenated, None for FASTA input

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def seq_text(self) -> bytes:
        if self.joined_seqs is None:
            self.joined_seqs = b"".join(self.seqs)
        return self.joined_seqs

    @property
    def qual_text(self) -> Optional[bytes]:
        if self.quals is None:
            return None
        if self.joined_quals is None:
            self.joined_quals = b"".join(self.quals)
        return self.joined_quals

    def name_columns(self):
        """The names as one uint8 text and int64 offsets (for the SAM formatter, samtext.pyx); computed once
        (the postprocessing threads of a batch may race to it, which only costs a duplicate computation)."""
        cached = self.__dict__.get("_name_columns")
        if cached is None:
            encoded = [name.encode() for name in self.names]
            offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
            text = np.frombuffer(b"".join(encoded), dtype=np.uint8) if offsets[-1] else np.zeros(1, np.uint8)
            cached = self.__dict__["_name_columns"] = (text, offsets)
        return cached

    def both_strands(self):
        """codes followed by the reverse complement of the whole batch: read i's reverse complement starts
        at 2 * len(codes) - offsets[i + 1]. Computed once, as name_columns."""
        cached = self.__dict__.get("_both_strands")
        if cached is None:
            cached = self.__dict__["_both_strands"] = np.concatenate([self.codes, _RC_CODE[self.codes[::-1]]])
        return cached

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


# --- opening and failures -------------------------------------------------------------------------------


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
    """One reads file; ``take(k)`` returns the next k records as lists, failures as InputError."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.taken = 0  # records returned so far
        self._file = None
        self._records = None
        self.format = None
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

    @property
    def has_qualities(self):
        return self.format == "fastq"

    def close(self):
        self._ended = True
        self._records = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def take(self, k):
        """Up to k records as (ids, seqs, quals or None); fewer only at the end of the file."""
        ids, seqs, quals = [], [], []
        if not self._ended:
            try:
                if self._records is None:
                    self._file, _ = _open_binary(self.path)
                    if self.format == "fastq":
                        self._records = iter(dnaio.open(self._file, fileformat="fastq"))
                    else:
                        self._records = self._fasta_records()
                ia, sa, qa = ids.append, seqs.append, quals.append
                if self.format == "fastq":
                    for rec in islice(self._records, k):
                        ia(rec.id)
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
                    raise self._fastq_error(message, e.line, len(ids)) from None
                self.close()  # only blank lines after the last record (kseq/bwa accept them too)
            except UnicodeDecodeError:
                self.close()
                raise self._non_ascii_error(len(ids)) from None
            except _DECOMPRESSION_ERRORS:
                self.close()
                raise self._decompression_error(len(ids)) from None
            except BaseException:
                self.close()
                raise
            if len(ids) < k:
                self.close()
        self.taken += len(ids)
        return ids, seqs, (quals if self.format == "fastq" else None)

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
            block = f.read(_FASTA_BLOCK)
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


def _strip_mate_suffixes(names):
    return [n[:-2] if n.endswith(("/1", "/2")) else n for n in names]


def _make_batch(names, seqs, quals, first_record, paired, locate):
    """Lists of one batch -> ReadBatch; `locate(i)` gives (path, record) of read i for error messages."""
    n = len(names)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, seqs), dtype=np.int64, count=n), out=offsets[1:])
    text = n and isinstance(seqs[0], str)
    joined = "".join(seqs).encode("ascii") if text else b"".join(seqs)
    codes = _CODE[np.frombuffer(joined, dtype=np.uint8)]
    if codes.size and codes.max() == INVALID:
        pos = int(np.argmax(codes == INVALID))
        i = int(np.searchsorted(offsets, pos, side="right")) - 1
        path, record = locate(i)
        raise InputError(path, f"invalid character {chr(joined[pos])!r} in the sequence of read '{names[i]}'", record)
    upper = joined.translate(_UPPER)
    if upper != joined:  # lowercase, '.' or '-' somewhere: cut the translated text
        joined = upper
        bounds = offsets.tolist()
        seqs = [joined[a:b] for a, b in zip(bounds, bounds[1:])]
    elif text:
        seqs = list(map(str.encode, seqs))
    jq = None
    if quals is not None:
        jq = "".join(quals).encode("ascii")
        q = np.frombuffer(jq, dtype=np.uint8)
        if q.size and (q.min() < 33 or q.max() > 126):
            pos = int(np.argmax((q < 33) | (q > 126)))
            i = int(np.searchsorted(offsets, pos, side="right")) - 1
            path, record = locate(i)
            raise InputError(path, f"invalid quality character {chr(jq[pos])!r} in read '{names[i]}'", record)
        quals = list(map(str.encode, quals))
    return ReadBatch(names, seqs, quals, codes, offsets, first_record, paired, joined, jq)


def _limits(max_reads, max_bases, unit):
    if max_reads is not None and max_reads < 1:
        raise ValueError("max_reads must be at least 1")
    if max_bases is not None and max_bases < 1:
        raise ValueError("max_bases must be at least 1")
    units = _UNLIMITED if max_reads is None else max(1, max_reads // unit)
    return units, _UNLIMITED if max_bases is None else max_bases


def _batched(take, unit, max_reads, max_bases):
    """Cut what `take(k units)` returns into batches; yields (first unit number, names, seqs, quals).

    A unit is a read or a pair (`unit` reads, adjacent). A batch holds at most `max_reads` reads and
    `max_bases` bases, except that a unit longer than `max_bases` forms a batch alone.
    """
    max_units, max_bases = _limits(max_reads, max_bases, unit)
    step = _CHUNK if max_units == _UNLIMITED or max_bases != _UNLIMITED else _UNLIMITED
    names, seqs, quals = [], [], []
    parts = []  # unit lengths (np.int64 arrays) of what is buffered
    buffered = bases = 0  # units and bases buffered
    first, ended = 1, False
    while True:
        while not ended and buffered < max_units and bases <= max_bases:
            want = min(max_units - buffered, step)
            n, s, q = take(want)
            ended = len(n) < want * unit
            lengths = np.fromiter(map(len, s), dtype=np.int64, count=len(s)).reshape(-1, unit).sum(axis=1)
            parts.append(lengths)
            buffered += len(lengths)
            bases += int(lengths.sum())
            names += n
            seqs += s
            if q is None:
                quals = None  # FASTA
            else:
                quals += q
        if not buffered:
            return
        lengths = np.concatenate(parts)
        cut = min(buffered, max_units, max(1, int(np.searchsorted(np.cumsum(lengths), max_bases, side="right"))))
        r = cut * unit
        if cut == buffered:
            yield first, names, seqs, quals
            names, seqs, quals = [], [], ([] if quals is not None else None)
        else:
            yield first, names[:r], seqs[:r], None if quals is None else quals[:r]
            names, seqs, quals = names[r:], seqs[r:], None if quals is None else quals[r:]
        parts = [lengths[cut:]]
        buffered -= cut
        bases = int(parts[0].sum())
        first += cut


def read_batches(path, max_reads=None, max_bases=None) -> Iterator[ReadBatch]:
    """Single-end reads of `path` in batches of at most `max_reads` reads and `max_bases` bases.

    A read longer than `max_bases` forms a batch alone; an empty file yields no batch.
    """
    _limits(max_reads, max_bases, 1)
    src = _Source(path)
    try:
        for first, names, seqs, quals in _batched(src.take, 1, max_reads, max_bases):
            yield _make_batch(names, seqs, quals, first, False, lambda i: (src.path, first + i))
    finally:
        src.close()


def _interleave(a, b):
    out = [None] * (len(a) + len(b))
    out[0::2] = a
    out[1::2] = b
    return out


def read_pair_batches(path1, path2, max_reads=None, max_bases=None) -> Iterator[ReadBatch]:
    """Paired-end reads from two files; batches alternate mate 1, mate 2 and never split a pair.

    `max_reads` counts reads (two per pair; at least one pair per batch); `first_record` is the record
    number of the batch's first pair in both files.
    """
    _limits(max_reads, max_bases, 2)
    src1, src2 = _Source(path1), _Source(path2)
    if src1.format and src2.format and src1.format != src2.format:
        raise InputError(src2.path, f"is {src2.format.upper()} but {src1.path} is {src1.format.upper()}", 1)

    def take(k):
        n1, s1, q1 = src1.take(k)
        n2, s2, q2 = src2.take(len(n1) if len(n1) < k else k)
        if len(n2) < len(n1):
            raise _unequal(src2.path, src1.path, src2.taken)
        if len(n1) < k and src2.take(1)[0]:
            raise _unequal(src1.path, src2.path, src1.taken)
        n1, n2 = _strip_mate_suffixes(n1), _strip_mate_suffixes(n2)
        if n1 != n2:
            i = next(i for i, (a, b) in enumerate(zip(n1, n2)) if a != b)
            record = src1.taken - len(n1) + i + 1
            raise InputError(src1.path, f"mate names differ: '{n1[i]}' here but '{n2[i]}' in {src2.path}", record)
        quals = None if q1 is None or q2 is None else _interleave(q1, q2)
        return _interleave(n1, n2), _interleave(s1, s2), quals

    paths = (src1.path, src2.path)
    try:
        for first, names, seqs, quals in _batched(take, 2, max_reads, max_bases):
            yield _make_batch(names, seqs, quals, first, True, lambda i: (paths[i % 2], first + i // 2))
    finally:
        src1.close()
        src2.close()


def _unequal(shorter, longer, k):
    return InputError(
        shorter, f"ends after {k} records but {longer} has more (the two files of pairs must be equally long)", k + 1
    )


def read_interleaved_batches(path, max_reads=None, max_bases=None) -> Iterator[ReadBatch]:
    """Paired-end reads from one interleaved file (mate 1, mate 2, mate 1, ...), as read_pair_batches.

    `first_record` is the record number (in the file) of the batch's first mate 1.
    """
    _limits(max_reads, max_bases, 2)
    src = _Source(path)

    def take(k):
        names, seqs, quals = src.take(2 * k)
        if len(names) % 2:
            raise InputError(src.path, "the last record has no mate (interleaved pairs need an even count)", src.taken)
        names = _strip_mate_suffixes(names)
        if names[0::2] != names[1::2]:
            i = next(i for i in range(0, len(names), 2) if names[i] != names[i + 1])
            record = src.taken - len(names) + i + 2
            message = f"mate names differ: '{names[i]}' in record {record - 1} but '{names[i + 1]}' here"
            raise InputError(src.path, message, record)
        return names, seqs, quals

    try:
        for first, names, seqs, quals in _batched(take, 2, max_reads, max_bases):
            record = 2 * first - 1
            yield _make_batch(names, seqs, quals, record, True, lambda i: (src.path, record + i))
    finally:
        src.close()
