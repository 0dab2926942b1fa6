"""Hostile input to the command line, each case in its own `python -m peanut_py` process under a time limit:
damaged reads and reference FASTA (plain and gzip), damaged index files (every dataset, the HDF5 metadata,
the root attributes), every numeric option at and beyond its limits, outputs that cannot or must not be
written, closed standard streams, signals mid-run and a rerun after each, and a full file system.

Every refusal is checked the same way (:func:`assert_refused`): exit status 1, exactly one line on standard
error, ``peanut: error: ...`` naming the file (and the record or option), no traceback, the time limit kept,
nothing new in the output's folder (no output, no hidden temporary file), and the inputs byte for byte as
before. Reading from standard input, FIFOs and process substitutions is left to the reader's own tests.
"""
import gzip
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import h5py
import numpy as np
import pytest

from helpers import EXAMPLE, REPO, fastq_records, require_shared_data

from peanut_py import options

TIME_LIMIT = 120  # seconds per process: a hang fails the case instead of the whole run
READS_GZ = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"
MATES_GZ = EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"
N_READS = 300
BAD = 150  # the record the damage is put into


@dataclass
class Run:
    rc: int
    out: str
    err: str
    seconds: float


def peanut(*args, cwd=None, redirect="", env=None, timeout=TIME_LIMIT):
    """``python -m peanut_py ARGS`` under bash (``redirect`` such as ``>&-`` is applied to it)."""
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    full.update(env or {})
    command = f'exec "{sys.executable}" -m peanut_py "$@" {redirect}'
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(["bash", "-c", command, "peanut", *map(str, args)], cwd=cwd, env=full,
                              capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"peanut {' '.join(map(str, args))} {redirect}: still running after {timeout} s (a hang)")
    return Run(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"),
               time.perf_counter() - t0)


def digest(paths):
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths if p and Path(p).is_file()}


def listing(folder):
    return sorted(os.listdir(folder))


