"""Temporary files beside outputs (peanut_py/outfiles.py): a killed run's are removed by the next run."""
import os
import signal
import subprocess
import sys
import time

from helpers import EXAMPLE, REPO, run_cli

from peanut_py.outfiles import remove_stale_temporaries, temporary_beside


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_the_temporaries_of_dead_processes_are_removed(tmp_path):
    out = tmp_path / "out.sam"
    dead = tmp_path / f".out.sam.{_dead_pid()}-0a1b2c3d.tmp"
    alive = tmp_path / f".out.sam.{os.getppid()}-0a1b2c3d.tmp"
    other_target = tmp_path / f".other.sam.{_dead_pid()}-0a1b2c3d.tmp"
    not_ours = tmp_path / ".out.sam.notes.tmp"
    for p in (dead, alive, other_target, not_ours):
        p.write_text("x")
    mine, fd = temporary_beside(out)
    os.close(fd)
    assert remove_stale_temporaries(out) == [str(dead)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (alive, other_target, not_ours, tmp_path / os.path.basename(mine)))


def _wait_for_temporary(folder, name, proc, timeout=120):
    t = time.time()
    while time.time() - t < timeout and proc.poll() is None:
        found = [p for p in folder.iterdir() if p.name.startswith(f".{name}.") and p.name.endswith(".tmp")]
        if found:
            return found
        time.sleep(0.005)
    return []


def test_a_killed_map_leaves_a_temporary_that_the_next_run_removes(example_index, tmp_path):
    out = tmp_path / "out.sam"
    args = [sys.executable, "-m", "peanut_py", "map", str(example_index),
            str(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"),
            str(EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"), "-o", str(out)]
    proc = subprocess.Popen(args, cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    left = _wait_for_temporary(tmp_path, "out.sam", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert left and all(p.exists() for p in left) and not out.exists()
    rc, _, err = run_cli(*args[3:])
    assert rc == 0, err
    assert f"removed {len(left)} temporary file" in err and "killed run" in err
    assert [p.name for p in tmp_path.iterdir()] == ["out.sam"]


def test_index_build_removes_a_killed_builds_temporary(tmp_path):
    out = tmp_path / "ref.h5"
    stale = tmp_path / f".ref.h5.{_dead_pid()}-deadbeef.tmp"
    stale.write_bytes(b"\0" * 4096)
    rc, _, err = run_cli("index", str(EXAMPLE / "chr20_slice.fa.gz"), "-o", str(out))
    assert rc == 0, err
    assert "removed 1 temporary file that a killed build left" in err
    assert [p.name for p in tmp_path.iterdir()] == ["ref.h5"]


def test_no_output_is_committed_once_interrupted(tmp_path):
    """SIGINT/SIGTERM set outfiles.INTERRUPTED before they raise KeyboardInterrupt in the main thread; should
    that exception get lost in code that swallows it, neither an index nor a SAM or BAM file is renamed into
    place: the writer drops its temporary file and raises KeyboardInterrupt itself (the command line then
    exits 130)."""
    import pytest

    from peanut_py import outfiles
    from peanut_py.reference import build_index
    from peanut_py.sam import open_output

    fasta = tmp_path / "ref.fa"
    fasta.write_text(">a\n" + "ACGTTGCAAGCTTAGC" * 40 + "\n")
    outfiles.INTERRUPTED.set()
    try:
        with pytest.raises(KeyboardInterrupt):
            build_index(str(fasta), str(tmp_path / "ref.h5"), q=8)
        for name in ("out.sam", "out.bam"):
            writer = open_output(str(tmp_path / name), "@HD\tVN:1.6\n")
            writer.write("r\t4\t*\t0\t0\t*\t*\t0\t0\tACGT\tIIII\n")
            with pytest.raises(KeyboardInterrupt):
                writer.close()
    finally:
        outfiles.INTERRUPTED.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.fa"]
    build_index(str(fasta), str(tmp_path / "ref.h5"), q=8)  # and without the flag, as always
    assert (tmp_path / "ref.h5").exists()
