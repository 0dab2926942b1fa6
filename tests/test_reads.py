"""reads.py: FASTQ/FASTA parsing into ReadBatch, batching, pairs, one-line errors with record numbers, and
inputs read as streams (FIFOs, pipes, standard input)."""
import bz2
import contextlib
import gzip
import lzma
import os
import random
import subprocess
import sys
import threading
import time
import zlib

import dnaio
import numpy as np
import pysam
import pytest

import peanut_py.reads as reads_module
from helpers import REPO, require_shared_data
from peanut_py import _fastq as fastq
from peanut_py.errors import InputError
from peanut_py.input_streams import check_inputs
from peanut_py.reads import ReadBatch, read_batches, read_interleaved_batches, read_pair_batches

# Reference base codes, written out per base: A0 C1 G2 T3, every other letter 4.
REF_CODE = {**{c: 4 for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}, "A": 0, "C": 1, "G": 2, "T": 3}


def ref_codes(seq):
    return [REF_CODE[c] for c in seq.upper().replace(".", "N").replace("-", "N")]


def write(tmp_path, name, data, compress=None):
    path = tmp_path / name
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(compressed(data, compress))
    return str(path)


def compressed(data, compress):
    if compress == "zst":
        from backports import zstd

        return zstd.compress(data)
    return {None: lambda d: d, "gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[compress](data)


def random_records(rng, n, min_len=0, max_len=150, alphabet="ACGTACGTACGTNacgtRYK"):
    recs = []
    for i in range(n):
        length = rng.randint(min_len, max_len)
        seq = "".join(rng.choice(alphabet) for _ in range(length))
        qual = "".join(chr(rng.randint(33, 126)) for _ in range(length))
        recs.append((f"read{i}", f"comment {i}" if i % 3 == 0 else "", seq, qual))
    return recs


def fastq_text(recs, suffix=""):
    out = []
    for name, comment, seq, qual in recs:
        header = f"@{name}{suffix}" + (f" {comment}" if comment else "")
        out.append(f"{header}\n{seq}\n+\n{qual}\n")
    return "".join(out)


def fasta_text(recs, width=60):
    out = []
    for name, comment, seq, _ in recs:
        header = f">{name}" + (f" {comment}" if comment else "")
        lines = [seq[i : i + width] for i in range(0, len(seq), width)]
        out.append(header + "\n" + "".join(line + "\n" for line in lines))
    return "".join(out)


def concat(batches):
    """One ReadBatch-like tuple of everything in `batches`."""
    names = [n for b in batches for n in b.names]
    seqs = [s for b in batches for s in b.seqs]
    quals = None if not batches or batches[0].quals is None else [q for b in batches for q in b.quals]
    codes = np.concatenate([b.codes for b in batches]) if batches else np.zeros(0, np.uint8)
    return names, seqs, quals, codes


def check_batch_invariants(batch):
    assert isinstance(batch, ReadBatch)
    assert batch.codes.dtype == np.uint8 and batch.offsets.dtype == np.int64
    assert batch.n == len(batch.names) == len(batch.seqs) == len(batch.offsets) - 1
    assert batch.offsets[0] == 0 and batch.offsets[-1] == batch.codes.size
    for i, seq in enumerate(batch.seqs):
        assert isinstance(seq, bytes)
        assert batch.codes[batch.offsets[i] : batch.offsets[i + 1]].tolist() == ref_codes(seq.decode())
        if batch.quals is not None:
            assert len(batch.quals[i]) == len(seq)


# --- content ------------------------------------------------------------------------------------------------


def test_fastq_content_matches_records(tmp_path):
    rng = random.Random(1)
    recs = random_records(rng, 200)
    path = write(tmp_path, "r.fq", fastq_text(recs))
    (batch,) = list(read_batches(path))
    check_batch_invariants(batch)
    assert batch.first_record == 1 and not batch.paired
    assert batch.names == [r[0] for r in recs]
    assert batch.seqs == [r[2].upper().encode() for r in recs]
    assert batch.quals == [r[3].encode() for r in recs]
    assert batch.lengths.tolist() == [len(r[2]) for r in recs]
    assert batch.codes.tolist() == [c for r in recs for c in ref_codes(r[2])]


def test_fasta_multiline_crlf_empty_records(tmp_path):
    rng = random.Random(2)
    recs = random_records(rng, 50, max_len=300) + [("empty", "", "", "")]
    text = fasta_text(recs, width=70)
    for name, data in (("lf.fa", text), ("crlf.fa", text.replace("\n", "\r\n"))):
        path = write(tmp_path, name, data)
        batches = list(read_batches(path, max_reads=7))
        for b in batches:
            check_batch_invariants(b)
            assert b.quals is None
        names, seqs, quals, _ = concat(batches)
        assert names == [r[0] for r in recs]
        assert seqs == [r[2].upper().encode() for r in recs]
        assert seqs[-1] == b""


def test_fasta_blocks_larger_than_parser_block(tmp_path):
    # Records that straddle the FASTA parser's block boundaries must come out whole.
    rng = random.Random(3)
    recs = random_records(rng, 40, max_len=200)
    path = write(tmp_path, "r.fa", fasta_text(recs, width=13))
    names, seqs, _, _ = concat(list(read_batches(path, max_reads=5, block_size=37)))
    assert names == [r[0] for r in recs]
    assert seqs == [r[2].upper().encode() for r in recs]


def test_dot_and_dash_read_as_n_and_long_reads_kept(tmp_path):
    long_seq = "ACGT" * 700  # 2800 bases: longer than MAX_READ_LENGTH; kept whole, the mapper decides
    text = f"@a\nAC.-gt\n+\nIIIIII\n@long\n{long_seq}\n+\n{'I' * len(long_seq)}\n"
    (batch,) = list(read_batches(write(tmp_path, "r.fq", text)))
    assert batch.seqs == [b"ACNNGT", long_seq.encode()]
    assert batch.codes[:6].tolist() == [0, 1, 4, 4, 2, 3]
    assert batch.lengths.tolist() == [6, 2800]


@pytest.mark.parametrize("compress", ["gz", "bz2", "xz", "zst"])
def test_compressed_equals_plain_detected_by_magic(tmp_path, compress):
    rng = random.Random(4)
    recs = random_records(rng, 300)
    plain = write(tmp_path, "plain.fq.gz", fastq_text(recs))  # a misleading name on purpose
    packed = write(tmp_path, "packed.fastq", fastq_text(recs), compress=compress)
    a = concat(list(read_batches(plain, max_reads=64)))
    b = concat(list(read_batches(packed, max_reads=64)))
    assert a[:3] == b[:3] and np.array_equal(a[3], b[3])


def test_concatenated_gzip_members(tmp_path):
    rng = random.Random(5)
    recs = random_records(rng, 20)
    path = tmp_path / "multi.fq.gz"
    path.write_bytes(gzip.compress(fastq_text(recs[:10]).encode()) + gzip.compress(fastq_text(recs[10:]).encode()))
    names, _, _, _ = concat(list(read_batches(str(path))))
    assert names == [r[0] for r in recs]


@pytest.mark.parametrize("compress", ["bz2", "xz", "zst"])
def test_concatenated_streams(tmp_path, compress):
    # pbzip2, xz and zstd write several streams or frames one after the other, as bgzip writes members
    rng = random.Random(6)
    recs = random_records(rng, 30)
    path = tmp_path / "multi.fq.x"
    path.write_bytes(b"".join(compressed(fastq_text(recs[i : i + 10]).encode(), compress) for i in (0, 10, 20)))
    names, _, _, _ = concat(list(read_batches(str(path))))
    assert names == [r[0] for r in recs]


@pytest.mark.parametrize("compress", ["gz", "bz2", "xz", "zst"])
def test_highly_compressible_input_is_decompressed_in_steps(tmp_path, compress):
    # 12 MB of text from a few kB: more than one decompression step's bounded output, for every format
    long_seq = "A" * 6_000_000
    text = f"@a\nACGT\n+\nIIII\n@long\n{long_seq}\n+\n{'I' * len(long_seq)}\n@b\nTT\n+\nII\n"
    path = write(tmp_path, "long.fq.x", text, compress=compress)
    assert os.path.getsize(path) < 100_000
    (batch,) = list(read_batches(path))
    assert batch.names == ["a", "long", "b"] and batch.lengths.tolist() == [4, 6_000_000, 2]
    assert batch.seqs[1] == long_seq.encode()


def test_empty_file_is_zero_reads(tmp_path):
    assert list(read_batches(write(tmp_path, "e.fq", ""))) == []
    assert list(read_batches(write(tmp_path, "e.fq.gz", "", compress="gz"))) == []
    e1, e2 = write(tmp_path, "e1.fq", ""), write(tmp_path, "e2.fq", "")
    assert list(read_pair_batches(e1, e2)) == []


def test_blank_lines_after_last_record_are_accepted(tmp_path):
    for tail in ("\n", "\n\n\n", "\r\n", "  \n"):
        (batch,) = list(read_batches(write(tmp_path, "b.fq", "@a\nAC\n+\nII\n@b\nG\n+\nI\n" + tail)))
        assert batch.names == ["a", "b"] and batch.seqs == [b"AC", b"G"]


def test_repeated_name_on_plus_line(tmp_path):
    (batch,) = list(read_batches(write(tmp_path, "p.fq", "@a x\nAC\n+a x\nII\n@b\nG\n+\nI\n")))
    assert batch.names == ["a", "b"] and batch.quals == [b"II", b"I"]


def test_final_record_without_newline(tmp_path):
    (batch,) = list(read_batches(write(tmp_path, "n.fq", "@a\nAC\n+\nII\n@b\nGT\n+\nII")))
    assert batch.seqs == [b"AC", b"GT"] and batch.quals == [b"II", b"II"]


def test_mixed_lengths_and_empty_reads_and_names(tmp_path):
    text = "@r1 c1\nACGT\n+\nIIII\n@r2\t tab comment\n\n+\n\n@r3/1\nA\n+\n#\n"
    (batch,) = list(read_batches(write(tmp_path, "m.fq", text)))
    assert batch.names == ["r1", "r2", "r3/1"]  # single-end: /1 is part of the name
    assert batch.seqs == [b"ACGT", b"", b"A"] and batch.offsets.tolist() == [0, 4, 4, 5]


# --- batching -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_fastq(tmp_path_factory):
    rng = random.Random(6)
    recs = random_records(rng, 257, min_len=0, max_len=400)
    path = write(tmp_path_factory.mktemp("mixed"), "m.fq.gz", fastq_text(recs), compress="gz")
    return path, recs


@pytest.mark.parametrize(
    "max_reads,max_bases", [(1, None), (7, None), (100, None), (None, None), (None, 1), (None, 500), (13, 2000)]
)
def test_batches_concatenate_to_whole_file(mixed_fastq, max_reads, max_bases):
    path, recs = mixed_fastq
    (whole,) = list(read_batches(path))
    batches = list(read_batches(path, max_reads=max_reads, max_bases=max_bases))
    names, seqs, quals, codes = concat(batches)
    assert names == whole.names and seqs == whole.seqs and quals == whole.quals
    assert np.array_equal(codes, whole.codes)
    record = 1
    for b in batches:
        check_batch_invariants(b)
        assert b.first_record == record
        record += b.n
        if max_reads is not None:
            assert b.n <= max_reads
        if max_bases is not None:
            assert b.codes.size <= max_bases or b.n == 1
    if max_bases is not None:  # greedy: a batch stops only when the next read would not fit
        for b, nxt in zip(batches, batches[1:]):
            assert b.n == max_reads or b.codes.size + nxt.lengths[0] > max_bases


def test_bad_limits():
    with pytest.raises(ValueError):
        list(read_batches("x", max_reads=0))
    with pytest.raises(ValueError):
        list(read_batches("x", max_bases=0))


# --- pairs ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory):
    rng = random.Random(7)
    r1 = random_records(rng, 101, max_len=250)
    r2 = [(n, "2:N:0", s[::-1], q[::-1]) for n, _, s, q in r1]
    d = tmp_path_factory.mktemp("pairs")
    p1 = write(d, "r_1.fq", fastq_text(r1, "/1"))
    p2 = write(d, "r_2.fq.gz", fastq_text(r2, "/2"), compress="gz")
    inter = "".join(fastq_text([a], "/1") + fastq_text([b], "/2") for a, b in zip(r1, r2))
    pi = write(d, "inter.fq", inter)
    return p1, p2, pi, r1, r2


@pytest.mark.parametrize(
    "max_reads,max_bases", [(None, None), (1, None), (2, None), (9, None), (None, 300), (10, 1000)]
)
def test_pair_batches(pair_files, max_reads, max_bases):
    p1, p2, pi, r1, r2 = pair_files
    batches = list(read_pair_batches(p1, p2, max_reads=max_reads, max_bases=max_bases))
    names, seqs, quals, _ = concat(batches)
    assert names[0::2] == names[1::2] == [r[0] for r in r1]  # /1 and /2 removed
    assert seqs[0::2] == [r[2].upper().encode() for r in r1]
    assert seqs[1::2] == [r[2].upper().encode() for r in r2]
    assert quals[1::2] == [r[3].encode() for r in r2]
    pair = 1
    for b in batches:
        check_batch_invariants(b)
        assert b.paired and b.n % 2 == 0 and b.first_record == pair
        pair += b.n // 2
        if max_reads is not None:
            assert b.n <= max(2, max_reads)
        if max_bases is not None:
            assert b.codes.size <= max_bases or b.n == 2
    inter = list(read_interleaved_batches(pi, max_reads=max_reads, max_bases=max_bases))
    assert [b.n for b in inter] == [b.n for b in batches]
    assert [b.first_record for b in inter] == [2 * b.first_record - 1 for b in batches]
    assert concat(inter)[:3] == (names, seqs, quals)


def test_phix_edge_cases():
    d = str(require_shared_data("phix"))
    batches = list(read_pair_batches(os.path.join(d, "phix.1.fastq"), os.path.join(d, "phix.2.fastq"), max_reads=16))
    names, seqs, quals, _ = concat(batches)
    assert len(names) == 90
    assert names[0:2] == ["SRR1377138.1", "SRR1377138.1"]  # comment dropped
    assert names[4:6] == ["SRR1377138.3", "SRR1377138.3"]  # /1 and /2 dropped
    assert names[-2:] == ["empty", "empty"] and seqs[-2:] == [b"", b""] and quals[-2:] == [b"", b""]
    assert seqs[2].startswith(b"NGACGAATCACCAGAACGGAAAA")  # 'ngacgaaTCACCAGAACGGaaaa' uppercased
    assert all(s == s.upper() for s in seqs)
    # Independent reference: pysam's kseq parser on the same files.
    with pysam.FastxFile(os.path.join(d, "phix.1.fastq")) as f:
        ref = list(f)
    assert seqs[0::2] == [r.sequence.upper().encode() for r in ref]
    assert quals[0::2] == [(r.quality or "").encode() for r in ref]
    for b in batches:
        check_batch_invariants(b)


def test_real_gzip_reads_match_pysam():
    path = str(require_shared_data("yeast", "SRR5204809_Spt5-ChIP_Input1_SacCer_ChIP-Seq_ss100k_R1.fastq.gz"))
    batches = list(read_batches(path, max_reads=30000))
    names, seqs, quals, codes = concat(batches)
    with pysam.FastxFile(path) as f:
        ref = [(r.name, r.sequence, r.quality) for r in f]
    assert len(names) == len(ref) == 100000
    assert names == [r[0] for r in ref]
    assert seqs == [r[1].upper().encode() for r in ref]
    assert quals == [r[2].encode() for r in ref]
    lut = np.full(256, 4, np.uint8)
    for i, c in enumerate(b"ACGT"):
        lut[c] = i
    assert np.array_equal(codes, lut[np.frombuffer(b"".join(seqs), np.uint8)])


# --- errors ---------------------------------------------------------------------------------------------------

GOOD = "@r1 c\nACGT\n+\nIIII\n@r2\nACGTA\n+\nIIIII\n@r3\nAC\n+\nII\n"


def expect_error(path, record, fragment, reader=read_batches):
    with pytest.raises(InputError) as info:
        for _ in reader(path) if isinstance(path, str) else reader(*path):
            pass
    message = str(info.value)
    assert "\n" not in message
    where = path if isinstance(path, str) else None
    if where is not None:
        assert message.startswith(f"{where}, record {record}: " if record else f"{where}: "), message
    assert info.value.record == record
    assert fragment in message, message
    return message


@pytest.mark.parametrize(
    "name,data,record,fragment",
    [
        ("trunc_header.fq", GOOD + "@r4\n", 4, "truncated FASTQ record"),
        ("trunc_header_nonl.fq", GOOD + "@r4", 4, "truncated FASTQ record"),
        ("trunc_seq.fq", GOOD + "@r4\nACGT\n", 4, "truncated FASTQ record"),
        ("trunc_plus.fq", GOOD + "@r4\nACGT\n+\n", 4, "truncated FASTQ record"),
        ("trunc_qual.fq", GOOD + "@r4\nACGT\n+\nII", 4, "quality string length differs"),
        ("qual_short.fq", GOOD.replace("IIIII", "IIII"), 2, "quality string length differs"),
        ("qual_long.fq", GOOD.replace("IIIII", "IIIIII"), 2, "quality string length differs"),
        ("no_plus.fq", GOOD.replace("ACGTA\n+", "ACGTA\nX"), 2, "expected to start with '+'"),
        ("bad_header.fq", GOOD.replace("@r3", "r3"), 3, "expected to start with '@'"),
        ("text.fq", "hello world\nnot a read file\n", 1, "not FASTQ or FASTA"),
        ("binary.fq", bytes(range(256)) * 8, 1, "not FASTQ or FASTA"),
        ("non_ascii.fq", (GOOD + "@r4\nAC").encode() + b"\xc3\xa9T\n+\nIIII\n", 4, "binary data"),
        ("non_ascii.fa", b">a\nACGT\n>b\nAC\xffGT\n", 2, "binary data"),
        ("bad_base.fq", GOOD.replace("ACGTA", "AC1TA"), 2, "invalid character '1'"),
        ("bad_base.fa", ">a\nACGT\n>b\nACG*T\n>c\nA\n", 2, "invalid character '*'"),
        ("bad_qual.fq", GOOD.replace("IIIII", "II II"), 2, "invalid quality character ' '"),
        ("control_char.fq", GOOD.replace("ACGTA", "AC\x01TA"), 2, "invalid character '\\x01'"),
        ("leading_blank.fq", "\n" + GOOD, 1, "not FASTQ or FASTA"),
        ("second_header.fq", GOOD.replace("ACGTA\n+", "ACGTA\n+rX"), 2, "descriptions don't match"),
    ],
)
def test_malformed_input(tmp_path, name, data, record, fragment):
    path = write(tmp_path, name, data)
    expect_error(path, record, fragment)
    # Small batches: the record number is absolute, not relative to the batch.
    with pytest.raises(InputError) as info:
        list(read_batches(path, max_reads=1))
    assert info.value.record == record


def test_binary_far_into_file_names_its_record(tmp_path):
    rng = random.Random(8)
    recs = random_records(rng, 3000, alphabet="ACGT")
    data = fastq_text(recs).encode()
    cut = data.index(b"\n@read2500\n") + 1
    data = data[:cut] + b"@read2500\n\xff\xfe\x00\n+\nIII\n" + data[cut:]
    expect_error(write(tmp_path, "junk.fq", data), 2501, "binary data")


def test_binary_in_fasta_across_blocks(tmp_path):
    rng = random.Random(10)
    recs = random_records(rng, 60, alphabet="ACGT")
    data = fasta_text(recs, width=30).encode()
    cut = data.index(b">read41\n")
    data = data[:cut] + b">read41\nAC\xfeGT\n" + data[cut:]
    for max_reads in (None, 1, 7):
        with pytest.raises(InputError) as info:
            list(read_batches(write(tmp_path, "b.fa", data), max_reads=max_reads, block_size=50))
        assert info.value.record == 42 and "binary data" in str(info.value)


def test_missing_file_and_directory(tmp_path):
    expect_error(str(tmp_path / "nope.fq"), None, "no such file")
    expect_error(str(tmp_path), None, "is a directory")


def truncated_gzip(recs, keep):
    """gzip of `recs` whose data breaks off inside record keep + 1 (records 1..keep decompress intact)."""
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    head = comp.compress(fastq_text(recs[:keep]).encode()) + comp.flush(zlib.Z_SYNC_FLUSH)
    rest = comp.compress(fastq_text(recs[keep:]).encode()) + comp.flush()
    return head + rest[: min(len(rest) // 2, 40)]


@pytest.mark.parametrize("keep", [0, 5, 2000])
def test_truncated_gzip(tmp_path, keep):
    rng = random.Random(9)
    recs = random_records(rng, 4000, alphabet="ACGT")
    path = tmp_path / "t.fq.gz"
    path.write_bytes(truncated_gzip(recs, keep))
    expect_error(str(path), keep + 1, "truncated or corrupt gzip data")


def truncated_gzip_fasta(recs, keep):
    """gzip of FASTA `recs` whose intact text ends inside the header of record keep + 1."""
    text = fasta_text(recs).encode()
    cut = len(fasta_text(recs[:keep])) + 4
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    head = comp.compress(text[:cut]) + comp.flush(zlib.Z_SYNC_FLUSH)
    rest = comp.compress(text[cut:]) + comp.flush()
    return head + rest[: min(len(rest) // 2, 40)]


@pytest.mark.parametrize("keep", [0, 5, 2000])
def test_truncated_gzip_fasta(tmp_path, keep):
    recs = random_records(random.Random(9), 4000, alphabet="ACGT")
    path = tmp_path / "t.fa.gz"
    path.write_bytes(truncated_gzip_fasta(recs, keep))
    expect_error(str(path), keep + 1, "truncated or corrupt gzip data")
    with pytest.raises(InputError) as info:
        list(read_batches(str(path), max_reads=7, block_size=1000))
    assert info.value.record == keep + 1


def test_gzip_with_trailing_garbage(tmp_path):
    path = tmp_path / "g.fq.gz"
    path.write_bytes(gzip.compress(GOOD.encode()) + b"this is not gzip")
    expect_error(str(path), 4, "truncated or corrupt gzip data")


def test_mate_names_differ(tmp_path):
    p1 = write(tmp_path, "a_1.fq", "@p1/1\nAC\n+\nII\n@p2/1\nAC\n+\nII\n@p3/1\nAC\n+\nII\n")
    p2 = write(tmp_path, "a_2.fq", "@p1/2 x\nAC\n+\nII\n@q2/2\nAC\n+\nII\n@p3/2\nAC\n+\nII\n")
    with pytest.raises(InputError) as info:
        list(read_pair_batches(p1, p2, max_reads=2))
    message = str(info.value)
    assert message.startswith(f"{p1}, record 2: ") and p2 in message
    assert "'p2'" in message and "'q2'" in message


@pytest.mark.parametrize("short_first", [True, False])
@pytest.mark.parametrize("max_reads", [None, 2, 6])
def test_pair_files_of_different_length(tmp_path, short_first, max_reads):
    long_text = "".join(f"@p{i}\nACG\n+\nIII\n" for i in range(5))
    short_text = "".join(f"@p{i}\nACG\n+\nIII\n" for i in range(3))
    long_path = write(tmp_path, "long.fq", long_text)
    short_path = write(tmp_path, "short.fq", short_text)
    args = (short_path, long_path) if short_first else (long_path, short_path)
    seen = []
    with pytest.raises(InputError) as info:
        for b in read_pair_batches(*args, max_reads=max_reads):
            seen += b.names[0::2]
    message = str(info.value)
    assert message.startswith(f"{short_path}, record 4: ends after 3 records") and long_path in message
    assert seen == ["p0", "p1", "p2"][: len(seen)]


def test_one_pair_file_empty(tmp_path):
    empty = write(tmp_path, "e.fq", "")
    full = write(tmp_path, "f.fq", GOOD)
    for args in ((empty, full), (full, empty)):
        with pytest.raises(InputError) as info:
            list(read_pair_batches(*args))
        assert str(info.value).startswith(f"{empty}, record 1: ends after 0 records")


def test_interleaved_errors(tmp_path):
    odd = write(tmp_path, "odd.fq", "@a/1\nA\n+\nI\n@a/2\nC\n+\nI\n@b/1\nG\n+\nI\n")
    expect_error(odd, 3, "has no mate", reader=read_interleaved_batches)
    bad = write(tmp_path, "bad.fq", "@a/1\nA\n+\nI\n@a/2\nC\n+\nI\n@b/1\nG\n+\nI\n@c/2\nT\n+\nI\n")
    message = expect_error(bad, 4, "mate names differ", reader=read_interleaved_batches)
    assert "'b' in record 3" in message and "'c'" in message


def test_pairs_fastq_with_fasta_rejected(tmp_path):
    p1 = write(tmp_path, "a.fq", GOOD)
    p2 = write(tmp_path, "b.fa", ">r1\nAC\n")
    with pytest.raises(InputError, match="is FASTA but"):
        list(read_pair_batches(p1, p2))


# --- the GIL-free FASTQ parser (_fastq.pyx) against the dnaio path ---------------------------------------------

def varied_records(rng, n, max_len=300):
    """Records with everything the strict form allows: empty reads, lowercase, '.', '-', IUPAC letters,
    descriptions after a space or a tab, '+' lines repeating the header."""
    recs = []
    for i in range(n):
        length = 0 if rng.random() < 0.05 else rng.randint(0, max_len)
        seq = "".join(rng.choice("ACGTACGTACGTNacgtn.-RYKMSWBDHVryk") for _ in range(length))
        qual = "".join(chr(rng.randint(33, 126)) for _ in range(length))
        comment = rng.choice(["", "", " 1:N:0:ACGT", "\tx y", "  two spaces", " /1"])
        recs.append((f"read{i}" + rng.choice(["", "", "/1", "/2", ".1"]), comment, seq, qual, rng.random() < 0.3))
    return recs


def varied_text(recs, suffix=""):
    out = []
    for name, comment, seq, qual, repeat in recs:
        header = f"{name}{suffix}{comment}"
        out.append(f"@{header}\n{seq}\n+{header if repeat else ''}\n{qual}\n")
    return "".join(out)


def batch_key(b):
    """Everything a ReadBatch holds, as comparable Python values."""
    text, off = b.name_columns()
    assert b.codes.dtype == np.uint8 and b.offsets.dtype == np.int64 and off.dtype == np.int64
    return (
        b.n, b.first_record, b.paired, b.names, b.seqs, b.quals, b.codes.tobytes(), b.offsets.tolist(),
        bytes(b.seq_text), None if b.qual_text is None else bytes(b.qual_text), bytes(text[: off[-1]]),
        off.tolist(), b.lengths.tolist(),
    )


def outcome(monkeypatch, fast, reader, args, **limits):
    """(batches, error as (message, record) or None, how often dnaio was opened) of one path."""
    opened = []
    real_open = dnaio.open
    monkeypatch.setattr(dnaio, "open", lambda *a, **k: opened.append(1) or real_open(*a, **k))
    batches, error = [], None
    try:
        for b in reader(*args, fast_fastq=fast, **limits):
            batches.append(batch_key(b))
    except InputError as e:
        error = (str(e), e.record)
    monkeypatch.setattr(dnaio, "open", real_open)
    return batches, error, len(opened)


# Errors dnaio raises per buffer read (128 kB), before returning the records completed in it
PER_BUFFER_ERRORS = ("binary data", "truncated or corrupt")


def same_both_ways(monkeypatch, reader, args, fallback, **limits):
    """The fast path gives what the dnaio path gives: the same batches, and the same error after the same
    batches; for an error dnaio meets per buffer (non-ASCII bytes, damaged compressed data), where its
    buffers fall decides how many of the batches before the error it hands out, so there one path may stop
    a few batches earlier (those it gives are the same). `fallback`: whether the fast path must hand over to
    dnaio (None: not checked). ``limits``: max_reads, max_bases and block_size of the reader."""
    fast = outcome(monkeypatch, True, reader, args, **limits)
    old = outcome(monkeypatch, False, reader, args, **limits)
    assert fast[1] == old[1]
    if old[1] is None or not any(e in old[1][0] for e in PER_BUFFER_ERRORS):
        assert len(fast[0]) == len(old[0])
    for a, b in zip(fast[0], old[0]):
        assert a == b
    if fallback is not None:
        assert old[2] >= 1 and (fast[2] > 0) == fallback
    return fast


def record_ends(text):
    """Offsets just after each record of a strict 4-line text."""
    ends, pos = [], 0
    while pos < len(text):
        for _ in range(4):
            pos = text.index(b"\n", pos) + 1
        ends.append(pos)
    return ends


def parse_text(text):
    block = fastq.Block(len(text))
    block.text[: len(text)] = np.frombuffer(text, np.uint8)
    return fastq.parse_block(block, 0, 0, len(text))


def test_fast_parser_every_prefix_is_incomplete_never_odd():
    # Block boundaries fall anywhere: every prefix of valid text parses its complete records and asks for more.
    rng = random.Random(20)
    text = varied_text(varied_records(rng, 12, max_len=12)).encode()
    ends = record_ends(text)
    for k in range(len(text) + 1):
        chunk, pos, status, longest = parse_text(text[:k])
        done = [e for e in ends if e <= k]
        assert status == fastq.INCOMPLETE, k
        assert pos == (done[-1] if done else 0)
        assert (chunk.n if chunk else 0) == len(done)
        if done:
            assert longest == max(b - a for a, b in zip([0] + done, done))


def test_fast_parser_columns():
    text = b"@r1 c d\nacg.-N\n+r1 c d\nIIIIII\n@r2\t/1\n\n+\n\n@r3/1\nRYK\n+\n#$%\n"
    chunk, pos, status, _ = parse_text(text)
    assert (chunk.n, pos, status) == (3, len(text), fastq.INCOMPLETE)
    name_text, name_off, seq, off, qual, codes = fastq.gather([[(chunk, 0, 3)]], False, True, True)
    assert bytes(name_text) == b"r1r2r3/1" and name_off.tolist() == [0, 2, 4, 8]
    assert bytes(seq) == b"ACGNNNRYK" and off.tolist() == [0, 6, 6, 9] and bytes(qual) == b"IIIIII#$%"
    assert codes.tolist() == ref_codes("acg.-NRYK")
    # pairs: names lose /1 and /2 (only at the end), mates alternate
    name_text, name_off, seq, off, _, _ = fastq.gather([[(chunk, 0, 1), (chunk, 2, 3)], [(chunk, 1, 3)]], True, True, True)
    assert bytes(name_text) == b"r1r2r3r3" and off.tolist() == [0, 6, 6, 9, 12]
    assert fastq.first_mate_mismatch([(chunk, 2, 3)], [(chunk, 2, 3)]) == -1
    assert fastq.first_mate_mismatch([(chunk, 0, 2)], [(chunk, 1, 3)]) == 0
    assert fastq.first_mate_mismatch([(chunk, 0, 2)], None) == 0


@pytest.mark.parametrize(
    "odd",
    [
        b"@r\r\nAC\r\n+\r\nII\r\n",  # CRLF
        b"\n",  # blank line
        b"r\nAC\n+\nII\n",  # no '@'
        b"@r\nAC\n-\nII\n",  # no '+'
        b"@r x\nAC\n+r\nII\n",  # '+' line differs from the header
        b"@r\nAC\n+\nI\n",  # quality shorter
        b"@r\nAC\n+\nIII\n",  # quality longer
        b"@r\nA1\n+\nII\n",  # not a letter
        b"@r\nA C\n+\nIII\n",  # space in the sequence
        b"@r\nAC\n+\nI I\n",  # space in the quality
        b"@r\nAC\n+\nI\x7f\n",  # DEL in the quality
        b"@r\x01\nAC\n+\nII\n",  # control character in the header
        b"@r\xc3\xa9\nAC\n+\nII\n",  # non-ASCII
        b"@r\nA\xffC\n+\nIII\n",
    ],
)
def test_fast_parser_stops_at_odd_record(odd):
    good = b"@g d\nACGT\n+\nIIII\n"
    chunk, pos, status, _ = parse_text(good + odd + good)
    assert (chunk.n, pos, status) == (1, len(good), fastq.ODD)


@pytest.mark.parametrize("block", [1, 17, 300, 1 << 23])
@pytest.mark.parametrize("max_reads,max_bases", [(None, None), (1, None), (7, None), (None, 500), (13, 2000)])
def test_fast_path_equals_dnaio_path(tmp_path, monkeypatch, block, max_reads, max_bases):
    # Tiny blocks put a block boundary inside every part of records, and make records longer than a block.
    rng = random.Random(21)
    path = write(tmp_path, "v.fq", varied_text(varied_records(rng, 150)))
    batches, _, _ = same_both_ways(monkeypatch, read_batches, (path,), False, max_reads=max_reads, max_bases=max_bases,
                                   block_size=block)
    assert sum(b[0] for b in batches) == 150


@pytest.mark.parametrize("compress", ["gz", "bz2"])
def test_fast_path_compressed(tmp_path, monkeypatch, compress):
    rng = random.Random(22)
    path = write(tmp_path, "v.fq", varied_text(varied_records(rng, 400)), compress=compress)
    for max_reads in (None, 64):
        same_both_ways(monkeypatch, read_batches, (path,), False, max_reads=max_reads, block_size=4096)


@pytest.fixture(scope="module")
def many_records():
    """3000 records (~500 kB: several of dnaio's 128 kB buffers) and their text."""
    rng = random.Random(23)
    recs = varied_records(rng, 3000, max_len=150)
    return recs, varied_text(recs).encode()


def test_fast_path_hands_out_reads_while_reading(tmp_path, monkeypatch, many_records):
    # Blocks much smaller than the file: reads come out block by block (holding back the last 128 kB).
    _, text = many_records
    path = write(tmp_path, "m.fq", text)
    # the per-file reader is private: whether it has more blocks to read is visible only there
    src = reads_module._Source(path, block_size=50_000)
    first, n = src.take(100)
    assert n == 100 and src._reading  # returned before the whole file was read
    src.close()
    for max_reads in (100, 1000):
        same_both_ways(monkeypatch, read_batches, (path,), False, max_reads=max_reads, block_size=50_000)


def crlf_at(text, i):
    ends = record_ends(text)
    a, b = ends[i - 1], ends[i]
    return text[:a] + text[a:b].replace(b"\n", b"\r\n") + text[b:]


def set_record(text, i, *lines):
    """`text` with record i's four lines replaced by `lines` (None keeps a line)."""
    ends = record_ends(text)
    a, b = ends[i - 1], ends[i]
    old = text[a:b].split(b"\n")
    new = [o if n is None else n for o, n in zip(old, lines)] + old[4:]
    return text[:a] + b"\n".join(new) + text[b:]


FALLBACK_CASES = {
    "crlf_record": lambda t: crlf_at(t, 2500),
    "crlf_file": lambda t: t.replace(b"\n", b"\r\n"),
    "truncated_last": lambda t: t[: record_ends(t)[-2] + 7],
    "truncated_in_quality": lambda t: set_record(t, 2999, None, b"ACGT", b"+", b"IIII")[:-3],
    "qual_length": lambda t: set_record(t, 2500, None, b"ACGT", None, b"IIIII"),
    "binary_junk": lambda t: set_record(t, 2500, None, b"AC\xff\xfe\x00T", None, b"IIIIII"),
    "bad_base": lambda t: set_record(t, 2500, None, b"AC1T", None, b"IIII"),
    "bad_qual": lambda t: set_record(t, 2500, None, b"ACGT", None, b"II I"),
    "plus_differs": lambda t: set_record(t, 2500, None, None, b"+other"),
    "no_at": lambda t: set_record(t, 2500, b"x"),
    "blank_lines_at_end": lambda t: t + b"\n\n",
    "spaces_at_end": lambda t: t + b"  \n",
}


@pytest.mark.parametrize("case", sorted(FALLBACK_CASES))
def test_fallback_gives_the_same_batches_and_errors(tmp_path, monkeypatch, many_records, case):
    _, text = many_records
    path = write(tmp_path, f"{case}.fq", FALLBACK_CASES[case](text))
    for max_reads in (None, 7, 1000):
        same_both_ways(monkeypatch, read_batches, (path,), True, max_reads=max_reads)


def test_no_final_newline_needs_no_fallback(tmp_path, monkeypatch, many_records):
    _, text = many_records
    path = write(tmp_path, "n.fq", text[:-1])
    same_both_ways(monkeypatch, read_batches, (path,), False, max_reads=1000)


@pytest.mark.parametrize("keep", [0, 2000])
def test_fallback_truncated_gzip(tmp_path, monkeypatch, keep):
    rng = random.Random(9)
    recs = random_records(rng, 4000, alphabet="ACGT")
    path = tmp_path / "t.fq.gz"
    path.write_bytes(truncated_gzip(recs, keep))
    for max_reads in (None, 100):
        # keep = 0: the damage shows when the format is sniffed, before any parser
        _, error, _ = same_both_ways(monkeypatch, read_batches, (str(path),), True if keep else None, max_reads=max_reads)
        assert error[1] == keep + 1


@pytest.mark.parametrize("max_reads,max_bases", [(None, None), (2, None), (9, None), (None, 300), (10, 1000)])
def test_fast_pairs_and_interleaved(tmp_path, monkeypatch, max_reads, max_bases):
    rng = random.Random(24)
    r1 = [(n.split("/")[0].split(".")[0], c, s, q, rep) for n, c, s, q, rep in varied_records(rng, 120)]
    r2 = [(n, " 2:N:0", s[::-1], q[::-1], not rep) for n, _, s, q, rep in r1]
    p1 = write(tmp_path, "a_1.fq", varied_text(r1, "/1"))
    p2 = write(tmp_path, "a_2.fq.gz", varied_text(r2, "/2"), compress="gz")
    pi = write(tmp_path, "ai.fq", "".join(varied_text([a], "/1") + varied_text([b], "/2") for a, b in zip(r1, r2)))
    limits = dict(max_reads=max_reads, max_bases=max_bases, block_size=1000)
    pairs, _, _ = same_both_ways(monkeypatch, read_pair_batches, (p1, p2), False, **limits)
    inter, _, _ = same_both_ways(monkeypatch, read_interleaved_batches, (pi,), False, **limits)
    assert [b[3] for b in pairs] == [b[3] for b in inter]  # the same names, /1 and /2 removed
    assert sum(b[0] for b in pairs) == 240


def test_fast_pair_errors(tmp_path, monkeypatch):
    pairs = "".join(f"@p{i}/1\nACG\n+\nIII\n" for i in range(300))
    mates = "".join(f"@{'q' if i == 200 else 'p'}{i}/2 x\nACG\n+\nIII\n" for i in range(300))
    p1, p2 = write(tmp_path, "x_1.fq", pairs), write(tmp_path, "x_2.fq", mates)
    short = write(tmp_path, "s_2.fq", "".join(f"@p{i}/2\nACG\n+\nIII\n" for i in range(250)))
    inter = write(tmp_path, "i.fq", "".join(f"@p{i}/1\nA\n+\nI\n@{'q' if i == 70 else 'p'}{i}/2\nC\n+\nI\n" for i in range(99)))
    odd = write(tmp_path, "o.fq", "".join(f"@p{i // 2}\nA\n+\nI\n" for i in range(51)))
    for max_reads in (None, 16):
        _, error, _ = same_both_ways(monkeypatch, read_pair_batches, (p1, p2), False, max_reads=max_reads)
        assert error == (f"{p1}, record 201: mate names differ: 'p200' here but 'q200' in {p2}", 201)
        _, error, _ = same_both_ways(monkeypatch, read_pair_batches, (p1, short), False, max_reads=max_reads)
        assert error[1] == 251 and "ends after 250 records" in error[0]
        _, error, _ = same_both_ways(monkeypatch, read_pair_batches, (short, p1), False, max_reads=max_reads)
        assert error[1] == 251
        _, error, _ = same_both_ways(monkeypatch, read_interleaved_batches, (inter,), False, max_reads=max_reads)
        assert error == (f"{inter}, record 142: mate names differ: 'p70' in record 141 but 'q70' here", 142)
        _, error, _ = same_both_ways(monkeypatch, read_interleaved_batches, (odd,), False, max_reads=max_reads)
        assert error[1] == 51 and "has no mate" in error[0]


REAL_PAIRS = [
    ("human", "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz", "NA12878_S1.chr20_10.0-10.1Mb_R2.fastq.gz"),
    ("lambda_simulated", "reads_1.fq.gz", "reads_2.fq.gz"),
    ("sarscov2", "ERR5069949_100pairs_R1.fastq.gz", "ERR5069949_100pairs_R2.fastq.gz"),
    ("phix", "phix.1.fastq", "phix.2.fastq"),
]


@pytest.mark.parametrize("where,name1,name2", REAL_PAIRS)
def test_fast_path_real_reads(monkeypatch, where, name1, name2):
    p1, p2 = str(require_shared_data(where, name1)), str(require_shared_data(where, name2))
    batches, _, _ = same_both_ways(monkeypatch, read_pair_batches, (p1, p2), False, max_reads=10000)
    assert sum(b[0] for b in batches) > 0
    same_both_ways(monkeypatch, read_batches, (p1,), False, max_reads=30000)


# --- streams: FIFOs, pipes (as bash's <(...) passes them), standard input -------------------------------------


@contextlib.contextmanager
def streamed(data, kind, tmp_path, name="s"):
    """A path whose one reading streams ``data``: a FIFO ('fifo') or a pipe named /dev/fd/N as bash's
    process substitution names it ('pipe'), written by a thread, its first bytes one by one (a reader of a
    pipe gets what has been written so far: the magic bytes must not need one read)."""
    if kind == "fifo":
        path = str(tmp_path / f"{name}.fifo")
        os.mkfifo(path)
        read_end = None
    else:
        read_end, write_end = os.pipe()
        path = f"/dev/fd/{read_end}"

    def write_all():
        try:
            with open(path if kind == "fifo" else write_end, "wb", buffering=0) as f:
                for i in range(min(6, len(data))):
                    f.write(data[i : i + 1])
                    time.sleep(0.005)
                f.write(data[6:])
        except (BrokenPipeError, OSError):
            pass  # the reader stopped early (an error it reports)

    writer = threading.Thread(target=write_all, daemon=True)
    writer.start()
    try:
        yield path
    finally:
        if kind == "fifo" and writer.is_alive():
            # the writer may still wait for a reader that never came: let it open, then leave it
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        if read_end is not None:
            os.close(read_end)
        else:
            os.unlink(path)
        writer.join(10)


def batches_and_error(reader, paths, **limits):
    """(batch_key of every batch, error as (message, record) or None)."""
    keys = []
    try:
        for b in reader(*paths, **limits):
            keys.append(batch_key(b))
    except InputError as e:
        return keys, (str(e), e.record)
    return keys, None


STREAM_TEXTS = {
    "strict": lambda t: t,
    "crlf_record": lambda t: crlf_at(t, 2500),  # the fast path hands over to dnaio mid-stream
    "no_final_newline": lambda t: t[:-1],
}


@pytest.mark.parametrize("kind", ["fifo", "pipe"])
@pytest.mark.parametrize("compress", [None, "gz", "bz2", "xz", "zst"])
@pytest.mark.parametrize("text", sorted(STREAM_TEXTS))
def test_streamed_reads_equal_the_file(tmp_path, many_records, kind, compress, text):
    data = compressed(STREAM_TEXTS[text](many_records[1]), compress)
    path = str(tmp_path / "r.fq")
    open(path, "wb").write(data)
    for limits in ({"max_reads": 1000}, {"max_reads": 7, "block_size": 50_000}):
        expected = batches_and_error(read_batches, (path,), **limits)
        assert expected[1] is None and sum(k[0] for k in expected[0]) == 3000
        with streamed(data, kind, tmp_path) as stream:
            assert batches_and_error(read_batches, (stream,), **limits) == expected


@pytest.mark.parametrize("case", ["qual_length", "binary_junk", "truncated_in_quality", "no_at", "crlf_file"])
def test_streamed_errors_equal_the_file(tmp_path, many_records, case):
    # the same message and record as from the file; the batches before an error a stream gives are the file's
    data = FALLBACK_CASES[case](many_records[1])
    path = str(tmp_path / "r.fq")
    open(path, "wb").write(data)
    for limits in ({}, {"max_reads": 100, "block_size": 50_000}):
        batches, error = batches_and_error(read_batches, (path,), **limits)
        with streamed(data, "pipe", tmp_path) as stream:
            got, got_error = batches_and_error(read_batches, (stream,), **limits)
        if error is None:
            assert got_error is None and got == batches
        else:
            assert got_error == (error[0].replace(path, stream), error[1])
            assert got == batches[: len(got)]


@pytest.mark.parametrize("keep", [0, 5, 2000])
def test_truncated_gzip_through_a_pipe(tmp_path, keep):
    recs = random_records(random.Random(9), 4000, alphabet="ACGT")
    with streamed(truncated_gzip(recs, keep), "pipe", tmp_path) as stream:
        expect_error(stream, keep + 1, "truncated or corrupt gzip data")
    with streamed(truncated_gzip_fasta(recs, keep), "pipe", tmp_path) as stream:
        expect_error(stream, keep + 1, "truncated or corrupt gzip data")


@pytest.mark.parametrize("kind", ["fifo", "pipe"])
def test_pairs_and_interleaved_from_streams(tmp_path, kind):
    rng = random.Random(24)
    r1 = [(n.split("/")[0].split(".")[0], c, s, q, rep) for n, c, s, q, rep in varied_records(rng, 3000, 150)]
    r2 = [(n, " 2:N:0", s[::-1], q[::-1], not rep) for n, _, s, q, rep in r1]
    t1, t2 = varied_text(r1, "/1").encode(), gzip.compress(varied_text(r2, "/2").encode())
    ti = "".join(varied_text([a], "/1") + varied_text([b], "/2") for a, b in zip(r1, r2)).encode()
    p1, p2, pi = str(tmp_path / "a_1.fq"), str(tmp_path / "a_2.fq.gz"), str(tmp_path / "i.fq")
    for path, data in ((p1, t1), (p2, t2), (pi, ti)):
        open(path, "wb").write(data)
    limits = {"max_reads": 512, "block_size": 30_000}
    pairs = batches_and_error(read_pair_batches, (p1, p2), **limits)
    assert pairs[1] is None and sum(k[0] for k in pairs[0]) == 6000
    with streamed(t1, kind, tmp_path, "a") as s1, streamed(t2, kind, tmp_path, "b") as s2:
        assert batches_and_error(read_pair_batches, (s1, s2), **limits) == pairs
    inter = batches_and_error(read_interleaved_batches, (pi,), **limits)
    assert [k[3] for k in inter[0]] == [k[3] for k in pairs[0]]  # the same names
    with streamed(ti, kind, tmp_path, "i") as si:
        assert batches_and_error(read_interleaved_batches, (si,), **limits) == inter


def run_reader(code, stdin=None, timeout=60):
    """Python ``code`` in a child process (a hang there ends in a timeout, not a stuck test run)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True, timeout=timeout, env=env)


COUNT_READS = """
import sys
from peanut_py.errors import InputError
from peanut_py.input_streams import check_inputs
from peanut_py.reads import read_batches
try:
    print(sum(b.n for b in read_batches(sys.argv[1] if len(sys.argv) > 1 else '-', max_reads=100)))
except InputError as e:
    print(e)
"""


def test_standard_input(tmp_path, many_records):
    text = many_records[1]
    path = write(tmp_path, "r.fq", text)
    digest = "print(hashlib.sha256(repr([(b.names, b.seqs, b.quals, b.first_record) for b in batches]).encode()).hexdigest())"
    code = f"import hashlib\nfrom peanut_py.reads import read_batches\nbatches = list(read_batches(PATH, max_reads=100))\n{digest}"
    for data in (text, gzip.compress(text)):
        run = run_reader(code.replace("PATH", "'-'"), stdin=data)
        assert run.returncode == 0, run.stderr
        assert run.stdout == run_reader(code.replace("PATH", repr(path))).stdout
    run = run_reader(COUNT_READS, stdin=GOOD.encode() + b"@r4\nACGT\n+\nII\n")
    assert run.stdout.decode().strip() == "standard input, record 4: quality string length differs from sequence length (line 16)"


def test_fifo_is_opened_once(tmp_path):
    """A FIFO's writer that opens it once: every read arrives, and a writer that writes nothing gives zero
    reads at once. A second opening would wait for a writer that never comes (the time limit ends it)."""
    fifo = tmp_path / "r.fifo"
    os.mkfifo(fifo)
    for data, expected in ((GOOD * 1000, "3000"), ("", "0")):
        child = subprocess.Popen([sys.executable, "-c", COUNT_READS, str(fifo)], stdout=subprocess.PIPE,
                                 env=dict(os.environ, PYTHONPATH=str(REPO)))
        try:
            deadline = time.monotonic() + 60
            while True:  # open the writing end once the child has opened the reading end
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                    break
                except OSError:
                    assert child.poll() is None and time.monotonic() < deadline, "the reader never opened the FIFO"
                    time.sleep(0.01)
            os.set_blocking(fd, True)
            with open(fd, "w") as f:
                f.write(data)
            out, _ = child.communicate(timeout=60)
        finally:
            child.kill()
        assert out.decode().strip() == expected


def test_one_stream_for_both_mates_is_refused(tmp_path):
    fifo = tmp_path / "r.fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="^standard input: given as both READS and MATES"):
        check_inputs("-", "-")
    with pytest.raises(InputError, match=f"^{fifo}: is the same stream as READS"):
        check_inputs(str(fifo), str(fifo))
    regular = write(tmp_path, "r.fq", GOOD)
    check_inputs(regular, regular)  # a file can be read twice
    check_inputs("-", regular)
    check_inputs("-", None)


def test_assembled_keeps_order_and_raises_errors_at_their_place():
    """Batches are gathered on several threads: results come in input order, and the first error in input
    order is the one raised, whether the gathering (make) or the reading (parts) fails, after the items before
    it were yielded."""
    def parts(n, fail_at=None):
        for i in range(n):
            if i == fail_at:
                raise InputError("r.fq", "parse failed", i)
            yield (i,)

    def make(i, bad=()):
        time.sleep(0.002 * ((7 * i) % 3))  # finish out of order
        if i in bad:
            raise InputError("r.fq", "gather failed", i)
        return i * i

    for workers in (1, 2, 4):
        assert list(reads_module._assembled(parts(25), make, workers)) == [i * i for i in range(25)]
        got = []
        with pytest.raises(InputError, match="parse failed"):
            for x in reads_module._assembled(parts(25, fail_at=9), make, workers):
                got.append(x)
        assert got == [i * i for i in range(9)]
        got = []
        with pytest.raises(InputError, match="gather failed") as e:
            for x in reads_module._assembled(parts(25, fail_at=9), lambda i: make(i, bad=(4, 6)), workers):
                got.append(x)
        assert got == [i * i for i in range(4)] and e.value.record == 4


def test_first_bad_record_is_reported_with_batches_gathered_in_parallel(tmp_path):
    """A read name SAM cannot carry in an early batch is reported, not a malformed record further on that
    the reader parses ahead."""
    rng = random.Random(5)
    recs = random_records(rng, 300, min_len=20, max_len=60)
    text = fastq_text(recs).splitlines(keepends=True)
    text[4 * 12] = "@bad@name\n"  # record 13: '@' is not allowed in QNAME
    text[4 * 250 + 2] = "x\n"  # record 251: not a '+' line
    path = write(tmp_path, "r.fq", "".join(text))
    with pytest.raises(InputError) as e:
        list(read_batches(path, max_reads=10))
    assert e.value.record == 13 and "bad@name" in str(e.value)
