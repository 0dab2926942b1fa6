"""Filtration (PEANUT, Section 3.2, Algorithm 2): the reference's q-gram table against the q-group index.

For each range of read strands whose hits fit device memory (normally one, all of them) and each chunk of
the reference q-gram table (consecutive buckets of its bucket table): the kmers present in the read buffer,
a counting pass (hits per kmer, and per read strand), prefix sums, and an emit
pass that writes every raw hit's diagonal into the slot of its read strand.  Each slot is sorted and
collapsed into candidates by one work-item; clusters with fewer votes than the q-gram lemma guarantees are
dropped there (``min_votes``).  Ranges share no read strand, so their candidates are concatenated (see
docs/core.md, "filtration").  The result does not depend on range, chunk or window sizes.
"""
import functools
import hashlib
from collections import namedtuple

import numpy as np

from .errors import PeanutError
from . import scans
from .device import StepTimer
from .layout import MAX_READ_LENGTH, default_fold
from .resident import MAX_CHUNK_BUCKETS

DEFAULT_COLLAPSE_GAP = 8
EMIT_BLOCK = 32  # raw hits per work-item of the emit pass
SORT_BLOCK = 16  # slot entries sorted by insertion before the merge passes
# Slot sort by a work-group per slot (sort_slots_local): entries sorted in local memory at once (a power of
# two; 4 bytes each: 16 KiB) and the work-items of a group (a power of two, lowered to the kernel's limit).
# Larger slots are sorted in such blocks and merged by one work-item; with 100 bp reads on human chr20,
# slots above 4096 entries hold a tenth of the hits, slots above 2048 two fifths.  SLOT_SORT_BY_GROUP None:
# on devices with their own memory (GPUs) only, where one work-item per slot coalesces nothing; a CPU
# device pays more for a work-group per slot than it saves.  True or False forces either kernel.
SORT_LOCAL = 4096
SORT_GROUP = 128
MASKED_GROUP = 64  # work-items that count one masked q-gram value's occurrences in the read buffer
SLOT_SORT_BY_GROUP = None
# Device bytes per raw hit of a window: its diagonal 4, the slot sort's scratch 4, candidates up to 16 (one
# per hit at worst), slack.
BYTES_PER_HIT = 32
HIT_SHARE = 0.5  # of the memory left free by the reference, the read buffer and its index
# Of that free memory, the most that the packed positions of a streamed table's present kmers may take
# (_Filtration._gather); beyond it the table is streamed again for every pass.
GATHER_SHARE = 0.5
# Of that free memory, the most that joining the packed chunks into one may take for a moment (the packed
# chunks and their joined copy): it happens before the filtration allocates anything else.
JOIN_SHARE = 1.0
# CPU devices count the slot sizes by per-position writes summed per read strand instead of atomics (the
# GPU's way; kernels/filter.cl, count_hits).
CPU_SCATTER_COUNTS = True
MAX_WINDOW = (1 << 31) - 1  # int32 index of pyopencl's scans; uint32 slot offsets

# A counting pass over one chunk: kernel arguments naming its work-items (``work``, ``extra``), the present
# kmers (device list, count) it ran over, their occurrences' ranges of O (per kmer; None per position), the
# hit offsets per work-item and the chunk's hits.
_Pass = namedtuple("_Pass", "chunk work extra present occ offsets n_hits")


# ---------------------------------------------------------------- the votes threshold (q-gram lemma)

