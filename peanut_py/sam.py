"""Alignments out: the SAM header and atomic SAM/BAM writers (the records come from sam_records.py).

The output is a path ('-' = standard output), a format (SAM or BAM; by default from the name) and whether
unmapped reads are left out (``peanut map -U``, :func:`drop_unmapped`).

A file output is written to a hidden temporary file beside the target and renamed onto it only by a
successful ``close()``; ``abort()``, an exception inside ``with open_output(...)`` (Ctrl-C included) or an
interpreter exit with the writer still open delete the temporary file, so no partial output is left.
"""
import atexit
import errno
import fcntl
import os
import re
import stat
import sys
import threading

import numpy as np

from ._bam import RefNames, sam_to_bam
from ._version import __version__
from .bgzf import BgzfWriter, bam_header, compression_threads
from .errors import PeanutError
from .outfiles import replace_unless_interrupted, temporary_beside
from .range_writes import RangeWriter

# --- header ---------------------------------------------------------------------------------------------------


def parse_read_group(text):
    """A bwa-style ``-R`` line ('@RG\\tID:x\\tSM:y', literal backslash-t accepted) -> (header line, ID)."""
    line = text.replace("\\t", "\t")
    if "\n" in line or "\r" in line:
        raise PeanutError("read group: the @RG line must be a single line")
    fields = line.split("\t")
    if fields[0] != "@RG":
        raise PeanutError(f"read group must start with '@RG\\t', got {text!r}")
    rg_id = None
    for field in fields[1:]:
        if len(field) < 3 or field[2] != ":" or not field[:2].isalnum():
            raise PeanutError(f"read group field {field!r} is not TAG:VALUE")
        if field.startswith("ID:"):
            rg_id = field[3:]
    if not rg_id:
        raise PeanutError(f"read group has no ID: {text!r} (e.g. '@RG\\tID:sample1\\tSM:sample1')")
    return line, rg_id


def index_header(index, read_group=None, program_command_line=None) -> str:
    """The SAM header of a run against ``index`` (a ReferenceIndex: its sequences, lengths and MD5s), with the
    bwa-style ``-R`` text ``read_group`` and the command line for @PG: map_reads and the writing process of
    several mapping processes (shards.py) write this one header."""
    return sam_header(index.names, index.lengths, md5s=index.md5s, read_group=read_group or None,
                      program_command_line=program_command_line)


def sam_header(names, lengths, md5s=None, read_group=None, program_command_line=None, version=__version__) -> str:
    """@HD, one @SQ per reference sequence, optionally @RG (a bwa-style -R string), and @PG."""
    out = ["@HD\tVN:1.6\tSO:unsorted\n"]
    if md5s is None:
        md5s = [None] * len(names)
    for name, length, md5 in zip(names, lengths, md5s):
        out.append(f"@SQ\tSN:{name}\tLN:{int(length)}" + (f"\tM5:{md5}\n" if md5 else "\n"))
    if read_group is not None:
        out.append(parse_read_group(read_group)[0] + "\n")
    pg = f"@PG\tID:peanut\tPN:peanut-py\tVN:{version}"
    if program_command_line:
        pg += "\tCL:" + " ".join(program_command_line.split())  # no tabs or newlines inside a header field
    out.append(pg + "\n")
    return "".join(out)


# --- what to write ------------------------------------------------------------------------------------------


_TAB, _NEWLINE = 9, 10


