"""Reads in: FASTQ or FASTA (plain, gzip, bzip2, xz or zstd; detected by magic bytes) into ``ReadBatch``es.

Each input is opened once and read front to back (input_streams.py), so files, FIFOs, process substitutions
and standard input are read alike; a mapping process of several may instead read the byte ranges of an
uncompressed FASTQ file that the writing process assigns to it (input_ranges.py, :func:`_parts`). FASTQ is
read in big blocks and parsed by _fastq.pyx without the GIL, into columns (no Python object per read).
_fastq.pyx takes only the strict common form; at the first record it is not sure about, that input goes on
with dnaio (cutadapt's Cython parser: it validates every record and reports line numbers), fed the text read
past the last record returned and then the rest of the input, so odd files (``\\r\\n``, ...) are read and
malformed ones fail with the messages and record numbers they always had. FASTA is read by the block parser
below, which splits whole blocks at ``\\n>`` with C-level bytes methods. The fallback's and FASTA's sequence
letters are checked, uppercased and turned into base codes per batch with NumPy lookup tables.
docs/io.md explains the choices (parser, streams, empty files, blank lines at the end,
long reads, '.' and '-').
"""
import os
import queue
import re
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Iterator, List, Optional

import dnaio
import numpy as np

from . import _fastq
from .errors import InputError
from .input_streams import DECOMPRESSION_ERRORS, Counted, Input, Prefixed, display_name, read_up_to

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

_COMPRESSION_NAME = {"gz": "gzip", "bz2": "bzip2", "xz": "xz", "zst": "zstd"}
_FASTA_BLOCK = 1 << 22
_FASTQ_BLOCK = 1 << 23
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

    def __getstate__(self):
        # the columns only: the lists made on first use are rebuilt where needed (postprocessing workers)
        return {k: v for k, v in self.__dict__.items() if k not in ("_names", "_seqs", "_quals", "_lengths")}

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
        """Bases per read (int64, read-only), made on first use: every postprocessing chunk reads it."""
        cached = self.__dict__.get("_lengths")
        if cached is None:
            cached = np.diff(self.offsets)
            cached.flags.writeable = False
            self.__dict__["_lengths"] = cached
        return cached


def _cut(text, offsets):
    bounds = offsets.tolist()
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


# --- failures ------------------------------------------------------------------------------------------------


def _short(text, limit=100):
    """First line of a parser message, shortened: our errors are one line."""
    text = text.strip().split("\n")[0].replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- one file ------------------------------------------------------------------------------------------------


