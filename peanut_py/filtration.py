"""Filtration (PEANUT, Section 3.2, Algorithm 2): the reference's q-gram table against the q-group index.

For each range of read strands whose hits fit device memory (normally one, all of them) and each chunk of
the reference q-gram table: a counting pass (hits per kmer), a prefix sum, and an emit pass that writes raw
hits as keys ``(rs << diag_bits) | diagonal``.  A range's keys are radix-sorted and collapsed into candidates
on the device; ranges share no read strand, so their candidates are concatenated (see docs/core.md,
"filtration").  The result does not depend on range, chunk or window sizes.
"""
import weakref

import numpy as np

from .errors import PeanutError
from .qgroup import StepTimer, _empty, kernels

DEFAULT_COLLAPSE_GAP = 8
EMIT_BLOCK = 32  # raw hits per work-item of the emit pass
# Key bits per radix-sort pass.  3 beats 4 on an H200 (49 M keys of 43 bits: 28 ms vs 52 ms) although it
# needs 15 passes instead of 11: each pass scans 8 instead of 16 int32 counters per key; it also halves the
# scan scratch and stays clear of pyopencl's scan assertion (see sort_length).  PoCL: about equal.
RADIX_BITS = 3
# Device bytes per raw hit of a window: key 8, its sorted copy 8, the radix sort's scan scratch 32 (one
# 8-counter int32 scan item per key at 3 bits per pass), cluster starts 4, candidates up to 16, slack.
BYTES_PER_HIT = 80
HIT_SHARE = 0.5  # of the memory left free by the reference, the read buffer and its index
MAX_WINDOW = (1 << 31) - 1  # int32 index of pyopencl's scans and RadixSort

_cache = weakref.WeakKeyDictionary()


def _tools(device):
    """Scan and sort kernels of the filtration, compiled once per device."""
    from pyopencl.algorithm import RadixSort
    from pyopencl.scan import GenericScanKernel

    tools = _cache.get(device)
    if tools is not None:
        return tools
    ctx = device.context
    tools = {
        # Algorithm 2, line 6: where each kmer's hits go.
        "hit_offsets": GenericScanKernel(
            ctx, np.uint64,
            arguments="__global const ulong *counts, __global ulong *offsets, __global ulong *total",
            input_expr="counts[i]", scan_expr="a + b", neutral="0",
            output_statement="offsets[i] = prev_item; if (i == N - 1) total[0] = item;",
        ),
        # Sorted keys: a cluster starts at the first hit of a read strand or after a diagonal step > gap.
        "raw_clusters": GenericScanKernel(
            ctx, np.uint32,
            arguments="__global const ulong *keys, __global uint *first, __global uint *n_out, "
            "const ulong gap, const uint diag_bits",
            input_expr="(i == 0 || (keys[i] >> diag_bits) != (keys[i - 1] >> diag_bits) "
            "|| keys[i] - keys[i - 1] > gap) ? 1 : 0",
            scan_expr="a + b", neutral="0",
            output_statement="if (item != prev_item) first[prev_item] = i; if (i == N - 1) n_out[0] = item;",
        ),
        # Intervals sorted by (rs, lo): largest hi so far within the read strand, before entry i.
        "running_hi": GenericScanKernel(
            ctx, np.uint32,
            arguments="__global const uint *rs, __global const uint *hi, __global uint *run_hi",
            input_expr="hi[i]", scan_expr="across_seg_boundary ? b : max(a, b)", neutral="0",
            is_segment_start_expr="i == 0 || rs[i] != rs[i - 1]",
            output_statement="run_hi[i] = prev_item;",
        ),
        "interval_clusters": GenericScanKernel(
            ctx, np.uint32,
            arguments="__global const uint *rs, __global const uint *lo, __global const uint *run_hi, "
            "__global uint *first, __global uint *n_out, const uint gap",
            input_expr="(i == 0 || rs[i] != rs[i - 1] || (lo[i] > run_hi[i] && lo[i] - run_hi[i] > gap)) ? 1 : 0",
            scan_expr="a + b", neutral="0",
            output_statement="if (item != prev_item) first[prev_item] = i; if (i == N - 1) n_out[0] = item;",
        ),
        "sort_keys": RadixSort(ctx, "__global ulong *keys", "keys[i]", ["keys"], bits_at_a_time=RADIX_BITS,
                               key_dtype=np.uint64),
        "sort_intervals": RadixSort(
            ctx, "__global uint *rs, __global uint *lo, __global uint *hi, __global uint *votes, const uint diag_bits",
            "(((ulong)rs[i]) << diag_bits) | lo[i]", ["rs", "lo", "hi", "votes"], bits_at_a_time=RADIX_BITS,
            key_dtype=np.uint64),
    }
    _cache[device] = tools
    return tools


