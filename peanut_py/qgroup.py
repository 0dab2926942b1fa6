"""The read buffer on the device and its q-group index (PEANUT, Section 2.2, Algorithm 1).

A :class:`ReadBuffer` holds every read twice, forward then reverse complement (read strand
``rs = 2 * read + strand``), in one text.  A :class:`QGroupIndex` indexes every overlapping q-gram of that
text with the four arrays of the paper: ``I`` (one bit per possible key, w = 32 per word), ``S``
(exclusive prefix sum of popcount(I)), ``Sp`` (S', exclusive prefix sum of the occurrence counts of the
distinct keys, with one closing entry) and ``O`` (text positions, sorted by q-gram and ascending within a
q-gram).  The key of a q-gram is the q-gram itself (the paper), or with ``fold`` = 1 its first q - 1 bases:
I and S are then a quarter the size and a lookup finds the q-gram inside its key's slot of O by binary
search on the last base (kernels/qgroup.cl, "Folding").  Lookups give the same ranges of the same O.
"""
import time
import types
from collections import namedtuple

import numpy as np

from .errors import PeanutError
from .scans import exclusive_sum

MAX_READ_LENGTH = 1024
W = 32  # bits per word of I (the paper's w)
GROUP_BLOCK = 1024  # groups (words of I) per block of the S computation; a multiple of S_STRIDE
# Groups per stored entry of a sampled S (the paper's 2; up to 16, the words of I in one 64-byte line). A
# larger stride shrinks S (q = 16: 256 MiB at 2, 32 MiB at 16: less fresh memory in a CPU device's first
# buffer) but adds popcounts to every lookup; on the 2-core VM 16 saved no time overall (every later buffer
# ~0.08 s slower of 1.5 s; docs/mapping.md, "Memory").
S_STRIDE = 2
# Text positions index pyopencl scans and RadixSorts whose index type is int32.
MAX_TEXT = (1 << 31) - 1
# Bases folded out of the key on a CPU device: there I and S are fresh memory that every run first touches
# (q = 16: 768 MiB unfolded, 192 MiB folded) and that every buffer clears and scans.  A GPU fills and scans
# 768 MiB in well under a millisecond, so it keeps the paper's unfolded index and saves the binary search.
CPU_FOLD = 1


def default_fold(device):
    """Bases folded out of the q-group index's key on ``device`` (see CPU_FOLD)."""
    return CPU_FOLD if getattr(device, "host_memory", False) else 0

QGroupHost = namedtuple("QGroupHost", "I S S_prime O")

def kernels(device, name, **defines):
    """Kernel objects of ``kernels/<name>.cl``, created once per (device, defines) and reused.

    A kernel object carries its arguments, so one should be launched from one thread at a time."""
    def build():
        prg = device.program(name, **defines)
        return types.SimpleNamespace(**{k.function_name: k for k in prg.all_kernels()})

    return device.cached(("kernels", name, tuple(sorted(defines.items()))), build)


class StepTimer:
    """Wall time per step when ``profile`` is set (the queue is drained after each step); else a no-op."""

    def __init__(self, queue, enabled):
        self.queue, self.enabled, self.times = queue, enabled, {}
        self._t = time.perf_counter()

    def __call__(self, step):
        if self.enabled:
            self.queue.finish()
            now = time.perf_counter()
            self.times[step] = self.times.get(step, 0.0) + now - self._t
            self._t = now


def qgroup_kernels(device, q, s_stride=None, fold=None):
    """The kernels of ``kernels/qgroup.cl`` for q-grams of length ``q``, S sampled every ``s_stride`` groups
    and ``fold`` bases folded out of the key (default: the device's)."""
    return kernels(device, "qgroup", Q=int(q), S_STRIDE=S_STRIDE if s_stride is None else int(s_stride),
                   GROUP_BLOCK=GROUP_BLOCK, FOLD=default_fold(device) if fold is None else int(fold))


def _empty(device, n, dtype):
    import pyopencl.array as cla

    # Zero-length buffers are not valid kernel arguments; keep one element.
    return cla.empty(device.queue, max(int(n), 1), dtype, allocator=device.pool)