def assert_one_line_error(run, *needles):
    assert "Traceback" not in run.err + run.out, run.err
    lines = run.err.splitlines()
    assert run.rc == 1, (run.rc, run.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("peanut: error: "), run.err[-2000:]
    for needle in needles:
        assert str(needle) in lines[0], (needle, lines[0])


def assert_refused(command, *needles, folder, inputs, cwd=None, redirect=""):
    """Run ``command`` (peanut's arguments) and check it is refused as promised; returns the Run."""
    before_files, before_sums = listing(folder), digest(inputs)
    run = peanut(*command, cwd=cwd, redirect=redirect)
    assert_one_line_error(run, *needles)
    assert run.out == ""
    assert listing(folder) == before_files, "an output or a temporary file was left behind"
    assert digest(inputs) == before_sums, "an input was changed"
    return run


def sam_records(path):
    return [line for line in Path(path).read_text().splitlines() if not line.startswith("@")]


# --- the shared inputs ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny index (the bundled chr20 slice plus a contig with N runs and a tandem repeat whose q-grams are
    masked, so that every dataset holds data) and the first N_READS reads and mates of the example, plain and
    gzip."""
    folder = tmp_path_factory.mktemp("hostile")
    rng = np.random.default_rng(23)
    extra = "".join("N" * 20 if i % 50 == 7 else "ACGT"[rng.integers(4)] for i in range(3000)) + "GATTACA" * 400
    fasta = folder / "ref.fa"
    fasta.write_bytes(gzip.decompress(EXAMPLE.joinpath("chr20_slice.fa.gz").read_bytes()) +
                      f">extra\n{extra}\n".encode())
    index = folder / "ref.h5"
    run = peanut("index", "--quiet", fasta, "-o", index)
    assert run.rc == 0, run.err
    reads = fastq_records(READS_GZ)[:N_READS]
    mates = fastq_records(MATES_GZ)[:N_READS]
    (folder / "reads.fq").write_bytes(fastq(reads))
    (folder / "mates.fq").write_bytes(fastq(mates))
    return {"folder": folder, "fasta": fasta, "index": index, "reads": reads, "mates": mates,
            "reads_path": folder / "reads.fq", "mates_path": folder / "mates.fq"}


def fastq(records):
    return "".join(f"@{n}\n{s}\n+\n{q}\n" for n, s, q in records).encode()


# --- damaged reads ----------------------------------------------------------------------------------------------


def _with_record(records, k, text):
    """FASTQ bytes of ``records`` with record k (1-based) replaced by the raw ``text`` (bytes)."""
    return fastq(records[: k - 1]) + text + fastq(records[k:])


def _record(name, seq, qual, plus="+"):
    return f"@{name}\n{seq}\n{plus}\n{qual}\n".encode("latin-1")


def damaged_reads(records):
    """name -> (file content, record named in the error or None, words the error must hold)."""
    n, s, q = records[BAD - 1]
    head = fastq(records[: BAD - 1])
    k = BAD
    return {
        "truncated_in_header": (head + b"@" + n[:5].encode(), k, "truncated FASTQ record"),
        "truncated_in_sequence": (head + f"@{n}\n{s[:20]}".encode(), k, "truncated FASTQ record"),
        "truncated_after_plus": (head + f"@{n}\n{s}\n+\n".encode(), k, "truncated FASTQ record"),
        "truncated_in_quality": (head + f"@{n}\n{s}\n+\n{q[:10]}".encode(), k, "quality string length differs"),
        "quality_longer": (_with_record(records, k, _record(n, s, q + "I")), k, "quality string length differs"),
        "quality_shorter": (_with_record(records, k, _record(n, s, q[:-1])), k, "quality string length differs"),
        "sequence_empty_quality_not": (_with_record(records, k, _record(n, "", q)), k, "length differs"),
        "plus_line_missing": (_with_record(records, k, _record(n, s, q, plus="-")), k, "'+'"),
        "plus_names_another_read": (_with_record(records, k, _record(n, s, q, plus="+other")), k, "record"),
        "header_without_at": (_with_record(records, k, _record(n, s, q)[1:]), k, "'@'"),
        "line_lost": (_with_record(records, k, f"@{n}\n{s}\n{q}\n".encode()), k, "record"),
        "blank_line_inside": (_with_record(records, k, f"@{n}\n\n{s}\n+\n{q}\n".encode()), k, "record"),
        "binary_in_sequence": (_with_record(records, k, _record(n, s[:5] + "\xff" + s[6:], q)), k, "binary data"),
        "binary_block_after_reads": (head + bytes(range(256)) * 4, k, "binary data"),
        "utf8_in_name": (_with_record(records, k, _record(n + "é", s, q)), k, "binary data"),
        "nul_in_name": (_with_record(records, k, _record(n[:4] + "\0" + n[4:], s, q)), k, "read name"),
        "nul_in_sequence": (_with_record(records, k, _record(n, s[:5] + "\0" + s[6:], q)), k, "invalid character"),
        "nul_in_quality": (_with_record(records, k, _record(n, s, q[:5] + "\0" + q[6:])), k, "quality character"),
        "bell_in_quality": (_with_record(records, k, _record(n, s, q[:5] + "\a" + q[6:])), k, "quality character"),
        "space_in_quality": (_with_record(records, k, _record(n, s, q[:5] + " " + q[6:])), k, "quality character"),
        "digit_in_sequence": (_with_record(records, k, _record(n, s[:5] + "7" + s[6:], q)), k, "invalid character '7'"),
        "lone_cr_in_sequence": (_with_record(records, k, _record(n, s[:5] + "\r" + s[6:], q)), k, "record"),
        "name_of_255_characters": (_with_record(records, k, _record("x" * 255, s, q)), k, "at most 254"),
        "name_of_100000_characters": (_with_record(records, k, _record("x" * 100_000, s, q)), k, "at most 254"),
        "at_sign_in_name": (_with_record(records, k, _record("r@1", s, q)), k, "'@'"),
        "fasta_record_among_fastq": (head + f">{n}\n{s}\n".encode() + fastq(records[k:]), k, "record"),
        "empty_file": (b"", None, "empty file"),
        "only_blank_lines": (b"\n\n\n\n", 1, "not FASTQ or FASTA"),
        "text_not_reads": (b"hello, this is not a reads file\n", 1, "not FASTQ or FASTA"),
        "random_binary": (bytes(np.random.default_rng(7).integers(0, 256, 5000, dtype=np.uint8)), 1, "not FASTQ"),
        "fasta_bad_character": (b">r1\nACGT\n>r2\nAC*GT\n", 2, "invalid character '*'"),
        "fasta_binary": (b">r1\nACGT\n>r2\nAC\x80GT\n", 2, "binary data"),
        "fasta_name_with_quote_at": (b">r1\nACGT\n>r@2\nACGT\n", 2, "'@'"),
    }


READ_CASES = sorted(damaged_reads([("r%d" % i, "ACGTACGTAC" * 10, "I" * 100) for i in range(N_READS)]))


GZIP_READ_CASES = ["binary_in_sequence", "empty_file", "fasta_bad_character", "name_of_255_characters",
                   "nul_in_name", "quality_shorter", "random_binary", "truncated_in_quality",
                   "truncated_in_sequence", "utf8_in_name"]


@pytest.mark.parametrize("case, packing", [(c, "plain") for c in READ_CASES] + [(c, "gzip") for c in GZIP_READ_CASES])
def test_damaged_reads_are_refused_naming_the_record(world, tmp_path, case, packing):
    content, record, needle = damaged_reads(world["reads"])[case]
    reads = tmp_path / f"{case}.fq"
    reads.write_bytes(gzip.compress(content, mtime=0) if packing == "gzip" else content)
    where = f"{reads}, record {record}: " if record is not None else f"{reads}: "
    assert_refused(["map", "-q", world["index"], reads, "-o", tmp_path / "out.sam"], where, needle,
                   folder=tmp_path, inputs=[reads, world["index"]])


def _gzip_damage(data):
    packed = gzip.compress(data, mtime=0)
    middle = len(packed) // 2
    return {
        "cut_in_half": packed[:middle],
        "trailer_missing": packed[:-8],
        "last_byte_missing": packed[:-1],
        "byte_flipped": packed[:middle] + bytes([packed[middle] ^ 0x55]) + packed[middle + 1 :],
        "crc_wrong": packed[:-8] + bytes(b ^ 0xFF for b in packed[-8:-4]) + packed[-4:],
        "header_only": packed[:10],
    }


@pytest.mark.parametrize("damage", sorted(_gzip_damage(b"x")))
def test_damaged_gzip_reads_are_refused(world, tmp_path, damage):
    reads = tmp_path / "reads.fq.gz"
    reads.write_bytes(_gzip_damage(fastq(world["reads"]))[damage])
    assert_refused(["map", "-q", world["index"], reads, "-o", tmp_path / "out.sam"], f"{reads}, record ", "gzip",
                   folder=tmp_path, inputs=[reads, world["index"]])


def damaged_pairs(world):
    """name -> (mates 1 content, mates 2 content or None for -p, record, words the error must hold)."""
    r, m = world["reads"], world["mates"]
    renamed = list(m)
    renamed[BAD - 1] = ("someone_else",) + renamed[BAD - 1][1:]
    both = [x for pair in zip(r, m) for x in pair]
    odd_names = list(both)
    odd_names[2 * BAD - 1] = ("someone_else",) + odd_names[2 * BAD - 1][1:]
    fasta_mates = "".join(f">{n}\n{s}\n" for n, s, _ in m).encode()
    return {
        "mate_named_differently": (fastq(r), fastq(renamed), BAD, "mate names differ"),
        "mates_file_shorter": (fastq(r), fastq(m[: BAD - 1]), BAD, "ends after"),
        "reads_file_shorter": (fastq(r[: BAD - 1]), fastq(m), BAD, "ends after"),
        "mates_empty": (fastq(r), b"", 1, "ends after 0 records"),
        "mates_fasta_reads_fastq": (fastq(r), fasta_mates, 1, "is FASTA but"),
        "mates_truncated": (fastq(r), fastq(m[: BAD - 1]) + b"@x\nAC", BAD, "truncated"),
        "interleaved_odd_count": (fastq(both[: 2 * BAD - 1]), None, 2 * BAD - 1, "no mate"),
        "interleaved_names_differ": (fastq(odd_names), None, 2 * BAD, "mate names differ"),
    }


PAIR_CASES = ["interleaved_names_differ", "interleaved_odd_count", "mate_named_differently", "mates_empty",
              "mates_fasta_reads_fastq", "mates_file_shorter", "mates_truncated", "reads_file_shorter"]


@pytest.mark.parametrize("case, packing", [(c, "plain") for c in PAIR_CASES] +
                         [(c, "gzip") for c in ("mate_named_differently", "mates_truncated", "interleaved_odd_count")])
def test_damaged_pairs_are_refused_naming_the_record(world, tmp_path, case, packing):
    first, second, record, needle = damaged_pairs(world)[case]
    pack = (lambda b: gzip.compress(b, mtime=0)) if packing == "gzip" else (lambda b: b)
    r1 = tmp_path / "r1.fq"
    r1.write_bytes(pack(first))
    paths = [r1]
    if second is not None:
        r2 = tmp_path / "r2.fq"
        r2.write_bytes(pack(second))
        paths.append(r2)
    command = ["map", "-q", world["index"], *paths, "-o", tmp_path / "out.sam"] + (["-p"] if second is None else [])
    run = assert_refused(command, f", record {record}: ", needle, folder=tmp_path, inputs=paths + [world["index"]])
    assert any(str(p) in run.err for p in paths)


def test_oversized_and_odd_reads_that_are_valid_are_mapped_in_full(world, tmp_path):
    """A read of 2 million bases, empty reads, CR LF line ends and lower case: accepted, every read once."""
    r = world["reads"][:20]
    text = fastq(r[:5]) + _record("huge", "ACGT" * 500_000, "I" * 2_000_000) + _record("empty", "", "") + \
        fastq([(n, s.lower(), q) for n, s, q in r[5:10]]).replace(b"\n", b"\r\n") + fastq(r[10:])
    reads = tmp_path / "odd.fq"
    reads.write_bytes(text)
    out = tmp_path / "out.sam"
    run = peanut("map", world["index"], reads, "-o", out)
    assert run.rc == 0 and "Traceback" not in run.err, run.err
    records = [line.split("\t") for line in sam_records(out)]
    assert [f[0] for f in records] == [n for n, _, _ in r[:5]] + ["huge", "empty"] + [n for n, _, _ in r[5:]]
    huge = records[5]
    assert int(huge[1]) & 4 and len(huge[9]) == 2_000_000
    assert records[6][9] == "*" and int(records[6][1]) & 4
    assert "reported unmapped" in run.err


# --- damaged reference FASTA -----------------------------------------------------------------------------------


REFERENCE_DAMAGE = {
    "empty": (b"", None, "empty file"),
    "blank_lines_only": (b"\n\n\n", None, "not a FASTA file"),
    "text_not_fasta": (b"hello\nworld\n", None, "not a FASTA file"),
    "binary": (bytes(range(256)) * 16, None, "not a FASTA file"),
    "reads_not_reference": (b"@r1\nACGT\n+\nIIII\n", None, "not a FASTA file"),
    "digit_in_sequence": (b">a\nACGT\n>b\nAC1T\n", "record 2 ('b')", "line 4"),
    "nul_in_sequence": (b">a\nAC\x00GT\n", "record 1 ('a')", "0x00"),
    "lone_cr": (b">a\nAC\rGT\n", "record 1 ('a')", "0x0d"),
    "non_ascii_in_sequence": (">a\nACGTé\n".encode(), "record 1 ('a')", "0xc3"),
    "space_in_sequence": (b">a\nAC GT\n", "record 1 ('a')", "0x20"),
    "header_only": (b">a\n", "record 1 ('a')", "no sequence"),
    "empty_contig_between": (b">a\nACGT\n>b\n>c\nACGT\n", "record 2 ('b')", "no sequence"),
    "empty_name": (b">\nACGT\n", "record 1", "empty contig name"),
    "duplicate_name": (b">a\nACGT\n>a\nACGT\n", "record 2", "duplicate contig name"),
    "name_star": (b">*\nACGT\n", "record 1", "SAM"),
    "name_equals": (b">=a\nACGT\n", "record 1", "SAM"),
    "name_comma": (b">a,b\nACGT\n", "record 1", "SAM"),
    "name_non_ascii": (">chré\nACGT\n".encode(), "record 1", "SAM"),
    "name_not_utf8": (b">chr\xff\nACGT\n", "record 1", "UTF-8"),
    "name_of_one_megabyte_with_bad_byte": (b">" + b"a" * 1_000_000 + b"\\\nACGT\n", "record 1", "SAM"),
}


@pytest.mark.parametrize("packing", ["plain", "gzip"])
@pytest.mark.parametrize("case", sorted(REFERENCE_DAMAGE))
def test_damaged_reference_is_refused(tmp_path, case, packing):
    content, record, needle = REFERENCE_DAMAGE[case]
    fasta = tmp_path / "ref.fa"
    fasta.write_bytes(gzip.compress(content, mtime=0) if packing == "gzip" else content)
    where = f"{fasta}, {record}: " if record else f"{fasta}: "
    assert_refused(["index", "--quiet", fasta, "-o", tmp_path / "ref.h5"], where, needle, folder=tmp_path,
                   inputs=[fasta])


@pytest.mark.parametrize("damage", sorted(_gzip_damage(b"x")) + ["bzip2", "xz"])
def test_damaged_or_unsupported_compressed_reference_is_refused(world, tmp_path, damage):
    import bz2
    import lzma

    data = world["fasta"].read_bytes()
    fasta = tmp_path / "ref.fa.gz"
    packed = {"bzip2": bz2.compress, "xz": lzma.compress}
    fasta.write_bytes(packed[damage](data) if damage in packed else _gzip_damage(data)[damage])
    assert_refused(["index", "--quiet", fasta, "-o", tmp_path / "ref.h5"], f"{fasta}: ",
                   "only plain or gzip" if damage in packed else "gzip", folder=tmp_path, inputs=[fasta])


# --- damaged index files ----------------------------------------------------------------------------------------


def _datasets(path):
    found = []
    with h5py.File(path, "r") as h5:
        h5.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
    return sorted(found)


INDEX_DATASETS = ["contigs/lengths", "contigs/md5", "contigs/names", "contigs/offsets", "qgrams/buckets",
                  "qgrams/masked", "qgrams/positions", "sequence/exceptions/end", "sequence/exceptions/letter",
                  "sequence/exceptions/start", "sequence/packed"]


def test_every_dataset_of_the_index_is_covered(world):
    assert _datasets(world["index"]) == INDEX_DATASETS


def _flip_at(path, offset, n=16):
    with open(path, "r+b") as f:
        f.seek(offset)
        data = f.read(n)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in data))


def _copy_index(world, folder):
    index = folder / "damaged.h5"
    shutil.copy(world["index"], index)
    return index


@pytest.mark.parametrize("command", ["map", "check"])
@pytest.mark.parametrize("dataset", INDEX_DATASETS)
def test_a_dataset_damaged_at_its_start_is_refused(world, tmp_path, dataset, command):
    """The first 16 bytes of the dataset's data inverted (h5py gives the file offset)."""
    index = _copy_index(world, tmp_path)
    with h5py.File(index, "r") as h5:
        ds = h5[dataset]
        offset = ds.id.get_offset()
        if offset is None:  # chunked
            offset = ds.id.get_chunk_info(0).byte_offset
        size = ds.id.get_storage_size()
    _flip_at(index, offset, min(16, size))
    args = ["index", "--check", index] if command == "check" else \
        ["map", "-q", index, world["reads_path"], "-o", tmp_path / "out.sam"]
    assert_refused(args, f"{index}: ", "index", folder=tmp_path, inputs=[index, world["reads_path"]])


