"""Several mapping processes in one run (``--processes N``, shards.py): the output equals a one-process run's,
byte for byte, for every input kind and output format; errors are one line and leave no output.

PoCL's CPU device serves every process here (two with ``POCL_DEVICES="pthread pthread"``, the code path of
two GPUs); small batch sizes give each process several batches."""
import gzip
import types

import pytest

from helpers import EXAMPLE, fastq_records, sam_body, write_fastq

from peanut_py.errors import PeanutError
from peanut_py.shards import processes_and_devices, threads_of, wanted

R1 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"
R2 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"
TWO_POCL_DEVICES = {"POCL_DEVICES": "pthread pthread"}


def _map(cli, out, *args, env=None):
    rc, _, err = cli("map", *args, "-o", out, env=env)
    assert rc == 0, err
    return err


def _reads_line(err):
    """The summary line, without its timings."""
    line = [x for x in err.splitlines() if " in" in x and ("reads in" in x or "pairs (" in x)][-1]
    return line.split(";")[0] if "pairs (" not in line else line.rsplit(";", 1)[0]


@pytest.fixture(scope="module")
def single_run(cli, example_index, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "one.sam"
    err = _map(cli, out, "-t", "2", "--batch-size", "300", example_index, R1)
    return sam_body(out), err


@pytest.fixture(scope="module")
def paired_run(cli, example_index, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "one.sam"
    err = _map(cli, out, "-t", "2", "--batch-size", "600", example_index, R1, R2)
    return sam_body(out), err


@pytest.mark.parametrize("processes,batch", [("2", "300"), ("3", "250")])
def test_single_end_in_processes_gives_the_sam_of_one(cli, tmp_path, example_index, single_run, processes, batch):
    one, one_err = single_run
    err = _map(cli, tmp_path / "p.sam", "-t", "3", "--processes", processes, "--batch-size", batch,
               example_index, R1)
    from peanut_py.post_processes import worker_processes

    # as many as asked, up to one per core
    assert f"{worker_processes(int(processes))} mapping processes" in err
    assert sam_body(tmp_path / "p.sam") == one
    assert sum(1 for line in one if not line.startswith("@")) == 2000
    # the summary adds up the processes' counts
    assert _reads_line(err) == _reads_line(one_err)


def test_pairs_in_processes_give_the_sam_of_one(cli, tmp_path, example_index, paired_run):
    one, one_err = paired_run
    err = _map(cli, tmp_path / "p.sam", "-t", "2", "--processes", "2", "--batch-size", "500", example_index, R1, R2)
    assert sam_body(tmp_path / "p.sam") == one
    assert _reads_line(err) == _reads_line(one_err)
    # each process estimated the insert size from the same first pairs; one of them says so
    estimate = [x for x in one_err.splitlines() if "insert size" in x]
    assert estimate and [x for x in err.splitlines() if "insert size" in x] == estimate


def test_a_read_group_gives_the_header_and_tags_of_one_process(cli, tmp_path, example_index):
    """-R: the writing process builds the same header (@SQ with M5, @RG) as a run of one process, and every
    record of the mapping processes carries the read group."""
    rg = "@RG\\tID:lane1\\tSM:NA12878"
    _map(cli, tmp_path / "one.sam", "-t", "2", "--batch-size", "300", "-R", rg, example_index, R1)
    _map(cli, tmp_path / "two.sam", "-t", "2", "--processes", "2", "--batch-size", "300", "-R", rg,
         example_index, R1)
    one, two = sam_body(tmp_path / "one.sam"), sam_body(tmp_path / "two.sam")
    assert two == one
    assert "@RG\tID:lane1\tSM:NA12878\n" in one
    assert any(line.startswith("@SQ") and "\tM5:" in line for line in one)
    records = [line for line in one if not line.startswith("@")]
    assert len(records) == 2000 and all("\tRG:Z:lane1" in line for line in records)


def test_interleaved_pairs_bam_and_hit_only(cli, tmp_path, example_index):
    pysam = pytest.importorskip("pysam")
    records = []
    for a, b in zip(fastq_records(R1)[:700], fastq_records(R2)[:700]):
        records += [a, b]
    inter = tmp_path / "inter.fq"
    write_fastq(inter, records)
    for fmt in ("sam", "bam"):
        outs = []
        for processes in ("1", "2"):
            (tmp_path / processes).mkdir(exist_ok=True)
            out = tmp_path / processes / f"out.{fmt}"
            _map(cli, out, "-p", "--no-unmapped", "-I", "300,50", "--processes", processes, "--batch-size", "200",
                 example_index, inter)
            outs.append(out)
        if fmt == "sam":
            assert sam_body(outs[0]) == sam_body(outs[1])
        else:
            # the BGZF blocks too: the records reach one compressor in the same order
            with pysam.AlignmentFile(str(outs[1])) as f:
                n = sum(1 for _ in f)
            assert n > 1000
            a, b = (gzip.decompress(p.read_bytes()) for p in outs)
            assert a.replace(b"--processes 1", b"--processes 2").replace(b"/1/out", b"/2/out") == b


def test_two_devices_run_one_process_each(cli, tmp_path, example_index, single_run):
    one, _ = single_run
    err = _map(cli, tmp_path / "all.sam", "--device", "all", "-t", "2", "--batch-size", "300", example_index, R1,
               env=TWO_POCL_DEVICES)
    assert "2 mapping processes" in err and "on devices" in err
    assert sam_body(tmp_path / "all.sam") == one


def test_a_bad_record_in_a_later_batch_is_one_line_and_leaves_no_output(cli, tmp_path, example_index):
    records = fastq_records(R1)[:900]
    bad = tmp_path / "bad.fq"
    write_fastq(bad, records)
    text = bad.read_text().splitlines()
    text[4 * 700 + 3] = text[4 * 700 + 3][:-5]  # record 701: qualities shorter than the bases
    bad.write_text("\n".join(text) + "\n")
    out = tmp_path / "out.sam"
    rc, _, err = cli("map", "--processes", "2", "--batch-size", "200", example_index, bad, "-o", out)
    assert rc == 1 and "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.startswith("peanut: error")]
    assert len(lines) == 1 and "bad.fq" in lines[0] and "record 701" in lines[0], err
    assert not out.exists() and list(tmp_path.glob(".out.sam*")) == []


def test_an_empty_input_is_an_error(cli, tmp_path, example_index):
    empty = tmp_path / "empty.fq"
    empty.write_text("")
    rc, _, err = cli("map", "--processes", "2", example_index, empty, "-o", tmp_path / "o.sam")
    assert rc == 1 and "empty file" in err and "Traceback" not in err
    assert not (tmp_path / "o.sam").exists()


def test_processes_option_is_checked(cli, tmp_path, example_index):
    for value in ("0", "x"):
        rc, _, err = cli("map", "--processes", value, example_index, R1, "-o", tmp_path / "o.sam")
        assert rc != 0 and "--processes" in err and "Traceback" not in err


def test_threads_and_devices_are_shared_out(monkeypatch):
    assert [threads_of(16, 2, i) for i in range(2)] == [8, 8]
    assert [threads_of(7, 3, i) for i in range(3)] == [3, 2, 2]
    assert [threads_of(2, 3, i) for i in range(3)] == [1, 1, 1]
    import peanut_py.device as device
    import peanut_py.shards as shards

    monkeypatch.setattr(shards, "worker_processes", lambda n: min(n, 8))  # as on a host with 8 cores
    monkeypatch.setattr(device, "device_indices", lambda spec: [0, 2, 3])
    kinds = {}
    monkeypatch.setattr(device, "device_info", lambda spec: types.SimpleNamespace(type=kinds.get(spec, "GPU")))
    assert processes_and_devices("auto", "all", None) == (3, [("0", None, 1), ("2", None, 1), ("3", None, 1)])
    # 48 or more threads per GPU: two processes each
    assert processes_and_devices("auto", "all", None, 150) == (6, [(d, None, 2) for d in "023023"])
    assert processes_and_devices("auto", "1", None, 64) == (2, [("1", None, 2)] * 2)
    kinds["1"] = "CPU"
    assert processes_and_devices("auto", "1", None, 64) == (1, [("1", None, 1)])
    assert processes_and_devices(2, "all", 8 << 30) == (2, [("0,3", 8 << 30, 1), ("2", 8 << 30, 1)])
    # more processes than devices: they share them, and each device's memory cap
    assert processes_and_devices(4, "all", 9 << 30) == (4, [("0", 9 << 29, 2), ("2", 9 << 30, 1),
                                                            ("3", 9 << 30, 1), ("0", 9 << 29, 2)])
    assert processes_and_devices("auto", "1", None) == (1, [("1", None, 1)])
    assert processes_and_devices(2, None, 4 << 30) == (2, [(None, 2 << 30, 2), (None, 2 << 30, 2)])
    assert processes_and_devices(20, None, None) == (8, [(None, None, 8)] * 8)
    assert wanted("auto", "all", 1) and wanted("auto", "0,1", 1) and wanted(2, None, 1) and wanted("auto", None, 48)
    assert not wanted("auto", None, 47) and not wanted("auto", "1", 16) and not wanted(1, "all", 64)
    with pytest.raises(PeanutError):
        monkeypatch.setattr(device, "device_indices", lambda spec: (_ for _ in ()).throw(PeanutError("x")))
        processes_and_devices("auto", "all", None)
    # a list of indices is taken without listing the devices (the mapping processes open and check them)
    assert processes_and_devices("auto", "3, 1", None) == (2, [("3", None, 1), ("1", None, 1)])
    with pytest.raises(PeanutError):
        processes_and_devices("auto", "0,0", None)  # the same device twice: listed, and refused there


def test_a_device_index_that_does_not_exist_is_one_line(cli, tmp_path, example_index):
    out = tmp_path / "o.sam"
    rc, _, err = cli("map", "--device", "0,7", example_index, R1, "-o", out)
    lines = [x for x in err.splitlines() if x.startswith("peanut: error")]
    assert rc == 1 and len(lines) == 1 and "7" in lines[0] and "Traceback" not in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_processes_sharing_a_device_share_its_memory(cli, tmp_path, example_index):
    """Two processes on one device without --memory-cap: each plans with half of the device's memory. PoCL's
    CPU device reports a share of the memory free at the time; POCL_MEMORY_LIMIT pins it (GiB)."""
    err = _map(cli, tmp_path / "p.sam", "--processes", "2", "--batch-size", "500", example_index, R1,
               env={"POCL_MEMORY_LIMIT": "3"})
    assert "(1.5 GiB)" in [x for x in err.splitlines() if "device:" in x][0]


@pytest.mark.parametrize("how", ["file", "append", "pipe"])
def test_standard_output_file_pipe_or_appended(tmp_path, example_index, single_run, how):
    """Into a regular file on standard output the mapping processes write themselves (and the file position
    ends after the records); appended to (>>) or a pipe, the records come through the writing process."""
    import os
    import subprocess
    import sys

    from helpers import REPO

    one, _ = single_run
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "peanut_py", "map", "-t", "2", "--processes", "2", "--batch-size", "300",
           str(example_index), str(R1)]
    out = tmp_path / "out.sam"
    if how == "pipe":
        proc = subprocess.run(cmd, env=env, capture_output=True)
        assert proc.returncode == 0, proc.stderr
        text = proc.stdout.decode()
    else:
        out.write_text("before\n" if how == "append" else "")
        # after peanut, the shell's next write lands after the records, as with one process
        script = 'import subprocess, sys; subprocess.run(sys.argv[1:], check=True); sys.stdout.write("after\\n")'
        with open(out, "ab" if how == "append" else "wb") as f:
            proc = subprocess.run([sys.executable, "-c", script] + cmd, env=env, stdout=f, stderr=subprocess.PIPE)
        assert proc.returncode == 0, proc.stderr
        text = out.read_text()
        assert text.endswith("\nafter\n")
        text = text[:-len("after\n")]
        if how == "append":
            assert text.startswith("before\n")
            text = text[len("before\n"):]
    assert [line for line in text.splitlines(keepends=True) if not line.startswith("@PG")] == one


def _children(pid):
    try:
        return [int(x) for x in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("what", ["SIGTERM to the run", "SIGKILL to a mapping process"])
def test_a_signal_or_a_lost_mapping_process_leaves_no_output(tmp_path, example_index, what):
    """SIGTERM: exit 130 and the mapping processes end with the run; a mapping process killed: one error line
    naming it, exit 1. Neither leaves an output or a temporary file."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from helpers import REPO, require_shared_data

    reads = require_shared_data("human", "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz")
    out = tmp_path / "out.sam"
    proc = subprocess.Popen([sys.executable, "-m", "peanut_py", "map", "--processes", "2", "--batch-size", "300",
                             str(example_index), str(reads), "-o", str(out)],
                            env=dict(os.environ, PYTHONPATH=str(REPO)), stderr=subprocess.PIPE, text=True)
    t = time.time()
    while time.time() - t < 120 and proc.poll() is None and \
            not (len(_children(proc.pid)) >= 2 and any(p.name.endswith(".tmp") for p in tmp_path.iterdir())):
        time.sleep(0.01)
    children = _children(proc.pid)
    assert proc.poll() is None and len(children) >= 2, "the run ended before its mapping processes started"
    if what.startswith("SIGTERM"):
        proc.send_signal(signal.SIGTERM)
    else:
        os.kill(children[-1], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    if what.startswith("SIGTERM"):
        assert proc.returncode == 130 and "interrupted" in err, err
    else:
        lines = [x for x in err.splitlines() if x.startswith("peanut: error")]
        assert proc.returncode == 1 and len(lines) == 1 and "mapping process" in lines[0], err
    assert list(tmp_path.iterdir()) == []
    t = time.time()
    while time.time() - t < 10 and any(_alive(c) for c in children):
        time.sleep(0.05)
    assert not any(_alive(c) for c in children)


def test_a_stream_input_is_read_by_one_process(tmp_path, example_index, single_run):
    """Standard input (or a FIFO) can be read only once: the run falls back to one mapping process and says so."""
    import os
    import subprocess
    import sys

    from helpers import REPO

    one, _ = single_run
    out = tmp_path / "out.sam"
    with gzip.open(R1, "rb") as f:
        data = f.read()
    proc = subprocess.run([sys.executable, "-m", "peanut_py", "map", "-t", "2", "--processes", "2", "--batch-size",
                           "300", str(example_index), "-", "-o", str(out)], input=data, capture_output=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "standard input is a stream" in err and "one mapping process" in err
    assert sam_body(out) == one


def test_the_reference_is_checked_once_before_the_run(cli, tmp_path, example_index):
    wrong = tmp_path / "wrong.fa"
    wrong.write_text(">chr20\n" + "ACGT" * 1000 + "\n")
    out = tmp_path / "o.sam"
    rc, _, err = cli("map", "--processes", "2", "--reference", wrong, example_index, R1, "-o", out)
    lines = [x for x in err.splitlines() if x.startswith("peanut: error")]
    assert rc == 1 and len(lines) == 1 and "not built from" in lines[0] and "Traceback" not in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["wrong.fa"]
    right = tmp_path / "right.fa"
    right.write_bytes(gzip.decompress((EXAMPLE / "chr20_slice.fa.gz").read_bytes()))
    rc, _, err = cli("map", "--processes", "2", "--reference", right, example_index, R1, "-o", out)
    assert rc == 0 and out.exists(), err


def _plain_pairs(tmp_path, n=900):
    r1, r2 = fastq_records(R1)[:n], fastq_records(R2)[:n]
    write_fastq(tmp_path / "r1.fq", r1)
    write_fastq(tmp_path / "r2.fq", r2)
    return tmp_path / "r1.fq", tmp_path / "r2.fq"


def test_plain_fastq_is_cut_by_byte_range_and_maps_as_one_process(cli, tmp_path, example_index, single_run,
                                                                 paired_run):
    """Uncompressed FASTQ: the writing process cuts the files, each mapping process reads only its ranges."""
    plain = tmp_path / "se.fq"
    write_fastq(plain, fastq_records(R1))
    err = _map(cli, tmp_path / "se.sam", "-t", "3", "--processes", "3", "--batch-size", "250", example_index, plain)
    assert "each reads the batches this process cuts" in err
    assert sam_body(tmp_path / "se.sam") == single_run[0]
    p1, p2 = _plain_pairs(tmp_path, 2000)
    err = _map(cli, tmp_path / "pe.sam", "-t", "2", "--processes", "2", "--batch-size", "500", example_index, p1, p2)
    assert "each reads the batches this process cuts" in err
    assert sam_body(tmp_path / "pe.sam") == paired_run[0]
    assert _reads_line(err) == _reads_line(paired_run[1])


def _odd_inputs(tmp_path, case):
    """Files whose cut ends in a tail, or which one process refuses: (paths, extra options)."""
    p1, p2 = _plain_pairs(tmp_path)
    if case == "crlf in the middle":
        lines = p1.read_bytes().split(b"\n")
        for i in range(4 * 500, 4 * 520):
            lines[i] += b"\r"
        p1.write_bytes(b"\n".join(lines))
        return [p1], []
    if case == "blank lines at the end":
        p1.write_bytes(p1.read_bytes() + b"\n\n")
        return [p1], []
    if case == "no newline at the end":
        p1.write_bytes(p1.read_bytes()[:-1])
        return [p1], []
    if case == "mate files of different lengths":
        p2.write_bytes(b"".join(p2.read_bytes().splitlines(keepends=True)[: 4 * 850]))
        return [p1, p2], ["-I", "300,50"]
    if case == "mate names differ in a later batch":
        lines = p2.read_text().splitlines()
        lines[4 * 777] = "@other"
        p2.write_text("\n".join(lines) + "\n")
        return [p1, p2], ["-I", "300,50"]
    if case == "odd interleaved count":
        inter = tmp_path / "inter.fq"
        records = [r for pair in zip(fastq_records(p1), fastq_records(p2)) for r in pair][:1601]
        write_fastq(inter, records)
        return [inter], ["-p", "-I", "300,50"]
    raise ValueError(case)


@pytest.mark.parametrize("case", ["crlf in the middle", "blank lines at the end", "no newline at the end",
                                  "mate files of different lengths", "mate names differ in a later batch",
                                  "odd interleaved count"])
def test_input_the_cut_cannot_take_maps_or_fails_as_with_one_process(cli, tmp_path, example_index, case):
    """Where the cut meets what is not four-line records, the rest is one tail read in full by one process:
    the same SAM, or the same one-line error (file and record), as a run of one process."""
    paths, extra = _odd_inputs(tmp_path, case)
    results = []
    for processes in ("1", "2"):
        out = tmp_path / f"p{processes}.sam"
        rc, _, err = cli("map", "-t", "2", "--processes", processes, "--batch-size", "200", *extra,
                         example_index, *paths, "-o", out)
        assert "Traceback" not in err, err
        errors = [x for x in err.splitlines() if x.startswith("peanut: error")]
        results.append((rc, errors, sam_body(out) if rc == 0 else out.exists()))
    assert results[0] == results[1]
    rc, errors, body = results[0]
    if case.startswith(("mate", "odd")):
        assert rc == 1 and len(errors) == 1 and "record" in errors[0], errors
    else:
        assert rc == 0 and sum(1 for x in body if not x.startswith("@")) == 900


def test_of_two_bad_records_the_first_is_reported_as_with_one_process(cli, tmp_path, example_index):
    """Record 400 ends the second batch (process 2), record 401 starts the third (process 1, which meets it
    while its first batch is still being mapped): the error named is record 400's, as with one process."""
    records = fastq_records(R1)[:900]
    bad = tmp_path / "bad.fq"
    write_fastq(bad, records)
    text = bad.read_text().splitlines()
    for record in (400, 401):
        text[4 * (record - 1) + 1] = "!" + text[4 * (record - 1) + 1][1:]
    bad.write_text("\n".join(text) + "\n")
    lines = []
    for processes in ("1", "2"):
        out = tmp_path / f"o{processes}.sam"
        rc, _, err = cli("map", "--processes", processes, "--batch-size", "200", example_index, bad, "-o", out)
        assert rc == 1 and "Traceback" not in err and not out.exists(), err
        lines.append([x for x in err.splitlines() if x.startswith("peanut: error")])
    assert lines[0] == lines[1] and len(lines[0]) == 1 and "record 400" in lines[0][0], lines


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_full_disk_while_the_records_are_written_is_one_line(tmp_path, example_index, single_run, processes):
    """The disk fills while the records are written, by the run itself or by its mapping processes (every
    process's range_writes.reserve and write_at fail with ENOSPC, made so by a sitecustomize module on the
    path): one error line naming the output, exit 1, neither the output nor a temporary file left."""
    import os
    import subprocess
    import sys

    from helpers import REPO

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import errno, os\n"
        "import peanut_py.range_writes as rw\n"
        "def _full(*args):\n"
        "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n"
        "rw.reserve = rw.write_at = _full\n")
    out = tmp_path / "out" / "out.sam"
    out.parent.mkdir()
    run = subprocess.run([sys.executable, "-m", "peanut_py", "map", "-t", "2", "--processes", processes,
                          "--batch-size", "300", str(example_index), str(R1), "-o", str(out)],
                         env=dict(os.environ, PYTHONPATH=f"{hooks}{os.pathsep}{REPO}"), capture_output=True,
                         text=True, timeout=600)
    lines = [x for x in run.stderr.splitlines() if x.startswith("peanut: error")]
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert len(lines) == 1 and "out.sam: cannot write: No space left on device" in lines[0], run.stderr
    assert list(out.parent.iterdir()) == []
