"""`peanut map` (single-end) end to end: accuracy on real reads, completeness, determinism, output formats,
bad input, and the q-gram-lemma sensitivity guarantee."""
import gzip
import os
import random
import re
import shlex
import shutil
import subprocess
import sys

import pysam
import pytest

from helpers import EXAMPLE, REPO, fastq_records, needs_tool, run_cli, sam_body, write_fastq

sys.path.insert(0, str(REPO))  # benchmarks/ is a package of the repository, not of the installed peanut_py
from benchmarks import planted  # noqa: E402

READS = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"


def primary_records(sam_path):
    with pysam.AlignmentFile(str(sam_path), check_sq=False) as f:
        return [r for r in f if not r.is_secondary and not r.is_supplementary]


def original_positions():
    truth = {}
    with gzip.open(EXAMPLE / "original_positions.tsv.gz", "rt") as f:
        for line in f:
            name, mate, contig, pos, strand = line.rstrip("\n").split("\t")
            if mate == "1":
                truth[name] = (contig, int(pos), strand)
    return truth


def test_example_reads_map_where_the_original_bam_put_them(example_index, tmp_path):
    out = tmp_path / "out.sam"
    rc, _, err = run_cli("map", str(example_index), str(READS), "-o", str(out), "-t", "2")
    assert rc == 0, err
    assert "reads in" in err and "mapped" in err  # the summary on stderr
    truth = original_positions()
    recs = primary_records(out)
    assert len(recs) == 2000
    mapped = [r for r in recs if not r.is_unmapped]
    close = [
        r for r in mapped
        if (r.reference_name, r.is_reverse) == (truth[r.query_name][0], truth[r.query_name][2] == "-")
        and abs(r.reference_start + 1 - truth[r.query_name][1]) <= 5
    ]
    assert len(mapped) >= 0.99 * 2000
    assert len(close) >= 0.985 * 2000
    # NM = mismatches in MD + inserted + deleted bases, for every mapped record
    for r in mapped:
        md = r.get_tag("MD")
        mismatches = len(re.findall("[A-Z]", re.sub(r"\^[A-Z]+", "", md)))
        indels = sum(n for op, n in r.cigartuples if op in (1, 2))
        assert r.get_tag("NM") == mismatches + indels, (r.query_name, md, r.cigarstring)
        assert r.has_tag("AS") and r.query_alignment_length > 0


@pytest.fixture(scope="module")
def mixed_reads(tmp_path_factory):
    """Real reads plus reads that cannot map: random, empty, all-N, shorter than q; mixed lengths."""
    rng = random.Random(5)
    real = fastq_records(READS)[:300]
    records = []
    for i, (name, seq, qual) in enumerate(real):
        cut = rng.choice([len(seq), len(seq), 60, 35])  # mixed read lengths in one file
        records.append((name, seq[:cut], qual[:cut]))
        if i % 25 == 0:
            s = "".join(rng.choice("ACGT") for _ in range(rng.randint(40, 150)))
            records.append((f"random{i}", s, "I" * len(s)))
    records += [("empty", "", ""), ("allN", "N" * 100, "#" * 100), ("short", "ACGTACGTAC", "IIIIIIIIII")]
    path = tmp_path_factory.mktemp("mixed") / "mixed.fq"
    write_fastq(path, records)
    return path, records


def test_every_read_once_in_input_order(example_index, mixed_reads, tmp_path):
    path, records = mixed_reads
    out = tmp_path / "out.sam"
    rc, _, err = run_cli("map", str(example_index), str(path), "-o", str(out), "--mode", "all", "--secondary")
    assert rc == 0, err
    recs = primary_records(out)
    assert [r.query_name for r in recs] == [name for name, _, _ in records]
    by_name = {r.query_name: r for r in recs}
    for name in ("empty", "allN", "short"):
        assert by_name[name].is_unmapped
    assert by_name["allN"].query_sequence == "N" * 100
    assert sum(r.is_unmapped for r in recs if r.query_name.startswith("random")) >= 12