def _metadata_offsets(path):
    """File offsets of HDF5 metadata: the superblock and every object header, B-tree, heap and symbol node."""
    data = Path(path).read_bytes()
    found = {"superblock_signature": 0, "superblock_version": 8, "superblock_addresses": 24}
    for signature in (b"OHDR", b"TREE", b"HEAP", b"SNOD", b"GCOL", b"FRHP", b"BTHD"):
        at = data.find(signature)
        if at >= 0:
            found[signature.decode().lower()] = at
    with h5py.File(path, "r") as h5:
        for name in ("/", "contigs", "qgrams", "sequence", "contigs/names", "qgrams/buckets"):
            key = "root" if name == "/" else name.replace("/", "_")
            found[f"object_header_{key}"] = h5py.h5o.get_info(h5[name].id).addr
    return found


METADATA = ["superblock_signature", "superblock_version", "superblock_addresses", "tree", "heap", "snod", "gcol",
            "object_header_root", "object_header_contigs", "object_header_qgrams", "object_header_sequence",
            "object_header_contigs_names", "object_header_qgrams_buckets"]


@pytest.mark.parametrize("command", ["info", "check", "map"])
@pytest.mark.parametrize("where", METADATA)
def test_damaged_hdf5_metadata_is_refused(world, tmp_path, where, command):
    index = _copy_index(world, tmp_path)
    offsets = _metadata_offsets(index)
    assert where in offsets, sorted(offsets)
    _flip_at(index, offsets[where], 8)
    args = {"info": ["info", index], "check": ["index", "--check", index],
            "map": ["map", "-q", index, world["reads_path"], "-o", tmp_path / "out.sam"]}[command]
    assert_refused(args, f"{index}: ", "index", folder=tmp_path, inputs=[index, world["reads_path"]])


