"""The device layer: device listing and choice, program building, the CLI's `peanut devices`."""
import subprocess
import sys

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

from peanut_py import device as devmod
from peanut_py.errors import PeanutError


def test_lists_at_least_the_cpu_device():
    infos = devmod.list_devices()
    assert infos, "the PoCL CPU device should be installed by make"
    expected = sum(len(p.get_devices()) for p in cl.get_platforms())
    assert len(infos) == expected
    assert [i.index for i in infos] == list(range(len(infos)))
    for info in infos:
        assert info.global_mem > 0 and 0 < info.max_alloc <= info.global_mem
        assert info.compute_units >= 1 and info.type in {"GPU", "CPU", "ACCELERATOR", "OTHER"}


def test_choice_by_index_and_name(monkeypatch):
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    infos = devmod.list_devices()
    last = infos[-1]
    assert devmod.default_device_index(str(last.index)) == last.index
    assert devmod.default_device_index(last.name[:5].upper()) == next(
        i.index for i in infos if last.name[:5].lower() in f"{i.platform} {i.name}".lower()
    )
    default = devmod.default_device_index(None)
    types = [i.type for i in infos]
    if "GPU" in types:
        assert infos[default].type == "GPU"
    with pytest.raises(PeanutError, match="matches no OpenCL device"):
        devmod.default_device_index("no-such-device-xyz")
    with pytest.raises(PeanutError, match="only"):
        devmod.default_device_index(str(len(infos)))


def test_pyopencl_ctx_is_honoured(monkeypatch):
    monkeypatch.setenv("PYOPENCL_CTX", "0:0")
    platform0 = cl.get_platforms()[0]
    chosen = devmod.list_devices()[devmod.default_device_index(None)]
    assert chosen.platform == platform0.name.strip() and chosen.name == platform0.get_devices()[0].name.strip()
    monkeypatch.setenv("PYOPENCL_CTX", "7:9")
    with pytest.raises(PeanutError, match="PYOPENCL_CTX"):
        devmod.default_device_index(None)


def test_program_build_with_defines_and_cache(tmp_path, monkeypatch):
    (tmp_path / "scale.cl").write_text(
        "__kernel void scale(__global int *x, const uint n) {\n"
        "  uint i = get_global_id(0); if (i < n) x[i] = x[i] * FACTOR + OFFSET; }\n"
    )
    (tmp_path / "broken.cl").write_text("__kernel void broken(__global int *x) { x[0] = undefined_name; }\n")
    dev = devmod.Device(kernel_dir=tmp_path)
    prg = dev.program("scale", FACTOR=3, OFFSET=1)
    assert dev.program("scale", OFFSET=1, FACTOR=3) is prg
    assert dev.program("scale", FACTOR=2, OFFSET=0) is not prg
    n = 1000  # not a multiple of any work-group size: the launch must round up and the kernel guard
    host = np.arange(n, dtype=np.int32)
    x = cla.to_device(dev.queue, host)
    dev.launch(prg.scale, n, x.data, np.uint32(n))
    assert np.array_equal(x.get(), host * 3 + 1)
    with pytest.raises(PeanutError) as err:
        dev.program("broken")
    assert "broken.cl" in str(err.value) and "undefined_name" in str(err.value)
    programs = {k for k in dev.built_keys() if k[0] == "program"}
    assert programs == {("program", "scale", (("FACTOR", 3), ("OFFSET", 1))),
                        ("program", "scale", (("FACTOR", 2), ("OFFSET", 0)))}  # a failed build is not kept


