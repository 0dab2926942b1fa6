"""The OpenCL device layer: the single owner of context, queues, memory pool, buffers and compiled programs.

Everything that talks to OpenCL gets its context from a :class:`Device`; kernels are compiled from the
package's ``kernels/<name>.cl`` with ``-D`` defines and ``-I kernels/`` (shared ``.clh`` headers) and cached
per (name, defines).  :class:`StepTimer` times the steps of a stage when profiling.
"""
import os
import pathlib
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .errors import PeanutError

NO_PLATFORM_HELP = (
    "no OpenCL platform found. Install your GPU vendor's OpenCL driver (NVIDIA, AMD ROCm, Intel), "
    "or the portable CPU device with: pip install 'pyopencl[pocl]'"
)


KERNEL_DIR = pathlib.Path(__file__).resolve().parent / "kernels"
# Words per work-item of buffers.cl's zero_words, before rounding to work-groups.
ZERO_SPAN = 16384


def _cl():
    try:
        import pyopencl
    except ImportError as e:  # pragma: no cover - dependency is declared
        raise PeanutError(f"pyopencl is not installed ({e}); {NO_PLATFORM_HELP}") from None
    return pyopencl


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    platform: str
    name: str
    type: str
    compute_units: int
    global_mem: int
    max_alloc: int
    max_work_group: int
    opencl_version: str

    def describe(self):
        gib = 1 << 30
        return (
            f"[{self.index}] {self.platform} | {self.name} | {self.type} | {self.compute_units} CUs | "
            f"{self.global_mem / gib:.1f} GiB global | {self.max_alloc / gib:.1f} GiB max alloc | "
            f"wg {self.max_work_group} | {self.opencl_version}"
        )


def _type_name(cl, t):
    if t & cl.device_type.GPU:
        return "GPU"
    if t & cl.device_type.ACCELERATOR:
        return "ACCELERATOR"
    if t & cl.device_type.CPU:
        return "CPU"
    return "OTHER"


def _all_devices():
    """All (DeviceInfo, cl.Device) pairs in platform order; raises PeanutError if there is no platform."""
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    found = []
    for platform in platforms:
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        for dev in devices:
            info = DeviceInfo(
                index=len(found),
                platform=platform.name.strip(),
                name=dev.name.strip(),
                type=_type_name(cl, dev.type),
                compute_units=dev.max_compute_units,
                global_mem=dev.global_mem_size,
                max_alloc=dev.max_mem_alloc_size,
                max_work_group=dev.max_work_group_size,
                opencl_version=dev.version.strip(),
            )
            found.append((info, dev))
    if not found:
        raise PeanutError(NO_PLATFORM_HELP)
    return found


_PROBE_SOURCE = "__kernel void probe(__global uint *x) { x[get_global_id(0)] += 1u; }"
_probe_cache = {}


def probe(cl_device):
    """Compile and run a trivial kernel on ``cl_device``; None if it works, else the error text."""
    key = (cl_device.platform.name, cl_device.name, cl_device.int_ptr)
    if key not in _probe_cache:
        cl = _cl()
        import numpy as np

        try:
            ctx = cl.Context([cl_device])
            queue = cl.CommandQueue(ctx)
            prg = cl.Program(ctx, _PROBE_SOURCE).build()
            host = np.arange(4, dtype=np.uint32)
            buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
            prg.probe(queue, (4,), None, buf)
            cl.enqueue_copy(queue, host, buf)
            queue.finish()
            ok = np.array_equal(host, np.arange(1, 5, dtype=np.uint32))
            _probe_cache[key] = None if ok else "trivial kernel gave wrong results"
        except cl.Error as e:
            _probe_cache[key] = " ".join(str(e).split())[:300]
    return _probe_cache[key]


