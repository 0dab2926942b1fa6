"""The read buffer on the device and its q-group index (PEANUT, Section 2.2, Algorithm 1).

A :class:`ReadBuffer` holds every read twice, forward then reverse complement (read strand ``rs = 2 * read +
strand``), in one text. A :class:`QGroupIndex` indexes every overlapping q-gram of the forward read strands
with the four arrays of the paper (a reverse strand's q-grams are the reverse complements of its forward
strand's, which filtration looks up instead: half the work and half of O): ``I`` (one bit per possible key, w =
32 per word), ``S`` (exclusive prefix sum of popcount(I)), ``Sp`` (S', exclusive prefix sum of the occurrence
counts of the distinct keys, with one closing entry) and ``O`` (text positions, sorted by q-gram and ascending
within a q-gram). The key of a q-gram is the q-gram itself (the paper), or with ``fold`` = 1 its first q - 1
bases: I and S are then a quarter the size and a lookup finds the q-gram inside its key's slot of O by binary
search on the last base (kernels/qgroup.cl, "Folding"). Lookups give the same ranges of the same O.
"""
from collections import namedtuple

import numpy as np

from .device import StepTimer
from .errors import PeanutError
from .layout import GROUP_BLOCK, MAX_READ_LENGTH, MAX_TEXT, S_STRIDE, W, default_fold, index_fixed_bytes
from .scans import exclusive_sum

QGroupHost = namedtuple("QGroupHost", "I S S_prime O")

# The sort of O on a device with its own memory (GPUs), unfolded: slots of more than SORT_BY_GROUP_ABOVE
# occurrences are sorted by a work-group of SORT_GROUP work-items each (sort_occurrences_group), in local
# memory up to SORT_LOCAL entries (a power of two; 4 bytes each), the rest by one work-item per slot.
# SORT_BY_GROUP None: so on GPUs only, where the repeats of a read buffer (slots of thousands of entries)
# otherwise keep whole SIMD groups waiting for one work-item; a CPU device sorts each slot in one work-item
# at no such cost.  True or False forces either (True needs fold 0).
SORT_BY_GROUP = None
SORT_BY_GROUP_ABOVE = 64
SORT_GROUP = 128
SORT_LOCAL = 4096


def qgroup_kernels(device, q, s_stride=None, fold=None):
    """The kernels of ``kernels/qgroup.cl`` for q-grams of length ``q``, S sampled every ``s_stride`` groups
    and ``fold`` bases folded out of the key (default: the device's)."""
    return device.kernels("qgroup", Q=int(q), S_STRIDE=S_STRIDE if s_stride is None else int(s_stride),
                          GROUP_BLOCK=GROUP_BLOCK, FOLD=default_fold(device) if fold is None else int(fold),
                          SORT_LOCAL=SORT_LOCAL)


class ReadBuffer:
    """Reads on the device: ``text`` (uint8, forward then reverse complement per read), ``rs_start``
    (uint32, n_rs + 1), ``pos_rs`` (uint32, read strand of every text position).

    ``codes`` is the uint8 concatenation of the forward reads (0..3, anything else is N), ``offsets`` the
    int64 read boundaries (n_reads + 1), ``lengths`` (optional) their differences. ``q``: the q of the index
    that will be built over the buffer (the text does not depend on it; the same program then serves both,
    one build fewer at start-up).
    """

    def __init__(self, device, codes, offsets, q=4, lengths=None):
        import pyopencl.array as cla

        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        offsets = np.asarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(codes):
            raise PeanutError("read buffer: offsets must start at 0 and end at len(codes)")
        # ``lengths``: np.diff(offsets) when the caller has it already (the device thread computes it once)
        lengths = np.diff(offsets) if lengths is None else lengths
        if len(lengths) and (lengths.min() < 0 or lengths.max() > MAX_READ_LENGTH):
            raise PeanutError(f"read buffer: read lengths must lie in 0..{MAX_READ_LENGTH}")
        if 2 * len(codes) > MAX_TEXT:
            raise PeanutError(f"read buffer: {len(codes)} bases exceed the {MAX_TEXT // 2} a buffer can hold")
        self.device = device
        self.n_reads = len(lengths)
        self.n_rs = 2 * self.n_reads
        self.max_len = int(lengths.max()) if len(lengths) else 0
        self.n_text = 2 * len(codes)
        rs_start = np.empty(self.n_rs + 1, dtype=np.uint32)
        rs_start[0:-1:2] = 2 * offsets[:-1]
        rs_start[1::2] = 2 * offsets[:-1] + lengths
        rs_start[-1] = self.n_text
        self.rs_start_host = rs_start
        self.rs_start = cla.to_device(device.queue, rs_start, allocator=device.pool)
        self.text = device.empty(self.n_text, np.uint8)
        self.pos_rs = device.empty(self.n_text, np.uint32)
        if self.n_text:
            d_codes = cla.to_device(device.queue, codes, allocator=device.pool)
            knl = qgroup_kernels(device, q, S_STRIDE)
            device.launch(knl.build_text, self.n_text, d_codes.data, self.rs_start.data, np.uint32(self.n_rs),
                          np.uint32(self.n_text), self.text.data, self.pos_rs.data)
            d_codes.finish()
            del d_codes

    @property
    def device_bytes(self):
        return self.text.nbytes + self.pos_rs.nbytes + self.rs_start.nbytes

    def to_host(self):
        return {"text": self.text.get()[: self.n_text], "rs_start": self.rs_start.get(),
                "pos_rs": self.pos_rs.get()[: self.n_text]}