def test_output_is_identical_for_threads_and_batch_sizes(example_index, mixed_reads, tmp_path):
    path, _ = mixed_reads
    outputs = []
    for extra in (["-t", "1"], ["-t", "2"], ["-t", "2", "--batch-size", "37"], ["-t", "1", "--batch-size", "150"]):
        out = tmp_path / f"out{len(outputs)}.sam"
        rc, _, err = run_cli("map", str(example_index), str(path), "-o", str(out), *extra)
        assert rc == 0, err
        outputs.append(sam_body(out))
    assert all(o == outputs[0] for o in outputs[1:])
    assert len(outputs[0]) > 300


def test_bam_output_equals_sam_output(example_index, tmp_path):
    sam_out, bam_out = tmp_path / "o.sam", tmp_path / "o.bam"
    for out in (sam_out, bam_out):
        rc, _, err = run_cli("map", str(example_index), str(READS), "-o", str(out), "-R", r"@RG\tID:demo\tSM:NA12878")
        assert rc == 0, err
    with pysam.AlignmentFile(str(bam_out)) as b, pysam.AlignmentFile(str(sam_out)) as s:
        assert [r.to_string() for r in b] == [r.to_string() for r in s]
        assert s.header.to_dict()["RG"] == [{"ID": "demo", "SM": "NA12878"}]
    assert all(r.get_tag("RG") == "demo" for r in primary_records(sam_out))
    if shutil.which("samtools") is None:
        pytest.skip("samtools not installed: BAM and SAM output compared, `samtools quickcheck` of the BAM not run")
    assert subprocess.run(["samtools", "quickcheck", str(bam_out)]).returncode == 0


@pytest.mark.slow
@needs_tool("PicardCommandLine", "picard-tools")
def test_picard_validates_output(example_index, mixed_reads, tmp_path):
    path, _ = mixed_reads
    for extra in ([], ["--mode", "all", "--secondary", "--max-hits", "20"], ["--semiglobal"]):
        out = tmp_path / "o.sam"
        rc, _, err = run_cli("map", str(example_index), str(path), "-o", str(out), "-R", r"@RG\tID:x\tSM:y\tPL:ILLUMINA", *extra)
        assert rc == 0, err
        r = subprocess.run(
            ["PicardCommandLine", "ValidateSamFile", f"I={out}", "MODE=SUMMARY", "IGNORE=QUALITY_NOT_STORED"],
            capture_output=True, text=True,
        )
        assert "No errors found" in r.stdout + r.stderr, (extra, r.stdout[-2000:], r.stderr[-2000:])


def test_stdout_is_the_default_output(example_index, tmp_path):
    reads = tmp_path / "few.fq"
    write_fastq(reads, fastq_records(READS)[:20])
    rc, out, err = run_cli("map", str(example_index), str(reads))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("@HD") and sum(1 for x in lines if not x.startswith("@")) == 20