def test_memory_cap():
    dev = devmod.Device(memory_cap=1 << 28)
    assert dev.global_mem == min(1 << 28, dev.info.global_mem)
    assert dev.max_alloc <= dev.global_mem
    # a smaller device of the same kind: its largest allocation keeps the device's share of its memory
    info = dev.info
    assert dev.max_alloc == min(info.max_alloc, dev.global_mem * info.max_alloc // info.global_mem)
    assert abs(dev.max_alloc / dev.global_mem - min(1.0, info.max_alloc / info.global_mem)) < 1e-6


def test_capped_pool_holds_the_device_to_its_cap():
    """With a memory cap, the pool's blocks in use never exceed it: idle blocks are given back first, and an
    allocation beyond it fails as an exhausted device's does (the device stage then splits the batch)."""
    import pyopencl.array as cla

    from peanut_py.device_stage import is_out_of_device_memory

    dev = devmod.Device(memory_cap=64 << 20)
    assert isinstance(dev.pool, devmod.CappedPool) and dev.pool.cap == dev.global_mem == 64 << 20
    a = cla.empty(dev.queue, 40 << 20, np.uint8, allocator=dev.pool)
    del a
    assert dev.pool.held_blocks == 1
    b = cla.empty(dev.queue, 50 << 20, np.uint8, allocator=dev.pool)  # 40 MiB idle + 50 > 64: given back first
    assert dev.pool.held_blocks == 0 and dev.pool.managed_bytes <= 64 << 20
    c = b[: 5 << 20] + 1  # arrays made by pyopencl's operations come from the same pool
    with pytest.raises(cl.MemoryError) as err:
        cla.empty(dev.queue, 20 << 20, np.uint8, allocator=dev.pool)
    assert is_out_of_device_memory(err.value)
    del c
    d = cla.empty(dev.queue, 10 << 20, np.uint8, allocator=dev.pool)
    assert int(d.fill(np.uint8(7)).get().max()) == 7
    # memory held beside the pool (staging buffers) leaves the pool that much less
    del b, d
    dev.hold_outside_pool(30 << 20)
    e = cla.empty(dev.queue, 30 << 20, np.uint8, allocator=dev.pool)
    with pytest.raises(cl.MemoryError):
        cla.empty(dev.queue, 8 << 20, np.uint8, allocator=dev.pool)
    del e
    # without a cap, or a cap above the device's memory, or planning only: the pool itself
    for kwargs in ({}, {"memory_cap": dev.info.global_mem + 1}, {"memory_cap": 64 << 20, "hold_to_cap": False}):
        assert not isinstance(devmod.Device(**kwargs).pool, devmod.CappedPool)


def test_no_platform_message(monkeypatch):
    monkeypatch.setattr(cl, "get_platforms", lambda: [])
    with pytest.raises(PeanutError, match="no OpenCL platform.*pocl"):
        devmod.list_devices()


def _peanut(*args, env=None):
    return subprocess.run([sys.executable, "-m", "peanut_py", *args], capture_output=True, text=True, env=env)


def test_cli_devices_marks_the_chosen_one():
    r = _peanut("devices")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith(("*", " "))]
    infos = devmod.list_devices()
    assert len(lines) == len(infos)
    marked = [line for line in lines if line.startswith("*")]
    assert len(marked) == 1
    chosen = infos[devmod.default_device_index(None)]
    assert chosen.name in marked[0] and "GiB" in marked[0]


def test_cli_devices_unknown_device_is_one_line_error():
    r = _peanut("devices", "--device", "no-such-device-xyz")
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("peanut: error:")
    assert "Traceback" not in r.stderr