@pytest.mark.parametrize("command", ["info", "check", "map"])
@pytest.mark.parametrize("keep", [0.0, 0.01, 0.33, 0.66, 0.999])
def test_an_index_cut_short_is_refused(world, tmp_path, keep, command):
    index = tmp_path / "cut.h5"
    data = world["index"].read_bytes()
    index.write_bytes(data[: int(len(data) * keep)])
    args = {"info": ["info", index], "check": ["index", "--check", index],
            "map": ["map", "-q", index, world["reads_path"], "-o", tmp_path / "out.sam"]}[command]
    assert_refused(args, f"{index}: ", folder=tmp_path, inputs=[index, world["reads_path"]])


ATTRIBUTE_DAMAGE = [("q", 0), ("q", 3), ("q", 17), ("q", 40), ("q", -1), ("q", "sixteen"), ("step", 0), ("step", -2),
                    ("contig_gap", -1), ("format_version", 999), ("format", "something else"), ("checksum", "0" * 32),
                    ("total_bases", -5), ("n_contigs", 7), ("mask_threshold", -1)]


@pytest.mark.parametrize("name, value", ATTRIBUTE_DAMAGE, ids=[f"{n}={v}" for n, v in ATTRIBUTE_DAMAGE])
def test_a_hostile_root_attribute_is_refused_or_harmless(world, tmp_path, name, value):
    """The root attributes describe the arrays (q, step, ...): a value the arrays cannot have is refused with
    one line naming the index; one that changes nothing the mapper uses still maps every read."""
    index = _copy_index(world, tmp_path)
    with h5py.File(index, "r+") as h5:
        h5.attrs[name] = value
    out = tmp_path / "out.sam"
    before = listing(tmp_path)
    run = peanut("map", "-q", index, world["reads_path"], "-o", out)
    assert "Traceback" not in run.err
    if run.rc == 0:
        # descriptive only: the mapper takes the sizes from the arrays themselves
        assert name in ("total_bases", "n_contigs", "mask_threshold", "contig_gap"), f"{name}={value!r} was accepted"
        assert len(sam_records(out)) == N_READS
    else:
        assert_one_line_error(run, f"{index}: ")
        assert listing(tmp_path) == before


