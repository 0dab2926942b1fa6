"""The writing process's cut of uncompressed FASTQ files into batches by byte range, for a run in several
mapping processes (shards.py): each mapping process then reads and parses only its own batches' bytes
(reads._parts), instead of every process parsing the whole input to find the same batch
boundaries.

The cut looks at line ends only (_fastq.count_records: a header line starting with '@', a sequence line, a
'+' line, as many qualities as bases), many times faster than the parse, and leaves every other check to the
mapping process that parses the range: a bad record is reported there with its record number in the file.
Where the cut meets anything that is not a four-line record (blank lines, a truncated or odd record, files
of pairs of different lengths, an odd count of interleaved records), the rest of the input from that batch
on becomes one tail, which one mapping process reads as a run of one process would, so that the reads, or the
error, are the same.
"""
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, NamedTuple, Optional, Tuple

import numpy as np

from . import _fastq
from .input_streams import readable_again


class Assignment(NamedTuple):
    """One batch for a mapping process: unit ``first`` (1-based: a read, or a pair) on, per file the bytes
    (offset, length); ``tail``: the rest of the files from there (length None), read in batches."""

    first: int
    spans: Tuple[Tuple[int, Optional[int]], ...]
    tail: bool


def can_cut(paths):
    """Whether every file of ``paths`` is a regular file that starts like FASTQ ('@', which no compressed
    format's magic number does)."""
    for path in paths:
        if path is None or not readable_again(path):
            return False
        try:
            with open(path, "rb") as f:
                if f.read(1) != b"@":
                    return False
        except OSError:
            return False  # the mapping processes name the problem
    return True


class _Text:
    """A file read front to back in big blocks (read, not mapped: a file cut short by another program while
    it is read then ends in a tail, whose reader names the record, instead of a bus error); ``count`` finds
    records from where the last count ended."""

    BLOCK = 1 << 25

    def __init__(self, path):
        self._file = open(path, "rb", buffering=0)
        self._buf = bytearray(self.BLOCK)
        self._view = np.frombuffer(self._buf, np.uint8)
        self._lo = self._hi = 0  # text not counted yet: _buf[_lo:_hi]
        self._offset = 0  # where _buf starts in the file
        self._eof = False

    @property
    def pos(self):
        """Where the next record starts in the file."""
        return self._offset + self._lo

    @property
    def at_end(self):
        return self._eof and self._lo == self._hi

    def count(self, records):
        """(records found, status) from ``pos`` on, at most ``records``; ``pos`` moves after them."""
        found = 0
        while True:
            n, self._lo, status = _fastq.count_records(self._view, self._lo, self._hi, records - found)
            found += n
            if status != _fastq.INCOMPLETE or self._eof:
                return found, status
            self._refill()

    def _refill(self):
        """Keep the text not counted yet, read more after it (twice the room for a record longer than half of
        it)."""
        left = self._hi - self._lo
        if 2 * left > len(self._buf):
            buf = bytearray(2 * len(self._buf))
            buf[:left] = self._buf[self._lo : self._hi]
            self._buf, self._view = buf, np.frombuffer(buf, np.uint8)
        else:
            self._buf[:left] = self._buf[self._lo : self._hi]
        self._offset += self._lo
        self._lo, self._hi = 0, left
        with memoryview(self._buf) as view:
            while self._hi < len(self._buf):
                got = self._file.readinto(view[self._hi :])
                if not got:
                    self._eof = True
                    break
                self._hi += got

    def close(self):
        self._file.close()


def cut(paths, per_unit, units) -> Iterator[Assignment]:
    """The batches of ``units`` units each of ``paths`` (one file, or the two files of pairs); a unit is
    ``per_unit`` adjacent records of each file (2 for interleaved pairs). The files of pairs are read and
    counted at the same time, one thread each (both steps release the interpreter lock): a batch's records
    are found by their number in each file alone, and the cut must keep ahead of every mapping process
    (docs/gpu.md, "Placement of the mapping processes and the cut of the input")."""
    texts = []
    pool = ThreadPoolExecutor(len(paths), thread_name_prefix="peanut-cut-file") if len(paths) > 1 else None
    try:
        for path in paths:
            texts.append(_Text(path))
        first = 1
        while True:
            starts = [t.pos for t in texts]
            records = units * per_unit
            counts = list(pool.map(lambda t: t.count(records), texts)) if pool is not None \
                else [texts[0].count(records)]
            found = {n for n, _ in counts}
            whole = len(found) == 1 and found.pop() % per_unit == 0
            ended = all(status == _fastq.INCOMPLETE and t.at_end for (_, status), t in zip(counts, texts))
            if whole and (ended or all(status == _fastq.FULL for _, status in counts)):
                n = counts[0][0] // per_unit
                if n:
                    yield Assignment(first, tuple((s, t.pos - s) for s, t in zip(starts, texts)), False)
                    first += n
                if ended:
                    return
                continue
            # not four-line records all the way: the rest, from this batch on, is read in full
            yield Assignment(first, tuple((s, None) for s in starts), True)
            return
    finally:
        if pool is not None:
            pool.shutdown()
        for t in texts:
            t.close()


__all__ = ["Assignment", "can_cut", "cut"]
