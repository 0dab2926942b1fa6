"""The reference on the device, uploaded once per run (see docs/core.md, "resident reference").

The packed sequence, the ambiguity bitmap and the contig table always stay resident: validation reads them
for every candidate, and filtration reads the q-gram value of a reference position from the packed sequence.
The q-gram table (bucket table and positions) is resident too when it fits the device's share for it, in
one part or, where the positions exceed the device's largest allocation, in several parts of consecutive
buckets.  Otherwise it stays on the host and filtration streams it in chunks of consecutive buckets, one
chunk at a time into reused device buffers.  Every mode hands filtration the same :class:`QGramChunk` views,
so the hits, and hence the candidates, are identical.
"""
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
# piece of the table into one (NumPy copies without the interpreter lock).
STAGES = 4
STAGE_BYTES = 64 << 20
COPY_THREADS = 8
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
            self._stream_layouts = {}
            self._stream_layout(MAX_CHUNK_BUCKETS)  # at start-up, not in the first batch
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
            self.device_bytes += sum(h.device_bytes for h in self._host_arrays())

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

    def qgram_chunks(self, max_buckets):
        """Yield :class:`QGramChunk` covering the table in bucket order, each with at most ``max_buckets``
        buckets (and, streamed, at most ``chunk_positions`` positions unless one bucket alone has more).

        Streamed chunks live in buffers that the next chunk overwrites: use each before advancing."""
        max_buckets = max(1, int(max_buckets))
        if not self.streamed:
            for part in self.parts:
                for b in range(0, part.n_buckets, max_buckets):
                    yield part._replace(b_base=part.b_base + b, n_buckets=min(max_buckets, part.n_buckets - b),
                                        first_bucket=part.first_bucket + b)
            return
        yield from self._streamed_chunks(max_buckets)

    def _host_arrays(self):
        """The host arrays a streamed table is copied from: its positions and each layout's bucket starts."""
        return [self._host_table] + [layout[1] for layout in self._stream_layouts.values()]

    def _stream_layout(self, max_buckets):
        """(bucket bounds of the streamed chunks, their rebased starts one after the other in host memory the
        device copies from, where each chunk's starts begin there), built once per ``max_buckets``."""
        layout = self._stream_layouts.get(max_buckets)
        if layout is None:
            host = self._buckets_host
            bounds = chunk_bounds(host, self.chunk_positions, max_buckets, whole_buckets=True)
            begin = np.arange(len(bounds) - 1, dtype=np.int64) + bounds[:-1]
            starts = np.empty(self.n_buckets + len(bounds) - 1, np.uint32)
            for i, (b0, b1) in enumerate(zip(bounds[:-1], bounds[1:])):
                starts[begin[i] : begin[i] + b1 - b0 + 1] = rebased_starts(host, b0, b1)
            layout = self._stream_layouts[max_buckets] = (bounds, _HostArray(self.device, starts, np.uint32), begin)
        return layout

    def _streamed_chunks(self, max_buckets):
        import pyopencl.array as cla

        queue, pool = self.device.queue, self.device.pool
        bounds, starts, begin = self._stream_layout(max_buckets)
        bufs = {}

        def buffer(name, n, dtype):
            # Grown on demand, reused across chunks.
            if name not in bufs or bufs[name].size < n:
                bufs[name] = cla.empty(queue, max(int(n), 1), dtype, allocator=pool)
            return bufs[name]

        host = self._buckets_host
        for i, (b0, b1) in enumerate(zip(bounds[:-1], bounds[1:])):
            p0, p1 = int(host[b0]), int(host[b1])
            d_starts = buffer("buckets", b1 - b0 + 1, np.uint32)
            d_pos = buffer("positions", p1 - p0, np.uint32)
            # In-order queue: the kernels of this chunk wait for its copies, the next chunk's copies for them.
            starts.copy_to(queue, d_starts, begin[i], begin[i] + b1 - b0 + 1)
            self._host_table.copy_to(queue, d_pos, p0, p1)
            yield QGramChunk(d_starts, d_pos, 0, b1 - b0, b0, p1 - p0)


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

    @property
    def device_bytes(self):
        """Device memory that the staging buffers take (NVIDIA's driver backs each with its size)."""
        return sum(mapped.nbytes for _, mapped in self._stages)

    def copy_to(self, queue, dest, lo, hi):
        """Enqueue copies of elements [lo, hi) to the start of device array ``dest``; returns once the last
        piece is in a staging buffer (the device copies it later, in queue order)."""
        import pyopencl as cl

        if not self._stages:
            if hi > lo:
                cl.enqueue_copy(queue, dest.data, self.array[lo:hi], is_blocking=False)
            return
        stage = len(self._stages[0][1])
        for a in range(lo, hi, stage):
            b = min(hi, a + stage)
            k = self._next
            self._next = (k + 1) % len(self._stages)
            if self._events[k] is not None:
                self._events[k].wait()  # the device has copied this buffer's previous piece
            mapped = self._stages[k][1]
            _parallel_copy(mapped[: b - a], self.array[a:b])
            self._events[k] = cl.enqueue_copy(queue, dest.data, mapped[: b - a],
                                              dst_offset=(a - lo) * self.dtype.itemsize, is_blocking=False)


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