def sort_length(sorter, n):
    """Smallest length >= n at which pyopencl's scan inside ``sorter`` (a RadixSort) runs.

    pyopencl (2026.1) asserts ``interval_size >= num_intervals`` when a scan's first-level unit
    (work-group size * k-group size) is smaller than the number of intervals it picks for n, which is at most
    3 * compute units: seen on an H200 (132 CUs) with 4-bit radix passes (unit 256) for n in (65536, 101376].
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
    counts for benchmarks: ``n_raw_hits``, ``n_ranges`` (read-strand ranges), ``n_chunks`` (table chunks
    emitted), ``n_windows`` (sorted key buffers); ``timings`` (seconds per step when
    profiled); ``raw`` (host dict of sorted raw ``rs``/``diag`` when filtration ran with ``keep_raw``).
    """

    FIELDS = ("rs", "diag_lo", "diag_hi", "votes")

    def __init__(self, n, rs, diag_lo, diag_hi, votes):
        self.n = int(n)
        self.rs, self.diag_lo, self.diag_hi, self.votes = rs, diag_lo, diag_hi, votes
        self.n_raw_hits = 0
        self.n_chunks = 0
        self.n_windows = 0
        self.n_ranges = 0
        self.timings = {}
        self.raw = None

    @property
    def raw_hits(self):
        return self.n_raw_hits

    def to_host(self):
        return {f: getattr(self, f).get()[: self.n] for f in self.FIELDS}