class QGroupIndex:
    """The q-group index (I, S, S', O) of a :class:`ReadBuffer`, built on the device (Algorithm 1).

    ``fold``: bases folded out of the key (0 or 1; default: the device's, see ``default_fold``).

    ``sample_s`` stores S only for every ``s_stride``-th group (default S_STRIDE; the paper samples every
    second): I + S then take 1 + 1/s_stride bits per possible q-gram instead of 2, at the cost of up to
    s_stride - 1 popcounts per lookup (words of I in the same cache line).
    Attributes: ``I``, ``S``, ``Sp`` (device uint32 arrays), ``O`` (uint32 text positions), ``Ob`` (uint8, the
    folded bases of every entry of O; one unused byte when not folded), ``q``, ``fold``,
    ``sample_s``, ``s_stride``, ``n_groups``, ``n_distinct`` (distinct keys), ``n_occurrences`` (len of O).
    With ``profile`` the queue is drained after every step and ``timings`` holds seconds per step.
    """

    def __init__(self, device, read_buffer, q, sample_s=True, profile=False, fold=None, s_stride=S_STRIDE):
        q = int(q)
        if not 4 <= q <= 16:
            raise PeanutError(f"q-gram length {q} is outside 4..16")
        self.fold = default_fold(device) if fold is None else int(fold)
        if self.fold not in (0, 1):
            raise PeanutError(f"fold must be 0 or 1, got {fold!r}")
        self.device, self.read_buffer, self.q, self.sample_s = device, read_buffer, q, bool(sample_s)
        self.n_groups = 4 ** (q - self.fold) // W
        need = index_fixed_bytes(q, sample_s, self.fold)
        if self.n_groups * 4 > device.max_alloc or need > device.global_mem:
            raise PeanutError(
                f"q={q}: the q-group index needs {need / 2**20:.0f} MiB (I alone {self.n_groups * 4 / 2**20:.0f} MiB), "
                f"more than this device offers ({device.max_alloc / 2**20:.0f} MiB per allocation); use a smaller q"
            )
        self.s_stride = int(s_stride) if self.sample_s else 1
        if self.s_stride not in (1, 2, 4, 8, 16):
            raise PeanutError(f"S stride must be 1, 2, 4, 8 or 16, got {s_stride!r}")
        knl = qgroup_kernels(device, q, self.s_stride, self.fold)
        scan = exclusive_sum(device)
        rb = read_buffer
        n_text = np.uint32(rb.n_text)
        step = StepTimer(device.queue, profile)

        # Every q-gram value once; the value array later holds each position's slot for the fill.
        value_slot = device.empty(rb.n_text, np.uint32)
        valid = device.empty(rb.n_text, np.uint8)
        device.launch(knl.qgram_values, rb.n_text, rb.text.data, rb.pos_rs.data, rb.rs_start.data, n_text,
                      value_slot.data, valid.data)
        step("q-grams")

        # Lines 1-4: one bit per present q-gram, counted per block of groups.
        self.I = device.zero_words(device.empty(self.n_groups, np.uint32))
        n_blocks = -(-self.n_groups // GROUP_BLOCK)
        block_count = device.zeros(n_blocks + 1, np.uint32)
        step("zero I")
        device.launch(knl.mark_groups, rb.n_text, value_slot.data, valid.data, n_text, self.I.data,
                      block_count.data)
        step("mark I")

        # Lines 5-8: S = exclusive prefix sum of popcount(I), block by block; the blocks' total is the
        # number of distinct q-grams.
        block_start = device.empty(n_blocks + 1, np.uint32)
        scratch = device.empty(n_blocks + 1, np.uint32)
        scan(block_count, block_start, scratch, size=n_blocks + 1, queue=device.queue)
        del block_count, scratch
        self.S = device.empty(-(-self.n_groups // self.s_stride), np.uint32)
        device.launch(knl.group_starts, n_blocks, self.I.data, np.uint32(self.n_groups), block_start.data,
                      np.uint32(n_blocks), self.S.data)
        self.n_distinct = int(block_start[n_blocks : n_blocks + 1].get()[0])
        del block_start
        step("scan S")

        # Lines 9-14: occurrences per distinct q-gram, then S' by a prefix sum (with a closing entry).
        counts = device.zeros(self.n_distinct + 1, np.uint32)
        device.launch(knl.count_occurrences, rb.n_text, value_slot.data, valid.data, n_text, self.I.data,
                      self.S.data, counts.data)
        del valid
        step("count")
        self.Sp = device.empty(self.n_distinct + 1, np.uint32)
        cursor = device.empty(self.n_distinct + 1, np.uint32)
        scan(counts, self.Sp, cursor, size=self.n_distinct + 1, queue=device.queue)
        del counts
        self.n_occurrences = int(self.Sp[self.n_distinct : self.n_distinct + 1].get()[0])
        step("scan S'")

        # Lines 15-20, then each q-gram's positions sorted so that O is deterministic.
        self.O = device.empty(self.n_occurrences, np.uint32)
        # The folded bases of every entry of O, for lookups (one unused byte unfolded).
        self.Ob = device.empty(self.n_occurrences if self.fold else 1, np.uint8)
        device.launch(knl.fill_occurrences, rb.n_text, value_slot.data, n_text, cursor.data, self.O.data)
        del value_slot
        step("fill O")
        sort_occurrences(device, knl, self.Sp, self.n_distinct, self.n_occurrences, rb.text, self.O, self.Ob,
                         self.fold)
        step("sort O")
        del cursor
        self.timings = step.times

    @property
    def device_bytes(self):
        return self.I.nbytes + self.S.nbytes + self.Sp.nbytes + self.O.nbytes + self.Ob.nbytes

    def to_host(self):
        """(I, S, S', O) as NumPy arrays; S is the sampled array when ``sample_s``."""
        return QGroupHost(self.I.get(), self.S.get(), self.Sp.get()[: self.n_distinct + 1],
                          self.O.get()[: self.n_occurrences])


def sort_occurrences(device, knl, Sp, n_slots, n_occurrences, text, O, Ob, fold):
    """Each slot ``O[Sp[s] .. Sp[s + 1])`` sorted in place by (folded bases, position) (kernels/qgroup.cl):
    by one work-item per slot, and where :func:`occurrence_sort_group` says so, the slots above
    SORT_BY_GROUP_ABOVE entries by a work-group each."""
    group = occurrence_sort_group(device, knl, fold)
    above = np.uint32(SORT_BY_GROUP_ABOVE if group else 0)
    big = device.empty(n_occurrences // (SORT_BY_GROUP_ABOVE + 1) + 1 if group else 1, np.uint32)
    big_counts = device.zeros(2, np.uint32)
    device.launch(knl.sort_occurrences, n_slots, Sp.data, np.uint32(n_slots), text.data, O.data, Ob.data, above,
                  big.data, big_counts.data)
    if not group:
        return
    n_big, n_scratch = (int(x) for x in big_counts.get())
    if n_big:
        scratch = device.empty(max(1, n_scratch), np.uint32)
        cursor = device.zeros(1, np.uint32)
        knl.sort_occurrences_group(device.queue, (n_big * group,), (group,), Sp.data, big.data, O.data, scratch.data,
                                   cursor.data)


def occurrence_sort_group(device, knl, fold):
    """Work-items per work-group of ``sort_occurrences_group``, or None for one work-item per slot throughout
    (see SORT_BY_GROUP; folded indexes sort by a key wider than the group sort's)."""
    by_group = not device.host_memory if SORT_BY_GROUP is None else SORT_BY_GROUP
    if not by_group or fold:
        return None
    return device.local_group(knl.sort_occurrences_group, SORT_GROUP)