# --- numeric options at and beyond their limits ---------------------------------------------------------------


def _numeric_options():
    """(command, flag, field, lo, hi, lo_open, integral) of every range-checked option."""
    out = []
    for command, classes in (("index", [options.IndexOptions]),
                             ("map", [options.MapOptions, options.Scoring, options.RunOptions])):
        for cls in classes:
            for f in fields(cls):
                m = f.metadata
                if m.get("lo") is None and m.get("hi") is None:
                    continue
                integral = isinstance(f.default, int) or f.type in (int, "int")
                out.append((command, m["flags"][0], f.name, m["lo"], m["hi"], m["lo_open"], integral))
    return out


NUMERIC = _numeric_options()


def _beyond(lo, hi, lo_open, integral, flag):
    values = {"below": lo if lo_open else lo - 1, "huge_negative": -(10 ** 30), "not_a_number": "nan",
              "infinite": "inf"}
    if hi is not None:
        values["above"] = hi + 1
        values["huge"] = 10 ** 30
    if integral:
        values["fraction"] = lo + 1.5
    if flag == "--memory-cap":  # a size: below 1 MiB, and sizes that are no number
        values = {"below": "1023K", "zero": "0", "negative": "-5G", "infinite": "inf", "huge": "1e400",
                  "fraction_of_a_byte": "0.5"}
    if flag in ("-i",):  # a fraction, or a percent above 1
        values = {"zero": 0, "negative": -5, "above_100_percent": 100.5, "not_a_number": "nan", "infinite": "inf"}
    return values


