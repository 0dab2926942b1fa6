"""Shared fixtures for all peanut-py tests.

- ``REPO``: the repository root (computed from this file, so tests run from any working directory).
- ``shared_data``: Path of ``../shared/data`` (real genomes and reads); tests using it are skipped, with the reason
  shown, only when that folder is absent.
- ``sarscov2_fasta`` / ``yeast_fasta`` / ``chr20_fasta``: the reference FASTA paths under ``shared_data``.
- ``sarscov2_index`` / ``yeast_index`` / ``chr20_index``: Paths of reference indexes built once per test session
  with the default parameters (q=16, step=1, default mask threshold) into a session temp dir. chr20 takes a few
  seconds to build; open them with ``peanut_py.reference.ReferenceIndex(path)``, never write to them.
- ``run_cli(*args, cwd=None, env=None, timeout=600)`` (also as fixture ``cli``): runs
  ``python -m peanut_py ARGS`` in a subprocess with this checkout first on PYTHONPATH and returns
  ``(returncode, stdout, stderr)`` as text.
"""
import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def run_cli(*args, cwd=None, env=None, timeout=600):
    """Run ``python -m peanut_py *args``; return (returncode, stdout, stderr).

    env entries are added to (not replace) the current environment; PYTHONPATH starts with the checkout unless
    env sets PYTHONPATH itself."""
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([full["PYTHONPATH"]] if full.get("PYTHONPATH") else []))
    if env:
        full.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "peanut_py", *map(str, args)],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="session")
def cli():
    """The run_cli helper as a fixture: ``rc, out, err = cli("info", path)``."""
    return run_cli


@pytest.fixture(scope="session")
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared test data not found: {SHARED_DATA} (../shared/data from the repository root) is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def sarscov2_fasta(shared_data):
    return shared_data / "sarscov2" / "MT192765.1.fasta"


@pytest.fixture(scope="session")
def yeast_fasta(shared_data):
    return shared_data / "yeast" / "S288C_R64-1-1.genome.fa.gz"


@pytest.fixture(scope="session")
def chr20_fasta(shared_data):
    return shared_data / "human" / "GRCh37_chr20.fa.gz"


def _build(tmp_path_factory, fasta, name):
    from peanut_py.reference import build_index

    out = tmp_path_factory.mktemp(f"index_{name}") / f"{name}.peanut.h5"
    build_index(fasta, out, command_line=f"tests/conftest.py {name}")
    return out


@pytest.fixture(scope="session")
def sarscov2_index(sarscov2_fasta, tmp_path_factory):
    return _build(tmp_path_factory, sarscov2_fasta, "sarscov2")


@pytest.fixture(scope="session")
def yeast_index(yeast_fasta, tmp_path_factory):
    return _build(tmp_path_factory, yeast_fasta, "yeast")


@pytest.fixture(scope="session")
def chr20_index(chr20_fasta, tmp_path_factory):
    return _build(tmp_path_factory, chr20_fasta, "chr20")


def fastq_records(path):
    """(name, sequence, qualities) of a plain or gzip FASTQ with 4-line records."""
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as f:
        lines = f.read().splitlines()
    return [(lines[i][1:].split()[0], lines[i + 1], lines[i + 3]) for i in range(0, len(lines), 4)]


def write_fastq(path, records):
    with open(path, "w") as f:
        for name, seq, qual in records:
            f.write(f"@{name}\n{seq}\n+\n{qual}\n")


def sam_body(path):
    """The SAM text without the @PG line (its CL differs between runs with different options)."""
    return [line for line in open(path) if not line.startswith("@PG")]


@pytest.fixture(scope="session")
def example_index(tmp_path_factory):
    """Index of the bundled 200 kb chr20 slice (index/example), built once per session."""
    out = tmp_path_factory.mktemp("example") / "slice.h5"
    rc, _, err = run_cli("index", str(REPO / "index" / "example" / "chr20_slice.fa.gz"), "-o", str(out))
    assert rc == 0, err
    return out