def drop_unmapped(text):
    """The SAM records of ``text`` (whole lines, str or UTF-8 bytes) without those that ``samtools view -F 4``
    would drop, except unmapped reads whose mate is mapped: records whose FLAG has 0x4 (unmapped) and either
    lacks 0x1 (single-end) or has 0x8 (mate unmapped too). Pairs stay whole when one mate is mapped, as with
    minimap2's --sam-hit-only.  Returns bytes (``text`` itself when nothing is dropped); lines without a
    numeric FLAG (headers, anything malformed) are kept.

    Bytes-level, with NumPy: one pass finds the tabs and newlines, the FLAG field is the text between each
    line's first two of them; no Python code runs per record, only one slice per run of kept records."""
    if isinstance(text, str):
        text = text.encode()
    if not text:
        return text
    a = np.frombuffer(text, np.uint8)
    n = a.size
    # tabs and newlines; another control byte (none in valid SAM) is found too: before FLAG, its line is kept
    sep = np.flatnonzero(a <= _NEWLINE)
    kind = a[sep]
    line_ends = np.flatnonzero(kind == _NEWLINE)  # indices into sep
    if line_ends.size == 0 or sep[line_ends[-1]] != n - 1:  # a last line without its newline
        sep, kind = np.append(sep, n), np.append(kind, np.uint8(_NEWLINE))
        line_ends = np.append(line_ends, sep.size - 1)
    first = np.empty_like(line_ends)  # index into sep of each line's first separator
    first[0] = 0
    first[1:] = line_ends[:-1] + 1
    sep_x = np.append(sep, [n, n])
    kind_x = np.append(kind, np.array([_NEWLINE, _NEWLINE], np.uint8))
    t1, t2 = sep_x[first], sep_x[first + 1]  # the tabs before and after FLAG
    width = t2 - t1 - 1
    valid = (kind_x[first] == _TAB) & (kind_x[first + 1] == _TAB) & (width >= 1) & (width <= 5)
    flag = np.zeros(line_ends.size, np.int64)
    for k in range(5):  # FLAG is 0..65535: at most five digits
        used = width > k
        digit = a[np.minimum(t1 + 1 + k, n - 1)].astype(np.int64) - 48
        valid &= ~used | ((digit >= 0) & (digit <= 9))
        flag = np.where(used, flag * 10 + digit, flag)
    drop = valid & ((flag & 0x4) != 0) & (((flag & 0x1) == 0) | ((flag & 0x8) != 0))
    if not drop.any():
        return text
    # join the runs of kept lines (few slices: one per run of dropped records)
    end = np.minimum(sep[line_ends] + 1, n)  # one past each line's newline
    start = np.concatenate(([0], end[:-1]))
    kept = np.concatenate(([False], ~drop, [False]))
    edges = np.flatnonzero(kept[1:] != kept[:-1])  # first kept line of a run, one past its last, alternating
    view = memoryview(text)
    return b"".join([view[s:e] for s, e in zip(start[edges[0::2]].tolist(), end[edges[1::2] - 1].tolist())])


# --- writers --------------------------------------------------------------------------------------------------

_open_writers = set()
_open_writers_lock = threading.Lock()


@atexit.register
def abort_open_writers():
    """A run that ends without closing its output (an error in another thread, sys.exit) leaves no partial file."""
    with _open_writers_lock:
        writers = list(_open_writers)
    for w in writers:
        w.abort()


def _temporary_beside(path):
    """Create a new hidden file beside `path` (outfiles.py; the run removes a killed run's first)."""
    try:
        return temporary_beside(path)
    except OSError as e:
        raise PeanutError(f"{path}: cannot write: {e.strerror or e}") from None


