"""The reference on the device, uploaded once per run (see docs/core.md, "resident reference").

The packed sequence, the ambiguity bitmap and the contig table always stay resident: validation reads them
for every candidate, and filtration reads the q-gram value of a reference position from the packed sequence.
The q-gram table (bucket table and positions) is resident too when it fits the device's share for it, in
one part or, where the positions exceed the device's largest allocation, in several parts of consecutive
buckets.  Otherwise it stays on the host and filtration streams it in chunks of consecutive buckets, one
chunk at a time into reused device buffers; a chunk crosses the bus with only the buckets that the read
buffer touches (the others left empty), packed on the host.  Every mode hands filtration the same
:class:`QGramChunk` views of the buckets it looks into, so the hits, and hence the candidates, are identical.
"""
import os
from collections import namedtuple

import numpy as np

from .errors import PeanutError
from .layout import USABLE, default_fold, index_fixed_bytes
from .reference import PAGE, page_aligned_empty, release_pages

# "room" = usable device memory minus the sequence and the fixed part (I + S) of a q-group index.
# The q-gram table stays resident when it takes at most this share of the room; the rest is for the read
# buffer, its O and S', the hits and validation.  Two thirds keep a human genome's table (6.5 GB at step 2)
# resident on a 16 GB card with room for a full pipeline batch; beyond it the batches shrink faster than
# streaming costs.
RESIDENT_SHARE = 2 / 3
# Share of the room for one streamed chunk of the q-gram table.
CHUNK_SHARE = 0.125
# Buckets per chunk of the table at most, unless a caller asks for fewer (filtration's default): bucket counts
# are 32-bit kernel arguments.
MAX_CHUNK_BUCKETS = (1 << 31) - 1
# Page-locked staging of a streamed table (_HostArray): buffers, bytes each, and the threads that copy a
# piece of the table into one, or pack a chunk's touched buckets (both without the interpreter lock).  Packing
# waits on memory for every touched bucket, and the device waits for the packing: it takes every core, up to
# the point where the host's memory is the limit.
STAGES = 4
STAGE_BYTES = 64 << 20
COPY_THREADS = max(1, min(16, os.cpu_count() or 1))
# Buckets per thread of a packed chunk at least: fewer are packed by one thread.
PACK_MIN_BUCKETS = 1 << 16
# Bytes of the reference copied to a GPU per call: large enough that the calls cost nothing next to the copy,
# small enough that a block's host pages (released after its copy) are a small share of a run's memory.
UPLOAD_BLOCK = 64 << 20

# One chunk of the q-gram table as device arrays: buckets first_bucket + b for b < n_buckets, whose positions
# are positions[buckets[b_base + b] .. buckets[b_base + b + 1]).
QGramChunk = namedtuple("QGramChunk", "buckets positions b_base n_buckets first_bucket n_positions")


def device_starts_dtype(n_positions):
    """The bucket starts' type on the device: 32 bits while every position offset fits."""
    return np.uint32 if n_positions < 1 << 32 else np.uint64


def _upload(device, array, dtype):
    """A read-only device copy of ``array``; on a CPU device, the page-aligned host array itself.

    PoCL uses a page-aligned host array in place (``CL_MEM_USE_HOST_PTR``; an unaligned one it copies), and
    the buffer keeps the array alive: no second copy of the reference in RAM and no time copying it into
    fresh pages (for chr20 about 600 MiB, a second of the start-up).  A GPU gets the array block by block
    (:func:`_copy_to_device`).
    """
    import pyopencl as cl
    import pyopencl.array as cla

    if len(array) and not device.host_memory:
        return _copy_to_device(device, array, dtype)
    a = np.ascontiguousarray(array, dtype=dtype)
    if a.size == 0:
        a = np.zeros(1, dtype=dtype)  # zero-length buffers are not valid kernel arguments
    if not device.host_memory:
        return cla.to_device(device.queue, a, allocator=device.pool)
    if a.ctypes.data % PAGE:
        a = _aligned_copy(a)
    buf = cl.Buffer(device.context, cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR, hostbuf=a)
    return cla.Array(device.queue, a.shape, a.dtype, data=buf)


