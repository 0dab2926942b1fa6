"""Shared fixtures for all peanut-py tests (plain helpers are in helpers.py).

- ``device``: one :class:`peanut_py.device.Device` (the default device) for the whole session. Tests use it
  read-only apart from its caches (programs, workspaces); a test that needs other settings (a memory cap, a
  kernel directory, ``host_memory``, a fresh build cache) creates its own Device.
- ``shared_data``: Path of ``../shared/data`` (real genomes and reads); tests using it are skipped, with the
  reason shown, when that folder is absent, and fail instead under ``CI=true`` (helpers.require_shared_data).
- ``sarscov2_fasta`` / ``yeast_fasta`` / ``chr20_fasta``: the reference FASTA paths under ``shared_data``.
- ``sarscov2_index`` / ``yeast_index`` / ``chr20_index``: Paths of reference indexes built once per test session
  with the default parameters (q=16, step=1, default mask threshold) into a session temp dir. chr20 takes a few
  seconds to build; open them with ``peanut_py.reference.ReferenceIndex(path)``, never write to them.
- ``example_index``: the index of the bundled 200 kb chr20 slice (index/example), built once per session.
- ``cli``: helpers.run_cli as a fixture: ``rc, out, err = cli("info", path)``.
"""
import pytest

from helpers import EXAMPLE, require_shared_data, run_cli


@pytest.fixture(scope="session")
def device():
    from peanut_py.device import Device

    return Device()


@pytest.fixture(scope="session")
def cli():
    """The run_cli helper as a fixture: ``rc, out, err = cli("info", path)``."""
    return run_cli


@pytest.fixture(scope="session")
def shared_data():
    return require_shared_data()


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


@pytest.fixture(scope="session")
def example_index(tmp_path_factory):
    """Index of the bundled 200 kb chr20 slice (index/example), built once per session."""
    out = tmp_path_factory.mktemp("example") / "slice.h5"
    rc, _, err = run_cli("index", str(EXAMPLE / "chr20_slice.fa.gz"), "-o", str(out))
    assert rc == 0, err
    return out