class _Writer:
    """Common part: context manager, close on success, abort on failure."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def write(self, text):
        raise NotImplementedError

    def encode(self, text):
        """What ``write_encoded`` takes for a block of SAM records; may run on any thread (the pipeline runs
        it on the postprocessing pool, so that BAM encoding is spread over the cores)."""
        return text

    def write_encoded(self, data):
        self.write(data)

    def direct_target(self):
        """Where other processes may write encoded records themselves, at offsets this writer's owner hands
        out (shards.py): ``(path or None for standard output, offset of the first record)``, or None where
        records must come through ``write_encoded`` (BAM, a pipe, a file opened for appending)."""
        return None

    def close(self):
        raise NotImplementedError

    def abort(self):
        raise NotImplementedError


def _stdout():
    """sys.stdout, or a one-line error when the process was started with standard output closed."""
    if sys.stdout is None:
        raise PeanutError("standard output is closed; give the output file with -o FILE")
    return sys.stdout


class _StdoutWriter(_Writer):
    """SAM on standard output, or streamed into an existing special file (a FIFO, a device such as
    /dev/null, a process substitution): such a target cannot be replaced atomically, and must not be."""

    def __init__(self, header, path=None):
        self.path = "standard output" if path is None else os.fspath(path)
        if path is None:
            self._out = _stdout().buffer
        else:
            try:
                self._out = open(path, "wb", buffering=1 << 20)
            except OSError as e:
                raise PeanutError(f"{self.path}: cannot write: {e.strerror or e}") from None
        self.write(header)
        self._sam = bool(header)  # a BAM writer's inner byte writer gets b""

    def _failed(self, e):
        return PeanutError(f"{self.path}: cannot write: {e.strerror or e}")

    def direct_target(self):
        if self.path != "standard output" or not self._sam:
            return None
        try:
            self._out.flush()
            fd = self._out.fileno()
            if not stat.S_ISREG(os.fstat(fd).st_mode) or fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
                return None
            return None, os.lseek(fd, 0, os.SEEK_CUR)
        except (OSError, ValueError, AttributeError):
            return None

    def moved_to(self, end):
        """Records were written up to offset ``end`` by other processes: standard output continues there."""
        os.lseek(self._out.fileno(), end, os.SEEK_SET)

    def write(self, text):
        try:
            self._out.write(text if isinstance(text, bytes) else text.encode())
        except OSError as e:
            raise self._failed(e) from None

    def close(self):
        try:
            self._out.flush()
            if self.path != "standard output":
                self._out.close()
        except OSError as e:
            raise self._failed(e) from None

    def abort(self):
        try:
            self._out.flush()
        except (OSError, ValueError):
            pass


class _AtomicFileWriter(_Writer):
    """Writes into a temporary file; close() renames it onto the target, abort() deletes it."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.temp_path, self._fd = _temporary_beside(self.path)
        self._done = False
        with _open_writers_lock:
            _open_writers.add(self)

    def _finish(self, keep):
        with _open_writers_lock:
            _open_writers.discard(self)
        self._done = True
        if keep:
            replace_unless_interrupted(self.temp_path, self.path)
        else:
            try:
                os.unlink(self.temp_path)
            except FileNotFoundError:
                pass

    def close(self):
        if self._done:
            return
        try:
            self._close_file()
            self._finish(True)
        except OSError as e:
            self.abort()
            raise PeanutError(f"{self.path}: cannot write: {e.strerror or e}") from None

    def abort(self):
        if self._done:
            return
        try:
            self._close_file()
        except Exception:  # the file is deleted next; a failure to flush it does not matter
            pass
        self._finish(False)


class _SamFileWriter(_AtomicFileWriter):
    def __init__(self, path, header):
        super().__init__(path)
        self._file = os.fdopen(self._fd, "wb", buffering=1 << 20)
        self._ranges = None  # the RangeWriter of the records, from the first block after the header
        self._end = None  # where its next block goes
        self._records = False  # whether the records have begun (every block after the header)
        self._sam = False
        self.write(header)
        self._sam = bool(header)  # a BAM writer's inner byte writer gets b""

    def write(self, text):
        data = text if isinstance(text, bytes) else text.encode()
        try:
            if self._sam and not self._records:
                # the records' blocks are written by a thread of their own (range_writes.py), so that the
                # thread that hands them over in input order does not wait for each write; one writer of a
                # file writes fastest with pwrite
                self._file.flush()
                self._end = self._file.tell()
                self._ranges = RangeWriter(self._file.fileno(), threads=1, mapped=False)
                self._records = True
            if self._records:
                self._ranges.write(self._end, data)
                self._end += len(data)
            else:
                self._file.write(data)
        except OSError as e:
            self.abort()
            raise PeanutError(f"{self.path}: cannot write: {e.strerror or e}") from None

    def direct_target(self):
        if not self._sam or self._records:
            return None
        self._file.flush()
        return self.temp_path, self._file.tell()

    def moved_to(self, end):
        self._file.seek(end)

    def _close_file(self):
        try:
            if self._ranges is not None:
                ranges, self._ranges = self._ranges, None
                ranges.close()
        finally:
            if not self._file.closed:
                self._file.close()


