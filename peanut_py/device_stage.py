"""The device stage of one read buffer: q-group index, filtration, validation (PEANUT sections 2.2, 3.2, 3.3)."""
import time
from dataclasses import dataclass, field

import numpy as np

from . import clipped as clipped_step
from . import filtration, validation
from .filtration import DEFAULT_COLLAPSE_GAP, filter_reference
from .hit_lists import merge_hits
from .layout import MAX_READ_LENGTH, S_STRIDE
from .options import DEFAULT_MIN_IDENTITY
from .qgroup import QGroupIndex, ReadBuffer, qgroup_kernels
from .scans import exclusive_sum
from .selection import BestStratumSelection, select_kernels
from .validation import validate_hits

NO_MASKED = np.zeros(0, np.uint32)  # filter_reference's masked q-grams when the threshold is not lowered


@dataclass
class DeviceResult:
    """Validated hits of one batch on the host, grouped by read-strand id (``rs = 2 * read + strand``)."""

    rs: object
    ref_start: object
    ref_end: object
    dist: object
    raw_hits: int = 0
    candidates: int = 0
    validated: int = 0
    too_long: int = 0  # reads longer than MAX_READ_LENGTH: left out of the device buffer, so without hits
    clipped: int = 0  # hits of reads without a validated hit, found by their local alignment (clipped.py)
    seconds: dict = field(default_factory=dict)


class DeviceStage:
    """The device stage: the three device steps for a batch of reads against the resident reference."""

    def __init__(self, device, resident, min_identity=DEFAULT_MIN_IDENTITY, collapse_gap=DEFAULT_COLLAPSE_GAP,
                 best_stratum=False, clipped=None, masked_aware=True):
        """``best_stratum``: validate with :class:`BestStratumSelection` (for mode best: same best stratum,
        weak rivals skipped); otherwise every candidate is validated. ``clipped`` (a
        :class:`peanut_py.clipped.ClippedSearch`, local mode): reads without a validated hit get the hits of
        their local alignments (clipped.py); None: they stay without hits. ``masked_aware``: the votes
        threshold of a read strand is lowered by its q-grams that the index masked (``resident.masked_kmers``),
        which keeps the q-gram lemma's guarantee inside masked repeats, and the best-stratum selection's
        need of a rival by the same count (every mode of ``peanut map``; False: the plain threshold, for
        measurements)."""
        self.device = device
        self.resident = resident
        self.fits = None  # reads per batch known to fit after the device ran out of memory (map_batch_or_split)
        self.min_identity = min_identity
        self.collapse_gap = DEFAULT_COLLAPSE_GAP if collapse_gap is None else collapse_gap
        self.best_stratum = best_stratum
        self.clipped = clipped
        self.masked_kmers = resident.masked_kmers if masked_aware else None
        self._contigs = None

    def warm_up(self):
        """Build the OpenCL programs that every batch uses, in the order the first batch needs them.

        Run in a thread while the first batch is read, they are ready (or being built, and then waited for,
        see ``Device.cached``) when it arrives.
        Errors are left to the batch that needs the program: it builds again and reports them."""
        q, gap = self.resident.q, self.collapse_gap
        try:
            self.device.warm_up()
            qgroup_kernels(self.device, q)
            exclusive_sum(self.device)
            filtration.build_programs(self.device, self.resident, S_STRIDE)
            filtration.min_votes_table(None, q, self.resident.step, gap)  # a thousand thresholds, computed once
            if self.best_stratum:
                select_kernels(self.device, q, self.resident.step, gap)
            validation.build_programs(self.device)
            if self.clipped is not None:
                clipped_step.build_programs(self.device)
        except Exception:
            pass

    def map_batch_or_split(self, codes, offsets, on_split=None):
        """:meth:`map_batch`, and when the device runs out of memory for the batch, the batch's two halves
        one after the other (recursively, down to single reads): a device that a driver, another process or
        fragmentation left with less memory than it reported gives the same result, more slowly. Each read's
        hits do not depend on the batch it is in, so the merged result equals the whole batch's.
        ``on_split(n_reads)`` is called when the first batch fails (for a log line); ``fits`` then holds the
        largest batch still tried whole."""
        n = len(offsets) - 1
        if self.fits is None or n <= self.fits:
            try:
                return self.map_batch(codes, offsets)
            except Exception as exc:  # noqa: BLE001 - only a device allocation failure is handled
                if n < 2 or not is_out_of_device_memory(exc):
                    raise
            # later batches of this size are split before they are tried (and it is said once)
            if on_split is not None and self.fits is None:
                on_split(n)
            self.fits = n // 2 if self.fits is None else min(self.fits, n // 2)
        offsets = np.asarray(offsets, dtype=np.int64)
        half = n // 2
        first = self.map_batch_or_split(codes[offsets[0]:offsets[half]], offsets[:half + 1] - offsets[0], on_split)
        second = self.map_batch_or_split(codes[offsets[half]:offsets[n]], offsets[half:] - offsets[half], on_split)
        return concatenate_results(first, second, half)

    def map_batch(self, codes, offsets):
        """``codes``/``offsets``: the batch's forward reads (see ReadBatch). Returns a DeviceResult.

        Reads longer than MAX_READ_LENGTH, which the kernels do not take, enter the buffer empty: they get no
        hits, so they are reported unmapped, and ``too_long`` counts them."""
        t0 = time.perf_counter()
        offsets = np.asarray(offsets, dtype=np.int64)
        lengths = np.diff(offsets)  # once for the batch: the buffer and the clipped step use it too
        codes, offsets, too_long = without_long_reads(codes, offsets, lengths=lengths)
        if too_long:
            lengths = np.diff(offsets)
        buffer = ReadBuffer(self.device, codes, offsets, q=self.resident.q, lengths=lengths)
        index = QGroupIndex(self.device, buffer, self.resident.q)
        t1 = time.perf_counter()
        candidates = filter_reference(self.device, self.resident, index, buffer, collapse_gap=self.collapse_gap,
                                      masked_kmers=NO_MASKED if self.masked_kmers is None else self.masked_kmers)
        t2 = time.perf_counter()
        select = None
        if self.best_stratum:
            select = BestStratumSelection(self.device, self.resident.q, self.resident.step, self.collapse_gap,
                                          masked_per_rs=candidates.masked_per_rs)
        hits = validate_hits(self.device, self.resident, buffer, candidates, min_identity=self.min_identity,
                             select=select)
        n_clipped = 0
        if self.clipped is None:
            host = hits.to_host()
            found = (host["rs"], host["ref_start"], host["ref_end"], host["dist"])
            t3 = time.perf_counter()
        else:
            # the clipped step chooses its reads on the device and brings the validated hits with them
            t3 = time.perf_counter()
            found, extra, kept = clipped_step.clipped_hits(self.device, self.resident, codes, offsets, hits,
                                                           candidates, self.clipped, *self.contigs(),
                                                           rs_start=buffer.rs_start, lengths=lengths)
            n_clipped = len(extra[0])
            keep = None if kept.all() else kept
            if n_clipped:
                found = merge_hits(found, extra, keep=keep)
            elif keep is not None:
                found = tuple(a[keep] for a in found)
        t4 = time.perf_counter()
        seconds = {"index": t1 - t0, "filter": t2 - t1, "validate": t3 - t2}
        if self.clipped is not None:
            seconds["clipped"] = t4 - t3
        return DeviceResult(
            rs=found[0],
            ref_start=found[1],
            ref_end=found[2],
            dist=found[3],
            raw_hits=int(getattr(candidates, "raw_hits", 0)),
            candidates=int(candidates.n),
            too_long=too_long,
            validated=int(candidates.n) if select is None else select.counts.get("leaders", 0)
            + select.counts.get("rivals", 0),
            clipped=n_clipped,
            seconds=seconds,
        )

    def contigs(self):
        """The resident reference's contig offsets and ends on the host (int64), read once."""
        if self._contigs is None:
            self._contigs = tuple(np.asarray(a.get(), dtype=np.int64)[: self.resident.n_contigs]
                                  for a in (self.resident.contig_offsets, self.resident.contig_ends))
        return self._contigs