BEYOND = [(c, flag, what, value) for c, flag, _, lo, hi, lo_open, integral in NUMERIC
          for what, value in sorted(_beyond(lo, hi, lo_open, integral, flag).items())]


@pytest.mark.parametrize("command, flag, what, value", BEYOND, ids=[f"{c}{f}-{w}" for c, f, w, _ in BEYOND])
def test_an_option_beyond_its_limit_is_refused_naming_it(world, tmp_path, command, flag, what, value):
    out = tmp_path / ("o.h5" if command == "index" else "o.sam")
    source = [world["fasta"]] if command == "index" else [world["index"], world["reads_path"]]
    before_files, before_sums = listing(tmp_path), digest(source)
    run = peanut(command, *source, "-o", out, flag, value)
    assert "Traceback" not in run.err
    lines = run.err.splitlines()
    if run.rc == 2:  # not a number of the option's kind: argparse's usage error, naming the option
        assert lines[-1].startswith(f"peanut {command}: error: argument {flag}"), run.err
    else:
        assert_one_line_error(run, flag)
    assert listing(tmp_path) == before_files and digest(source) == before_sums


def _at(lo, hi, lo_open, integral, flag):
    values = {"lowest": lo if not lo_open else 1e-9}
    if hi is not None:
        values["highest"] = hi
    if flag == "--memory-cap":
        values = {"lowest": "1M", "tebibytes": "64T"}
    return values


AT = [(c, flag, what, value) for c, flag, _, lo, hi, lo_open, integral in NUMERIC
      for what, value in sorted(_at(lo, hi, lo_open, integral, flag).items())]


