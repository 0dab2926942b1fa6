"""Postprocessing in worker processes (``--workers processes``): the SAM equals the threads', shared-memory
segments never outlive the run, and a dead worker or a signal ends the run cleanly."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers import EXAMPLE, REPO, sam_body

from peanut_py.errors import PeanutError
from peanut_py.options import MapOptions, RunOptions, check
from peanut_py.post_processes import PROCESSES_MIN_WORKERS, WorkerProcesses, use_processes, worker_processes

R1 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"
R2 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"


def _segments():
    """Our process's POSIX shared-memory segments live in /dev/shm as psm_*."""
    return {p for p in os.listdir("/dev/shm") if p.startswith("psm_")} if os.path.isdir("/dev/shm") else set()


def _map(cli, tmp_path, name, *args):
    out = tmp_path / f"{name}.sam"
    rc, _, err = cli("map", *args, "-o", out)
    assert rc == 0, err
    return sam_body(out), err


@pytest.mark.parametrize("paired", [False, True], ids=["single", "paired"])
def test_processes_give_the_sam_of_threads(cli, tmp_path, example_index, paired):
    reads = [R1, R2] if paired else [R1]
    before = _segments()
    threads, err = _map(cli, tmp_path, "threads", "-t", "4", "--batch-size", "700", "--workers", "threads",
                        example_index, *reads)
    assert "postprocessing threads" in err
    for batch in ("300", "700"):
        procs, err = _map(cli, tmp_path, f"processes{batch}", "-t", "4", "--batch-size", batch, "--workers",
                          "processes", example_index, *reads)
        assert "postprocessing processes" in err, err
        assert procs == threads
    assert sum(1 for line in threads if not line.startswith("@")) == (4000 if paired else 2000)
    assert _segments() <= before


def test_auto_chooses_processes_only_for_many_cpu_aligning_workers():
    assert use_processes("auto", PROCESSES_MIN_WORKERS, "cpu")
    assert not use_processes("auto", PROCESSES_MIN_WORKERS - 1, "cpu")
    assert not use_processes("auto", 64, "device")
    assert use_processes("processes", 1, "cpu") and not use_processes("threads", 64, "cpu")
    cores = len(os.sched_getaffinity(0))
    assert worker_processes(4094) == cores and worker_processes(1) == 1
    with pytest.raises(PeanutError, match="--workers"):
        check(RunOptions(workers="forks"))


def test_a_batch_goes_to_shared_memory_once_and_its_skeleton_is_small(example_index):
    """The arrays travel out of band: a chunk's call carries only a few kilobytes whatever the batch size,
    and the segment is gone once its last chunk is done."""
    from peanut_py.device_stage import DeviceResult
    from peanut_py.reads import read_batches

    batch = next(iter(read_batches(str(R1), max_reads=2000)))
    n_hits = 50_000
    result = DeviceResult(rs=np.arange(n_hits, dtype=np.uint32), ref_start=np.zeros(n_hits, np.uint32),
                          ref_end=np.zeros(n_hits, np.int64), dist=np.zeros(n_hits, np.int32))
    workers = WorkerProcesses(1, str(example_index), MapOptions())
    try:
        shared = workers.share((batch, result), 2)
        assert len(shared.meta) < 4096
        assert sum(n for _, n in shared.layout) >= batch.codes.nbytes + 4 * n_hits
        name = shared.name
        assert name in _segments()
        shared.chunk_done()
        assert name in _segments()
        shared.chunk_done()
        assert name not in _segments()
    finally:
        workers.close()


def test_a_killed_worker_is_one_error_and_leaks_nothing(example_index):
    from peanut_py.device_stage import DeviceResult
    from peanut_py.reads import read_batches

    batch = next(iter(read_batches(str(R1), max_reads=100)))
    empty = np.zeros(0, np.uint32)
    result = DeviceResult(rs=empty, ref_start=empty, ref_end=empty.astype(np.int64), dist=empty.astype(np.int32))
    before = _segments()
    workers = WorkerProcesses(1, str(example_index), MapOptions())
    try:
        text, n, stats = workers.call(workers.share((batch, result), 1), "process", 0, 100, 0, 0)
        assert n == 100 and text.count(b"\n") == 100 and stats["mapped"] == 0
        process = workers._workers[0][0]
        process.kill()
        process.join()
        with pytest.raises(PeanutError, match="postprocessing worker process ended unexpectedly"):
            workers.call(workers.share((batch, result), 1), "process", 0, 100, 0, 0)
    finally:
        workers.close()
    assert _segments() <= before


@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_a_signal_to_the_process_group_stops_every_worker(example_index, shared_data, tmp_path, sig):
    """Ctrl-C in a terminal reaches the whole process group, workers included: exit 130, one message, no
    worker's traceback, no output, no shared-memory segment and no worker left."""
    reads = shared_data / "human" / "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz"
    out = tmp_path / "out.sam"
    before = _segments()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    options = ["--batch-size", "300", "-t", "4", "--workers", "processes"]
    # the kernels built first: a signal to the group would also stop a compiler the OpenCL driver runs
    warm = subprocess.run([sys.executable, "-m", "peanut_py", "map", str(example_index), str(R1), *options],
                          capture_output=True, env=env)
    assert warm.returncode == 0, warm.stderr
    proc = subprocess.Popen(
        [sys.executable, "-m", "peanut_py", "map", str(example_index), str(reads), "-o", str(out), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        time.sleep(0.05)
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir()), "the run never started writing"
    time.sleep(0.5)
    os.killpg(proc.pid, getattr(signal, f"SIG{sig}"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err, err
    assert "leaked" not in err
    assert list(tmp_path.iterdir()) == []
    deadline = time.time() + 10
    while time.time() < deadline and _session_processes(proc.pid):
        time.sleep(0.1)
    assert not _session_processes(proc.pid)
    assert _segments() <= before


def _session_processes(sid):
    """Live processes of session ``sid`` (the run and anything it started)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(pid))
    return found
