"""The reference's bases on the host, for the final alignment: the index's 2-bit packed sequence, mapped from
the file, and the runs of bases that are not A, C, G or T.

The final alignment needs a window of a few hundred bases per hit, so the windows are unpacked on demand
(``_genome``, without the GIL) instead of keeping every base unpacked at one byte: a quarter of a byte per
base, and those pages are the page cache's, shared with the device copy on a CPU device and with every other
run on the same index.
"""
import numpy as np

from ._genome import unpack_windows


class HostGenome:
    """Base codes of global windows (docs/architecture.md): 0..3 for A, C, G, T, and 4 for non-ACGT bases,
    the gaps between contigs and anything past the genome's end, as ``ReferenceIndex.codes`` gives them.

    ``packed``: the uint32 words of the packed sequence; ``run_start``/``run_end``: disjoint, sorted global
    intervals whose bases are 4.
    """

    def __init__(self, packed, run_start, run_end):
        self.packed = np.ascontiguousarray(packed, dtype=np.uint32)
        self.run_start = np.ascontiguousarray(run_start, dtype=np.int64)
        self.run_end = np.ascontiguousarray(run_end, dtype=np.int64)
        if self.run_start.shape != self.run_end.shape:
            raise ValueError("run_start and run_end differ in length")

    @classmethod
    def from_index(cls, index):
        """The genome of a ``reference.ReferenceIndex``: its packed words (mapped from the file where stored
        raw), its non-ACGT runs, and the gaps before, between and after its contigs."""
        exc_start, exc_end, _ = index.exceptions()
        offsets = np.asarray(index.offsets, dtype=np.int64)
        ends = offsets + np.asarray(index.lengths, dtype=np.int64)
        gap_start = np.concatenate(([0], ends))
        gap_end = np.concatenate((offsets, [index.total_padded]))
        start = np.concatenate((gap_start, exc_start))
        end = np.concatenate((gap_end, exc_end))
        keep = end > start
        order = np.argsort(start[keep], kind="stable")
        return cls(index.packed(), start[keep][order], end[keep][order])

    @property
    def nbytes(self):
        """Bytes of the host arrays (the packed words mostly page-cache pages of the index file)."""
        return self.packed.nbytes + self.run_start.nbytes + self.run_end.nbytes

    def windows(self, starts, lengths):
        """The codes of the windows ``[starts[i], starts[i] + lengths[i])`` concatenated, and int64 offsets
        (n + 1)."""
        return unpack_windows(self.packed, self.run_start, self.run_end,
                              np.ascontiguousarray(starts, dtype=np.int64),
                              np.ascontiguousarray(lengths, dtype=np.int64))

    def codes(self, start, end):
        """The codes of one window ``[start, end)``."""
        return self.windows([start], [end - start])[0]