@pytest.mark.parametrize("command, flag, what, value", AT, ids=[f"{c}{f}-{w}" for c, f, w, _ in AT])
def test_an_option_at_its_limit_runs_to_the_end(world, tmp_path, command, flag, what, value):
    """At the limit the option is accepted and the run completes (a memory cap too small for the q-gram
    table is the one limit that ends in a one-line error instead)."""
    out = tmp_path / ("o.h5" if command == "index" else "o.sam")
    if command == "index":
        fasta = tmp_path / "small.fa"
        fasta.write_bytes(world["fasta"].read_bytes()[:30_000])
        run = peanut("index", "--quiet", fasta, "-o", out, flag, value)
        assert run.rc == 0 and run.err == "", run.err
        assert peanut("index", "--check", out).rc == 0
        return
    reads = tmp_path / "few.fq"
    reads.write_bytes(fastq(world["reads"][:20]))
    extra = ["-E", "1"] if flag == "-O" and value == 0 else []
    run = peanut("map", "-q", world["index"], reads, "-o", out, flag, value, *extra)
    if flag == "--memory-cap" and what == "lowest":
        assert_one_line_error(run, "do not fit")
        assert listing(tmp_path) == ["few.fq"]
        return
    assert run.rc == 0 and run.err == "", run.err
    assert len([r for r in sam_records(out) if not int(r.split("\t")[1]) & 0x100]) == 20


# --- outputs ------------------------------------------------------------------------------------------------


def test_map_output_that_must_not_be_written_is_refused(world, tmp_path):
    """-o naming a directory, an input (reads, mates, index, --reference), a missing folder, a CRAM name or
    a format the name contradicts: refused before any work; nothing changes."""
    inputs = {}
    for name in ("reads.fq", "mates.fq", "ref.h5", "ref.fa"):
        shutil.copy({"reads.fq": world["reads_path"], "mates.fq": world["mates_path"], "ref.h5": world["index"],
                     "ref.fa": world["fasta"]}[name], tmp_path / name)
        inputs[name] = tmp_path / name
    (tmp_path / "outdir").mkdir()
    base = ["map", "-q", inputs["ref.h5"], inputs["reads.fq"], inputs["mates.fq"], "--reference", inputs["ref.fa"]]
    cases = [(tmp_path / "outdir", [], "is a directory"), (inputs["reads.fq"], [], "overwrite an input"),
             (inputs["mates.fq"], [], "overwrite an input"), (inputs["ref.h5"], [], "overwrite an input"),
             (inputs["ref.fa"], [], "overwrite an input"), (tmp_path / "nope" / "o.sam", [], "no such directory"),
             (tmp_path / "o.cram", [], "CRAM"), (tmp_path / "o.sam", ["--output-format", "bam"], "contradicts")]
    for out, extra, needle in cases:
        assert_refused(base + ["-o", out] + extra, out, needle, folder=tmp_path, inputs=list(inputs.values()))


def test_index_output_that_must_not_be_written_is_refused(world, tmp_path):
    fasta = tmp_path / "ref.fa"
    shutil.copy(world["fasta"], fasta)
    (tmp_path / "outdir").mkdir()
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    device = tmp_path / "full"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's numbers
    for out, needle in ((fasta, "overwrite the input"), (tmp_path / "outdir", "directory"),
                        (tmp_path / "nope" / "x.h5", "does not exist"), (fifo, "not a regular file"),
                        (device, "not a regular file")):
        assert_refused(["index", "--quiet", fasta, "-o", out], out, needle, folder=tmp_path, inputs=[fasta])
    assert os.path.exists(fifo) and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert stat.S_ISCHR(os.stat(device).st_mode)


@pytest.mark.parametrize("fmt", ["sam", "bam"])
@pytest.mark.parametrize("how", ["option", "redirect"])
def test_output_to_a_full_device_is_one_line(world, tmp_path, fmt, how):
    """A device that is always full (a copy of /dev/full's node): one error line, exit 1, the node left as it
    was and nothing beside it. htslib does not say why a BAM write failed, so only SAM names the reason."""
    device = tmp_path / "full"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    args = ["map", "-q", world["index"], world["reads_path"], "--output-format", fmt]
    reason = "No space left on device" if fmt == "sam" else "cannot write"
    if how == "option":
        run = assert_refused(args + ["-o", device], device, reason, folder=tmp_path, inputs=[world["reads_path"]])
    else:
        run = assert_refused(args, "standard output", reason, folder=tmp_path, inputs=[world["reads_path"]],
                             redirect=f"> {device}")
    assert stat.S_ISCHR(os.stat(device).st_mode), run