def test_cached_builds_each_key_once_across_threads():
    """Threads asking for the same key while it builds wait for that build (the warm-up thread and the
    device thread); a failed build is not cached, so the next caller sees the error itself."""
    import threading
    import time

    dev = devmod.Device()
    calls = []

    def slow():
        calls.append(threading.current_thread().name)
        time.sleep(0.2)
        return object()

    got = []
    threads = [threading.Thread(target=lambda: got.append(dev.cached("test-slow", slow))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 4 and all(g is got[0] for g in got)
    assert "test-slow" in dev.built_keys()

    def broken():
        calls.append("broken")
        raise PeanutError("no")

    for _ in range(2):
        with pytest.raises(PeanutError):
            dev.cached("test-broken", broken)
    assert calls.count("broken") == 2 and "test-broken" not in dev.built_keys()
    assert dev.cached("test-broken", lambda: 7) == 7


def test_workspace_grows_only_when_a_call_needs_more():
    """One buffer per key, reused while it is large enough, replaced (with headroom) when it is not; a GPU
    (here: the default device without host memory) gets pool arrays instead."""
    dev = devmod.Device(host_memory=True)
    assert dev.host_memory
    a = dev.workspace("test-ws", 1000, np.uint32)
    assert a.size == 1000 and a.dtype == np.uint32 and a.base_data.size >= 4000
    b = dev.workspace("test-ws", 1100, np.uint32)  # within the headroom of 1.25: the same buffer
    assert b.base_data.int_ptr == a.base_data.int_ptr and b.size == 1100
    c = dev.workspace("test-ws", 600, np.uint64)
    assert c.base_data.int_ptr == a.base_data.int_ptr and c.dtype == np.uint64
    d = dev.workspace("test-ws", 10_000, np.uint32)
    assert d.size == 10_000 and d.base_data.size >= 40_000
    d.set(np.arange(10_000, dtype=np.uint32))
    assert np.array_equal(d.get(), np.arange(10_000, dtype=np.uint32))
    assert dev.workspace("test-other", 10, np.uint8).base_data.int_ptr != d.base_data.int_ptr
    gpu = devmod.Device(host_memory=False)
    assert not gpu.host_memory
    e, f = gpu.workspace("test-ws", 100, np.uint32), gpu.workspace("test-ws", 100, np.uint32)
    assert e.size == 100 and e.base_data.int_ptr != f.base_data.int_ptr  # two live pool arrays


def test_device_opening_gives_the_devices_or_their_error_where_asked():
    """``peanut map`` opens its devices on a thread while it loads modules and the index: the result is what
    open_devices gives, and an error opening them is raised by result(), in the caller's thread."""
    opening = devmod.DeviceOpening()
    (opened,) = opening.result()
    assert opened.info == devmod.open_devices()[0].info and opened.queue is not None
    bad = devmod.DeviceOpening("no-such-device-xyz")
    bad.join()
    with pytest.raises(PeanutError, match="no-such-device-xyz"):
        bad.result()


def test_map_with_a_bad_device_is_one_line_error(tmp_path, example_index):
    """The devices open on a thread of their own; their error still ends the run with one line, no traceback
    and no output, whether the reads file is fine or missing (as before the devices opened early, the device
    is what such a run reports)."""
    reads = tmp_path / "r.fq"
    reads.write_text("@r1\nACGTACGTACGTACGTACGTACGT\n+\nIIIIIIIIIIIIIIIIIIIIIIII\n")
    for path in (reads, tmp_path / "missing.fq"):
        r = _peanut("map", "--device", "no-such-device-xyz", str(example_index), str(path),
                    "-o", str(tmp_path / "x.sam"))
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no-such-device-xyz" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not (tmp_path / "x.sam").exists()


def test_get_all_downloads_several_arrays_with_one_wait(device):
    """Device.get_all equals each array's own get (its first ``sizes[k]`` elements), whatever the dtypes;
    empty requests give empty arrays, and views start where they start."""
    rng = np.random.default_rng(7)
    hosts = [rng.integers(0, 2**31, 1000, dtype=np.uint32), rng.integers(-50, 50, 37, dtype=np.int32),
             rng.integers(0, 2**62, 5, dtype=np.int64), np.arange(3, dtype=np.uint8)]
    arrays = [cla.to_device(device.queue, h) for h in hosts]
    got = device.get_all(arrays)
    assert [g.dtype for g in got] == [h.dtype for h in hosts]
    assert all(np.array_equal(g, h) for g, h in zip(got, hosts))
    sizes = [10, 0, 5, 1]
    got = device.get_all([a[:s] if s else a[:1] for a, s in zip(arrays, sizes)], sizes)
    assert [len(g) for g in got] == sizes
    assert all(np.array_equal(g, h[:s]) for g, h, s in zip(got, hosts, sizes))
    assert device.get_all([]) == []
    view, = device.get_all([arrays[0][100:110]])
    assert np.array_equal(view, hosts[0][100:110])