class _Source:
    """One reads input, opened once; ``take(k)`` returns the next k records as slices of chunks, failures as
    InputError.

    FASTQ goes through _fastq.pyx block by block while its records are in the strict form; at the first one
    that is not (or a non-ASCII byte, or a failing read) the input goes on with dnaio from the first record
    not yet returned, fed the text already read past it and then the rest of the input (or the failure met):
    dnaio reads the odd record, or fails as it always has, with the same record numbers.
    """

    def __init__(self, path, fast_fastq=None, block_size=None, span=None, first_record=1, blocks=None):
        self.path = os.fspath(path)
        self.name = display_name(self.path)  # in messages
        self._fastq_block = _FASTQ_BLOCK if block_size is None else max(1, int(block_size))
        self._fasta_block = _FASTA_BLOCK if block_size is None else max(1, int(block_size))
        # records returned so far, counting those before `span` (four-line FASTQ records: input_ranges.py)
        self.taken = first_record - 1
        self._records = None
        self.format = None
        self._input = Input(self.path, span)
        self.compression = self._input.compression
        try:
            first = self._input.text.read(1)
        except DECOMPRESSION_ERRORS:
            self._input.close()
            raise self._decompression_error(1) from None
        except BaseException:
            self._input.close()
            raise
        self._text = Prefixed(first, self._input.text)  # the whole text again: the sniffed byte put back
        if first == b"":
            self.format = None  # an empty file holds zero reads (bwa accepts it too)
        elif first == b"@" or span is not None:  # a span is of a FASTQ file, from a record on (or its tail)
            self.format = "fastq"
        elif first == b">":
            self.format = "fasta"
        else:
            self._input.close()
            shown = repr(chr(first[0])) if 32 <= first[0] < 127 else f"byte 0x{first[0]:02x}"
            raise InputError(self.name, f"not FASTQ or FASTA: starts with {shown}, not '@' or '>'", 1)
        self._ended = False
        # the fast path's state
        self._fast = (FAST_FASTQ if fast_fastq is None else bool(fast_fastq)) and self.format == "fastq"
        self._pending = deque()  # [chunk, next read] parsed, not returned yet
        # _fastq.Blocks of this file (shared with the file's other sources), filled again once their reads are copied
        self._blocks = [] if blocks is None else blocks
        self._block, self._lo, self._hi, self._base = None, 0, 0, 0  # text after the last parsed record
        self._reading = True  # more blocks to read
        self._complete = False  # read and parsed to the end: nothing is left for dnaio
        self._failure = None  # the exception that stopped the fast path's reading, met again by dnaio
        self._handover = b""  # the text the fast path read past the last record it returned
        self._read_end = 0  # end of the text read into the current block
        # the fallback's state: its text (counting lines) and the lines before it (of the records returned)
        self._counted = None
        self._lines_before = 0
        if self.format is None:
            self.close()

    @property
    def has_qualities(self):
        return self.format == "fastq"

    def close(self):
        self._ended = True
        self._records = None
        self._pending.clear()
        self._blocks, self._block = [], None
        if self._input is not None:
            self._input.close()
            self._input = None

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
                m = min(k - got, chunk.n - i)
                slices.append((chunk, i, i + m))
                got += m
                i = entry[1] = i + m
                if i < chunk.n:
                    return got  # k reached
                self._pending.popleft()
            if got == k:
                return got
            if self._reading:
                self._read_block()
                continue
            if not self._complete:
                # hand over to dnaio: every parsed record is returned, so it starts at the unparsed rest
                self._fast = False
                self._handover = self._block.text[self._lo : max(self._lo, self._read_end)].tobytes()
                self._blocks, self._block = [], None
            return got

    def _read_block(self):
        """Read the next block (after the unparsed rest of the last) and parse its complete records."""
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
        filled, eof = left, False
        view = memoryview(buf)
        try:
            while filled < size:
                got = self._text.readinto(view[filled:size])
                if not got:
                    eof = True
                    break
                filled += got
        except Exception as e:  # decompression failure and the like: dnaio meets it again in the fallback
            self._failure = e
        finally:
            view.release()
        failed = self._failure is not None
        self._read_end = filled  # the text read; a newline added below is the parser's, not the input's
        if eof and filled and buf[filled - 1] != 10:
            buf[filled] = 10  # dnaio adds the missing last newline too
            filled += 1
        pos = 0
        while True:
            chunk, pos, status, _ = _fastq.parse_block(block, base, pos, filled)
            if chunk is not None:
                self._pending.append([chunk, 0])
            if status != _fastq.FULL:
                break
        # the parsed records are ASCII (parse_block checks every byte); a non-ASCII byte after them is an
        # error for dnaio to report, and no reason to read on (binary data would make records ever longer)
        junk = _fastq.first_non_ascii(buf, pos, filled) >= 0
        self._block, self._lo, self._hi, self._base = block, pos, filled, base
        self._reading = not (eof or failed or junk or status == _fastq.ODD)
        self._complete = eof and pos == filled

    # dnaio (and FASTA)

    def _take_records(self, k, slices, pending):
        """Up to k records the old way (lists of Python objects), after `pending` records of this take."""
        ids, seqs, quals = [], [], []
        try:
            if self._records is None:
                if self.format == "fastq":
                    # the text from the first record not returned (the fast path's read past it), then the input
                    self._counted = Counted(self._handover, self._text, self._failure)
                    self._lines_before = 4 * (self.taken + pending)  # the fast path returns 4-line records only
                    self._records = iter(dnaio.open(self._counted, fileformat="fastq"))
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
        except DECOMPRESSION_ERRORS:
            self.close()
            lines = self._counted.newlines if self._counted is not None else 0
            raise self._decompression_error(self._line_record(lines)) from None
        if ids:
            slices.append((_raw_chunk(ids, seqs, quals if self.format == "fastq" else None), 0, len(ids)))
        return len(ids)

    # failures

    def _line_record(self, line):
        """The FASTQ record holding line ``line`` (0-based) of the fallback's text."""
        return (self._lines_before + line) // 4 + 1  # dnaio reads only 4-line FASTQ

    def _decompression_error(self, record):
        what = _COMPRESSION_NAME.get(self.compression, "compressed")
        return InputError(self.name, f"truncated or corrupt {what} data: it breaks off at this record", record)

    def _fastq_error(self, message, line, pending):
        if line is None:
            if "Non-ASCII" in message:
                return self._non_ascii_error(pending)
            return InputError(self.name, f"invalid FASTQ: {_short(message)}", self.taken + pending + 1)
        record = self._line_record(line)
        line += self._lines_before
        if message.startswith("Premature end of file"):
            text = f"truncated FASTQ record: the file ends at line {line + 1}"
        elif message.startswith("Length of sequence and qualities differ"):
            text = f"quality string length differs from sequence length (line {line + 1})"
        else:
            text = f"invalid FASTQ at line {line + 1}: {_short(message)}"
        return InputError(self.name, text, record)

    def _non_ascii_error(self, pending):
        line = None if self._counted is None else self._counted.first_non_ascii_line
        record = self.taken + pending + 1 if line is None else self._line_record(line)
        return InputError(self.name, _BINARY, record)

    def _fasta_records(self):
        """(name, sequence bytes) per record: blocks split at '\\n>', line breaks deleted by bytes.translate."""
        f = self._text
        done = 0  # records yielded (in all takes)
        pending = b""  # text after a '>' whose record may continue in the next block
        start = True
        while True:
            block, failure = read_up_to(f, self._fasta_block)
            if not block and failure is None:
                break
            if start:
                block, start = block[1:], False  # the leading '>' seen by the sniffer
            data = pending + block
            if not block.isascii():
                pos = len(pending) + int(np.argmax(np.frombuffer(block, dtype=np.uint8) >= 128))
                raise InputError(self.name, _BINARY, done + 1 + data.count(b"\n>", 0, pos))
            cut = data.rfind(b"\n>")
            if cut < 0:
                pending = data
            else:
                pending = data[cut + 2 :]
                for rec in data[:cut].split(b"\n>"):
                    done += 1
                    yield _fasta_record(rec)
            if failure is not None:  # the records before the damage are out: it is in the next one
                raise self._decompression_error(done + 1)
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