@pytest.mark.parametrize(
    "content, message",
    [
        ("@r1\nACGT\n+\nIIII\n@r2\nACGT\n", "r"),  # truncated record
        ("@r1\nACGT\n+\nIII\n", "r"),  # quality length differs
        ("\x00\x01\x02binary junk\xff\n", ""),  # binary junk
        ("", "empty"),  # empty file
        # read names SAM cannot carry (QNAME: [!-?A-~]{1,254}), on the fast path and on the fallback's
        ("@" + "x" * 255 + "\nACGT\n+\nIIII\n", "record 1: read name 'xxxx"),
        ("@" + "x" * 254 + "\nACGT\n+\nIIII\n@r2\nAC\n+\nII\n@" + "y" * 300 + " c\nA\n+\nI\n", "record 3"),
        ("@r1\nACGT\n+\nIIII\n@r@2\nACGT\n+\nIIII\n", "record 2: read name 'r@2' has the character '@'"),
        ("@r1\x00abc\nACGT\n+\nIIII\n", "record 1: read name 'r1\\x00abc'"),
        ("@r1\x7fz\nACGT\n+\nIIII\n", "record 1: read name 'r1\\x7fz'"),
        (">r1\nACGT\n>r\"2\"x\nACGT\n>r@3\nACGT\n", "record 3: read name 'r@3'"),  # FASTA reads
    ],
)
def test_bad_reads_give_one_line_error_and_no_output(example_index, tmp_path, content, message):
    reads = tmp_path / "bad.fq"
    reads.write_bytes(content.encode("latin-1"))
    out = tmp_path / "out.sam"
    rc, _, err = run_cli("map", str(example_index), str(reads), "-o", str(out))
    assert rc != 0 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("peanut: error:")]
    assert len(errors) == 1 and errors[0] == err.splitlines()[-1]
    assert str(reads) in errors[0] and message in errors[0]
    assert [p.name for p in tmp_path.iterdir()] == ["bad.fq"]


def test_index_errors(example_index, tmp_path, sarscov2_fasta):
    out = tmp_path / "out.sam"
    rc, _, err = run_cli("map", str(tmp_path / "missing.h5"), str(READS), "-o", str(out))
    assert rc != 0 and "missing.h5" in err and "Traceback" not in err
    rc, _, err = run_cli("map", str(EXAMPLE / "chr20_slice.fa.gz"), str(READS), "-o", str(out))
    assert rc != 0 and "chr20_slice.fa.gz" in err and "Traceback" not in err
    rc, _, err = run_cli("map", str(example_index), str(READS), "-o", str(out), "--reference", str(sarscov2_fasta))
    assert rc != 0 and "not built from" in err and "Traceback" not in err
    rc, _, err = run_cli("map", str(example_index), str(READS), "-o", str(out), "--reference",
                         str(EXAMPLE / "chr20_slice.fa.gz"))
    assert rc == 0, err
    assert not [p for p in tmp_path.iterdir() if p.name != "out.sam"]


@pytest.mark.slow
def test_real_chr20_reads(chr20_index, shared_data, tmp_path):
    """Issue acceptance: NA12878 chr20 R1 reads, >= 99 % mapped and >= 98.5 % within 5 bp of the BAM."""
    human = shared_data / "human"
    out = tmp_path / "r1.sam"
    rc, _, err = run_cli("map", str(chr20_index), str(human / "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz"),
                         "-o", str(out), "-t", "2")
    assert rc == 0, err
    truth = {}
    with pysam.AlignmentFile(str(human / "NA12878_S1.chr20.10_10p1mb.bam")) as bam:
        for r in bam:
            if r.is_read1 and not r.is_secondary and not r.is_supplementary and not r.is_unmapped:
                truth[r.query_name] = (r.reference_start, r.is_reverse)
    recs = primary_records(out)
    assert len(recs) == 25839 + 0  # R1 file: one record per read
    mapped = [r for r in recs if not r.is_unmapped]
    close = [r for r in mapped if r.query_name in truth and abs(r.reference_start - truth[r.query_name][0]) <= 5]
    assert len(mapped) / len(recs) >= 0.99
    assert len(close) / len(recs) >= 0.985