def hit_window(device, used_bytes):
    """Raw hits per emit window: the device memory not used by the reference, the reads and their index."""
    free = 0.75 * device.global_mem - used_bytes
    n = int(HIT_SHARE * free // BYTES_PER_HIT)
    return max(1 << 16, min(n, device.max_alloc // 8, MAX_WINDOW))


def filter_reference(device, resident, qgroup_index, read_buffer, collapse_gap=DEFAULT_COLLAPSE_GAP,
                     max_hits_per_pass=None, max_kmers_per_chunk=None, per_position=False, keep_raw=False,
                     profile=False):
    """Candidates of every read strand of ``read_buffer`` against the whole reference.

    Raw hits whose diagonals (same read strand) follow each other within ``collapse_gap`` become one
    candidate ``[diag_lo, diag_hi]`` with ``votes`` = number of raw hits.  ``max_hits_per_pass`` and
    ``max_kmers_per_chunk`` bound the device memory (defaults from the device); ``per_position`` uses one
    work-item per reference position instead of per kmer (same hits); ``keep_raw`` copies the sorted raw
    hits to the host (for tests); ``profile`` fills ``timings``.
    """
    if resident.q != qgroup_index.q:
        raise PeanutError(f"reference index has q={resident.q} but the read index was built with q={qgroup_index.q}")
    return _Filtration(device, resident, qgroup_index, read_buffer, collapse_gap, max_hits_per_pass,
                       max_kmers_per_chunk, per_position, keep_raw, profile).run()


class _Filtration:
    """One filtration of a read buffer.

    The read strands are processed in ranges whose raw hits fit one window of device memory (normally a
    single range, all strands).  Per range, every chunk of the q-gram table emits its hits into one key
    buffer, which is sorted and collapsed once: ranges never share a read strand, so their candidates are
    final and simply concatenated in rs order.  Only a single read strand with more hits than a window is
    emitted in several windows whose candidates are then merged (see ``_merge``).
    """

    def __init__(self, device, resident, qi, rb, gap, max_hits, max_kmers, per_position, keep_raw, profile):
        self.device, self.resident, self.qi, self.rb = device, resident, qi, rb
        self.gap, self.per_position, self.keep_raw = int(gap), per_position, keep_raw
        used = resident.device_bytes + qi.device_bytes + rb.device_bytes
        self.window = max(1, min(int(max_hits or hit_window(device, used)), MAX_WINDOW))
        self.max_kmers = int(max_kmers or max(1, min(self.window // 2, MAX_WINDOW)))
        self.diag_bits = max(1, resident.genome_end.bit_length())
        self.key_bits = self.diag_bits + max(1, (rb.n_rs - 1).bit_length())
        if self.key_bits > 64:
            raise PeanutError("filtration: read strand id and diagonal do not fit one 64-bit key")
        self.knl = kernels(device, "filter", Q=qi.q, SAMPLE_S=int(qi.sample_s), STARTS_T=resident.starts_ctype,
                           EMIT_BLOCK=EMIT_BLOCK)
        self.tools = _tools(device)
        self.step = StepTimer(device.queue, profile)
        self.total = _empty(device, 1, np.uint64)
        self.raw_parts = []
        self.n_raw = self.n_chunks = self.n_windows = self.n_ranges = 0

    # ---- one chunk of the q-gram table
    def _table(self, chunk):
        """Kernel arguments naming the chunk, the number of work-items of the counting pass, the kernels."""
        table = (chunk.kmers.data, chunk.starts.data, np.uint64(chunk.k_base), np.uint32(chunk.n_kmers))
        if not self.per_position:
            return table, (), chunk.n_kmers, self.knl.count_hits, self.knl.emit_hits
        first = int(chunk.starts[chunk.k_base : chunk.k_base + 1].get()[0])
        end = int(chunk.starts[chunk.k_base + chunk.n_kmers : chunk.k_base + chunk.n_kmers + 1].get()[0])
        extra = (np.uint64(first), np.uint32(end - first))
        return table, extra, end - first, self.knl.count_hits_by_position, self.knl.emit_hits_by_position

    def _count(self, chunk, text_range):
        """Counting pass and prefix sum (Algorithm 2, lines 1-6): per-item hit offsets and the chunk's total."""
        qi = self.qi
        table, extra, n_items, count_knl, _ = self._table(chunk)
        if n_items == 0:
            return None, 0
        index = (qi.I.data, qi.S.data, qi.Sp.data, qi.O.data, *text_range)
        counts = _empty(self.device, n_items, np.uint64)
        self.device.launch(count_knl, n_items, *table, *index, *extra, counts.data)
        offsets = _empty(self.device, n_items, np.uint64)
        self.tools["hit_offsets"](counts, offsets, self.total, size=n_items, queue=self.device.queue)
        n_hits = int(self.total.get()[0])
        self.step("count")
        return offsets, n_hits

    def _emit(self, chunk, text_range, offsets, w0, w1, keys, out_base):
        qi, rb = self.qi, self.rb
        table, extra, n_items, _, emit_knl = self._table(chunk)
        index = (qi.I.data, qi.S.data, qi.Sp.data, qi.O.data, *text_range)
        items = n_items if self.per_position else -(-(w1 - w0) // EMIT_BLOCK)
        self.device.launch(emit_knl, items, *table, *index, *extra, chunk.positions.data, rb.pos_rs.data,
                           rb.rs_start.data, offsets.data, np.uint64(w0), np.uint64(w1), np.uint32(self.diag_bits),
                           keys.data, np.uint64(out_base))
        self.step("emit")

    def _keys(self, n):
        """A key buffer for n hits, padded with keys that sort last where pyopencl's scan needs it."""
        m = sort_length(self.tools["sort_keys"], n)
        keys = _empty(self.device, m, np.uint64)
        if m > n:
            keys[n:].fill(np.uint64((1 << self.key_bits) - 1))
        return keys

    def _sort_collapse(self, keys, n):
        (keys,), _ = self.tools["sort_keys"](keys, key_bits=self.key_bits, allocator=self.device.pool,
                                             queue=self.device.queue)
        self.step("sort")
        if self.keep_raw:
            self.raw_parts.append(keys.get()[:n])
        part = _collapse_raw(self.device, self.knl, self.tools, keys, n, self.gap, self.diag_bits)
        self.n_windows += 1
        self.step("collapse")
        return part

    # ---- one range of read strands
    def _text_range(self, r0, r1):
        rs_start = self.rb.rs_start_host
        return np.uint32(rs_start[r0]), np.uint32(rs_start[r1])

    def _count_range(self, r0, r1):
        text_range = self._text_range(r0, r1)
        total = 0
        for chunk in self.resident.qgram_chunks(self.max_kmers):
            self.step("upload")
            total += self._count(chunk, text_range)[1]
        return total

    def _emit_range(self, r0, r1, total):
        """Candidates of read strands [r0, r1), which have ``total`` raw hits."""
        text_range = self._text_range(r0, r1)
        self.n_ranges += 1
        if total <= self.window:
            keys = self._keys(total)
            fill = 0
            for chunk in self.resident.qgram_chunks(self.max_kmers):
                self.step("upload")
                self.n_chunks += 1
                offsets, n = self._count(chunk, text_range)
                if n:
                    self._emit(chunk, text_range, offsets, 0, n, keys, fill)
                    fill += n
            return self._sort_collapse(keys, total)
        # One read strand with more hits than a window: windows over each chunk's hits, merged per strand.
        parts = []
        for chunk in self.resident.qgram_chunks(self.max_kmers):
            self.step("upload")
            self.n_chunks += 1
            offsets, n = self._count(chunk, text_range)
            for w0 in range(0, n, self.window):
                w1 = min(n, w0 + self.window)
                keys = self._keys(w1 - w0)
                self._emit(chunk, text_range, offsets, w0, w1, keys, 0)
                parts.append(self._sort_collapse(keys, w1 - w0))
                if len(parts) > 1 and sum(p.n for p in parts) > self.window:
                    parts = [self._merge(parts)]
        return self._merge(parts) if len(parts) > 1 else parts[0]

    def _merge(self, parts):
        merged = _merge(self.device, self.knl, self.tools, parts, self.gap, self.diag_bits, self.key_bits)
        self.step("merge")
        return merged

    def run(self):
        parts = []
        ranges = [(0, self.rb.n_rs)]  # a stack, popped in ascending rs order
        while ranges:
            r0, r1 = ranges.pop()
            total = self._count_range(r0, r1)
            if total == 0:
                continue
            if total > self.window and r1 - r0 > 1:
                # Equal numbers of read strands per range, enough ranges for the hits to fit on average;
                # a range that still overflows is split again.
                k = min(r1 - r0, -(-total // self.window) + 1)
                bounds = [r0 + (r1 - r0) * i // k for i in range(k + 1)]
                ranges.extend(reversed(list(zip(bounds[:-1], bounds[1:]))))
                continue
            self.n_raw += total
            parts.append(self._emit_range(r0, r1, total))
        result = _concatenate(self.device, parts)
        result.n_raw_hits, result.n_chunks, result.n_windows = self.n_raw, self.n_chunks, self.n_windows
        result.n_ranges = self.n_ranges
        result.timings = self.step.times
        if self.keep_raw:
            keys = np.sort(np.concatenate(self.raw_parts)) if self.raw_parts else np.zeros(0, np.uint64)
            result.raw = {"rs": (keys >> np.uint64(self.diag_bits)).astype(np.uint32),
                          "diag": (keys & np.uint64((1 << self.diag_bits) - 1)).astype(np.uint32)}
        return result


def _concatenate(device, parts):
    """Candidates of disjoint, ascending read-strand ranges, one after the other."""
    import pyopencl.array as cla

    parts = [p for p in parts if p.n]
    if not parts:
        return Candidates(0, *(_empty(device, 0, np.uint32) for _ in range(4)))
    if len(parts) == 1:
        return parts[0]
    cols = [cla.concatenate([getattr(p, f)[: p.n] for p in parts], queue=device.queue, allocator=device.pool)
            for f in Candidates.FIELDS]
    return Candidates(sum(p.n for p in parts), *cols)


def _collapse_raw(device, knl, tools, keys, n, gap, diag_bits):
    """Sorted raw hit keys -> candidates (single-linkage of diagonals within ``gap``, per read strand)."""
    first = _empty(device, n, np.uint32)
    n_out = _empty(device, 1, np.uint32)
    tools["raw_clusters"](keys, first, n_out, np.uint64(gap), np.uint32(diag_bits), size=n, queue=device.queue)
    n_c = int(n_out.get()[0])
    out = [_empty(device, n_c, np.uint32) for _ in range(4)]
    device.launch(knl.collapse_raw, n_c, keys.data, np.uint32(n), first.data, np.uint32(n_c), np.uint32(diag_bits),
                  *(a.data for a in out))
    return Candidates(n_c, *out)


def _merge(device, knl, tools, parts, gap, diag_bits, key_bits):
    """Candidates of several windows -> one sorted, collapsed set.

    Merging intervals that overlap or lie within ``gap`` of the running maximum is the same single-linkage
    rule applied to the union of the raw hits, so the result equals a collapse of all hits at once.
    """
    import pyopencl.array as cla

    queue, pool = device.queue, device.pool
    n = sum(p.n for p in parts)
    arrays = [[getattr(p, f)[: p.n] for p in parts if p.n] for f in Candidates.FIELDS]
    m = sort_length(tools["sort_intervals"], n)
    if m > n:  # entries that sort last: largest read strand and diagonal the key can hold
        rs_bits = key_bits - diag_bits
        for column, value in zip(arrays, ((1 << rs_bits) - 1, (1 << diag_bits) - 1, 0, 0)):
            pad = cla.empty(queue, m - n, np.uint32, allocator=pool)
            pad.fill(np.uint32(value))
            column.append(pad)
    cols = [cla.concatenate(column, queue=queue, allocator=pool) for column in arrays]
    (rs, lo, hi, votes), _ = tools["sort_intervals"](*cols, np.uint32(diag_bits), key_bits=key_bits,
                                                      allocator=pool, queue=queue)
    run_hi = _empty(device, n, np.uint32)
    tools["running_hi"](rs, hi, run_hi, size=n, queue=queue)
    first = _empty(device, n, np.uint32)
    n_out = _empty(device, 1, np.uint32)
    tools["interval_clusters"](rs, lo, run_hi, first, n_out, np.uint32(gap), size=n, queue=queue)
    n_c = int(n_out.get()[0])
    out = [_empty(device, n_c, np.uint32) for _ in range(4)]
    device.launch(knl.merge_intervals, n_c, rs.data, lo.data, hi.data, votes.data, np.uint32(n), first.data,
                  np.uint32(n_c), *(a.data for a in out))
    return Candidates(n_c, *out)