_DONE = object()


def _prefetched(items, depth=2):
    """``items`` (an iterator) advanced by a thread of its own, up to ``depth`` ahead, in the same order; an
    exception it raises is raised here at its place in the sequence.  The batch reader parses the next
    batch's text (its file reads and the parser release the interpreter lock) while the columns of the
    current one are gathered.  Closing the generator stops the thread before it returns."""
    out = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item):
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for item in items:
                if not put((item, None)):
                    return
        except BaseException as e:  # noqa: BLE001 - raised again in the consumer, in order
            put((None, e))
            return
        put((_DONE, None))

    thread = threading.Thread(target=produce, name="peanut-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, error = out.get()
            if error is not None:
                raise error
            if item is _DONE:
                return
            yield item
    finally:
        stop.set()
        thread.join()


# Batches whose columns are gathered at the same time. Gathering copies every base, quality and name once into
# fresh arrays (the copy runs without the interpreter lock); for pairs of long reads one thread cannot keep up
# with the device and the postprocessing pool, two can.
ASSEMBLERS = 2


def _assembled(parts, make, workers=ASSEMBLERS):
    """``make(*part)`` for each item of ``parts`` on ``workers`` threads, results yielded in input order. An
    exception, from ``make`` or from ``parts`` itself, is raised at its item's place: the items before it
    are yielded first, later ones are dropped. Closing the generator waits for the items already started."""
    if workers <= 1:
        for part in parts:
            yield make(*part)
        return
    items = iter(parts)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="peanut-gather") as pool:
        pending = deque()
        try:
            while True:
                try:
                    part = next(items)
                except StopIteration:
                    break
                except BaseException:
                    while pending:
                        yield pending.popleft().result()
                    raise
                pending.append(pool.submit(make, *part))
                if len(pending) > workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
            close = getattr(items, "close", None)
            if close is not None:
                close()


def _sharded(parts, shard):
    """The items of ``parts`` whose 0-based number is ``i`` modulo ``n``, for ``shard`` = (i, n) (None: all).
    For input that the writing process cannot cut by byte range (compressed, FASTA: input_ranges.py), every
    mapping process parses the whole input, which keeps record numbers and batch boundaries the same in all
    of them, but gathers only its own batches' columns (shards.py)."""
    if shard is None:
        yield from parts
        return
    i, n = shard
    for k, part in enumerate(parts):
        if k % n == i:
            yield part