def check_device(spec=None):
    """Raise PeanutError unless the chosen device compiles and runs a trivial kernel."""
    info, dev = _pick(_all_devices(), spec)
    error = probe(dev)
    if error is not None:
        raise PeanutError(
            f"OpenCL device [{info.index}] {info.name} cannot compile kernels ({error}); "
            "on Debian/Ubuntu `apt-get install pocl-opencl-icd` gives a working CPU device"
        )
    return info


def list_devices():
    return [info for info, _ in _all_devices()]


def _pick(found, spec):
    """Choose a device: ``spec`` is an index or a case-insensitive name substring; else PYOPENCL_CTX; else GPU first."""
    if spec is None:
        spec = os.environ.get("PYOPENCL_CTX") or None
        if spec is not None and ":" in spec:  # PyOpenCL's "platform:device" syntax
            p, _, d = spec.partition(":")
            platforms = []
            for info, dev in found:
                if info.platform not in platforms:
                    platforms.append(info.platform)
            try:
                plat = platforms[int(p)]
                return [x for x in found if x[0].platform == plat][int(d or 0)]
            except (ValueError, IndexError):
                raise PeanutError(f"PYOPENCL_CTX={spec!r} does not name an OpenCL device; see `peanut devices`") from None
    if spec is None:
        order = {"GPU": 0, "ACCELERATOR": 1, "CPU": 2, "OTHER": 3}
        ranked = sorted(found, key=lambda x: (order[x[0].type], x[0].index))
        # A listed device may still be unable to compile kernels (PyPI's PoCL on CPUs newer than its
        # LLVM knows); the default skips such devices when a working one exists.
        if len(ranked) > 1:
            for candidate in ranked:
                if probe(candidate[1]) is None:
                    return candidate
        return ranked[0]
    spec = str(spec)
    if spec.isdigit():
        i = int(spec)
        if i >= len(found):
            raise PeanutError(f"--device {spec}: there are only {len(found)} OpenCL devices; see `peanut devices`")
        return found[i]
    matches = [x for x in found if spec.lower() in f"{x[0].platform} {x[0].name}".lower()]
    if not matches:
        raise PeanutError(f"--device {spec!r} matches no OpenCL device; see `peanut devices`")
    return matches[0]


def device_info(spec=None):
    """The DeviceInfo of the device ``spec`` picks (as Device(spec) would), without opening it."""
    return _pick(_all_devices(), spec)[0]


def default_device_index(spec=None):
    return device_info(spec).index


def is_multi_spec(spec):
    """True for a ``--device`` value that names several devices: ``all`` or a comma-separated list."""
    return spec is not None and (str(spec).strip().lower() == "all" or "," in str(spec))


def _pick_many(found, spec):
    """The devices of a multi-device ``spec``: ``all`` is every working device of the best kind present (all
    GPUs if there is one, else all accelerators, else all CPU devices), a list names each device by index or
    name substring, in the order given."""
    if str(spec).strip().lower() == "all":
        order = {"GPU": 0, "ACCELERATOR": 1, "CPU": 2, "OTHER": 3}
        # each device builds and runs its trivial kernel at the same time (a context each, ~0.2 s on a GPU)
        with ThreadPoolExecutor(max_workers=max(1, len(found)), thread_name_prefix="peanut-probe") as pool:
            errors = list(pool.map(lambda x: probe(x[1]), found))
        working = [x for x, error in zip(found, errors) if error is None]
        if not working:
            return [_pick(found, None)]
        best = min(order[x[0].type] for x in working)
        return [x for x in working if order[x[0].type] == best]
    parts = [p.strip() for p in str(spec).split(",")]
    if any(not p for p in parts):
        raise PeanutError(f"--device {spec!r}: an empty entry in the list; give indices or names such as 0,2")
    chosen = [_pick(found, p) for p in parts]
    seen = {}
    for part, (info, _) in zip(parts, chosen):
        if info.index in seen:
            raise PeanutError(f"--device {spec!r}: {seen[info.index]!r} and {part!r} are the same device "
                              f"[{info.index}] {info.name}")
        seen[info.index] = part
    return chosen