class _BamWriter(_Writer):
    """BAM: each block of SAM records becomes BAM records (``encode``, which the pipeline runs on its
    postprocessing pool, without the interpreter lock: _bam.pyx) and the record stream is BGZF-compressed
    (bgzf.py, on a quarter of ``threads``) into a byte writer: a file replaced atomically, or a stream."""

    def __init__(self, inner, header, threads=1):
        self._inner = inner
        self.path = inner.path
        self._done = False
        names, lengths = _reference_dictionary(header)
        self._refs = RefNames(names)
        self._bgzf = BgzfWriter(inner.write, compression_threads(threads))
        try:
            self._bgzf.write(bam_header(header, names, lengths))
            self._bgzf.flush()  # the records start in a block of their own, as htslib writes them
        except BaseException:
            self.abort()
            raise

    def encode(self, text):
        return _bam_records(text, self._refs)

    def write_encoded(self, records):
        self._bgzf.write(records)

    def write(self, text):
        self.write_encoded(self.encode(text))

    def close(self):
        if self._done:
            return
        self._done = True
        try:
            self._bgzf.close()
        except BaseException:
            self._inner.abort()
            raise
        self._inner.close()

    def abort(self):
        self._done = True
        self._bgzf.abort()
        self._inner.abort()


def _reference_dictionary(header):
    """The (names, lengths) of a SAM header's @SQ lines, in order."""
    text = header.decode() if isinstance(header, bytes) else header
    names, lengths = [], []
    for line in text.splitlines():
        if line.startswith("@SQ\t"):
            fields = dict(f.split(":", 1) for f in line.split("\t")[1:] if ":" in f)
            names.append(fields["SN"])
            lengths.append(int(fields["LN"]))
    return names, lengths


class _HitOnlyWriter(_Writer):
    """Another writer with the records of unmapped reads left out (:func:`drop_unmapped`); the header, written
    by that writer when it opens, is untouched."""

    def __init__(self, inner):
        self._inner = inner
        self.path = inner.path

    def write(self, text):
        kept = drop_unmapped(text)
        if kept:
            self._inner.write(kept)

    def encode(self, text):
        return self._inner.encode(drop_unmapped(text))

    def write_encoded(self, data):
        if data:
            self._inner.write_encoded(data)

    def direct_target(self):
        return self._inner.direct_target()

    def moved_to(self, end):
        self._inner.moved_to(end)

    def close(self):
        self._inner.close()

    def abort(self):
        self._inner.abort()


def output_format(path, fmt=None):
    """'sam' or 'bam': `fmt` if given, else from the file name (*.bam is BAM; stdout and the rest SAM)."""
    if fmt is not None:
        fmt = fmt.lower()
        if fmt not in ("sam", "bam"):
            raise PeanutError(f"unknown output format {fmt!r} (use sam or bam)")
        return fmt
    if path not in (None, "-") and os.fspath(path).lower().endswith(".bam"):
        return "bam"
    if path not in (None, "-") and os.fspath(path).lower().endswith(".cram"):
        raise PeanutError(f"{path}: CRAM output is not supported (write .bam or .sam)")
    return "sam"


def _check_format_against_name(path, fmt):
    """Refuse an explicit format that the file's name contradicts (``--output-format sam -o x.bam``, or bam
    with x.sam): a .bam file holding SAM text, or the reverse, surprises every later reader of the name."""
    if fmt is None or path in (None, "-") or is_special_file(path):
        return
    named = {".sam": "sam", ".bam": "bam"}.get(os.path.splitext(os.fspath(path))[1].lower())
    if named is not None and named != fmt:
        raise PeanutError(f"{path}: --output-format {fmt} contradicts the name's .{named}; name the file "
                          f"*.{fmt}, or leave out --output-format")


