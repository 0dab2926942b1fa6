"""benchmarks/kernel_profile.py and benchmarks/spy_threads.py: the device-time table of a real run on the
bundled slice, the busy time as a union of intervals, and py-spy's stacks per thread; benchmarks/pin_processes.py:
its plan, and real spawned processes pinned by it."""
import os
import subprocess
import sys
from types import SimpleNamespace

import pyopencl as cl
import pyopencl._cl as _cl
import pytest

from helpers import EXAMPLE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # benchmarks/ is a package of the repository, not of the installed peanut_py

from benchmarks import kernel_profile, pin_processes, spy_threads  # noqa: E402

R1 = str(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz")
R2 = str(EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz")


def _event(start, end):
    return SimpleNamespace(profile=SimpleNamespace(start=start, end=end))


def test_busy_time_is_the_union_of_the_events():
    record = {"events": [("a", _event(0, 10)), ("b", _event(5, 20)), ("a", _event(30, 35)),
                         ("c", SimpleNamespace())]}  # an event without profiling information is left out
    rows, busy, span = kernel_profile.summarize(record)
    assert rows == [("b", 1, 15e-9), ("a", 2, 15e-9)] or rows == [("a", 2, 15e-9), ("b", 1, 15e-9)]
    assert busy == pytest.approx(25e-9) and span == pytest.approx(35e-9)


def test_idle_gaps_are_summed_per_queue_by_the_enqueuing_site():
    # queue 1: idle 5 before the command enqueued at b.py:2 and 10 before the one at a.py:1 again; a command
    # overlapping its predecessor leaves no gap; queue 2's commands are measured against their own queue only
    events = [("k", _event(0, 10)), ("k", _event(15, 20)), ("k", _event(18, 25)), ("k", _event(35, 40)),
              ("k", _event(12, 14)), ("k", _event(50, 51)), ("k", SimpleNamespace())]
    sites = [(1, "a.py:1"), (1, "b.py:2"), (1, "c.py:3"), (1, "a.py:1"), (2, "d.py:4"), (2, "d.py:4"),
             (1, "e.py:5")]
    gaps = kernel_profile.idle_gaps({"events": events, "sites": sites})
    assert gaps["b.py:2"] == (1, pytest.approx(5e-9))
    assert gaps["a.py:1"] == (1, pytest.approx(10e-9))
    assert gaps["d.py:4"] == (1, pytest.approx(36e-9))
    assert "c.py:3" not in gaps and "e.py:5" not in gaps


def test_a_real_run_is_profiled_and_pyopencl_restored(example_index):
    before = (cl.CommandQueue, _cl.enqueue_nd_range_kernel, cl.enqueue_copy)
    out = kernel_profile.profile_run(str(example_index), R1, R2, threads=2, batch_size=1000)
    assert (cl.CommandQueue, _cl.enqueue_nd_range_kernel, cl.enqueue_copy) == before
    names = {name: (count, seconds) for name, count, seconds in out["rows"]}
    # every batch of 1,000 reads builds its text, emits its hits and validates (4 batches of pairs)
    for kernel in ("build_text", "emit_hits"):
        assert names[kernel][0] == 4 and names[kernel][1] > 0
    assert any(n.startswith("validate_hits_w") for n in names)
    assert names["copy to host"][0] > 0 and names["copy to device"][0] > 0
    assert 0 < out["busy"] <= out["span"] + 1e-9
    assert out["busy"] <= sum(s for _, _, s in out["rows"]) + 1e-9
    assert out["record"]["blocking"]["peanut-device"] > 0
    assert out["stages"]["device"] > 0
    # every command has the line of peanut_py that enqueued it
    sites = out["record"]["sites"]
    assert len(sites) == len(out["record"]["events"])
    assert any(site.startswith("qgroup.py:") for _, site in sites) and all(site != "?" for _, site in sites)


def test_spy_threads_per_thread_and_device_split(tmp_path, capsys):
    spy = tmp_path / "spy.txt"
    spy.write_text(
        "thread (1): peanut-post_0;worker (pool.py:1) 5\n"
        "thread (2): peanut-post_1;worker (pool.py:1) 3\n"
        "thread (3): peanut-device;DeviceStage.map_batch (peanut_py/device_stage.py:9);"
        "f (peanut_py/validation.py:3);enqueue_copy (pyopencl/__init__.py:1) 7\n"
        "thread (3): peanut-device;DeviceStage.map_batch (peanut_py/device_stage.py:9);"
        "merge_hits (peanut_py/hit_lists.py:22) 2\n")
    assert spy_threads.main([str(spy)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines] == [["9", "peanut-device"], ["8", "post"]]  # most samples first
    assert spy_threads.main([str(spy), "--thread", "peanut-device"]) == 0
    out = capsys.readouterr().out
    assert "host 2 samples, waiting in blocking copies 7" in out
    assert "f@validation.py:3 | enqueue_copy" in out


def test_knobs_are_set_by_name_and_checked(monkeypatch):
    from peanut_py import filtration

    monkeypatch.setattr(filtration, "EMIT_BLOCK", filtration.EMIT_BLOCK)  # restored after the test
    monkeypatch.setattr(filtration, "SLOT_SORT_BY_GROUP", filtration.SLOT_SORT_BY_GROUP)
    before = kernel_profile.set_knobs(["filtration.EMIT_BLOCK=64", "filtration.SLOT_SORT_BY_GROUP = False"])
    assert filtration.EMIT_BLOCK == 64 and filtration.SLOT_SORT_BY_GROUP is False
    assert before == ["filtration.EMIT_BLOCK=32", "filtration.SLOT_SORT_BY_GROUP=None"]
    for bad in ("filtration.NO_SUCH_KNOB=1", "EMIT_BLOCK=64", "filtration.EMIT_BLOCK", "no_module.X=1"):
        with pytest.raises((ValueError, ImportError)):
            kernel_profile.set_knobs([bad])
    assert filtration.EMIT_BLOCK == 64


def test_pin_plan_splits_each_node_between_its_processes():
    assert pin_processes.cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    node0, node1 = list(range(0, 8)), list(range(8, 16))
    # four GPUs, two per node, one process each: each node's CPUs halved, in order
    assert pin_processes.plan(4, 4, [node0, node0, node1, node1]) == [[0, 1, 2, 3], [4, 5, 6, 7],
                                                                      [8, 9, 10, 11], [12, 13, 14, 15]]
    # two processes on each of two GPUs of one node: process i on GPU i mod 2
    assert pin_processes.plan(4, 2, [node0, node0]) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # more processes than CPUs: none is left without one
    assert all(pin_processes.plan(3, 1, [[0, 1]]))


_SPAWNING = """
import multiprocessing, time
def sleep():
    time.sleep(4)
if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    children = [ctx.Process(target=sleep) for _ in range(2)]
    for c in children:
        c.start()
        time.sleep(0.3)  # started in a known order
    for c in children:
        c.join()
"""


def test_spawned_processes_are_pinned_in_their_start_order(tmp_path):
    script = tmp_path / "spawning.py"
    script.write_text(_SPAWNING)
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        expected = pin_processes.plan(2, 1, pin_processes.gpu_local_cpus(1))
        assert pin_processes.main(["--under", str(parent.pid), "--gpus", "1", "--processes", "2",
                                   "--seconds", "2.5"]) == 0
        children = sorted(p for p in pin_processes.descendants(parent.pid) if pin_processes.is_mapping_process(p))
        assert len(children) == 2
        for pid, cpus in zip(children, expected):
            for task in os.listdir(f"/proc/{pid}/task"):
                assert sorted(os.sched_getaffinity(int(task))) == cpus
    finally:
        parent.wait(timeout=30)
    assert parent.returncode == 0