def device_indices(spec=None):
    """The indices (``peanut devices``) of the devices a run with ``--device spec`` uses."""
    found = _all_devices()
    if is_multi_spec(spec):
        return [info.index for info, _ in _pick_many(found, spec)]
    return [_pick(found, spec)[0].index]


def open_devices(spec=None, memory_cap=None):
    """The :class:`Device` objects of a run: one for an index, a name or the default, several for ``all`` or a
    list. A multi-device run checks that each one compiles kernels before any work starts."""
    found = _all_devices()
    if not is_multi_spec(spec):
        return [Device(spec, memory_cap=memory_cap)]
    chosen = _pick_many(found, spec)
    for info, dev in chosen:
        error = probe(dev)
        if error is not None:
            raise PeanutError(f"--device {spec}: OpenCL device [{info.index}] {info.name} cannot compile kernels "
                              f"({error})")
    return [Device(memory_cap=memory_cap, choice=c) for c in chosen]


class DeviceOpening:
    """``open_devices(spec, memory_cap)`` on a thread of its own, started before ``peanut map`` imports NumPy
    and the mapping modules and opens the index: finding the OpenCL platforms and creating a context take
    a few tenths of a second in the driver, which then overlap that work. ``result()`` gives the devices or
    raises the error opening them raised, where the run would have opened them; ``join()`` waits for the
    thread (a process must not exit while a thread is inside the driver's initialisation)."""

    def __init__(self, spec=None, memory_cap=None):
        self._args = (spec, memory_cap)
        self._devices = self._error = None
        self._thread = threading.Thread(target=self._open, name="peanut-open-devices", daemon=True)
        self._thread.start()

    def _open(self):
        try:
            self._devices = open_devices(*self._args)
        except BaseException as e:  # noqa: BLE001 - raised again by result(), in the caller's thread
            self._error = e

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._devices

    def join(self):
        self._thread.join()


class CappedPool:
    """A memory pool held to a device's capped memory: an allocation that would take the pool's blocks in
    use beyond ``cap`` bytes fails as an exhausted device's does (pyopencl.MemoryError, which the device
    stage answers by splitting the batch), after the pool's idle blocks are given back where they and the
    new block would exceed it.  So a run with ``--memory-cap`` allocates what a card of that size holds, not
    what the larger card it runs on lends it.  ``outside`` counts device memory held beside the pool (see
    :meth:`Device.hold_outside_pool`), which the pool's blocks leave room for."""

    def __init__(self, pool, cap):
        self._pool, self.cap, self.outside = pool, int(cap), 0

    def __call__(self, nbytes):
        import pyopencl as cl

        pool = self._pool
        size = pool.alloc_size(pool.bin_number(max(int(nbytes), 1)))
        room = self.cap - self.outside
        if pool.active_bytes + size > room:
            raise cl.MemoryError("clCreateBuffer", -4, f"out of device memory (capped at {self.cap:,} bytes)")
        if pool.managed_bytes + size > room:
            pool.free_held()
        return pool.allocate(nbytes)

    allocate = __call__

    def __getattr__(self, name):  # active_bytes, held_blocks, free_held, ... of the pool
        return getattr(self._pool, name)