@pytest.mark.parametrize("fmt", ["sam", "bam"])
def test_a_closed_pipe_ends_quietly(world, fmt):
    run = subprocess.run(["bash", "-c", f'"{sys.executable}" -m peanut_py map -q --output-format {fmt} "$1" "$2" '
                          '| head -c 100 > /dev/null; echo "${PIPESTATUS[0]}" >&2', "_", str(world["index"]),
                          str(world["reads_path"])], capture_output=True, text=True, timeout=TIME_LIMIT,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert run.stderr.strip() in ("141", "0"), run.stderr


@pytest.mark.parametrize("stream", ["stdin", "stdout", "stderr"])
@pytest.mark.parametrize("command", ["map_to_stdout", "map_to_file", "index", "info", "check", "devices"])
def test_closed_standard_streams(world, tmp_path, command, stream):
    """A closed stream the command does not need changes nothing; a closed standard output it writes to is
    one error line; a closed standard error leaves only the exit status to tell."""
    out = tmp_path / ("o.h5" if command == "index" else "o.sam")
    args = {"map_to_stdout": ["map", "-q", world["index"], world["reads_path"]],
            "map_to_file": ["map", "-q", world["index"], world["reads_path"], "-o", out],
            "index": ["index", "--quiet", world["fasta"], "-o", out], "info": ["info", world["index"]],
            "check": ["index", "--check", world["index"]], "devices": ["devices"]}[command]
    fd = {"stdin": "<&-", "stdout": ">&-", "stderr": "2>&-"}[stream]
    before = digest([world["index"], world["reads_path"], world["fasta"]])
    run = peanut(*args, redirect=fd)
    assert "Traceback" not in run.err
    writes_stdout = command in ("map_to_stdout", "info", "check", "devices")
    if stream == "stdout" and writes_stdout:
        assert_one_line_error(run, "standard output")
        assert listing(tmp_path) == []
    else:
        assert run.rc == 0, run.err
        if stream == "stderr":
            assert run.err == ""
        if command == "map_to_file":
            assert len(sam_records(out)) == N_READS
        if command == "index":
            assert peanut("index", "--check", out).rc == 0
    assert digest([world["index"], world["reads_path"], world["fasta"]]) == before


# --- signals and a full file system -------------------------------------------------------------------------


def _wait_for_temporary(folder, proc, timeout=TIME_LIMIT):
    t = time.time()
    while time.time() - t < timeout and proc.poll() is None:
        if any(p.name.endswith(".tmp") for p in folder.iterdir()):
            return True
        time.sleep(0.01)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("what", ["map_sam", "map_bam", "index"])
def test_a_signal_mid_run_and_a_rerun(world, tmp_path, what, sig):
    """A signal while the output's temporary file is being written: SIGINT and SIGTERM end with 130 and no
    file; after SIGKILL the temporary file stays. The rerun succeeds and leaves only the output."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if what == "index":
        # chr20 (seconds of writing): with a smaller genome the build can end between the temporary file
        # showing up and the signal on a loaded machine, and the signal then meets a finished process
        source = [require_shared_data("human", "GRCh37_chr20.fa.gz")]
        out = tmp_path / "ref.h5"
        args = ["index", "--quiet", *source, "-o", out]
    else:
        source = [world["index"], require_shared_data("human", "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz")]
        out = tmp_path / ("out.sam" if what == "map_sam" else "out.bam")
        args = ["map", "-q", *source, "-o", out, "--batch-size", "500"]
    before = digest(source)
    proc = subprocess.Popen([sys.executable, "-m", "peanut_py", *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert _wait_for_temporary(tmp_path, proc), "the run never started writing"
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=TIME_LIMIT)
    assert "Traceback" not in err
    if sig == "SIGKILL":
        assert proc.returncode == -signal.SIGKILL
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] and not out.exists()
    else:
        assert proc.returncode == 130, err
        assert listing(tmp_path) == [] and "interrupted" in err
    rerun = peanut(*[a for a in args if a != "--quiet" and a != "-q"])
    assert rerun.rc == 0, rerun.err
    assert ("removed 1 temporary file" in rerun.err) == (sig == "SIGKILL"), rerun.err
    assert listing(tmp_path) == [out.name]
    assert digest(source) == before


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs (only root may mount one): where the output runs out of room half-way."""
    if os.geteuid() != 0:
        pytest.skip("a full file system needs a small tmpfs, and only root may mount one (not running as root)")
    mount = tmp_path / "full"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here although root (a container without CAP_SYS_ADMIN?): "
                    f"{made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("what", ["map_sam", "map_bam", "index"])
def test_a_full_file_system_is_one_line_and_leaves_nothing(world, full_disk, what):
    reads = require_shared_data("human", "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz")  # SAM and BAM > 1 MiB
    if what == "index":
        out, args = full_disk / "ref.h5", ["index", "--quiet", world["fasta"]]
    else:
        out = full_disk / ("out.sam" if what == "map_sam" else "out.bam")
        args = ["map", "-q", world["index"], reads]
    assert_refused(args + ["-o", out], str(out), "No space left on device", folder=full_disk,
                   inputs=[world["index"], reads, world["fasta"]])