def check_output_path(path, inputs=(), fmt=None):
    """Refuse, before any work, an output file that cannot be written as asked: an unsupported format
    (:func:`output_format`), an explicit format that the name contradicts (.sam vs .bam), a directory, a file
    that is one of ``inputs`` (reads, mates, index, reference; it would be overwritten), or a folder that does
    not exist.  ``path`` None or '-' (standard output) and special files (:func:`is_special_file`) are written
    as they are."""
    output_format(path)  # a .cram name is refused whatever the format
    if fmt is not None:
        _check_format_against_name(path, output_format(path, fmt))
    if path is None or path == "-" or is_special_file(path):
        return
    if os.path.isdir(path):
        raise PeanutError(f"{path}: the output is a directory; give a file name such as "
                          f"{os.path.join(path, 'out.sam')}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise PeanutError(f"{path}: cannot write the output: no such directory {folder}")
    if os.path.exists(path):
        for other in inputs:
            if other is not None and other != "-" and os.path.exists(other) and os.path.samefile(path, other):
                raise PeanutError(f"{path}: the output would overwrite an input of this run")


def open_output(path, header, fmt=None, threads=1, hit_only=False):
    """A writer with write(text_block) (str or UTF-8 bytes), close(), abort() and context management.

    path None or '-': stdout; an existing special file (device, FIFO): written in place, streamed; otherwise an
    atomically replaced file. `threads`: the run's threads (BAM compresses on a quarter of them).
    `hit_only`: leave out unmapped reads (:func:`drop_unmapped`).
    """
    writer = _open_writer(path, header, output_format(path, fmt), threads)
    return _HitOnlyWriter(writer) if hit_only else writer


def _bam_records(text, refs):
    """BAM records (without BGZF) of a block of SAM records (str or bytes) against ``refs`` (RefNames)."""
    return sam_to_bam(text if isinstance(text, bytes) else text.encode(), refs)


def encoder(header, fmt, hit_only=False):
    """The ``encode`` of the writer that :func:`open_output` gives for ``fmt`` and ``hit_only``, without the
    writer: a mapping process of several (shards.py) encodes its records, the writing process writes them
    with ``write_encoded``."""
    if fmt == "bam":
        refs = RefNames(_reference_dictionary(header)[0])

        def encode(text):
            return _bam_records(text, refs)
    else:
        def encode(text):
            return text if isinstance(text, bytes) else text.encode()
    if hit_only:
        return lambda text: encode(drop_unmapped(text))
    return encode


def _open_writer(path, header, fmt, threads):
    if path is None or path == "-":
        inner = _StdoutWriter(header if fmt == "sam" else b"")
    elif is_special_file(path):
        inner = _StdoutWriter(header if fmt == "sam" else b"", path)
    else:
        inner = _SamFileWriter(path, header if fmt == "sam" else b"")
    return _BamWriter(inner, header, threads) if fmt == "bam" else inner


# Names of a process's open files (/dev/stdout, /dev/fd/1, /proc/self/fd/1): a symbolic link to whatever the
# descriptor is, a regular file too when the shell redirected it (peanut map -o /dev/stdout > out.sam)
_DESCRIPTOR_NAME = re.compile(r"/dev/(stdout|stderr)|/dev/fd/\d+|/proc/(self|thread-self|\d+)/fd/\d+")


def is_special_file(path):
    """Whether ``path`` exists and is neither a regular file nor a directory (a device, FIFO or socket), or
    names an open file descriptor (/dev/stdout, /dev/fd/N, /proc/self/fd/N) whatever it is: output into it is
    streamed, never written beside it and renamed onto it (which would replace a device node, or the
    /dev/stdout link itself)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if stat.S_ISDIR(mode):
        return False
    return not stat.S_ISREG(mode) or _DESCRIPTOR_NAME.fullmatch(os.path.abspath(path)) is not None
