"""`peanut index` / `peanut info` as a user runs them: bad input, messages, files left behind, installed package."""
import bz2
import gzip
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers import REPO, run_cli
from peanut_py.reference import ReferenceIndex

_RANDOM = b">r\n" + np.random.default_rng(1).choice(list(b"ACGT"), 200_000).astype(np.uint8).tobytes() + b"\n"
_GZ = gzip.compress(_RANDOM)
assert len(_GZ) > 40_000

# (file content, substrings the one-line error must contain besides the file name)
BAD_FASTA = {
    "empty": (b"", ["empty file"]),
    "blank_lines_only": (b"\n\n", ["not a FASTA file"]),
    "not_fasta": (b"hello world\nACGT\n", ["not a FASTA file", "line 1"]),
    "duplicate_name": (b">a\nACGT\n>b x\nAC\n>a other\nGG\n", ["record 3", "duplicate contig name 'a'", "line 5"]),
    "empty_contig": (b">a\n>b\nACGT\n", ["record 1 ('a')", "no sequence", "line 1"]),
    "empty_last_contig": (b">a\nACGT\n>b\n", ["record 2 ('b')", "no sequence"]),
    "empty_name": (b">a\nAC\n> x\nACGT\n", ["record 2", "empty contig name", "line 3"]),
    "digit": (b">a\nACGT\n>chr2\nACGT\nAC1T\n", ["record 2 ('chr2')", "line 5", "illegal character '1'"]),
    "dash": (b">a\nAC-GT\n", ["record 1 ('a')", "line 2", "'-'"]),
    "star": (b">a\nACGT*\n", ["line 2", "'*'"]),
    "dot": (b">a\nAC\nA.T\n", ["line 3", "'.'"]),
    "space": (b">a\nAC GT\n", ["line 2", "0x20"]),
    "tab": (b">a\nACGT\t\n", ["line 2", "0x09"]),
    "trailing_space": (b">a\nACGT \n", ["line 2", "0x20"]),
    "lone_cr": (b">a\nAC\rGT\n", ["line 2", "0x0d"]),
    "nul": (b">a\nAC\x00GT\n", ["line 2", "0x00"]),
    "utf8_letter": (">a\nACGTé\n".encode(), ["line 2", "0xc3"]),
    "binary": (bytes(range(256)) * 4, ["not a FASTA file"]),
    "bzip2": (bz2.compress(b">a\nACGT\n"), ["bzip2", "only plain or gzip"]),
    "truncated_gzip": (_GZ[: len(_GZ) // 2], ["truncated gzip"]),
    "gzip_missing_trailer": (_GZ[:-4], ["truncated gzip"]),
    "corrupt_gzip": (b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"garbage that is not deflate", ["gzip"]),
    # contig names that SAM forbids (SAM v1.6, 1.2.1): refused here, not written into an invalid header later
    "name_star": (b">a\nACGT\n>*\nACGT\n", ["record 2", "line 3", "'*'", "not a valid SAM reference name"]),
    "name_equals": (b">=x\nACGT\n", ["record 1", "'=x'", "not a valid SAM reference name"]),
    "name_comma": (b">chr1,2\nACGT\n", ["record 1", "'chr1,2'", "SAM v1.6"]),
    "name_backslash": (b">a\\b\nACGT\n", ["record 1", "not a valid SAM reference name"]),
    "name_brackets": (b">a[1]\nACGT\n", ["record 1", "not a valid SAM reference name"]),
    "name_quote": (b">a\"b\nACGT\n", ["record 1", "not a valid SAM reference name"]),
    "name_non_ascii": (">chré\nACGT\n".encode(), ["record 1", "'chré'", "not a valid SAM reference name"]),
}


def assert_one_line_error(rc, out, err, *needles):
    assert rc == 1, (rc, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("peanut: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert str(n) in lines[0], (n, lines[0])


@pytest.mark.parametrize("case", sorted(BAD_FASTA))
def test_bad_fasta(tmp_path, case):
    content, needles = BAD_FASTA[case]
    fa = tmp_path / f"{case}.fa"
    fa.write_bytes(content)
    rc, out, err = run_cli("index", fa, cwd=tmp_path)
    assert_one_line_error(rc, out, err, fa, *needles)
    assert [p.name for p in tmp_path.iterdir()] == [fa.name]  # no index, no temp file


def test_good_edge_cases_are_accepted(tmp_path):
    """CRLF, lowercase, IUPAC, blank lines, no final newline, very long lines and long headers are fine."""
    fa = tmp_path / "ok.fa"
    long_line = "acgt" * 5_000_000  # one 20 Mbp line: longer than the reader's block
    fa.write_bytes(
        (">a " + "x" * 100_000 + "\r\nACGTRYKM\r\nswbdhvn\r\n\r\n>b\n" + long_line + "\n\n>c\nAC").encode()
    )
    rc, out, err = run_cli("index", fa, "-o", tmp_path / "ok.h5", "-q", "4", cwd=tmp_path)
    assert rc == 0, err
    with ReferenceIndex(tmp_path / "ok.h5") as ix:
        assert ix.names == ["a", "b", "c"]
        assert ix.fetch(0, 0, 15) == "ACGTRYKMSWBDHVN"
        assert ix.lengths.tolist() == [15, len(long_line), 2]
        assert ix.fetch(1, 9_999_990, 10_000_010) == long_line.upper()[9_999_990:10_000_010]


def test_missing_file_and_directory(tmp_path):
    rc, out, err = run_cli("index", tmp_path / "nope.fa", cwd=tmp_path)
    assert_one_line_error(rc, out, err, tmp_path / "nope.fa", "no such file")
    rc, out, err = run_cli("index", tmp_path, cwd=tmp_path)
    assert_one_line_error(rc, out, err, tmp_path, "is a directory")
    assert list(tmp_path.iterdir()) == []


def _unwritable_dir(tmp_path):
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return d
    return "/sys"  # root may write anywhere else; sysfs refuses new files even to root


def test_bad_output(tmp_path):
    fa = tmp_path / "a.fa"
    fa.write_text(">a\nACGTACGTACGTACGTACGT\n")
    cases = [
        (tmp_path / "no_such_dir" / "x.h5", ["does not exist"]),
        (tmp_path, ["is a directory"]),
        (fa, ["overwrite the input"]),
        (os.path.join(_unwritable_dir(tmp_path), "x.h5"), ["cannot write"]),
    ]
    for out_path, needles in cases:
        rc, out, err = run_cli("index", fa, "-o", out_path, cwd=tmp_path)
        assert_one_line_error(rc, out, err, out_path, *needles)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "ro") == ["a.fa"]
    assert fa.read_text() == ">a\nACGTACGTACGTACGTACGT\n"


@pytest.mark.parametrize("args,needle", [(["-q", "17"], "-q 17: must lie in 4..16"), (["-q", "0"], "-q 0"),
                                         (["-q", "3"], "-q 3: must lie in 4..16"),
                                         (["-s", "0"], "-s/--step 0: must lie in 1..1024"),
                                         (["-m", "-5"], "-m/--mask -5: must lie in 0..")])
def test_bad_parameters(tmp_path, args, needle):
    fa = tmp_path / "a.fa"
    fa.write_text(">a\nACGT\n")
    rc, out, err = run_cli("index", fa, *args, cwd=tmp_path)
    assert_one_line_error(rc, out, err, needle)
    assert list(tmp_path.iterdir()) == [fa]


def test_default_output_path_and_info(tmp_path, sarscov2_fasta):
    fa = tmp_path / "virus.fasta"
    shutil.copy(sarscov2_fasta, fa)
    rc, out, err = run_cli("index", fa, "-q", "12", "-m", "7", cwd=tmp_path)
    assert rc == 0, err
    index = tmp_path / "virus.fasta.peanut.h5"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["virus.fasta", "virus.fasta.peanut.h5"]
    assert "indexed 1 contigs, 29,829 bases" in err and "peak memory" in err
    with ReferenceIndex(index) as ix:
        assert (ix.q, ix.step, ix.mask_threshold) == (12, 1, 7)
        assert ix.attrs["command_line"] == f"peanut index {fa} -q 12 -m 7"
        checksum, md5 = ix.checksum, ix.md5s[0]
        kept = ix.attrs["positions_kept"]
    rc, info, err = run_cli("info", index)
    assert rc == 0, err
    for needle in ("MT192765.1", "29,829", "q / step           12 / 1", "mask threshold     7", checksum, md5,
                   f"{kept:,} kept", "format version     2", "bucket table       2^"):
        assert needle in info, needle
    rc, info2, err = run_cli("index", "--info", index)
    assert rc == 0 and info2 == info


def test_info_on_bad_files(tmp_path, cli):
    fa = tmp_path / "a.fa"
    fa.write_text(">a\nACGT\n")
    rc, out, err = cli("info", fa)
    assert_one_line_error(rc, out, err, fa, "not a peanut-py index")
    rc, out, err = cli("info", tmp_path / "missing.h5")
    assert_one_line_error(rc, out, err, "missing.h5", "no such file")


def test_ctrl_c_leaves_nothing(tmp_path, chr20_fasta):
    """SIGINT in the middle of a chr20 build: exit 130 and no file, temporary or final, left behind."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "peanut_py", "index", str(chr20_fasta), "-o",
                             str(tmp_path / "chr20.h5")], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not any(tmp_path.iterdir()) and time.time() < deadline:  # wait until the temp file exists
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_installed_package_works_outside_the_tree(tmp_path, sarscov2_fasta):
    """Non-editable install into a temp dir; run from elsewhere; peanut_py/kernels/ (*.cl and the *.clh headers)
    must travel with the package."""
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(REPO)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {"PYTHONPATH": str(target)}
    rc, where, err = run_cli_code("import peanut_py; print(peanut_py.__file__)", cwd=work, env=env)
    assert rc == 0 and where.strip().startswith(str(target)), (where, err)
    rc, out, err = run_cli("index", sarscov2_fasta, "-o", work / "v.h5", cwd=work, env=env)
    assert rc == 0, err
    with ReferenceIndex(work / "v.h5") as ix:
        assert ix.names == ["MT192765.1"]
    kernel_dir = REPO / "peanut_py" / "kernels"
    repo_kernels = sorted(p.name for p in kernel_dir.iterdir() if p.suffix in (".cl", ".clh"))
    assert "affine.cl" in repo_kernels and any(name.endswith(".clh") for name in repo_kernels)
    for name in repo_kernels:
        installed = target / "peanut_py" / "kernels" / name
        assert installed.is_file(), name
        assert installed.read_bytes() == (kernel_dir / name).read_bytes()


def run_cli_code(code, cwd, env):
    full = dict(os.environ, **env)
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=full, capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_threads_give_the_same_index(tmp_path):
    """`peanut index -t N` sorts and sweeps the q-gram groups on N threads: the file is the same byte for
    byte (several rounds and many sort groups, as for a human genome)."""
    from peanut_py.reference import build_index

    fa = tmp_path / "r.fa"
    fa.write_bytes(_RANDOM + b">copy\n" + _RANDOM[3:60_003] + b"\n")
    sizes = dict(round_keys=70_000, sort_group=4_000, flush_elements=1 << 12, chunk=1 << 11)
    files = []
    for threads in (1, 2, 5):
        out = tmp_path / f"t{threads}.h5"
        build_index(fa, out, q=12, mask_threshold=3, threads=threads, **sizes)
        files.append(out.read_bytes())
    assert files[0] == files[1] == files[2]
    with ReferenceIndex(tmp_path / "t1.h5") as ix:
        assert ix.attrs["positions_masked"] > 0 and ix.positions().size > 200_000


def test_an_index_of_an_older_format_says_how_to_rebuild_it(tmp_path, sarscov2_index, shared_data):
    old = tmp_path / "old.h5"
    shutil.copy(sarscov2_index, old)
    import h5py

    with h5py.File(old, "a") as f:
        f.attrs["format_version"] = 1
        source = f.attrs["source_fasta"]
    reads = shared_data / "sarscov2" / "ERR5069949_100pairs_R1.fastq.gz"
    for args in (["info", old], ["map", old, reads, "-o", tmp_path / "o.sam"]):
        rc, out, err = run_cli(*map(str, args))
        lines = err.strip().splitlines()
        assert rc == 1 and len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(f"peanut: error: {old}: index format version 1 is not supported")
        assert lines[0].endswith(f"rebuild it from its FASTA: peanut index -o {old} {source}")
    assert not (tmp_path / "o.sam").exists()