def _zeros(device, n, dtype):
    import pyopencl as cl

    a = _empty(device, n, dtype)
    cl.enqueue_fill_buffer(device.queue, a.data, np.zeros(1, dtype), 0, a.nbytes)
    return a


ZERO_SPAN = 16384  # words per work-item of zero_words (kernels/qgroup.cl), before rounding to work-groups


def zero_words(device, knl, a):
    """``a`` (a uint32 device array) set to 0: by ``knl.zero_words`` on a CPU device, whose fill command runs
    on one thread, else by the fill command (``knl``: the q-group index's kernels)."""
    if device.host_memory:
        device.launch(knl.zero_words, -(-a.size // ZERO_SPAN), a.data, np.uint64(a.size))
    else:
        import pyopencl as cl

        cl.enqueue_fill_buffer(device.queue, a.data, np.zeros(1, np.uint32), 0, a.nbytes)
    return a


class ReadBuffer:
    """Reads on the device: ``text`` (uint8, forward then reverse complement per read), ``rs_start``
    (uint32, n_rs + 1), ``pos_rs`` (uint32, read strand of every text position).

    ``codes`` is the uint8 concatenation of the forward reads (0..3, anything else is N), ``offsets`` the
    int64 read boundaries (n_reads + 1). ``q``: the q of the index that will be built over the buffer (the text
    does not depend on it; the same program then serves both, one build fewer at start-up).
    """

    def __init__(self, device, codes, offsets, q=4):
        import pyopencl.array as cla

        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        offsets = np.asarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(codes):
            raise PeanutError("read buffer: offsets must start at 0 and end at len(codes)")
        lengths = np.diff(offsets)
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
        self.text = _empty(device, self.n_text, np.uint8)
        self.pos_rs = _empty(device, self.n_text, np.uint32)
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

    ``sample_s`` stores S only for every S_STRIDE-th group (the paper samples every second): I + S then take
    1 + 1/S_STRIDE bits per possible q-gram instead of 2, at the cost of up to S_STRIDE - 1 popcounts per
    lookup (words of I in the same cache line).
    Attributes: ``I``, ``S``, ``Sp`` (device uint32 arrays), ``O`` (uint32 text positions), ``Ob`` (uint8, the
    folded bases of every entry of O; one unused byte when not folded), ``q``, ``fold``,
    ``sample_s``, ``s_stride``, ``n_groups``, ``n_distinct`` (distinct keys), ``n_occurrences`` (len of O).
    With ``profile`` the queue is drained after every step and ``timings`` holds seconds per step.
    """

    def __init__(self, device, read_buffer, q, sample_s=True, profile=False, fold=None):
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
        self.s_stride = S_STRIDE if self.sample_s else 1
        knl = qgroup_kernels(device, q, self.s_stride, self.fold)
        scan = exclusive_sum(device)
        rb = read_buffer
        n_text = np.uint32(rb.n_text)
        step = StepTimer(device.queue, profile)

        # Every q-gram value once; the value array later holds each position's slot for the fill.
        value_slot = _empty(device, rb.n_text, np.uint32)
        valid = _empty(device, rb.n_text, np.uint8)
        device.launch(knl.qgram_values, rb.n_text, rb.text.data, rb.pos_rs.data, rb.rs_start.data, n_text,
                      value_slot.data, valid.data)
        step("q-grams")

        # Lines 1-4: one bit per present q-gram, counted per block of groups.
        self.I = zero_words(device, knl, _empty(device, self.n_groups, np.uint32))
        n_blocks = -(-self.n_groups // GROUP_BLOCK)
        block_count = _zeros(device, n_blocks + 1, np.uint32)
        step("zero I")
        device.launch(knl.mark_groups, rb.n_text, value_slot.data, valid.data, n_text, self.I.data,
                      block_count.data)
        step("mark I")

        # Lines 5-8: S = exclusive prefix sum of popcount(I), block by block; the blocks' total is the
        # number of distinct q-grams.
        block_start = _empty(device, n_blocks + 1, np.uint32)
        scratch = _empty(device, n_blocks + 1, np.uint32)
        scan(block_count, block_start, scratch, size=n_blocks + 1, queue=device.queue)
        del block_count, scratch
        self.S = _empty(device, -(-self.n_groups // self.s_stride), np.uint32)
        device.launch(knl.group_starts, n_blocks, self.I.data, np.uint32(self.n_groups), block_start.data,
                      np.uint32(n_blocks), self.S.data)
        self.n_distinct = int(block_start[n_blocks : n_blocks + 1].get()[0])
        del block_start
        step("scan S")

        # Lines 9-14: occurrences per distinct q-gram, then S' by a prefix sum (with a closing entry).
        counts = _zeros(device, self.n_distinct + 1, np.uint32)
        device.launch(knl.count_occurrences, rb.n_text, value_slot.data, valid.data, n_text, self.I.data,
                      self.S.data, counts.data)
        del valid
        step("count")
        self.Sp = _empty(device, self.n_distinct + 1, np.uint32)
        cursor = _empty(device, self.n_distinct + 1, np.uint32)
        scan(counts, self.Sp, cursor, size=self.n_distinct + 1, queue=device.queue)
        del counts
        self.n_occurrences = int(self.Sp[self.n_distinct : self.n_distinct + 1].get()[0])
        step("scan S'")

        # Lines 15-20, then each q-gram's positions sorted so that O is deterministic.
        self.O = _empty(device, self.n_occurrences, np.uint32)
        # The folded bases of every entry of O, for lookups (one unused byte unfolded).
        self.Ob = _empty(device, self.n_occurrences if self.fold else 1, np.uint8)
        device.launch(knl.fill_occurrences, rb.n_text, value_slot.data, n_text, cursor.data, self.O.data)
        del value_slot
        step("fill O")
        device.launch(knl.sort_occurrences, self.n_distinct, self.Sp.data, np.uint32(self.n_distinct), rb.text.data,
                      self.O.data, self.Ob.data)
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


def index_fixed_bytes(q, sample_s=True, fold=0):
    """Device bytes of a q-group index that depend on q only, at the peak of its build: I (4^(q - fold) / 8
    bytes), S (1/S_STRIDE or all of that again) and the block counts and starts of the S computation (8 bytes
    per block)."""
    i_bytes = 4 ** (q - fold) // 8
    s_bytes = i_bytes // S_STRIDE if sample_s else i_bytes
    blocks = -(-(i_bytes // 4) // GROUP_BLOCK) + 1
    return i_bytes + s_bytes + 8 * blocks


# Device bytes per read base while a buffer is built (see docs/core.md, "buffer sizing"): codes 1, text 2,
# pos_rs 8, O 8, the q-gram value (later slot) of every text position 8 and its valid flag 2, and per
# distinct q-gram (at most one per text position, 2 per base) 4 bytes each of counts, S', the fill cursor
# and the S' scan's scratch: 32.  (Folded, O's bases take 2 per base, but only after the valid flags are
# freed.)
BUILD_BYTES_PER_BASE = 61
READ_SHARE = 0.5  # of the memory left after the reference and I + S; the rest is for hits and validation
USABLE = 0.75  # of global memory: drivers, fragmentation and the pool's slack take the rest


def reads_per_buffer(device, mean_read_length, q=16, sample_s=True, reserved_bytes=0, max_reads=None, fold=None):
    """How many reads of ``mean_read_length`` one buffer should hold on ``device``.

    ``reserved_bytes`` is what is already resident (``ResidentReference.device_bytes``).  The caller may cap
    the result with ``max_reads``.  Raises PeanutError when not even one read fits.
    """
    mean = max(1.0, float(mean_read_length))
    fold = default_fold(device) if fold is None else fold
    free = USABLE * device.global_mem - reserved_bytes - index_fixed_bytes(q, sample_s, fold)
    per_read = BUILD_BYTES_PER_BASE * mean + 8
    n = int(READ_SHARE * free // per_read)
    # Single allocations (pos_rs, O: 8 bytes per read base) and the int32 index of the scans.
    n = min(n, int(device.max_alloc // (8 * mean)), int(MAX_TEXT // (2 * mean)))
    if max_reads is not None:
        n = min(n, int(max_reads))
    if n < 1:
        raise PeanutError(
            f"device {device.name} has too little memory for q={q} with {reserved_bytes / 2**20:.0f} MiB of "
            "reference resident; use a smaller q"
        )
    return n