@pytest.mark.parametrize("mode", ["all", "best"])
def test_sensitivity_guarantee(shared_data, tmp_path, mode):
    """Every read with e_g(n) = floor((n - q) / q) edits is found at its true position (q = 16, step 1,
    no masking), on real chr20 sequence, for read lengths 50..250 and both strands. In mode best (with
    best-stratum selection) the true position is among the reported best hits unless a hit with fewer
    edits exists."""
    with gzip.open(shared_data / "human" / "GRCh37_chr20.fa.gz", "rt") as f:
        f.readline()
        chrom = "".join(line.strip() for line in f).upper()
    region = chrom[30_000_000:31_000_000]
    fasta = tmp_path / "region.fa"
    fasta.write_text(">region\n" + "\n".join(region[i:i + 60] for i in range(0, len(region), 60)) + "\n")
    index = tmp_path / "region.h5"
    rc, _, err = run_cli("index", str(fasta), "-o", str(index), "-m", "0")
    assert rc == 0, err
    rng = random.Random(11)
    comp = str.maketrans("ACGT", "TGCA")
    records, truth = [], {}
    while len(records) < 400:
        n = rng.randint(50, 250)
        start = rng.randrange(0, len(region) - n)
        ref = region[start:start + n]
        if "N" in ref:
            continue
        e = (n - 16) // 16
        read = planted.plant_edits(ref, [rng.choice("sid") for _ in range(e)], rng)
        reverse = rng.random() < 0.5
        if reverse:
            read = read.translate(comp)[::-1]
        name = f"r{len(records)}_n{n}_e{e}"
        records.append((name, read, "I" * len(read)))
        truth[name] = (start, reverse, e)
    reads = tmp_path / "planted.fq"
    write_fastq(reads, records)
    out = tmp_path / "planted.sam"
    rc, _, err = run_cli("map", str(index), str(reads), "-o", str(out), "--semiglobal", "--mode", mode,
                         "--secondary", "--max-hits", "1000", "-i", "0.7", "-t", "2")
    assert rc == 0, err
    found = {name: False for name in truth}
    with pysam.AlignmentFile(str(out)) as sam:
        for r in sam:
            start, reverse, e = truth[r.query_name]
            if not r.is_unmapped and r.is_reverse == reverse and abs(r.reference_start - start) <= e:
                found[r.query_name] = True
            if mode == "best" and not r.is_unmapped and not r.is_secondary and r.get_tag("NM") < e:
                found[r.query_name] = True  # a better hit than the planted one: the best stratum is elsewhere
    missed = [name for name, ok in found.items() if not ok]
    assert not missed, f"{len(missed)} planted reads not found at their origin, e.g. {missed[:5]}"


