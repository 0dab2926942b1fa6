"""Alignments out: the SAM header and atomic SAM/BAM writers (the records come from sam_records.py).

A file output is written to a hidden temporary file beside the target and renamed onto it only by a
successful ``close()``; ``abort()``, an exception inside ``with open_output(...)`` (Ctrl-C included) or an
interpreter exit with the writer still open delete the temporary file, so no partial output is left.
"""
import atexit
import os
import stat
import sys
import threading


from ._version import __version__
from .errors import PeanutError
from .outfiles import temporary_beside

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

    def _failed(self, e):
        return PeanutError(f"{self.path}: cannot write: {e.strerror or e}")

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
            os.replace(self.temp_path, self.path)
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
        self.write(header)

    def write(self, text):
        try:
            self._file.write(text if isinstance(text, bytes) else text.encode())
        except OSError as e:
            self.abort()
            raise PeanutError(f"{self.path}: cannot write: {e.strerror or e}") from None

    def _close_file(self):
        if not self._file.closed:
            self._file.close()


class _BamWriter(_AtomicFileWriter):
    """BAM through htslib: each SAM line is parsed by AlignedSegment.fromstring against the header."""

    def __init__(self, path, header, threads=1):
        import pysam

        super().__init__(path)
        os.close(self._fd)  # htslib opens the temporary file by name
        try:
            self._header = pysam.AlignmentHeader.from_text(header)
            self._bam = pysam.AlignmentFile(self.temp_path, "wb", header=self._header, threads=max(1, threads))
        except (ValueError, OSError) as e:
            self._bam = None
            self.abort()
            raise PeanutError(f"{self.path}: cannot write BAM: {e}") from None
        self._fromstring = pysam.AlignedSegment.fromstring

    def write(self, text):
        header, write, fromstring = self._header, self._bam.write, self._fromstring
        if isinstance(text, bytes):
            text = text.decode()
        try:
            for line in text.splitlines():
                write(fromstring(line, header))
        except OSError as e:
            self.abort()
            raise PeanutError(f"{self.path}: cannot write: {e.strerror or e}") from None

    def _close_file(self):
        if self._bam is not None:
            bam, self._bam = self._bam, None
            bam.close()


class _StdoutBamWriter(_Writer):
    """BAM on standard output, or streamed into an existing special file (see _StdoutWriter)."""

    def __init__(self, header, threads=1, path=None):
        import pysam

        if path is None:
            _stdout().flush()
        self.path = "standard output" if path is None else os.fspath(path)
        self._header = pysam.AlignmentHeader.from_text(header)
        try:
            self._bam = pysam.AlignmentFile("-" if path is None else self.path, "wb", header=self._header,
                                            threads=max(1, threads))
        except (ValueError, OSError) as e:
            raise PeanutError(f"{self.path}: cannot write BAM: {e}") from None
        self._fromstring = pysam.AlignedSegment.fromstring

    def write(self, text):
        if isinstance(text, bytes):
            text = text.decode()
        for line in text.splitlines():
            self._bam.write(self._fromstring(line, self._header))

    def close(self):
        if self._bam is not None:
            bam, self._bam = self._bam, None
            try:
                bam.close()
            except OSError as e:
                raise PeanutError(f"{self.path}: cannot write: {e.strerror or e}") from None

    def abort(self):
        try:
            self.close()
        except PeanutError:
            pass


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


def check_output_path(path, inputs=()):
    """Refuse, before any work, an output file that cannot be written as asked: an unsupported format
    (:func:`output_format`), a directory, a file that is one of ``inputs`` (reads, mates, index, reference; it
    would be overwritten), or a folder that does not exist.  ``path`` None or '-' (standard output) and
    special files (:func:`is_special_file`) are written as they are."""
    output_format(path)
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


def open_output(path, header, fmt=None, threads=1):
    """A writer with write(text_block) (str or UTF-8 bytes), close(), abort() and context management.

    path None or '-': stdout; an existing special file (device, FIFO): written in place, streamed; otherwise an
    atomically replaced file. `threads`: BAM compression threads.
    """
    fmt = output_format(path, fmt)
    if path is None or path == "-":
        return _StdoutBamWriter(header, threads) if fmt == "bam" else _StdoutWriter(header)
    if is_special_file(path):
        return _StdoutBamWriter(header, threads, path) if fmt == "bam" else _StdoutWriter(header, path)
    return _BamWriter(path, header, threads) if fmt == "bam" else _SamFileWriter(path, header)


def is_special_file(path):
    """Whether ``path`` exists and is neither a regular file nor a directory (a device, FIFO or socket): output
    into it is streamed, never written beside it and renamed onto it (which would replace a device node)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))