def guaranteed_errors(n, q, step=1):
    """e_g: the most edits for which every occurrence of a read of length ``n`` yields a raw hit, or -1.

    e edits leave at most e + 1 error-free pieces of the read with n - e bases or more in total; a piece of
    length q + step - 1 holds a q-gram at a sampled reference position.  So e_g = floor((n - q - step + 1) /
    (q + step - 1)): floor((n - q) / q) at step 1.
    """
    return max(-1, (n - q - step + 1) // (q + step - 1))


def guaranteed_votes(n, q, step, errors, collapse_gap=DEFAULT_COLLAPSE_GAP):
    """Votes that the candidate covering an occurrence with ``errors`` edits is guaranteed to have.

    q-gram lemma: at least P = n - q + 1 - errors * q read q-grams avoid every edit.  They form at most
    errors + 1 runs of consecutive read offsets, each on one diagonal with consecutive reference positions,
    of which a run of L holds at least floor(L / step) sampled ones: at least ceil((P - (errors + 1) *
    (step - 1)) / step) raw hits.  Their diagonals lie within the net indel drift; two of them separated by
    more than ``collapse_gap`` need that many indels in between, so they fall into at most
    floor(errors / (collapse_gap + 1)) + 1 candidates, the largest of which has at least its share.
    Each read q-gram whose value the reference masked as repetitive can cost one of these hits
    (``filter_reference`` lowers the threshold accordingly when it knows the masked values).
    """
    preserved = n - q + 1 - errors * q
    hits = max(0, -(-(preserved - (errors + 1) * (step - 1)) // step))
    pieces = errors // (collapse_gap + 1) + 1
    return -(-hits // pieces)


def votes_threshold(n, q, step=1, collapse_gap=DEFAULT_COLLAPSE_GAP):
    """t(n): the largest votes threshold that keeps the guarantee of threshold 1 (every occurrence with at
    most ``guaranteed_errors(n, q, step)`` edits keeps a candidate).  1 where nothing is guaranteed."""
    e_g = guaranteed_errors(n, q, step)
    if e_g < 0:
        return 1
    return max(1, min(guaranteed_votes(n, q, step, e, collapse_gap) for e in range(e_g + 1)))


def min_votes_table(min_votes, q, step=1, collapse_gap=DEFAULT_COLLAPSE_GAP, max_length=MAX_READ_LENGTH):
    """uint32 threshold per read-strand length 0..max_length: ``votes_threshold`` for None/"auto", else the
    fixed int ``min_votes`` (read-only: one table per parameters serves every batch)."""
    if min_votes is None or min_votes == "auto":
        return _auto_votes_table(int(q), int(step), int(collapse_gap), int(max_length))
    if isinstance(min_votes, (bool, str)) or int(min_votes) != min_votes or min_votes < 1:
        raise PeanutError(f"min_votes must be 'auto' or a positive integer, got {min_votes!r}")
    return np.full(max_length + 1, int(min_votes), np.uint32)


@functools.lru_cache(maxsize=16)
def _auto_votes_table(q, step, collapse_gap, max_length):
    # a thousand pure-Python threshold evaluations: once per run, not once per batch on the device thread
    table = np.array([votes_threshold(n, q, step, collapse_gap) for n in range(max_length + 1)], np.uint32)
    table.flags.writeable = False
    return table


def filter_kernels(device, q, s_stride, starts_ctype, fold, suffix_bits):
    """The kernels of ``kernels/filter.cl`` for a q-group index of ``q``, ``s_stride`` and ``fold`` and a
    q-gram table whose bucket starts have the C type ``starts_ctype`` and whose buckets leave ``suffix_bits``
    bits of a q-gram value."""
    return device.kernels("filter", Q=int(q), S_STRIDE=int(s_stride), FOLD=int(fold), STARTS_T=starts_ctype,
                          SUFFIX_BITS=int(suffix_bits),
                          EMIT_BLOCK=EMIT_BLOCK, SORT_BLOCK=SORT_BLOCK, SORT_LOCAL=SORT_LOCAL)


def build_programs(device, resident, s_stride):
    """Build what every filtration against ``resident`` uses (see ``DeviceStage.warm_up``)."""
    filter_kernels(device, resident.q, s_stride, resident.starts_ctype, default_fold(device), resident.suffix_bits)
    tools = filter_tools(device)
    tools["hit_offsets"], tools["slot_starts"]


def filter_tools(device):
    """The filtration's scans and sort by name (``tools["hit_offsets"]``), each built on first use: those
    that only a read strand with more raw hits than a window needs (the interval merge: 13 programs to
    build) are never built by the runs that do not have one.  The ``tools`` argument of
    :func:`collapse_slots`."""
    return _Tools(device)


class _Tools:
    MERGE = ("running_hi", "interval_clusters", "keep_votes", "sort_intervals")

    def __init__(self, device):
        self.device = device

    def __getitem__(self, name):
        if name in self.MERGE:
            return scans.interval_merge(self.device)[name]
        if name == "slot_starts":
            # Slot of each read strand (with a closing entry) and its fill cursor; also the first candidate
            # of each slot.
            return scans.exclusive_sum(self.device)
        if name == "hit_offsets":
            return scans.hit_offsets(self.device)
        raise KeyError(name)


def sort_length(sorter, n):
    """Smallest length >= n at which pyopencl's scan inside ``sorter`` (a RadixSort) runs.

    pyopencl (2026.1) asserts ``interval_size >= num_intervals`` when a scan's first-level unit
    (work-group size * k-group size) is smaller than the number of intervals it picks for n, which is at most
    3 * compute units (with 132 compute units and 4-bit radix passes, unit 256: n in (65536, 101376]).
    Padding the keys past that range (with keys that sort last) avoids it.
    """
    from pytools import uniform_interval_splitting

    scan = getattr(sorter, "scan_kernel", sorter)
    info = getattr(scan, "first_level_scan_info", None)
    if info is None:
        return n
    unit = info.wg_size * info.k_group_size
    max_intervals = 3 * max(dev.max_compute_units for dev in scan.devices)
    m = n
    while True:
        size, count = uniform_interval_splitting(m, unit, max_intervals)
        if size >= count:
            return m
        m = max(m + 1, unit * max_intervals + 1, 2 * m if m > unit * max_intervals else 0)


class Candidates:
    """Candidate diagonals per read strand, sorted by (rs, diag_lo).

    Device uint32 arrays ``rs``, ``diag_lo``, ``diag_hi``, ``votes`` (the first ``n`` entries are valid);
    counts for benchmarks: ``n_raw_hits``, ``n_collapsed`` (candidates before the votes threshold),
    ``n_ranges`` (read-strand ranges), ``n_chunks`` (table chunks emitted), ``n_windows`` (hit windows
    sorted); ``timings`` (seconds per step when profiled); ``raw`` (host dict of sorted raw ``rs``/``diag``
    when filtration ran with ``keep_raw``); ``masked_per_rs`` (device array of the masked q-grams per read
    strand by which the votes threshold was lowered, or None).
    """

    FIELDS = ("rs", "diag_lo", "diag_hi", "votes")

    def __init__(self, n, rs, diag_lo, diag_hi, votes):
        self.n = int(n)
        self.rs, self.diag_lo, self.diag_hi, self.votes = rs, diag_lo, diag_hi, votes
        self.n_raw_hits = 0
        self.n_collapsed = self.n
        self.n_chunks = 0
        self.n_windows = 0
        self.n_ranges = 0
        self.timings = {}
        self.raw = None
        self.masked_per_rs = None
        self.gathered = False  # a streamed table's present positions packed once (_Filtration._gather)
        # its streamed chunks packed, their device bytes and the chunks the passes ran over (one, joined)
        self.n_packed = self.gathered_bytes = self.n_gathered_chunks = 0

    @property
    def raw_hits(self):
        return self.n_raw_hits

    def to_host(self):
        return {f: getattr(self, f).get()[: self.n] for f in self.FIELDS}


def hit_window(device, used_bytes):
    """Raw hits per emit window: the device memory not used by the reference, the reads and their index."""
    free = 0.75 * device.global_mem - used_bytes
    n = int(HIT_SHARE * free // BYTES_PER_HIT)
    return max(1 << 16, min(n, device.max_alloc // 4, MAX_WINDOW))


def filter_reference(device, resident, qgroup_index, read_buffer, collapse_gap=DEFAULT_COLLAPSE_GAP,
                     min_votes=None, masked_kmers=None, max_hits_per_pass=None, max_buckets_per_chunk=None,
                     per_position=False, keep_raw=False, profile=False, *, scatter_counts=None, sort_padding=0):
    """Candidates of every read strand of ``read_buffer`` against the whole reference.

    Raw hits whose diagonals (same read strand) follow each other within ``collapse_gap`` become one
    candidate ``[diag_lo, diag_hi]`` with ``votes`` = number of raw hits.  Candidates with fewer votes than
    ``min_votes`` are dropped: None or "auto" = ``votes_threshold`` of the read strand's length (keeps the
    q-gram lemma's guarantee, see docs/core.md), an int = that threshold for all (1 keeps everything).
    ``masked_kmers`` (sorted q-gram values the reference index masked as repetitive; default
    ``resident.masked_kmers`` when it exists): the automatic threshold of a read strand is lowered by the
    number of its q-grams among them, which keeps the guarantee inside masked repeats.
    ``max_hits_per_pass`` and ``max_buckets_per_chunk`` bound the device memory (defaults from the device);
    ``per_position`` uses one work-item per reference position instead of per kmer (same hits);
    ``keep_raw`` copies the sorted raw hits to the host (for tests); ``profile`` fills ``timings``.
    ``scatter_counts``: how a CPU device counts the slot sizes, by per-position writes (True) or by atomics
    as a GPU does (False); None: ``CPU_SCATTER_COUNTS``.  ``sort_padding``: keys that sort last added to
    the interval sort of merged windows, beyond the padding ``sort_length`` adds (for tests: the padded
    sort that only some GPUs need).  Neither changes the candidates.
    """
    if resident.q != qgroup_index.q:
        raise PeanutError(f"reference index has q={resident.q} but the read index was built with q={qgroup_index.q}")
    table = min_votes_table(min_votes, resident.q, resident.step, collapse_gap)
    if masked_kmers is None:
        masked_kmers = getattr(resident, "masked_kmers", None)
    if min_votes not in (None, "auto") or masked_kmers is None or len(masked_kmers) == 0:
        masked_kmers = None
    if scatter_counts is None:
        scatter_counts = CPU_SCATTER_COUNTS
    return _Filtration(device, resident, qgroup_index, read_buffer, collapse_gap, table, masked_kmers,
                       max_hits_per_pass, max_buckets_per_chunk, per_position, keep_raw, profile,
                       bool(scatter_counts), int(sort_padding)).run()


class _Filtration:
    """One filtration of a read buffer.

    The read strands are processed in ranges whose raw hits fit one window of device memory (normally a
    single range, all strands).  The counting pass sizes one slot per read strand of the range; every chunk
    of the q-gram table emits its hits into the slots, which are then sorted and collapsed per read strand.
    Ranges never share a read strand, so their candidates are final and simply concatenated in rs order.
    Only a single read strand with more hits than a window is emitted in several windows whose candidates
    are then merged (see ``_merge``) before the votes threshold applies.
    """

    def __init__(self, device, resident, qi, rb, gap, table, masked_kmers, max_hits, max_buckets, per_position,
                 keep_raw, profile, scatter_counts, sort_padding):
        import pyopencl.array as cla

        self.device, self.resident, self.qi, self.rb = device, resident, qi, rb
        self.scatter_counts, self.sort_padding = scatter_counts, sort_padding
        self.gap, self.per_position, self.keep_raw = int(gap), per_position, keep_raw
        if not 0 <= self.gap < 1 << 32:
            raise PeanutError(f"collapse gap must lie in 0..2^32-1, got {gap}")
        self.max_buckets = int(max_buckets or MAX_CHUNK_BUCKETS)
        self.diag_bits = max(1, resident.genome_end.bit_length())
        self.key_bits = self.diag_bits + max(1, (rb.n_rs - 1).bit_length())
        if self.key_bits > 64:
            raise PeanutError("filtration: read strand id and diagonal do not fit one 64-bit key")
        self.knl = filter_kernels(device, qi.q, qi.s_stride, resident.starts_ctype, qi.fold, resident.suffix_bits)
        self.tools = filter_tools(device)
        self.step = StepTimer(device.queue, profile)
        self.thresholds = (table > 1).any()
        # the table and the masked q-grams are the same for every batch of a run: uploaded once per device
        self.min_votes = device.constant(("min_votes", table.tobytes()), lambda: table)
        self.no_threshold = None  # threshold 1 for the windows of one read strand, uploaded when needed
        self.masked_per_rs = None
        if masked_kmers is not None and rb.n_rs:
            host_masked = np.ascontiguousarray(masked_kmers, dtype=np.uint32)
            digest = hashlib.blake2b(host_masked.data, digest_size=16).digest()
            masked = device.constant(("masked_kmers", digest), lambda: host_masked)
            self.masked_per_rs = device.zeros(rb.n_rs, np.uint32)
            # a CPU device runs a group's work-items one after the other: one per value there
            group = 1 if device.host_memory else device.local_group(self.knl.count_masked, MASKED_GROUP)
            self.knl.count_masked(device.queue, (len(masked) * group,), (group,), masked.data,
                                  np.uint32(len(masked)), qi.I.data, qi.S.data, qi.Sp.data, qi.O.data, qi.Ob.data,
                                  rb.pos_rs.data, self.masked_per_rs.data)
        self._present_cache = {}  # per chunk of a resident table
        # (array, flag) for the threshold of the slots and of keep_votes: the counts, or unused.
        self.masked_args = ((self.masked_per_rs, np.uint32(1)) if self.masked_per_rs is not None
                            else (self.min_votes, np.uint32(0)))
        self.total = device.empty(1, np.uint64)
        self.raw_parts = []
        self.n_raw = self.n_collapsed = self.n_chunks = self.n_windows = self.n_ranges = 0
        used = resident.device_bytes + qi.device_bytes + rb.device_bytes
        self.gathered, self.n_packed, self.gathered_bytes = None, 0, 0
        # a streamed table crosses the bus with only the buckets this read buffer touches
        self.touched = self._touched_buckets() if resident.streamed else None
        if resident.streamed and not per_position:
            free = 0.75 * device.global_mem - used
            self.gathered, gathered_bytes = self._gather(GATHER_SHARE * free, JOIN_SHARE * free)
            used += gathered_bytes
            self.gathered_bytes = gathered_bytes
        self.window = max(1, min(int(max_hits or hit_window(device, used)), MAX_WINDOW))

    # ---- the q-gram table's chunks
    def _chunks(self):
        """The chunks the counting and emit passes run over: the table's, or the packed ones of a streamed
        table (``gathered``)."""
        if self.gathered is not None:
            return iter(self.gathered)
        return self.resident.qgram_chunks(self.max_buckets, self.touched)

    def _touched_buckets(self):
        """Host uint32 words with bit b & 31 of word b >> 5 set where bucket b of the q-gram table may hold a
        q-gram of the read buffer (the keys that I marks): the buckets a streamed chunk must carry."""
        n_buckets = self.resident.n_buckets
        n_words = (n_buckets + 31) // 32
        touched = self.device.empty(n_words, np.uint32)
        self.device.launch(self.knl.touched_buckets, n_words, self.qi.I.data, np.uint64(n_buckets),
                           np.uint32(n_words), touched.data)
        # and the buckets of their reverse complements, which the reverse strands hold
        qi = self.qi
        if qi.n_distinct:
            self.device.launch(self.knl.touched_reverse, qi.n_distinct, self.rb.text.data, qi.O.data, qi.Sp.data,
                               qi.Ob.data, np.uint32(qi.n_distinct), np.uint64(n_buckets), touched.data)
        return touched.get()

    def _gather(self, budget, join_budget):
        """(chunks, bytes): one pass over a streamed table that packs, chunk by chunk, the positions of the
        kmers the read buffer holds (gather_positions), then joins the packed chunks into one, with one list
        of present kmers.  Every counting and emit pass then runs on that instead of streaming the table
        again: one pass over the bus per read buffer instead of one plus two per range of read strands, and
        one counting and one emit launch per range instead of one per chunk.  The packed chunks stay apart
        where joining them (twice their bytes for a moment) would exceed ``join_budget``; (None, 0), with
        nothing kept, where the packed positions alone would exceed ``budget``."""
        device, knl = self.device, self.knl
        packed_chunks, present, used, n_total = [], [], 0, 0
        for chunk in self.resident.qgram_chunks(self.max_buckets, self.touched):
            self.step("upload")
            values, strands, ranges, n = self._present(chunk)
            if n == 0:
                continue
            sizes, starts = device.empty(n, np.uint64), device.empty(n, np.uint64)
            device.launch(knl.present_sizes, n, ranges.data, np.uint32(n), sizes.data)
            self.tools["hit_offsets"](sizes, starts, self.total, size=n, queue=device.queue)
            n_packed = int(self.total.get()[0])
            used += 4 * n_packed + 12 * n
            n_total += n_packed
            if used > budget or n_total >= 1 << 32:
                self.step("gather")
                return None, 0
            packed = device.empty(max(1, n_packed), np.uint32)
            device.launch(knl.gather_positions, n, ranges.data, np.uint32(n), chunk.positions.data, starts.data,
                          packed.data)
            del sizes, starts
            # the chunk's buckets are overwritten by the next chunk: the packed chunk needs only its list
            packed_chunks.append(chunk._replace(buckets=None, positions=packed, n_positions=n_packed))
            present.append((values[:n].copy(), strands[:n].copy(), ranges[: 2 * n].copy(), n))  # room released
            self.step("gather")
        self.n_packed = len(packed_chunks)
        if len(packed_chunks) < 2 or 2 * used > join_budget:
            for chunk, listed in zip(packed_chunks, present):
                self._present_cache[(chunk.first_bucket, chunk.n_buckets)] = listed
            return packed_chunks, used
        whole = self._join(packed_chunks, present, n_total)
        self.step("gather")
        return [whole], used

    def _join(self, chunks, present, n_positions):
        """One chunk of the packed positions of ``chunks`` one after the other (``n_positions`` in all), whose
        present kmers (cached for it) are theirs with the ranges moved by each chunk's offset.  Bucket fields
        are those of the whole table: no pass over a packed chunk reads its buckets."""
        import pyopencl.array as cla

        queue, pool = self.device.queue, self.device.pool
        positions = cla.concatenate([c.positions[: c.n_positions] for c in chunks], queue=queue, allocator=pool)
        values = cla.concatenate([v for v, _, _, _ in present], queue=queue, allocator=pool)
        strands = cla.concatenate([f for _, f, _, _ in present], queue=queue, allocator=pool)
        offset, moved = 0, []
        for c, (_, _, r, _) in zip(chunks, present):
            moved.append(r + r.dtype.type(offset) if offset else r)
            offset += c.n_positions
        ranges = cla.concatenate(moved, queue=queue, allocator=pool)
        n = sum(k for _, _, _, k in present)
        n_buckets = self.resident.n_buckets
        self._present_cache[(0, n_buckets)] = (values, strands, ranges, n)
        return chunks[0]._replace(buckets=None, positions=positions, b_base=0, n_buckets=n_buckets, first_bucket=0,
                                  n_positions=n_positions)

    # ---- one chunk of the q-gram table
    def _present(self, chunk):
        """(values, strands, ranges, count) of the chunk's kmers that the read buffer holds (device arrays):
        each distinct q-gram g of the read buffer's index at most twice, as itself (strand 0) and as rc(g)
        (strand 1, the reverse strands' occurrences; see kernels/filter.cl), and each value of the chunk at
        most twice.  A resident table is scanned once per filtration (its chunks are views of one array);
        streamed chunks are scanned as they come."""
        key = (chunk.first_bucket, chunk.n_buckets)
        if key in self._present_cache:
            return self._present_cache[key]
        device, res, qi = self.device, self.resident, self.qi
        n_pos = chunk.n_positions
        if n_pos is None:  # a view of the resident table
            n_pos = int(res.n_positions)
        (s0, s1), (o0, o1) = self._slot_range(chunk)
        whole = (s0, s1) == (0, qi.n_distinct)
        # the forward lookups need the slots of the chunk's keys, the reverse ones (rc(g) of a slot's key lies
        # in any bucket) every slot; one launch does both when these are the same
        launches = [(0, qi.n_distinct, 3)] if whole else [(s0, s1, 1), (0, qi.n_distinct, 2)]
        room = max(1, min(n_pos, o1 - o0) + min(n_pos, qi.n_occurrences))
        values = device.empty(room, np.uint32)
        strands = device.empty(room, np.uint8)
        ranges = device.empty(2 * room, res.starts_dtype)
        n_present = device.zeros(1, np.uint32)
        for a, b, which in launches:
            if b > a:
                device.launch(self.knl.present_kmers, b - a, chunk.buckets.data, np.uint64(chunk.b_base),
                              np.uint32(chunk.n_buckets), np.uint32(chunk.first_bucket), chunk.positions.data,
                              res.packed.data, self.rb.text.data, qi.O.data, qi.Sp.data, qi.Ob.data,
                              np.uint32(a), np.uint32(b), np.uint32(which), values.data, strands.data, ranges.data,
                              n_present.data)
        result = (values, strands, ranges, int(n_present.get()[0]))
        if not res.streamed:
            self._present_cache[key] = result
        return result

    def _slot_range(self, chunk):
        """((s0, s1), (Sp[s0], Sp[s1])): the slots of the q-group index whose keys may fall into the chunk's
        buckets, and their occurrences in O.  A key is a q-gram without its FOLD low bases, a bucket one
        without its suffix_bits low bits; a key (folded deeper than the suffix) may straddle two chunks."""
        qi, res = self.qi, self.resident
        if qi.n_distinct == 0:
            return (0, 0), (0, 0)
        fold_bits = 2 * qi.fold
        n_keys = 1 << (2 * qi.q - fold_bits)
        b0, b1 = chunk.first_bucket, chunk.first_bucket + chunk.n_buckets
        if res.suffix_bits >= fold_bits:
            k0, k1 = b0 << (res.suffix_bits - fold_bits), b1 << (res.suffix_bits - fold_bits)
        else:
            k0, k1 = b0 >> (fold_bits - res.suffix_bits), ((b1 - 1) >> (fold_bits - res.suffix_bits)) + 1
        if k0 == 0 and k1 >= n_keys:  # the whole table: every slot
            return (0, qi.n_distinct), (0, qi.n_occurrences)
        keys = [k for k in (k0, k1) if k < n_keys]
        ranks, occ = [], []
        if keys:
            import pyopencl.array as cla

            d_keys = cla.to_device(self.device.queue, np.array(keys, np.uint32), allocator=self.device.pool)
            out = self.device.empty(2 * len(keys), np.uint32)
            self.device.launch(self.knl.key_ranks, len(keys), qi.I.data, qi.S.data, qi.Sp.data, d_keys.data,
                               np.uint32(len(keys)), out.data)
            found = [int(x) for x in out.get()]
            ranks, occ = found[: len(keys)], found[len(keys) :]
        while len(ranks) < 2:  # a bound at the end of the key space
            ranks.append(qi.n_distinct)
            occ.append(qi.n_occurrences)
        return (ranks[0], ranks[1]), (occ[0], occ[1])

    def _count(self, chunk, r0, r1, rs_hits=None):
        """Counting pass and prefix sum (Algorithm 2, lines 1-6) of one chunk: a :class:`_Pass` with the hit
        offsets per work-item and the chunk's total; with ``rs_hits``, the chunk's hits are also added to the
        slot sizes of read strands r0 .. r1 - 1."""
        device, knl = self.device, self.knl
        present = None
        if self.per_position:
            b = chunk.b_base
            first = int(chunk.buckets[b : b + 1].get()[0])
            end = int(chunk.buckets[b + chunk.n_buckets : b + chunk.n_buckets + 1].get()[0])
            work = (self.resident.packed.data, chunk.positions.data)
            extra, n_items = (np.uint64(first), np.uint32(end - first)), end - first
            count_knl = knl.count_hits_by_position
        else:
            present = self._present(chunk)
            work = (present[0].data, present[1].data, present[2].data, np.uint32(present[3]))
            extra, n_items = (), present[3]
            count_knl = knl.count_hits
        if n_items == 0:
            return _Pass(chunk, work, extra, present, None, None, 0)
        counts = device.empty(n_items, np.uint64)
        occ = None if self.per_position else device.empty(2 * n_items, np.uint32)
        # How the slot sizes are counted (kernels/filter.cl, count_hits): per-position items and GPUs by
        # atomics, CPU devices by per-position writes summed per read strand.
        mode, hits_at = (0 if rs_hits is None else 1), None
        if rs_hits is not None and occ is not None and device.host_memory and self.scatter_counts:
            t0, t1 = self._text_range(r0, r1)
            mode, hits_at = 2, device.zero_words(device.empty(t1 - t0, np.uint32))
        device.launch(count_knl, n_items, *work, *self._index(r0, r1), *extra,
                      self.rb.pos_rs.data, self.rb.rs_start.data, np.uint32(r0), np.uint32(mode),
                      (rs_hits if rs_hits is not None else counts).data, counts.data,
                      *(() if occ is None else (occ.data, (hits_at if hits_at is not None else occ).data)))
        if mode == 2:
            device.launch(knl.strand_hits, r1 - r0, hits_at.data, self.rb.rs_start.data, np.uint32(r0),
                          np.uint32(r1 - r0), np.uint32(t0), rs_hits.data)
            del hits_at
        offsets = device.empty(n_items, np.uint64)
        self.tools["hit_offsets"](counts, offsets, self.total, size=n_items, queue=device.queue)
        n_hits = int(self.total.get()[0])
        self.step("count")
        return _Pass(chunk, work, extra, present, occ, offsets, n_hits)

    def _emit(self, p, r0, r1, w0, w1, cursor, diags):
        """Emit pass for the hits numbered [w0, w1) of the counted chunk ``p`` into the slots."""
        chunk = p.chunk
        if self.per_position:
            lookup = (*p.work, *self._index(r0, r1), *p.extra)
            knl, items = self.knl.emit_hits_by_position, int(p.extra[1])
        else:
            lookup = (p.present[1].data, p.present[2].data, np.uint32(p.present[3]), self.qi.O.data, p.occ.data,
                      chunk.positions.data)
            knl, items = self.knl.emit_hits, -(-(w1 - w0) // EMIT_BLOCK)
        self.device.launch(knl, items, *lookup, self.rb.pos_rs.data, self.rb.rs_start.data,
                           p.offsets.data, np.uint64(w0), np.uint64(w1), np.uint32(r0), cursor.data, diags.data)
        self.step("emit")

    def _text_range(self, r0, r1):
        """(t0, t1): text positions of read strands [r0, r1) and of the forward strands of their reads, where
        the index holds their occurrences (a range is whole reads, or one read strand)."""
        rs_start = self.rb.rs_start_host
        return int(rs_start[r0 & ~1]), int(rs_start[r1])

    def _index(self, r0, r1):
        """The q-group index's kernel arguments for read strands [r0, r1): its arrays, the forward text
        range, and the strands a range of one read strand selects (bit 0 forward, bit 1 reverse)."""
        qi = self.qi
        t0, t1 = self._text_range(r0, r1)
        strands = 3 if r1 - r0 > 1 else 1 << (r0 & 1)
        return (qi.I.data, qi.S.data, qi.Sp.data, qi.O.data, qi.Ob.data, np.uint32(t0), np.uint32(t1),
                np.uint32(strands))

    # ---- one range of read strands
    def _count_range(self, r0, r1):
        """Raw hits of read strands [r0, r1): the total, the hits per read strand (uint32, with a closing 0;
        valid when the total fits a window) and the counting passes of a resident table (or of a streamed table
        of one chunk), which the emit pass reuses; None where they were not kept."""
        rs_hits = self.device.zeros(r1 - r0 + 1, np.uint32)
        total, passes, n_chunks = 0, [], 0
        # the passes over a resident (or gathered) table are kept for the emit pass; a streamed chunk's only
        # while it is the only one (the next chunk overwrites its buffers)
        keep = not self.resident.streamed or self.gathered is not None
        for chunk in self._chunks():
            self.step("upload")
            p = self._count(chunk, r0, r1, rs_hits)
            total += p.n_hits
            n_chunks += 1
            if keep or n_chunks == 1:
                passes.append(p)
            else:
                passes = []
        return total, rs_hits, passes if keep or n_chunks <= 1 else None

    def _passes(self, r0, r1, counted):
        """The counting pass of every chunk of the table, reusing the kept passes (``counted``)."""
        if counted is not None:
            self.n_chunks += len(counted)
            yield from counted
            return
        for chunk in self._chunks():
            self.step("upload")
            self.n_chunks += 1
            yield self._count(chunk, r0, r1)

    def _slots(self, r0, r1, total, rs_hits, counted):
        """Candidates of read strands [r0, r1), which have ``total`` <= window raw hits."""
        n_slots = r1 - r0
        slot_start = self.device.empty(n_slots + 1, np.uint32)
        cursor = self.device.empty(n_slots + 1, np.uint32)
        self.tools["slot_starts"](rs_hits, slot_start, cursor, size=n_slots + 1, queue=self.device.queue)
        diags = self.device.workspace("filtration-diags", total, np.uint32)
        for p in self._passes(r0, r1, counted):
            if p.n_hits:
                self._emit(p, r0, r1, 0, p.n_hits, cursor, diags)
        del counted, cursor
        return self._collapse(r0, n_slots, slot_start, diags, total, self.min_votes)

    def _collapse(self, r0, n_slots, slot_start, diags, total, min_votes):
        self.n_windows += 1
        masked = self.masked_args if min_votes is self.min_votes else None
        return collapse_slots(self.device, self.knl, self.tools, diags, total, slot_start, n_slots,
                              self.rb.rs_start, r0, min_votes, self.gap, step=self.step,
                              raw=self.raw_parts if self.keep_raw else None, count_all=self.thresholds,
                              masked=masked)

    def _windows(self, r0, total):
        """Candidates of the single read strand r0, whose ``total`` raw hits exceed a window: windows of hit
        numbers per chunk are sorted and collapsed as one slot each, merged, then thresholded."""
        import pyopencl.array as cla

        if self.no_threshold is None:
            self.no_threshold = cla.to_device(self.device.queue, np.ones_like(self.min_votes.get()),
                                              allocator=self.device.pool)
        parts = []
        for p in self._passes(r0, r0 + 1, None):
            for w0 in range(0, p.n_hits, self.window):
                w1 = min(p.n_hits, w0 + self.window)
                slot_start = cla.to_device(self.device.queue, np.array([0, w1 - w0], np.uint32),
                                           allocator=self.device.pool)
                cursor = self.device.zeros(1, np.uint32)
                diags = self.device.empty(w1 - w0, np.uint32)
                self._emit(p, r0, r0 + 1, w0, w1, cursor, diags)
                parts.append(self._collapse(r0, 1, slot_start, diags, w1 - w0, self.no_threshold))
                if len(parts) > 1 and sum(p.n for p in parts) > self.window:
                    parts = [self._merge(parts)]
        merged = self._merge(parts) if len(parts) > 1 else parts[0]
        return self._threshold(merged)

    def _merge(self, parts):
        merged = _merge(self.device, self.knl, self.tools, parts, self.gap, self.diag_bits, self.key_bits,
                        self.sort_padding)
        self.step("merge")
        return merged

    def _threshold(self, cand):
        """Merged candidates of one read strand with the votes threshold applied."""
        cand.n_collapsed = cand.n
        if not self.thresholds or cand.n == 0:
            return cand
        out = [self.device.empty(cand.n, np.uint32) for _ in range(4)]
        n_out = self.device.empty(1, np.uint32)
        self.tools["keep_votes"](cand.rs, cand.diag_lo, cand.diag_hi, cand.votes, self.rb.rs_start,
                                 self.min_votes, *self.masked_args, *out, n_out, size=cand.n,
                                 queue=self.device.queue)
        kept = Candidates(int(n_out.get()[0]), *out)
        kept.n_collapsed = cand.n
        self.step("merge")
        return kept

    def run(self):
        parts = []
        ranges = [(0, self.rb.n_rs)]  # a stack, popped in ascending rs order
        while ranges:
            r0, r1 = ranges.pop()
            total, rs_hits, counted = self._count_range(r0, r1)
            if total == 0:
                continue
            if total > self.window and r1 - r0 > 1:
                # Equal numbers of reads per range (both strands of a read share its index occurrences),
                # enough ranges for the hits to fit on average; a range that still overflows is split again,
                # a single read into its two strands.
                n_reads = (r1 - r0) // 2
                if n_reads == 1:
                    bounds = [r0, r0 + 1, r1]
                else:
                    k = min(n_reads, -(-total // self.window) + 1)
                    bounds = [r0 + 2 * (n_reads * i // k) for i in range(k + 1)]
                ranges.extend(reversed(list(zip(bounds[:-1], bounds[1:]))))
                continue
            self.n_raw += total
            self.n_ranges += 1
            if total <= self.window:
                part = self._slots(r0, r1, total, rs_hits, counted)
            else:
                del counted
                part = self._windows(r0, total)
            self.n_collapsed += part.n_collapsed
            parts.append(part)
        result = _concatenate(self.device, parts)
        result.n_raw_hits, result.n_chunks, result.n_windows = self.n_raw, self.n_chunks, self.n_windows
        result.n_ranges, result.n_collapsed = self.n_ranges, self.n_collapsed
        result.gathered = self.gathered is not None
        result.n_packed, result.gathered_bytes = self.n_packed, self.gathered_bytes
        result.n_gathered_chunks = len(self.gathered) if self.gathered is not None else 0
        result.timings = self.step.times
        result.masked_per_rs = self.masked_per_rs
        if self.keep_raw:
            if self.raw_parts:
                rs = np.concatenate([p[0] for p in self.raw_parts])
                diag = np.concatenate([p[1] for p in self.raw_parts])
                order = np.lexsort((diag, rs))
                rs, diag = rs[order], diag[order]
            else:
                rs = diag = np.zeros(0, np.uint32)
            result.raw = {"rs": rs, "diag": diag}
        return result


def collapse_slots(device, knl, tools, diags, total, slot_start, n_slots, rs_start, r0, min_votes, gap, step=None,
                   raw=None, count_all=True, masked=None):
    """Slots of raw diagonals -> candidates.  Slot s (read strand r0 + s) is ``diags[slot_start[s] ..
    slot_start[s + 1])``; each is sorted in place (``knl.sort_slots`` or on GPUs ``knl.sort_slots_local``, see
    :func:`slot_sort_group`; scratch of ``total`` entries) and its
    clusters with at least ``min_votes[length of the read strand]`` votes are written in (rs, diag_lo) order.
    ``n_collapsed`` of the result counts all clusters (when ``count_all``); with a list ``raw``, the sorted
    raw hits are appended to it as host arrays (rs, diag).  ``masked``: (masked q-grams per read strand,
    flag) lowering the thresholds (see ``slot_threshold`` in filter.cl), or None."""
    step = step or (lambda name: None)
    scratch = device.workspace("filtration-sort-scratch", total, np.uint32)
    n_kept = device.zeros(n_slots + 1, np.uint32)
    n_all = device.empty(n_slots, np.uint32)
    masked_per_rs, use_masked = masked or (min_votes, np.uint32(0))
    common = (slot_start.data, np.uint32(n_slots), rs_start.data, np.uint32(r0), min_votes.data,
              masked_per_rs.data, use_masked, np.uint32(gap))
    args = (diags.data, scratch.data, *common, n_kept.data, n_all.data)
    group = slot_sort_group(device, knl)
    if group is None:
        device.launch(knl.sort_slots, n_slots, *args)
    elif n_slots:
        knl.sort_slots_local(device.queue, (n_slots * group,), (group,), *args)
    del scratch
    step("sort")
    if raw is not None:
        sizes = np.diff(slot_start.get()[: n_slots + 1].astype(np.int64))
        raw.append((np.repeat(np.arange(r0, r0 + n_slots, dtype=np.uint32), sizes), diags.get()[:total]))
    cand_start = device.empty(n_slots + 1, np.uint32)
    copy = device.empty(n_slots + 1, np.uint32)
    tools["slot_starts"](n_kept, cand_start, copy, size=n_slots + 1, queue=device.queue)
    del copy
    n_c = int(cand_start[n_slots : n_slots + 1].get()[0])  # n_kept's closing entry is 0
    out = [device.empty(n_c, np.uint32) for _ in range(4)]
    device.launch(knl.write_candidates, n_slots, diags.data, *common, cand_start.data, *(a.data for a in out))
    part = Candidates(n_c, *out)
    part.n_collapsed = int(n_all.get()[:n_slots].sum(dtype=np.int64)) if count_all else n_c
    step("collapse")
    return part


def slot_sort_group(device, knl):
    """Work-items per slot of the slot sort: None for ``knl.sort_slots`` (one work-item per slot), else the
    work-group size of ``knl.sort_slots_local`` (see ``SLOT_SORT_BY_GROUP``), a power of two."""
    by_group = not device.host_memory if SLOT_SORT_BY_GROUP is None else SLOT_SORT_BY_GROUP
    if not by_group:
        return None
    return device.local_group(knl.sort_slots_local, SORT_GROUP)


def _concatenate(device, parts):
    """Candidates of disjoint, ascending read-strand ranges, one after the other."""
    import pyopencl.array as cla

    parts = [p for p in parts if p.n]
    if not parts:
        return Candidates(0, *(device.empty(0, np.uint32) for _ in range(4)))
    if len(parts) == 1:
        return parts[0]
    cols = [cla.concatenate([getattr(p, f)[: p.n] for p in parts], queue=device.queue, allocator=device.pool)
            for f in Candidates.FIELDS]
    return Candidates(sum(p.n for p in parts), *cols)


def _merge(device, knl, tools, parts, gap, diag_bits, key_bits, padding=0):
    """Candidates of several windows -> one sorted, collapsed set.

    Merging intervals that overlap or lie within ``gap`` of the running maximum is the same single-linkage
    rule applied to the union of the raw hits, so the result equals a collapse of all hits at once.
    """
    import pyopencl.array as cla

    queue, pool = device.queue, device.pool
    n = sum(p.n for p in parts)
    arrays = [[getattr(p, f)[: p.n] for p in parts if p.n] for f in Candidates.FIELDS]
    m = sort_length(tools["sort_intervals"], n + padding)
    if m > n:  # entries that sort last: largest read strand and diagonal the key can hold
        rs_bits = key_bits - diag_bits
        for column, value in zip(arrays, ((1 << rs_bits) - 1, (1 << diag_bits) - 1, 0, 0)):
            pad = cla.empty(queue, m - n, np.uint32, allocator=pool)
            pad.fill(np.uint32(value))
            column.append(pad)
    cols = [cla.concatenate(column, queue=queue, allocator=pool) for column in arrays]
    (rs, lo, hi, votes), _ = tools["sort_intervals"](*cols, np.uint32(diag_bits), key_bits=key_bits,
                                                      allocator=pool, queue=queue)
    run_hi = device.empty(n, np.uint32)
    tools["running_hi"](rs, hi, run_hi, size=n, queue=queue)
    first = device.empty(n, np.uint32)
    n_out = device.empty(1, np.uint32)
    tools["interval_clusters"](rs, lo, run_hi, first, n_out, np.uint32(gap), size=n, queue=queue)
    n_c = int(n_out.get()[0])
    out = [device.empty(n_c, np.uint32) for _ in range(4)]
    device.launch(knl.merge_intervals, n_c, rs.data, lo.data, hi.data, votes.data, np.uint32(n), first.data,
                  np.uint32(n_c), *(a.data for a in out))
    return Candidates(n_c, *out)