class Device:
    """One OpenCL device with its context, in-order queue, memory pool and program cache.

    Create one per device of a run (open_devices) and pass it to every kernel wrapper; nothing else creates
    contexts.
    """

    def __init__(self, spec=None, memory_cap=None, kernel_dir=None, *, host_memory=None, choice=None,
                 hold_to_cap=True):
        cl = _cl()
        import pyopencl.tools

        # ``choice``: an (info, cl.Device) pair already picked (open_devices), instead of ``spec``
        self.info, self.cl_device = choice if choice is not None else _pick(_all_devices(), spec)
        # None: from the device type (see ``host_memory``); tests force either to exercise the other path.
        self._host_memory = None if host_memory is None else bool(host_memory)
        self.context = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(self.context)
        self.allocator = pyopencl.tools.ImmediateAllocator(self.queue)
        # Size classes of the pool: a CPU device's buffers are host memory whose untouched pages cost nothing,
        # so coarse classes (4 per octave, up to 25 % rounding) let batches of slightly different sizes share
        # blocks instead of first-touching one per class; a GPU keeps pyopencl's default (16 per octave),
        # since there the rounding is real device memory.
        self.pool = pyopencl.tools.MemoryPool(self.allocator, 2 if self.host_memory else 4)
        self._side_queue = None
        self._side_lock = threading.Lock()
        self._built = {}
        self._workspaces = {}
        self._lock = threading.Lock()
        # A cap (bytes) lets tests and benchmarks simulate a smaller device: of the same kind, so its largest
        # allocation keeps the device's share of its memory (a quarter on NVIDIA's GPUs).
        self.global_mem = min(self.info.global_mem, memory_cap) if memory_cap else self.info.global_mem
        self.max_alloc = min(self.info.max_alloc, self.global_mem * self.info.max_alloc // self.info.global_mem)
        # The pool is held to the cap (CappedPool) unless ``hold_to_cap`` is False: the cap then only sizes
        # the plans (tests at toy sizes, where pyopencl's scan temporaries and the pool's size classes
        # outweigh the planned shares of a few hundred KiB).
        if memory_cap and memory_cap < self.info.global_mem and hold_to_cap:
            self.pool = CappedPool(self.pool, self.global_mem)
        # Where ``program`` finds ``<name>.cl`` (the package's kernels unless a caller brings its own).
        self.kernel_dir = pathlib.Path(kernel_dir) if kernel_dir is not None else KERNEL_DIR

    @property
    def name(self):
        return self.info.name

    @property
    def host_memory(self):
        """True for a CPU device (PoCL): its buffers are host memory, so read-only host arrays can be used
        in place (``CL_MEM_USE_HOST_PTR``) instead of copied.  ``Device(host_memory=...)`` overrides it (tests
        run a GPU's buffer handling on a CPU device that way)."""
        if self._host_memory is not None:
            return self._host_memory
        return self.info.type == "CPU"

    @property
    def max_work_group(self):
        return self.info.max_work_group

    def cached(self, key, build):
        """``build()`` once per ``key`` on this device (programs, kernels, pyopencl scans), whichever thread asks
        first; a thread asking while another builds the same key waits for that build instead of repeating it
        (``DeviceStage.warm_up`` builds ahead of the device thread). A failed build is not cached: the next
        caller builds again and sees the error itself."""
        while True:
            with self._lock:
                entry = self._built.get(key)
                if entry is None:
                    pending = self._built[key] = threading.Event()
                    break
            if not isinstance(entry, threading.Event):
                return entry
            entry.wait()
        try:
            value = build()
        except BaseException:
            with self._lock:
                del self._built[key]
            pending.set()
            raise
        with self._lock:
            self._built[key] = value
        pending.set()
        return value

    def built_keys(self):
        """The keys of everything :meth:`cached` has built on this device so far (programs, kernels, scans;
        not the :meth:`constant` tables), as a frozenset: a read-only view for tests and diagnostics (builds
        still in progress excluded)."""
        with self._lock:
            return frozenset(k for k, v in self._built.items()
                             if not isinstance(v, threading.Event)
                             and not (isinstance(k, tuple) and k[0] == "constant"))

    def hold_outside_pool(self, nbytes):
        """Count ``nbytes`` of device memory allocated beside the pool (page-locked staging buffers, which
        NVIDIA's driver backs with device memory) against a memory cap."""
        if isinstance(self.pool, CappedPool):
            self.pool.outside += int(nbytes)

    def workspace(self, key, n, dtype, headroom=1.25):
        """A device array of ``n`` elements of ``dtype`` in a buffer kept for ``key`` across calls, grown (with
        ``headroom``) only when a call needs more. For the large per-batch temporaries (filtration's raw hits
        and their sort scratch) whose size changes a little from batch to batch: the pool would keep one block
        per size class they visit, each first touched once, which on a CPU device is fresh memory (several times
        what is in use). One thread (the device stage's) and one
        in-order queue use a key, so a batch's use cannot overlap the previous one's. On a GPU the array comes
        from the pool as before: there a buffer costs no first touch, and the pool, unlike a workspace, gives
        its idle blocks back when an allocation fails (a small device needs that room for validation)."""
        import numpy as np
        import pyopencl.array as cla

        if not self.host_memory:
            return cla.empty(self.queue, max(int(n), 1), dtype, allocator=self.pool)
        dtype = np.dtype(dtype)
        need = max(int(n), 1) * dtype.itemsize
        buf = self._workspaces.get(key)
        if buf is None or buf.size < need:
            self._workspaces.pop(key, None)
            del buf  # released before its successor is allocated
            size = min(max(need, int(need * headroom)), self.max_alloc)
            buf = self._workspaces[key] = self.allocator(size)
        return cla.Array(self.queue, max(int(n), 1), dtype, data=buf)

    def constant(self, key, make):
        """A device copy of the host array ``make()`` returns, uploaded once per ``key`` and kept as long as the
        device: the tables that every batch reads and no kernel writes (votes thresholds, error bounds).
        Uploading them per batch would make the device thread wait for the queue each time."""
        import pyopencl.array as cla

        return self.cached(("constant", *key), lambda: cla.to_device(self.queue, make()))

    def program(self, name, **defines):
        """Compile ``kernels/<name>.cl`` with ``-D KEY=VALUE`` for each define; cached per argument set."""
        return self.cached(("program", name, tuple(sorted(defines.items()))), lambda: self._build(name, defines))

    def kernels(self, name, **defines):
        """Kernel objects of ``kernels/<name>.cl`` by function name, created once per defines and reused.

        A kernel object carries its arguments, so one should be launched from one thread at a time."""
        def build():
            prg = self.program(name, **defines)
            return types.SimpleNamespace(**{k.function_name: k for k in prg.all_kernels()})

        return self.cached(("kernels", name, tuple(sorted(defines.items()))), build)

    def _build(self, name, defines):
        cl = _cl()
        path = self.kernel_dir / f"{name}.cl"
        try:
            source = path.read_text()
        except OSError as e:
            raise PeanutError(f"cannot read kernel {path}: {e.strerror}") from None
        options = [f"-D{k}={int(v) if isinstance(v, bool) else v}" for k, v in sorted(defines.items())]
        options += ["-I", str(KERNEL_DIR)]
        try:
            return cl.Program(self.context, source).build(options=options)
        except cl.RuntimeError as e:
            raise PeanutError(f"OpenCL build of {path} failed:\n{e}") from None

    def work_group_size(self, kernel, preferred=256):
        """A work-group size valid for ``kernel`` on this device (never a vendor-specific constant)."""
        cl = _cl()
        limit = kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.cl_device)
        multiple = kernel.get_work_group_info(
            cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, self.cl_device
        )
        size = min(preferred, limit, self.max_work_group)
        if multiple and size >= multiple:
            size -= size % multiple
        return max(1, size)

    def local_group(self, kernel, wanted):
        """Work-items of a work-group for ``kernel``, a kernel that a whole group runs together over local
        memory: the largest power of two up to ``wanted`` that the device and the kernel allow, or None where
        the kernel's local memory exceeds the device's (the caller then takes its one-work-item kernel)."""
        info = _cl().kernel_work_group_info
        if kernel.get_work_group_info(info.LOCAL_MEM_SIZE, self.cl_device) > self.cl_device.local_mem_size:
            return None
        limit = min(self.max_work_group, kernel.get_work_group_info(info.WORK_GROUP_SIZE, self.cl_device))
        group = int(wanted)
        while group > max(1, limit):
            group //= 2
        return group

    def launch(self, kernel, n, *args, preferred=256, queue=None):
        """Run a 1-D kernel over ``n`` work-items (global size rounded up; kernels guard ``gid < n``), on
        ``queue`` (default: the device's main queue)."""
        if n == 0:
            return None
        wg = self.work_group_size(kernel, preferred)
        global_size = (n + wg - 1) // wg * wg
        return kernel(queue or self.queue, (global_size,), (wg,), *args)

    def side_queue(self):
        """A second in-order queue, created once: for device work issued from other threads than the one
        driving the main queue (the final alignment from the postprocessing pool), so that it neither waits
        for nor interleaves with the mapping core's commands."""
        with self._side_lock:
            if self._side_queue is None:
                self._side_queue = _cl().CommandQueue(self.context)
            return self._side_queue

    def warm_up(self):
        """Build the device layer's own programs that a run will use (see ``DeviceStage.warm_up``)."""
        if self.host_memory:
            self.kernels("buffers")

    # --- buffers ------------------------------------------------------------------------------------------

    def empty(self, n, dtype):
        """An uninitialised device array of ``n`` elements from the pool (at least one: zero-length buffers
        are not valid kernel arguments)."""
        import pyopencl.array as cla

        return cla.empty(self.queue, max(int(n), 1), dtype, allocator=self.pool)

    def zeros(self, n, dtype):
        """A device array of ``n`` zeros (at least one element), filled by the fill command."""
        import numpy as np

        a = self.empty(n, dtype)
        _cl().enqueue_fill_buffer(self.queue, a.data, np.zeros(1, dtype), 0, a.nbytes)
        return a

    def get_all(self, arrays, sizes=None):
        """Host copies of device ``arrays`` after one wait on the device's main queue: :func:`get_all`."""
        return get_all(self.queue, arrays, sizes)

    def zero_words(self, a):
        """``a`` (a uint32 device array) set to 0 and returned.  A CPU device's fill command runs on one
        thread, so there a kernel spreads the work (and the first touch of fresh pages) over the cores."""
        import numpy as np

        if self.host_memory:
            knl = self.kernels("buffers").zero_words
            self.launch(knl, -(-a.size // ZERO_SPAN), a.data, np.uint64(a.size))
        else:
            _cl().enqueue_fill_buffer(self.queue, a.data, np.zeros(1, np.uint32), 0, a.nbytes)
        return a


def get_all(queue, arrays, sizes=None):
    """Host copies of the device ``arrays`` (pyopencl arrays; the first ``sizes[k]`` elements of each, default
    all), in that order, through ``queue`` (in order) with one wait: the copies are enqueued without blocking
    and only the last is waited for, so the device does not sit idle between them while the calling thread
    takes the interpreter lock back after each."""
    import numpy as np

    cl = _cl()
    out, events = [], []  # every event kept until the wait: pyopencl's copy event waits when it is dropped
    for k, a in enumerate(arrays):
        n = a.size if sizes is None else int(sizes[k])
        host = np.empty(n, a.dtype)
        if n:
            events.append(cl.enqueue_copy(queue, host, a.base_data, src_offset=a.offset, is_blocking=False))
        out.append(host)
    if events:
        events[-1].wait()
    return out


class StepTimer:
    """Wall time per step when ``enabled`` (the queue is drained after each step); else a no-op."""

    def __init__(self, queue, enabled):
        self.queue, self.enabled, self.times = queue, enabled, {}
        self._t = time.perf_counter()

    def __call__(self, step):
        if self.enabled:
            self.queue.finish()
            now = time.perf_counter()
            self.times[step] = self.times.get(step, 0.0) + now - self._t
            self._t = now
