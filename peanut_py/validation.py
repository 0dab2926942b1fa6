"""Validation (PEANUT section 3.3): banded Myers edit distance of every candidate, identity filter, compaction.

Each candidate (read strand ``rs``, diagonals ``diag_lo..diag_hi``) is aligned semi-globally (whole read strand,
any reference substring) inside the diagonal band ``[diag_lo - k, diag_hi + k]``, ``k = max_errors(n)``, clipped
to the candidate's contig; see ``kernels/myers.cl`` and docs/core.md ("Validation") for the exact rules.
Candidates with ``(n - dist) / n < min_identity`` are dropped on the device and the survivors are compacted in
candidate order, so the output stays sorted by read strand.
"""
import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .errors import PeanutError
from .options import DEFAULT_MIN_IDENTITY
from .scans import validation_compaction, where

NO_ALIGNMENT = -1  # dist of a candidate whose band holds no complete alignment (never a survivor)
MAX_WORDS = 4  # default largest bit-vector: 4 x 64 bits, a band of at most 255 diagonals


def _identity_fraction(min_identity):
    """``min_identity`` as the decimal the user wrote (0.8 -> 4/5), so that 80/100 passes 0.8."""
    value = float(min_identity)
    if not 0.0 <= value <= 1.0 or math.isnan(value):
        raise PeanutError(f"minimum identity {min_identity!r} is not between 0 and 1")
    return Fraction(repr(value))


def max_errors(read_length, min_identity):
    """The largest k with (n - k) / n >= min_identity, computed exactly (no floating-point rounding)."""
    n = int(read_length)
    if n <= 0:
        return 0
    return n - math.ceil(_identity_fraction(min_identity) * n)


@functools.lru_cache(maxsize=64)
def max_errors_table(max_length, min_identity):
    """``max_errors(n)`` for n = 0..max_length as uint32, the device's lookup table (read-only: one table per
    arguments serves every batch, since the exact fractions cost the device thread a millisecond a batch)."""
    table = np.array([max_errors(n, min_identity) for n in range(int(max_length) + 1)], dtype=np.uint32)
    table.flags.writeable = False
    return table


def max_errors_on_device(device, max_length, min_identity):
    """:func:`max_errors_table` on ``device``, uploaded once per arguments."""
    return device.constant(("max_errors", int(max_length), float(min_identity)),
                           lambda: max_errors_table(int(max_length), min_identity))


def band_width(span, k):
    """Diagonals in the band of a candidate spanning ``span = diag_hi - diag_lo`` with ``k`` errors, uncapped."""
    return span + 2 * k + 1