@pytest.mark.parametrize("cache", ["warm", pytest.param("cold", marks=pytest.mark.slow)])
@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_interrupt_leaves_no_output(example_index, shared_data, tmp_path, sig, cache):
    """Ctrl-C (or SIGTERM) during a run: exit 130, no output file and no temporary file left behind. "cold"
    gives PoCL an empty kernel cache, so the signal lands while kernels compile (that once ended in a
    build error or a C++ abort instead of 130)."""
    import os
    import signal
    import sys
    import time

    reads = shared_data / "human" / "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz"
    out = tmp_path / "out.bam"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if cache == "cold":
        env["POCL_CACHE_DIR"] = str(tmp_path.parent / f"pocl-cache-{sig}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "peanut_py", "map", str(example_index), str(reads), "-o", str(out), "--batch-size", "500"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    # wait until the run is under way (the first progress/summary lines come after the reference upload)
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        time.sleep(0.05)
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir()), "the run never started writing"
    proc.send_signal(getattr(signal, f"SIG{sig}"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert list(tmp_path.iterdir()) == []


def test_memory_cap_adapts_and_keeps_the_output(device, example_index, tmp_path):
    """--memory-cap 2G (a small GPU) gives the same SAM as the whole device; a cap below the q-group
    index's fixed size is refused with one line naming what does not fit; a malformed size is a usage error."""
    reads = READS
    outs = []
    for extra in ([], ["--memory-cap", "2G"]):
        out = tmp_path / f"out{len(outs)}.sam"
        rc, _, err = run_cli("map", str(example_index), str(reads), "-o", str(out), *extra)
        assert rc == 0, err
        outs.append(sam_body(out))
    assert outs[0] == outs[1]
    # q = 16: I + S take 768 MiB, folded on a CPU device 192 MiB; 3/4 of the cap is usable.
    cap = 256 if device.host_memory else 1024
    rc, _, err = run_cli("map", str(example_index), str(reads), "-o", str(tmp_path / "x.sam"), "--memory-cap", f"{cap}M")
    assert rc != 0 and f"do not fit this device's {cap} MiB" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.sam").exists()
    rc, _, err = run_cli("map", str(example_index), str(reads), "--memory-cap", "lots")
    assert rc == 2 and "invalid size 'lots'" in err


def test_hugepage_env_for_the_restart(tmp_path, monkeypatch):
    """`peanut map` restarts itself with glibc's huge-page tunable only where that changes something."""
    import platform

    from peanut_py.cli import hugepage_env

    thp = tmp_path / "enabled"
    thp.write_text("always [madvise] never\n")
    monkeypatch.setattr(platform, "libc_ver", lambda: ("glibc", "2.36"))
    env = hugepage_env({"PATH": "/bin"}, str(thp))
    assert env == {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1", "PEANUT_NO_REEXEC": "1"}
    env = hugepage_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, str(thp))
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert hugepage_env({"PEANUT_NO_REEXEC": "1"}, str(thp)) is None  # the restarted process itself
    assert hugepage_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, str(thp)) is None  # the user decided
    assert hugepage_env({}, str(tmp_path / "missing")) is None
    for mode in ("[always] madvise never", "always madvise [never]"):
        thp.write_text(mode)
        assert hugepage_env({}, str(thp)) is None
    thp.write_text("always [madvise] never\n")
    monkeypatch.setattr(platform, "libc_ver", lambda: ("glibc", "2.31"))  # no such tunable yet
    assert hugepage_env({}, str(thp)) is None
    monkeypatch.setattr(platform, "libc_ver", lambda: ("", ""))  # musl
    assert hugepage_env({}, str(thp)) is None


@pytest.mark.slow
def test_a_run_that_compiles_kernels_says_so(example_index, tmp_path):
    """With every kernel cache off (PyOpenCL's and PoCL's), the run compiles its programs and says so on
    stderr, once, with the time they took; the SAM is the same as a run from the cache."""
    import os

    cold = dict(os.environ, PYOPENCL_NO_CACHE="1", POCL_KERNEL_CACHE="0")
    out_cold, out_warm = tmp_path / "cold.sam", tmp_path / "warm.sam"
    rc, _, err = run_cli("map", str(example_index), str(READS), "-o", str(out_cold), env=cold)
    assert rc == 0, err
    assert err.count("compiling the OpenCL kernels for") == 1 and "once per device" in err
    assert re.search(r"OpenCL kernels built after \d+\.\d s", err)
    rc, _, err = run_cli("map", "-q", str(example_index), str(READS), "-o", str(out_warm))
    assert rc == 0 and err == ""
    assert sam_body(out_cold) == sam_body(out_warm)


@pytest.mark.parametrize("target", ["directory", "reads", "index", "missing-folder"])
def test_output_that_cannot_be_written_is_refused_before_any_work(example_index, tmp_path, target):
    """-o naming a directory, an input of the run or a file in a folder that does not exist: one error line
    naming the path, exit 1, before any read is mapped; inputs untouched, nothing left behind."""
    reads = tmp_path / "reads.fq.gz"
    shutil.copy(READS, reads)
    index = tmp_path / "index.h5"
    shutil.copy(example_index, index)
    out = {"directory": tmp_path / "outdir", "reads": reads, "index": index,
           "missing-folder": tmp_path / "nope" / "out.sam"}[target]
    if target == "directory":
        out.mkdir()
    before = {p.name: p.read_bytes() for p in (reads, index)}
    rc, stdout, err = run_cli("map", str(index), str(reads), "-o", str(out))
    assert rc == 1 and stdout == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("peanut: error: ") and str(out) in lines[0], err
    assert {p.name: p.read_bytes() for p in (reads, index)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["reads.fq.gz", "index.h5"] +
                                                                 (["outdir"] if target == "directory" else []))
    if target == "directory":
        assert list(out.iterdir()) == []


@pytest.mark.parametrize("args, needle", [
    (["-t", "0"], "-t/--threads 0: must lie in 1..4096"),
    (["-t", "-1"], "-t/--threads -1"),
    (["--batch-size", "0"], "--batch-size 0: must lie in 1.."),
    (["--batch-size", "-5"], "--batch-size -5"),
    (["-A", "0"], "-A 0: must lie in 1..100"),
    (["-B", "-4"], "-B -4: must lie in 0..100"),
    (["-B", "101"], "-B 101"),
    (["-O", "0", "-E", "0"], "a gap must cost something"),
    (["-L", "-1"], "-L -1"),
    (["--max-hits", "0"], "--max-hits 0"),
    (["-i", "0"], "-i/--min-identity 0.0: must lie in (0.0, 1.0]"),
    (["-i", "-5"], "-i/--min-identity -5.0"),
])
def test_numeric_options_out_of_range_give_one_line_error(example_index, tmp_path, args, needle):
    """Every numeric option is range-checked in one place (options.py) before any work: one error line
    naming the option, exit 1, no output."""
    out = tmp_path / "out.sam"
    rc, stdout, err = run_cli("map", str(example_index), str(READS), "-o", str(out), *args)
    assert rc == 1 and stdout == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("peanut: error: ") and needle in lines[0], err
    assert list(tmp_path.iterdir()) == []


def test_numeric_options_at_their_limits_are_accepted(example_index, tmp_path):
    reads = tmp_path / "few.fq"
    write_fastq(reads, fastq_records(READS)[:50])
    rc, _, err = run_cli("map", "-q", str(example_index), str(reads), "-o", str(tmp_path / "o.sam"), "-t", "1",
                         "--batch-size", "1", "-B", "0", "-O", "0", "-E", "1", "-L", "0", "--max-hits", "1", "-i", "1")
    assert rc == 0, err


def _shell(command, **kwargs):
    """``command`` under bash (for redirections such as ``>&-``), with this Python's peanut_py importable."""
    import os
    import sys

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(["bash", "-c", command.replace("PEANUT", f"{sys.executable} -m peanut_py")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=str(REPO), **kwargs)


def _is_char_device(path):
    import os
    import stat

    return stat.S_ISCHR(os.stat(path).st_mode)


def _is_fifo(path):
    import stat

    return stat.S_ISFIFO(os.stat(path).st_mode)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_full_device_gives_one_line_error_and_stays_a_device(example_index, tmp_path):
    """-o /dev/full and a standard output on /dev/full: 'No space left on device', exit 1, no traceback; the
    device node is written, never replaced by a file renamed onto it."""
    for command in (f"PEANUT map -q {example_index} {READS} -o /dev/full",
                    f"PEANUT map -q {example_index} {READS} > /dev/full"):
        run = _shell(command)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 1 and len(lines) == 1 and "No space left on device" in lines[0], run.stderr
        assert _is_char_device("/dev/full")
    assert not [p for p in os.listdir("/dev") if p.startswith(".full")]


def test_special_outputs_are_streamed_in_place(example_index, tmp_path):
    """/dev/null, a FIFO and a process substitution as -o: written in place (streamed), left what they are."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    run = _shell(f"(grep -vc '^@' < {fifo} > {tmp_path}/fifo.count &); "
                 f"PEANUT map -q {example_index} {READS} -o {fifo} && "
                 f"PEANUT map -q {example_index} {READS} -o /dev/null && "
                 f"PEANUT map -q {example_index} {READS} -o >(grep -vc '^@' > {tmp_path}/subst.count); sleep 1")
    assert run.returncode == 0, run.stderr
    assert _is_char_device("/dev/null") and _is_fifo(fifo)
    assert (tmp_path / "fifo.count").read_text().strip() == "2000"
    assert (tmp_path / "subst.count").read_text().strip() == "2000"


def test_closed_standard_streams(example_index, tmp_path):
    """Standard output closed: an error when the SAM would go there, fine with -o. Standard error closed:
    the run maps as usual (its messages go nowhere)."""
    run = _shell(f"PEANUT map -q {example_index} {READS} >&-")
    assert run.returncode == 1 and "standard output is closed" in run.stderr and "Traceback" not in run.stderr
    out = tmp_path / "o.sam"
    run = _shell(f"PEANUT map -q {example_index} {READS} -o {out} >&-")
    assert run.returncode == 0, run.stderr
    assert sum(1 for line in open(out) if not line.startswith("@")) == 2000
    out.unlink()
    run = _shell(f"PEANUT map {example_index} {READS} -o {out} 2>&-")
    assert run.returncode == 0 and run.stderr == ""
    assert sum(1 for line in open(out) if not line.startswith("@")) == 2000


MATES = EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"


def _sam_without_pg(text):
    """The SAM but its @PG line (which quotes the command line)."""
    return [line for line in text.splitlines() if not line.startswith("@PG")]


def _writer(data_command, fifo):
    """A shell command that writes into ``fifo`` in the background (opened once, as any writer does)."""
    return f"({data_command} > {fifo} &); "


def test_streamed_reads_give_the_sam_of_the_file(example_index, tmp_path):
    """Standard input (plain and gzip through a pipe), a process substitution and a FIFO as READS: every
    input read once, front to back; the SAM on standard output at the same time is the file's, byte for byte."""
    fifo = tmp_path / "reads.fifo"
    os.mkfifo(fifo)
    expected = _shell(f"PEANUT map -q {example_index} {READS}")
    assert expected.returncode == 0, expected.stderr
    assert sum(1 for line in expected.stdout.splitlines() if not line.startswith("@")) == 2000
    for command in (f"zcat {READS} | PEANUT map -q {example_index} -",
                    f"PEANUT map -q {example_index} - < {READS}",
                    f"PEANUT map -q {example_index} <(zcat {READS})",
                    _writer(f"zcat {READS}", fifo) + f"PEANUT map -q {example_index} {fifo}"):
        run = _shell(f"timeout 120 bash -c {shlex.quote(command)}")
        assert run.returncode == 0, (command, run.stderr)
        assert _sam_without_pg(run.stdout) == _sam_without_pg(expected.stdout), command


def test_streamed_pairs_give_the_sam_of_the_files(example_index, tmp_path):
    """Pairs from two FIFOs, from two process substitutions, and interleaved from standard input: the SAM of
    the two files, also with batches small enough that the insert-size estimate holds several back."""
    first, second = tmp_path / "r1.fifo", tmp_path / "r2.fifo"
    os.mkfifo(first)
    os.mkfifo(second)
    interleaved = ("paste <(zcat {0} | paste - - - -) <(zcat {1} | paste - - - -) | tr '\\t' '\\n'"
                   .format(READS, MATES))
    for options in ("", "--batch-size 300"):
        expected = _shell(f"PEANUT map -q {options} {example_index} {READS} {MATES}")
        assert expected.returncode == 0, expected.stderr
        assert sum(1 for line in expected.stdout.splitlines() if not line.startswith("@")) == 4000
        for command in (_writer(f"zcat {READS}", first) + _writer(f"cat {MATES}", second)
                        + f"PEANUT map -q {options} {example_index} {first} {second}",
                        f"PEANUT map -q {options} {example_index} <(zcat {READS}) <(zcat {MATES})",
                        f"{interleaved} | PEANUT map -q {options} -p {example_index} -"):
            run = _shell(f"timeout 120 bash -c {shlex.quote(command)}")
            assert run.returncode == 0, (command, run.stderr)
            assert _sam_without_pg(run.stdout) == _sam_without_pg(expected.stdout), command


def test_streamed_input_errors(example_index, tmp_path):
    """One error line, exit 1, never a hang: standard input for both READS and MATES, one FIFO for both, a
    FIFO whose writer writes nothing (it is opened once: a second opening would wait for ever), bad reads on
    standard input (named so, with the record), a closed standard input."""
    fifo = tmp_path / "reads.fifo"
    os.mkfifo(fifo)
    cases = [
        (f"PEANUT map -q {example_index} - - < {READS}", "standard input: given as both READS and MATES"),
        (f"PEANUT map -q {example_index} {fifo} {fifo}", f"{fifo}: is the same stream as READS"),
        (_writer("true", fifo) + f"PEANUT map -q {example_index} {fifo}", f"{fifo}: empty file (no reads)"),
        (f"printf '@r1\\nACGT\\n+\\nIIII\\n@r2\\nAC\\n+\\nI\\n' | PEANUT map -q {example_index} -",
         "standard input, record 2: quality string length differs"),
        (f"zcat {READS} | head -c 100000 | gzip | head -c 20000 | PEANUT map -q {example_index} -",
         "standard input, record "),
        (f"PEANUT map -q {example_index} - <&-", "standard input: is closed"),
    ]
    for command, message in cases:
        run = _shell(f"timeout 120 bash -c {shlex.quote(command)}")
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"peanut: error: {message}"), \
            (command, run.stderr)
        assert "Traceback" not in run.stderr
        if "READS" in message:  # refused before any work: not even the header is written
            assert run.stdout == ""


def test_reads_longer_than_supported_are_reported_unmapped(example_index, tmp_path):
    """A read longer than MAX_READ_LENGTH (1,024) is not an abort: it is an unmapped record with its SEQ and
    QUAL, the summary counts it, and every other read gets exactly the records it gets without it."""
    records = fastq_records(READS)[:60]
    name, seq, qual = records[10]
    long_read = (name, (seq * 12)[:1500], (qual * 12)[:1500])
    with_long, without = tmp_path / "with.fq", tmp_path / "without.fq"
    write_fastq(with_long, records[:10] + [long_read] + records[11:])
    write_fastq(without, records[:10] + records[11:])
    rc, _, err = run_cli("map", str(example_index), str(with_long), "-o", str(tmp_path / "with.sam"))
    assert rc == 0, err
    assert "1 reads longer than 1,024 bases (not supported yet) reported unmapped" in err
    rc, _, err = run_cli("map", "-q", str(example_index), str(without), "-o", str(tmp_path / "without.sam"))
    assert rc == 0, err
    body = [line for line in sam_body(tmp_path / "with.sam") if not line.startswith("@")]
    assert len(body) == 60
    fields = body[10].split("\t")
    assert fields[0] == name and int(fields[1]) == 4 and fields[9] == long_read[1]
    assert fields[10].rstrip("\n") == long_read[2]
    others = [line for line in sam_body(tmp_path / "without.sam") if not line.startswith("@")]
    assert body[:10] + body[11:] == others


def test_a_closed_pipe_ends_quietly(example_index):
    """`peanut map ... | head`: the reader of the SAM goes away early; peanut ends as Unix tools do (SIGPIPE),
    with nothing on standard error."""
    run = _shell(f"PEANUT map -q {example_index} {READS} | head -3; echo status ${{PIPESTATUS[0]}} >&2")
    assert run.stdout.count("\n") == 3 and run.stdout.startswith("@HD")
    assert run.stderr.strip() in ("status 141", "status 0"), run.stderr


def test_pairs_get_larger_batches_on_gpus_only():
    """Pairs on a GPU batch as many pairs as a single-end batch has reads; CPU devices keep their size."""
    from types import SimpleNamespace

    from peanut_py.mapping import pipeline_batch

    gpu, cpu = SimpleNamespace(host_memory=False), SimpleNamespace(host_memory=True)
    assert pipeline_batch(gpu, paired=True) == 2 * pipeline_batch(gpu) == 1 << 19
    assert pipeline_batch(cpu, paired=True) == pipeline_batch(cpu) < pipeline_batch(gpu)
