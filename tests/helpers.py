"""Plain helpers shared by the test modules (fixtures live in conftest.py; reference implementations in the
*_oracle.py modules).

- ``REPO``: the repository root (computed from this file, so tests run from any working directory);
  ``EXAMPLE``: the bundled example data (index/example).
- ``SHARED_DATA``: ``../shared/data`` from the repository root (real genomes and reads); the environment
  variable ``PEANUT_SHARED_DATA`` points it elsewhere.
- ``require_shared_data(*parts)``: the path ``SHARED_DATA/parts...``; when it is absent the test is skipped
  with the reason shown, or, under ``CI=true``, fails: CI must run the real-data tests.
- ``needs_tool(name, what)``: a skipif mark for tests that run an external program (samtools, Picard) that
  CI machines may lack.
- ``run_cli(*args, cwd=None, env=None, timeout=600)``: runs ``python -m peanut_py ARGS`` in a subprocess
  with this checkout first on PYTHONPATH and returns ``(returncode, stdout, stderr)`` as text.
- ``fastq_records`` / ``write_fastq`` / ``sam_body``: FASTQ and SAM text I/O.
"""
import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "index" / "example"
SHARED_DATA = Path(os.environ.get("PEANUT_SHARED_DATA") or REPO.parent / "shared" / "data")


def in_ci():
    """True under CI=true (GitHub Actions and most CI services set it)."""
    return os.environ.get("CI", "").strip().lower() == "true"


def require_shared_data(*parts, root=None):
    """``root/parts...`` (default root: ``SHARED_DATA``) if it exists. Otherwise the test is skipped, with
    the missing path as the reason, or fails under ``CI=true``, where a missing data folder would silently
    turn every real-data test into a skip."""
    root = SHARED_DATA if root is None else Path(root)
    path = root.joinpath(*parts)
    if path.exists():
        return path
    what = f"shared test data not found: {path} is absent (real genomes and reads live in ../shared/data " \
           f"from the repository root, or where PEANUT_SHARED_DATA points)"
    if in_ci():
        pytest.fail(f"{what}; under CI=true the real-data tests must run, so this is a failure", pytrace=False)
    pytest.skip(what)


def needs_tool(name, what=None):
    """Mark a test that runs the program ``name``: skipped, with the reason shown, where it is not installed."""
    return pytest.mark.skipif(shutil.which(name) is None,
                              reason=f"{what or name} not installed ({name} not on PATH)")


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