def words_for_band(width):
    """64-bit words the bit-vector needs for a band of ``width`` diagonals (one helper bit on top)."""
    return max(1, (width + 1 + 63) // 64)


def max_band(words):
    """The widest band (diagonals) a bit-vector of ``words`` words holds; wider bands are shrunk to it."""
    return 64 * words - 1


@dataclass
class ValidatedHits:
    """Survivors of validation in candidate order (so sorted by read strand). Device arrays of length ``n``.

    ``ref_start``/``ref_end`` are global (padded) coordinates, start inclusive, end exclusive; ``candidate``
    is the index of the candidate each hit came from.
    """

    n: int
    rs: object
    ref_start: object
    ref_end: object
    dist: object
    candidate: object

    def to_host(self):
        from .device import get_all

        names = ("rs", "ref_start", "ref_end", "dist", "candidate")
        arrays = [getattr(self, name) for name in names]
        return dict(zip(names, get_all(arrays[0].queue, arrays, [self.n] * len(names))))


def _myers_kernel(device, words):
    """The validation kernel for bit-vectors of ``words`` 64-bit words (1..MAX_WORDS, one program for all)."""
    if not 1 <= int(words) <= MAX_WORDS:
        raise PeanutError(f"validation: bit-vectors of 1..{MAX_WORDS} words are compiled, not {words}")
    return getattr(device.kernels("myers"), f"validate_hits_w{int(words)}")


def _band_words_kernel(device):
    return device.kernels("myers").band_words


def build_programs(device):
    """Build what every validation uses (see ``DeviceStage.warm_up``): the Myers program (every word size and
    the word-class split), the word-class compaction and the survivors' compaction."""
    _band_words_kernel(device)
    where(device)
    _myers_kernel(device, 1)
    validation_compaction(device)


def validate_candidates(device, resident, read_buffer, candidates, min_identity=DEFAULT_MIN_IDENTITY, words=None,
                        selected=None, out=None, max_words=MAX_WORDS):
    """Run the validation kernel over all candidates: per-candidate device arrays (dist, start, end, keep).

    ``dist`` is NO_ALIGNMENT where the band holds no alignment; start/end are 0 for candidates not kept.
    ``words`` fixes the bit-vector size (band cap 64*words-1) for every candidate; by default each candidate
    runs with the fewest words its band needs, at most ``max_words`` (the same results: bits above a band
    never reach it, see kernels/myers.cl).
    ``selected`` (device uint32 array of candidate indices): validate only these, writing into ``out`` (the
    four arrays of an earlier call, or fresh ones with keep = 0 and dist = NO_ALIGNMENT everywhere else).
    """
    import pyopencl.array as cla

    n = int(candidates.n)
    queue, pool = device.queue, device.pool
    if out is None:
        dist = cla.empty(queue, n, np.int32, allocator=pool)
        start = cla.empty(queue, n, np.uint32, allocator=pool)
        end = cla.empty(queue, n, np.uint32, allocator=pool)
        keep = cla.empty(queue, n, np.uint32, allocator=pool)
        if selected is not None and n:
            # enqueue_fill_buffer, not Array.fill: PoCL runs pyopencl's fill kernel an order of magnitude slower
            import pyopencl as cl

            for a, value in ((dist, NO_ALIGNMENT), (start, 0), (end, 0), (keep, 0)):
                cl.enqueue_fill_buffer(queue, a.data, np.full(1, value, dtype=a.dtype), 0, a.nbytes)
    else:
        dist, start, end, keep = out
    n_items = n if selected is None else int(selected.size)
    if n_items == 0:
        return dist, start, end, keep
    table_dev = max_errors_on_device(device, read_buffer.max_len, min_identity)
    if words is not None:
        batches = [(int(words), n_items, selected)]
    else:
        batches = _word_classes(device, candidates, read_buffer, table_dev, n_items, selected, max_words)
    for w, count, items in batches:
        _launch_myers(device, resident, read_buffer, candidates, table_dev, w, count, items, (dist, start, end, keep))
    return dist, start, end, keep


def _word_classes(device, candidates, read_buffer, table_dev, n_items, selected, max_words):
    """[(words, count, candidate indices)] for each bit-vector size the items need (kernels/myers.cl,
    band_words), smallest first; the indices keep the items' order."""
    import pyopencl.array as cla

    queue, pool = device.queue, device.pool
    need = cla.empty(queue, n_items, np.uint32, allocator=pool)
    device.launch(_band_words_kernel(device), n_items, np.uint32(n_items),
                  (selected if selected is not None else candidates.rs).data, np.uint32(selected is not None),
                  candidates.rs.data, candidates.diag_lo.data, candidates.diag_hi.data, read_buffer.rs_start.data,
                  table_dev.data, np.uint32(max_words), need.data)
    # every class's compaction first, then their counts in one download: the device runs the scans back to back
    classes = []
    for w in range(1, max_words + 1):
        items = cla.empty(queue, n_items, np.uint32, allocator=pool)
        count = cla.empty(queue, 1, np.uint32, allocator=pool)
        where(device)(need, np.uint32(w), selected if selected is not None else count,
                      np.uint32(selected is not None), items, count, size=n_items, queue=queue)
        classes.append((w, items, count))
    counts = device.get_all([count for _, _, count in classes])
    return [(w, int(c[0]), items) for (w, items, _), c in zip(classes, counts) if int(c[0])]


def _launch_myers(device, resident, read_buffer, candidates, table_dev, words, n_items, selected, out):
    dist, start, end, keep = out
    device.launch(
        _myers_kernel(device, words),
        n_items,
        np.uint32(n_items),
        (selected if selected is not None else candidates.rs).data,
        np.uint32(selected is not None),
        candidates.rs.data,
        candidates.diag_lo.data,
        candidates.diag_hi.data,
        resident.packed.data,
        resident.ambiguous.data,
        resident.contig_offsets.data,
        resident.contig_ends.data,
        np.uint32(resident.n_contigs),
        read_buffer.text.data,
        read_buffer.rs_start.data,
        table_dev.data,
        dist.data,
        start.data,
        end.data,
        keep.data,
    )


def validate_hits(device, resident, read_buffer, candidates, min_identity=DEFAULT_MIN_IDENTITY, max_words=MAX_WORDS,
                  words=None, select=None):
    """Validate ``candidates`` and keep those with percent identity >= ``min_identity``, in candidate order.

    ``max_words`` bounds the bit-vector (band cap 64*max_words-1 diagonals); ``words`` forces an exact size
    (benchmarks). ``select`` (a :class:`peanut_py.selection.BestStratumSelection`): validate only the
    candidates it selects (leaders first, then rivals). Returns :class:`ValidatedHits`.
    """
    import pyopencl.array as cla

    if select is None:
        dist, start, end, keep = validate_candidates(device, resident, read_buffer, candidates, min_identity, words,
                                                     max_words=max_words)
    else:
        dist, start, end, keep = select.run(
            lambda selected, out=None: validate_candidates(device, resident, read_buffer, candidates, min_identity,
                                                           words, selected=selected, out=out, max_words=max_words),
            candidates, read_buffer)
    n = int(candidates.n)
    queue, pool = device.queue, device.pool
    dtypes = (np.uint32, np.int32, np.uint32, np.uint32, np.uint32)
    o_rs, o_dist, o_start, o_end, o_cand = (cla.empty(queue, max(n, 1), dt, allocator=pool) for dt in dtypes)
    if n == 0:
        return ValidatedHits(0, o_rs[:0], o_start[:0], o_end[:0], o_dist[:0], o_cand[:0])
    count = cla.empty(queue, 1, np.uint32, allocator=pool)
    validation_compaction(device)(
        keep, candidates.rs[:n], dist, start, end, o_rs, o_dist, o_start, o_end, o_cand, count, queue=queue
    )
    m = int(count.get()[0])
    # Views into the full-size buffers: the postprocessor downloads them soon, so trimming copies would not pay.
    return ValidatedHits(m, o_rs[:m], o_start[:m], o_end[:m], o_dist[:m], o_cand[:m])