# OpenCL's status codes for a failed allocation: CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES,
# CL_OUT_OF_HOST_MEMORY (drivers report an exhausted device with either of the first two)
OUT_OF_MEMORY_CODES = (-4, -5, -6)


def is_out_of_device_memory(exc):
    """Whether ``exc`` is an OpenCL allocation failure (pyopencl.MemoryError, or an error with one of
    OUT_OF_MEMORY_CODES)."""
    import pyopencl as cl

    if isinstance(exc, cl.MemoryError):
        return True
    code = getattr(exc, "code", None)
    if code is None and isinstance(exc, cl.Error) and exc.args and hasattr(exc.args[0], "code"):
        code = exc.args[0].code
    if callable(code):
        code = code()
    try:
        return int(code) in OUT_OF_MEMORY_CODES
    except (TypeError, ValueError):
        return False


def concatenate_results(first, second, n_first):
    """The DeviceResult of a batch from those of its first ``n_first`` reads and of the rest."""
    shifted = np.asarray(second.rs).astype(np.asarray(first.rs).dtype, copy=False) + 2 * n_first
    seconds = dict(first.seconds)
    for key, value in second.seconds.items():
        seconds[key] = seconds.get(key, 0.0) + value
    return DeviceResult(
        rs=np.concatenate([np.asarray(first.rs), shifted]),
        ref_start=np.concatenate([np.asarray(first.ref_start), np.asarray(second.ref_start)]),
        ref_end=np.concatenate([np.asarray(first.ref_end), np.asarray(second.ref_end)]),
        dist=np.concatenate([np.asarray(first.dist), np.asarray(second.dist)]),
        raw_hits=first.raw_hits + second.raw_hits,
        candidates=first.candidates + second.candidates,
        validated=first.validated + second.validated,
        too_long=first.too_long + second.too_long,
        clipped=first.clipped + second.clipped,
        seconds=seconds,
    )


def without_long_reads(codes, offsets, max_length=MAX_READ_LENGTH, lengths=None):
    """``(codes, offsets, n)``: the reads with every read longer than ``max_length`` made empty (same read
    count and order), and the number of such reads. ``lengths``: np.diff(offsets), when the caller has it."""
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets) if lengths is None else lengths
    long = lengths > max_length
    n = int(np.count_nonzero(long))
    if n == 0:
        return codes, offsets, 0
    kept = np.where(long, 0, lengths)
    codes = np.asarray(codes)[np.repeat(~long, lengths)]
    return codes, np.concatenate(([0], np.cumsum(kept))), n
