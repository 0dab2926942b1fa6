"""The README's commands, run as written: every `peanut` line of its usage block on the bundled example, and
its two make targets as a dry run. A README command that stops working fails here, so the front page cannot
drift from the command line."""
import gzip
import os
import re
import shutil
import stat
import subprocess
import sys

import pysam
import pytest

from helpers import EXAMPLE, REPO, fastq_records

README = REPO / "README.md"
N_PAIRS = 300  # reads per file of the test's copies: enough for an insert-size estimate, quick on a CPU


def readme_block(heading):
    """The lines of the first ```sh block under the README section ``heading``."""
    text = README.read_text()
    section = text.split(f"\n## {heading}\n", 1)
    assert len(section) == 2, f"README.md has no section '## {heading}'"
    block = re.search(r"```sh\n(.*?)```", section[1].split("\n## ", 1)[0], re.S)
    assert block, f"README.md, section '{heading}': no ```sh block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def peanut_commands():
    return [line for line in readme_block("Usage") if line.startswith("peanut ")]


def write_fastq_gz(path, records):
    with gzip.open(path, "wt") as f:
        for name, seq, qual in records:
            f.write(f"@{name}\n{seq}\n+\n{qual}\n")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The README's file names, made from the bundled example: ref.fa.gz (the 200 kb chr20 slice), reads.fq.gz,
    r1/r2.fq.gz and interleaved.fq.gz (its first pairs), and a `peanut` on PATH that runs this checkout."""
    d = tmp_path_factory.mktemp("readme")
    shutil.copy(EXAMPLE / "chr20_slice.fa.gz", d / "ref.fa.gz")
    r1 = fastq_records(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz")[:N_PAIRS]
    r2 = fastq_records(EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz")[:N_PAIRS]
    write_fastq_gz(d / "reads.fq.gz", r1)
    write_fastq_gz(d / "r1.fq.gz", r1)
    write_fastq_gz(d / "r2.fq.gz", r2)
    write_fastq_gz(d / "interleaved.fq.gz", [rec for pair in zip(r1, r2) for rec in pair])
    bin_dir = d / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "peanut"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" '
                       f'-m peanut_py "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return d


def run_line(line, workdir):
    env = dict(os.environ, PATH=f"{workdir / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def results(workdir):
    """Every `peanut` command of the README's usage block, in order, with its exit status and output."""
    commands = peanut_commands()
    assert len(commands) >= 5, f"README.md's usage block lost its peanut commands: {commands}"
    return [(line, run_line(line, workdir)) for line in commands]


def test_every_readme_command_succeeds(results):
    failed = [f"{line}\n  exit {p.returncode}: {p.stderr.strip()[-400:]}" for line, p in results if p.returncode]
    assert not failed, "README commands that fail:\n" + "\n".join(failed)


def test_the_readme_covers_index_info_single_and_paired_mapping(results):
    words = [line.split()[1] for line, _ in results]
    assert {"devices", "index", "info", "map"} <= set(words)
    maps = [line for line, _ in results if line.split()[1] == "map"]
    assert any("r1.fq.gz r2.fq.gz" in line for line in maps), "no paired-end example"
    assert any(" -p " in line for line in maps), "no interleaved example"


def test_readme_commands_write_what_they_promise(results, workdir):
    assert (workdir / "ref.fa.gz.peanut.h5").is_file()
    info = next(p for line, p in results if line.startswith("peanut info"))
    assert "20_9950001_10150000" in info.stdout
    devices = next(p for line, p in results if line.startswith("peanut devices"))
    assert "*" in devices.stdout
    # single-end SAM through the shell's redirection: one primary record per read
    with pysam.AlignmentFile(str(workdir / "out.sam")) as sam:
        primaries = [r for r in sam if not r.is_secondary]
    assert len(primaries) == N_PAIRS and sum(not r.is_unmapped for r in primaries) >= N_PAIRS * 0.95
    # paired BAM files: both mates of every pair, most of them properly paired; the read group where given
    for name, read_group in (("out.bam", None), ("s1.bam", "s1")):
        with pysam.AlignmentFile(str(workdir / name), "rb") as bam:
            records = [r for r in bam if not r.is_secondary]
            header = bam.header.to_dict()
        assert len(records) == 2 * N_PAIRS, name
        assert sum(r.is_proper_pair for r in records) >= 2 * N_PAIRS * 0.9, name
        if read_group:
            assert [rg["ID"] for rg in header.get("RG", [])] == [read_group]
            assert all(r.get_tag("RG") == read_group for r in records)
    # interleaved pairs, all hits as secondary records
    with pysam.AlignmentFile(str(workdir / "all.sam")) as sam:
        records = list(sam)
    assert sum(not r.is_secondary for r in records) == 2 * N_PAIRS
    assert all(r.is_paired for r in records)


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
@pytest.mark.parametrize("target", ["demo", "test"])
def test_the_two_make_commands_exist(target, tmp_path):
    """`make demo` and `make test` as the README gives them (a dry run: the real ones take minutes)."""
    lines = readme_block("Two commands (fresh Debian/Ubuntu machine, Python >= 3.10, a C compiler)")
    assert any(line.startswith(f"make {target}") for line in lines)
    p = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