def _limits(max_reads, max_bases, unit):
    if max_reads is not None and max_reads < 1:
        raise ValueError("max_reads must be at least 1")
    if max_bases is not None and max_bases < 1:
        raise ValueError("max_bases must be at least 1")
    units = _UNLIMITED if max_reads is None else max(1, max_reads // unit)
    return units, _UNLIMITED if max_bases is None else max_bases


def _batched(take, unit, max_reads, max_bases, first=1):
    """Cut the _Parts that `take(k units)` returns into batches; yields (unit number, from `first`, _Part).

    A unit is a read or a pair (`unit` reads, adjacent). A batch holds at most `max_reads` reads and
    `max_bases` bases, except that a unit longer than `max_bases` forms a batch alone.
    """
    max_units, max_bases = _limits(max_reads, max_bases, unit)
    step = _CHUNK if max_units == _UNLIMITED or max_bases != _UNLIMITED else _UNLIMITED
    held = None  # the _Part buffered
    parts = []  # unit lengths (np.int64 arrays) of what is buffered
    buffered = bases = 0  # units and bases buffered
    ended = False
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


def _parts(open_take, unit, max_reads, max_bases, shard, assignments):
    """(first unit, _Part) of each batch: of the whole input, or of each byte range that the writing process
    assigns to this mapping process (``assignments``: (first unit, spans, tail), input_ranges.py). A range of
    whole records is one batch (the writing process cut it); a tail (the rest of the files, from a record the
    cut did not take) is cut into batches as the whole input would be. ``open_take(spans, first)`` opens
    the files (spans None: whole) and returns (take, close) for _batched."""
    if assignments is None:
        take, close = open_take(None, 1)
        try:
            yield from _sharded(_batched(take, unit, max_reads, max_bases), shard)
        finally:
            close()
        return
    for first, spans, tail in assignments:
        try:
            take, close = open_take(spans, first)
            try:
                yield from _batched(take, unit, max_reads if tail else None, max_bases, first)
            finally:
                close()
        except InputError as e:
            _mark(e, first)
            raise


def _mark(error, first):
    if error.batch_start is None:
        error.batch_start = first


def _read(open_take, make, unit, max_reads, max_bases, shard, assignments):
    """The batches of :func:`_parts`, parsed ahead and gathered by ``make``. Reading assigned ranges, an input
    error carries the number of the read or pair where its range or batch begins (InputError.batch_start)."""
    if assignments is not None:
        gather = make

        def make(first, part):
            try:
                return gather(first, part)
            except InputError as e:
                _mark(e, first)
                raise

    yield from _assembled(_prefetched(_parts(open_take, unit, max_reads, max_bases, shard, assignments)), make)


def _block_pools(n):
    """Per file, the _fastq.Blocks its sources share: a range's source fills again those that the ranges
    before it left (fresh memory costs a page fault per page)."""
    return [[] for _ in range(n)]


def read_batches(path, max_reads=None, max_bases=None, *, fast_fastq=None, block_size=None,
                 shard=None, assignments=None) -> Iterator[ReadBatch]:
    """Single-end reads of `path` in batches of at most `max_reads` reads and `max_bases` bases.

    A read longer than `max_bases` forms a batch alone; an empty file yields no batch.
    `fast_fastq`: False reads FASTQ with dnaio only (None: ``FAST_FASTQ``); `block_size`: bytes read per
    block (None: 8 MiB for FASTQ, 4 MiB for FASTA). Neither changes the batches; tests compare both parsers
    and put block boundaries everywhere. `shard` (i, n): only batches i, i + n, i + 2n, ... (:func:`_sharded`);
    `assignments`: only the byte ranges the writing process hands out (:func:`_parts`).
    """
    _limits(max_reads, max_bases, 1)
    pools = _block_pools(1)
    opened = {}

    def open_take(spans, first):
        src = opened["src"] = _Source(path, fast_fastq, block_size, *_span_of(spans, 0, first), blocks=pools[0])

        def take(k):
            slices, n = src.take(k)
            return _Part([slices], 1, n)

        return take, src.close

    def make(first, part):
        src = opened["src"]
        return _make_batch(part, first, False, src.has_qualities, lambda i: (src.name, first + i))

    yield from _read(open_take, make, 1, max_reads, max_bases, shard, assignments)


def _span_of(spans, i, first_record):
    """_Source's (span, first record) for file ``i`` of ``spans`` (None: the whole file)."""
    return (None, 1) if spans is None else (spans[i], first_record)


def read_pair_batches(path1, path2, max_reads=None, max_bases=None, *, fast_fastq=None,
                      block_size=None, shard=None, assignments=None) -> Iterator[ReadBatch]:
    """Paired-end reads from two files; batches alternate mate 1, mate 2 and never split a pair.

    `max_reads` counts reads (two per pair; at least one pair per batch); `first_record` is the record
    number of the batch's first pair in both files. `fast_fastq`, `block_size`, `shard`, `assignments`: as
    for read_batches.
    """
    _limits(max_reads, max_bases, 2)
    pools = _block_pools(2)
    opened = {}

    def open_take(spans, first):
        src1 = _Source(path1, fast_fastq, block_size, *_span_of(spans, 0, first), blocks=pools[0])
        try:
            src2 = _Source(path2, fast_fastq, block_size, *_span_of(spans, 1, first), blocks=pools[1])
        except BaseException:
            src1.close()
            raise
        if src1.format and src2.format and src1.format != src2.format:
            src1.close()
            src2.close()
            raise InputError(src2.name, f"is {src2.format.upper()} but {src1.name} is {src1.format.upper()}", 1)
        mates = _MateReader(src2)
        opened["names"] = (src1.name, src2.name)
        opened["with_quals"] = src1.has_qualities and src2.has_qualities

        def take(k):
            # the second file is read and parsed beside the first (both release the interpreter lock)
            mates.start(k)
            s1, n1 = src1.take(k)
            s2, n2 = mates.result()
            if n2 < n1:
                raise _unequal(src2.name, src1.name, src2.taken)
            if n1 < k and (n2 > n1 or src2.take(1)[1]):
                raise _unequal(src1.name, src2.name, src1.taken)
            i = _fastq.first_mate_mismatch(s1, s2)
            if i >= 0:
                a, b = _name_at(s1, i), _name_at(s2, i)
                record = src1.taken - n1 + i + 1
                raise InputError(src1.name, f"mate names differ: '{a}' here but '{b}' in {src2.name}", record)
            return _Part([s1, s2], 1, n1)

        def close():
            mates.close()
            src1.close()
            src2.close()

        return take, close

    def make(first, part):
        paths = opened["names"]
        return _make_batch(part, first, True, opened["with_quals"], lambda i: (paths[i % 2], first + i // 2))

    yield from _read(open_take, make, 2, max_reads, max_bases, shard, assignments)


class _MateReader:
    """``src.take(k)`` of the second file of pairs on a thread of its own: ``start(k)``, then ``result()``."""

    def __init__(self, src):
        self._src = src
        self._jobs = queue.Queue()
        self._results = queue.Queue()
        self._thread = None

    def start(self, k):
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="peanut-read-mates", daemon=True)
            self._thread.start()
        self._jobs.put(k)

    def _serve(self):
        while True:
            k = self._jobs.get()
            if k is None:
                return
            try:
                self._results.put((self._src.take(k), None))
            except BaseException as e:  # noqa: BLE001 - raised again in result()
                self._results.put((None, e))

    def result(self):
        got, error = self._results.get()
        if error is not None:
            raise error
        return got

    def close(self):
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()


def _unequal(shorter, longer, k):
    return InputError(
        shorter, f"ends after {k} records but {longer} has more (the two files of pairs must be equally long)", k + 1
    )


def read_interleaved_batches(path, max_reads=None, max_bases=None, *, fast_fastq=None,
                             block_size=None, shard=None, assignments=None) -> Iterator[ReadBatch]:
    """Paired-end reads from one interleaved file (mate 1, mate 2, mate 1, ...), as read_pair_batches.

    `first_record` is the record number (in the file) of the batch's first mate 1. `fast_fastq`,
    `block_size`, `shard`, `assignments` (a range's first unit is a pair: its mate 1 is record
    2 first - 1): as for read_batches.
    """
    _limits(max_reads, max_bases, 2)
    pools = _block_pools(1)
    opened = {}

    def open_take(spans, first):
        src = opened["src"] = _Source(path, fast_fastq, block_size, *_span_of(spans, 0, 2 * first - 1),
                                      blocks=pools[0])

        def take(k):
            slices, n = src.take(2 * k)
            if n % 2:
                raise InputError(src.name, "the last record has no mate (interleaved pairs need an even count)",
                                 src.taken)
            i = _fastq.first_mate_mismatch(slices, None)
            if i >= 0:
                a, b = _name_at(slices, 2 * i), _name_at(slices, 2 * i + 1)
                record = src.taken - n + 2 * i + 2
                message = f"mate names differ: '{a}' in record {record - 1} but '{b}' here"
                raise InputError(src.name, message, record)
            return _Part([slices], 2, n // 2)

        return take, src.close

    def make(first, part):
        src = opened["src"]
        record = 2 * first - 1
        return _make_batch(part, record, True, src.has_qualities, lambda i: (src.name, record + i))

    yield from _read(open_take, make, 2, max_reads, max_bases, shard, assignments)