def _copy_to_device(device, array, dtype):
    """``array`` copied to a new device array of ``dtype`` in blocks of UPLOAD_BLOCK bytes, each block converted
    on its own and its pages released once copied where it is mapped from the index (reference.release_pages):
    the host never holds more than a block of the reference beyond what it already had, where converting or
    touching the whole array would hold all of it (a human genome's q-gram table is about 30 GB)."""
    import pyopencl as cl
    import pyopencl.array as cla

    out = cla.empty(device.queue, len(array), dtype, allocator=device.pool)
    step = max(1, UPLOAD_BLOCK // out.dtype.itemsize)
    for lo in range(0, len(array), step):
        block = array[lo : lo + step]
        cl.enqueue_copy(device.queue, out.data, np.ascontiguousarray(block, dtype=dtype),
                        dst_offset=lo * out.dtype.itemsize)  # blocking: the converted block is a temporary
        release_pages(block)
    return out


def _aligned_copy(a):
    out = page_aligned_empty(a.size, a.dtype)
    out[:] = a
    return out


class ResidentReference:
    """Device copy of a reference index.

    Device arrays: ``packed``, ``ambiguous``, ``contig_offsets``, ``contig_ends`` (uint32) and, unless
    ``streamed``, the q-gram table as ``parts``: :class:`QGramChunk` of consecutive buckets, one part (then
    also ``buckets``, the bucket table: uint32, or uint64 beyond 2^32 positions, and ``positions``, uint32)
    or, where the positions exceed the largest allocation (``part_positions`` lowers that bound), several
    with uint32 starts rebased to the part.  Host ints ``n_contigs``, ``q``, ``step``, ``bucket_bits``, ``n_buckets``, ``suffix_bits``
    (2q - bucket_bits), ``n_positions``, ``genome_end`` (one past the last contig base).  ``table_budget``
    (bytes) overrides the device-derived room for the q-gram table; ``chunk_positions`` the positions per
    streamed chunk; ``starts_dtype`` the device type of resident bucket starts (default
    :func:`device_starts_dtype`; tests force ``np.uint64`` to run the kernels' 64-bit variant on a small
    table).
    """

    # The index's masked q-gram values (host uint32, ascending), which lower the votes threshold of the read
    # strands holding them (filtration.py); None where the index does not store them.
    masked_kmers = None

    def __init__(self, device, packed, ambiguous, offsets, lengths, buckets, positions, q, step,
                 table_budget=None, chunk_positions=None, *, starts_dtype=None, part_positions=None):
        self.device = device
        self.q, self.step = int(q), int(step)
        self.n_buckets = len(buckets) - 1
        self.bucket_bits = self.n_buckets.bit_length() - 1
        if self.n_buckets < 1 or self.n_buckets != 1 << self.bucket_bits or self.bucket_bits > 2 * self.q:
            raise ValueError(f"a bucket table has 2^k + 1 entries, k <= 2q; got {len(buckets)}")
        self.suffix_bits = 2 * self.q - self.bucket_bits
        offsets = np.asarray(offsets, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        ends = offsets + lengths
        self.n_contigs = len(offsets)
        self.genome_end = int(ends.max()) if len(ends) else 0
        if self.genome_end >= 1 << 32:
            raise PeanutError("reference: padded genome exceeds 2^32 bases, the range of device coordinates")

        seq_arrays = {"packed": packed, "ambiguous": ambiguous}
        seq_bytes = sum(np.asarray(a).nbytes for a in seq_arrays.values()) + 8 * self.n_contigs
        for name, a in seq_arrays.items():
            if np.asarray(a).nbytes > device.max_alloc:
                raise PeanutError(
                    f"reference: the {name} sequence ({np.asarray(a).nbytes / 2**20:.0f} MiB) exceeds this device's "
                    f"largest allocation ({device.max_alloc / 2**20:.0f} MiB)"
                )
        # Room left once the sequence and the fixed part of a q-group index (I + S) are on the device.
        room = USABLE * device.global_mem - index_fixed_bytes(self.q, fold=default_fold(device)) - seq_bytes
        if room <= 0:
            raise PeanutError(
                f"reference: the sequence ({seq_bytes / 2**20:.0f} MiB) and the q-group index for q={self.q} "
                f"({index_fixed_bytes(self.q, fold=default_fold(device)) / 2**20:.0f} MiB) do not fit this device's "
                f"{device.global_mem / 2**20:.0f} MiB; use a smaller q or a larger device"
            )
        self.packed = _upload(device, packed, np.uint32)
        self.ambiguous = _upload(device, ambiguous, np.uint32)
        self.contig_offsets = _upload(device, offsets, np.uint32)
        self.contig_ends = _upload(device, ends, np.uint32)

        # The q-gram table: host arrays (NumPy) whose slices go to the device.
        self._buckets_host = buckets
        self.n_positions = int(buckets[self.n_buckets])
        needed = device_starts_dtype(self.n_positions)
        if starts_dtype is None:
            starts_dtype = needed
        elif np.dtype(starts_dtype) not in {np.dtype(needed), np.dtype(np.uint64)}:
            raise ValueError(f"starts_dtype {np.dtype(starts_dtype)} cannot hold {self.n_positions} positions")
        else:
            starts_dtype = np.dtype(starts_dtype).type
        bucket_bytes = np.dtype(starts_dtype).itemsize * (self.n_buckets + 1)
        table_bytes = bucket_bytes + 4 * self.n_positions
        if table_budget is None:
            table_budget = RESIDENT_SHARE * room
        if part_positions is None:
            part_positions = device.max_alloc // 4
        # Resident parts: consecutive buckets whose positions (and rebased 32-bit starts) fit one allocation.
        part_positions = max(1, min(int(part_positions), (1 << 32) - 1))
        bounds = None
        if table_bytes <= table_budget and bucket_bytes <= device.max_alloc:
            bounds = chunk_bounds(buckets, part_positions, device.max_alloc // 4 - 1)
        self.streamed = bounds is None
        if chunk_positions is None:
            # positions and, at most, one bucket start per position: at most 8 bytes per position of a chunk.
            chunk_positions = int(min(CHUNK_SHARE * room, device.max_alloc) // 8)
        self.chunk_positions = max(1, int(chunk_positions))
        self.buckets = self.positions = None
        self.parts = []
        if self.streamed:
            self.starts_dtype = np.uint32  # chunks are rebased to their first position
            self._host_table = _HostArray(device, positions, np.uint32)
            hb = np.asarray(buckets)  # in a type the packer reads (callers may bring their own)
            self._buckets_host = np.ascontiguousarray(hb, dtype=hb.dtype if hb.dtype in (np.uint32, np.uint64)
                                                      else np.uint64)
            self._stream_bounds = {}
            self._packing = {}  # host arrays a chunk is packed into where no staging buffer holds it
        elif len(bounds) == 2:
            self.buckets = _upload(device, buckets, starts_dtype)
            self.positions = _upload(device, positions, np.uint32)
            self.starts_dtype = starts_dtype
            self.parts = [QGramChunk(self.buckets, self.positions, 0, self.n_buckets, 0, None)]
        else:
            self.starts_dtype = np.uint32
            for b0, b1 in zip(bounds[:-1], bounds[1:]):
                p0, p1 = int(buckets[b0]), int(buckets[b1])
                starts = _upload(device, rebased_starts(buckets, b0, b1), np.uint32)
                self.parts.append(QGramChunk(starts, _upload(device, positions[p0:p1], np.uint32), 0, b1 - b0,
                                             b0, p1 - p0))
        self.device_bytes = sum(a.nbytes for a in (self.packed, self.ambiguous, self.contig_offsets, self.contig_ends))
        self.device_bytes += sum(p.buckets.nbytes + p.positions.nbytes for p in self.parts)
        if self.streamed:
            self.device_bytes += self._host_table.device_bytes

    @classmethod
    def from_index(cls, device, reference_index, **kwargs):
        """Upload a :class:`peanut_py.reference.ReferenceIndex`."""
        return cls.from_index_many([device], reference_index, **kwargs)[0]

    @classmethod
    def from_index_many(cls, devices, reference_index, **kwargs):
        """Upload a :class:`peanut_py.reference.ReferenceIndex` to each of ``devices``, reading it once: the
        host arrays are shared (CPU devices use them in place)."""
        from concurrent.futures import ThreadPoolExecutor

        ri = reference_index
        # The arrays are read side by side (each reader spreads its chunks over the cores and holds the GIL
        # only between chunks); bucket starts arrive in the type the device keeps them in.
        starts_dtype = device_starts_dtype(ri.n_positions)
        with ThreadPoolExecutor(max_workers=4) as pool:
            parts = [pool.submit(f) for f in (ri.packed, ri.ambiguity_bitmap, lambda: ri.buckets(starts_dtype),
                                               ri.positions)]
            packed, ambiguous, buckets, positions = (f.result() for f in parts)
        # Where no device uses the host arrays in place, their pages leave this process's resident set once
        # checked and once copied: a GPU run does not hold the reference twice.
        ri.check_table(buckets, positions, release=not any(d.host_memory for d in devices))

        masked = ri.masked_kmers()

        def upload(device):
            resident = cls(device, packed, ambiguous, ri.offsets, ri.lengths, buckets, positions, ri.q,
                           ri.step, **kwargs)
            resident.masked_kmers = masked
            return resident

        if len(devices) == 1:
            return [upload(devices[0])]
        # each device has its own context and queue, so the copies go over their buses side by side
        with ThreadPoolExecutor(max_workers=len(devices)) as pool:
            return list(pool.map(upload, devices))

    @property
    def starts_ctype(self):
        return "ulong" if self.starts_dtype == np.uint64 else "uint"

    def qgram_chunks(self, max_buckets, touched=None):
        """Yield :class:`QGramChunk` covering the table in bucket order, each with at most ``max_buckets``
        buckets (and, streamed, at most ``chunk_positions`` positions unless one bucket alone has more).

        Streamed chunks live in buffers that the next chunk overwrites: use each before advancing.  With
        ``touched`` (host uint32 words, bit b & 31 of word b >> 5 for bucket b), a streamed chunk holds the
        positions of the touched buckets only, the others empty: what a read buffer's filtration looks into
        (filtration.py), at a fraction of the bytes.  A resident table's chunks hold every bucket."""
        max_buckets = max(1, int(max_buckets))
        if not self.streamed:
            for part in self.parts:
                for b in range(0, part.n_buckets, max_buckets):
                    yield part._replace(b_base=part.b_base + b, n_buckets=min(max_buckets, part.n_buckets - b),
                                        first_bucket=part.first_bucket + b)
            return
        yield from self._streamed_chunks(max_buckets, touched)

    def _chunk_bounds(self, max_buckets):
        """Bucket bounds of the streamed chunks, found once per ``max_buckets``."""
        bounds = self._stream_bounds.get(max_buckets)
        if bounds is None:
            bounds = chunk_bounds(self._buckets_host, self.chunk_positions, max_buckets, whole_buckets=True)
            self._stream_bounds[max_buckets] = bounds
        return bounds

    def _host_buffer(self, name, n):
        """A host array of at least ``n`` uint32 for packing a chunk, grown on demand and reused: the copy
        from it ends before the next chunk is packed (_HostArray.copy_from)."""
        a = self._packing.get(name)
        if a is None or len(a) < n:
            a = self._packing[name] = np.empty(max(int(n), 1), np.uint32)
        return a[:n]

    def _pack(self, b0, b1, touched):
        """Buckets [b0, b1) of the table packed for the device: (rebased starts, where they lie, positions,
        where they lie, count), each place a staging buffer's index (None: a host array).  Without
        ``touched`` the positions are the table's own slice, copied as they are."""
        from ._stream_pack import pack_touched, touched_positions

        host, table = self._buckets_host, self._host_table
        n_b = b1 - b0
        k = max(1, min(COPY_THREADS, n_b // PACK_MIN_BUCKETS))
        parts = [(b0 + n_b * i // k, b0 + n_b * (i + 1) // k) for i in range(k)]
        run = (lambda f, items: [f(*x) for x in items]) if k == 1 else \
            (lambda f, items: list(_copy_pool().map(lambda x: f(*x), items)))
        if touched is None:
            counts = [int(host[bb]) - int(host[ba]) for ba, bb in parts]
        else:
            counts = run(lambda ba, bb: touched_positions(host, touched, ba, bb), parts)
        ats = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        total = int(ats[-1])
        # packed into two staging buffers where both fit (no copy between), else into host arrays
        staged = table.stages(n_b + 1, total) if touched is not None else None
        starts_at, positions_at = staged or (None, None)
        starts = table.staged(starts_at, n_b + 1) if staged else self._host_buffer("starts", n_b + 1)
        if touched is None:
            p0 = int(host[b0])
            positions, out = table.array[p0 : p0 + total], None
        else:
            positions = out = table.staged(positions_at, total) if staged else self._host_buffer("positions", total)
        run(lambda i, ba, bb: pack_touched(host, table.array, touched, ba, bb, b0, starts, out, int(ats[i])),
            [(i, ba, bb) for i, (ba, bb) in enumerate(parts)])
        starts[n_b] = total
        return starts, starts_at, positions, positions_at, total

    def _streamed_chunks(self, max_buckets, touched):
        import pyopencl.array as cla

        queue, pool, table = self.device.queue, self.device.pool, self._host_table
        bufs = {}

        def buffer(name, n, dtype):
            # Grown on demand, reused across chunks.
            if name not in bufs or bufs[name].size < n:
                bufs[name] = cla.empty(queue, max(int(n), 1), dtype, allocator=pool)
            return bufs[name]

        bounds = self._chunk_bounds(max_buckets)
        for b0, b1 in zip(bounds[:-1], bounds[1:]):
            starts, starts_at, positions, positions_at, n = self._pack(int(b0), int(b1), touched)
            d_starts = buffer("buckets", b1 - b0 + 1, np.uint32)
            d_pos = buffer("positions", n, np.uint32)
            # In-order queue: the kernels of this chunk wait for its copies, the next chunk's copies for them.
            table.copy_from(queue, d_starts, starts, starts_at)
            table.copy_from(queue, d_pos, positions, positions_at)
            yield QGramChunk(d_starts, d_pos, 0, b1 - b0, b0, n)


def rebased_starts(starts, b0, b1):
    """The starts of buckets b0 .. b1 (b1 closing) of the bucket table ``starts``, counted from the first
    bucket's: what a part or chunk of the table holding only those buckets' positions indexes them by."""
    return np.asarray(starts[b0 : b1 + 1], dtype=np.int64) - int(starts[b0])


def chunk_bounds(starts, max_positions, max_buckets, whole_buckets=False):
    """Bucket numbers b_0 = 0 < b_1 < ... < b_k = n_buckets such that buckets [b_i, b_i+1) hold at most
    ``max_positions`` positions and are at most ``max_buckets`` buckets; ``starts`` is the bucket table
    (n_buckets + 1 ascending starts).  A bucket alone above ``max_positions`` gets a chunk of its own with
    ``whole_buckets``; otherwise the result is None (no such tiling exists)."""
    n_buckets = len(starts) - 1
    bounds = [0]
    end = int(starts[n_buckets])
    while bounds[-1] < n_buckets:
        b0 = bounds[-1]
        limit = int(starts[b0]) + max_positions
        # last bucket bound whose start is within the limit (searched on the table's own dtype)
        b1 = n_buckets if limit >= end else int(np.searchsorted(starts, starts.dtype.type(limit), "right")) - 1
        b1 = min(b1, b0 + max_buckets)
        if b1 <= b0:
            if not whole_buckets:
                return None
            b1 = b0 + 1
        bounds.append(b1)
    return np.array(bounds, dtype=np.int64)


class _HostArray:
    """A host array the device copies slices of, through page-locked staging buffers where the device has its
    own memory.

    Copies from pageable memory go through the driver's own staging at a fraction of the bus speed, and a
    streamed table crosses the bus once per read buffer.  Page-locking the whole table would cost its size in
    device memory too on NVIDIA's driver, which backs every ``CL_MEM_ALLOC_HOST_PTR`` buffer with device
    memory of the same size (a 6 GB table on an 8 GB card), and seconds of start-up to pin it.  So the array
    stays where it is (mapped from the index) and each slice goes through STAGES page-locked buffers of
    STAGE_BYTES: threads copy a piece into a free buffer while the device copies the previous pieces from
    the others.  A CPU device reads host memory anyway: there the array is copied from directly.
    """

    def __init__(self, device, array, dtype, stage_bytes=None):
        self.dtype = np.dtype(dtype)
        self.array = np.ascontiguousarray(array, dtype=self.dtype)  # no copy of a mapped table of this type
        self._stages, self._events, self._next = [], [], 0
        if device.host_memory or len(array) == 0:
            return
        import pyopencl as cl

        stage = max(1, int(stage_bytes or STAGE_BYTES) // self.dtype.itemsize)
        stage = min(stage, len(self.array), max(1, device.max_alloc // self.dtype.itemsize))
        try:
            for _ in range(STAGES):
                buf = cl.Buffer(device.context, cl.mem_flags.READ_ONLY | cl.mem_flags.ALLOC_HOST_PTR,
                                stage * self.dtype.itemsize)
                mapped, _ = cl.enqueue_map_buffer(device.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE,
                                                  0, (stage,), self.dtype)
                self._stages.append((buf, mapped))
                self._events.append(None)
        except (cl.Error, MemoryError):
            # no page-locked memory to be had: copy from the array itself, more slowly
            self._stages, self._events = [], []
        device.hold_outside_pool(self.device_bytes)

    @property
    def device_bytes(self):
        """Device memory that the staging buffers take (NVIDIA's driver backs each with its size)."""
        return sum(mapped.nbytes for _, mapped in self._stages)

    def copy_to(self, queue, dest, lo, hi):
        """Enqueue copies of elements [lo, hi) to the start of device array ``dest``; returns once the last
        piece is in a staging buffer (the device copies it later, in queue order)."""
        self.copy_from(queue, dest, self.array[lo:hi])

    def stages(self, *sizes):
        """The next staging buffers, one per size, each free once the device has copied what it held, if
        there are that many and each holds its size: their indices for :meth:`staged` and
        :meth:`copy_from` (call that for each before any other copy), or None."""
        if len(sizes) > len(self._stages) or max(sizes) > len(self._stages[0][1]):
            return None
        taken = []
        for _ in sizes:
            k = self._next
            self._next = (k + 1) % len(self._stages)
            if self._events[k] is not None:
                self._events[k].wait()
                self._events[k] = None
            taken.append(k)
        return taken

    def staged(self, k, n):
        """The first ``n`` elements of staging buffer ``k`` (from :meth:`stages`), to be filled by the caller."""
        return self._stages[k][1][:n]

    def copy_from(self, queue, dest, src, at=None):
        """Enqueue copies of host array ``src`` (of this dtype) to the start of device array ``dest``;
        returns once ``src`` may be overwritten (the device copies the staged pieces later, in queue order).
        ``at``: ``src`` is already staging buffer ``at``'s (:meth:`stages`, :meth:`staged`)."""
        import pyopencl as cl

        n = len(src)
        if at is not None:
            if n:
                self._events[at] = cl.enqueue_copy(queue, dest.data, src, is_blocking=False)
            return
        if not self._stages:
            if n:
                cl.enqueue_copy(queue, dest.data, src, is_blocking=True)
            return
        stage = len(self._stages[0][1])
        for a in range(0, n, stage):
            b = min(n, a + stage)
            k = self._next
            self._next = (k + 1) % len(self._stages)
            if self._events[k] is not None:
                self._events[k].wait()  # the device has copied this buffer's previous piece
            mapped = self._stages[k][1]
            _parallel_copy(mapped[: b - a], src[a:b])
            self._events[k] = cl.enqueue_copy(queue, dest.data, mapped[: b - a],
                                              dst_offset=a * self.dtype.itemsize, is_blocking=False)


def _parallel_copy(dst, src):
    """dst[:] = src in COPY_THREADS slices side by side (NumPy copies without the interpreter lock)."""
    n = len(src)
    if n < COPY_THREADS << 16:
        dst[:] = src
        return
    bounds = [n * i // COPY_THREADS for i in range(COPY_THREADS + 1)]
    list(_copy_pool().map(lambda i: dst.__setitem__(slice(bounds[i], bounds[i + 1]), src[bounds[i]:bounds[i + 1]]),
                          range(COPY_THREADS)))


_COPY_POOL = []


def _copy_pool():
    if not _COPY_POOL:
        from concurrent.futures import ThreadPoolExecutor

        _COPY_POOL.append(ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="peanut-stage"))
    return _COPY_POOL[0]

