"""BAM output: _bam.pyx's records equal htslib's for the same SAM lines byte for byte, the BGZF stream is
valid and deterministic, and `peanut map -o x.bam` holds exactly the SAM run's records."""
import gzip
import os
import struct
import zlib

import numpy as np
import pysam
import pytest

from helpers import EXAMPLE

from peanut_py import _bgzf, bgzf, sam
from peanut_py._bam import RefNames, sam_to_bam

R1 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"
R2 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"


def _records_of(bam_path):
    """The uncompressed record stream of a BAM file (everything after the header and reference list)."""
    with open(bam_path, "rb") as f:
        data = gzip.decompress(f.read())
    assert data[:4] == b"BAM\x01"
    (l_text,) = struct.unpack_from("<i", data, 4)
    at = 8 + l_text
    (n_ref,) = struct.unpack_from("<i", data, at)
    at += 4
    for _ in range(n_ref):
        (l_name,) = struct.unpack_from("<i", data, at)
        at += 4 + l_name + 4
    return data[at:]


def _htslib_bam(tmp_path, header, lines):
    """The same lines written by htslib (pysam): its record stream."""
    path = tmp_path / "htslib.bam"
    h = pysam.AlignmentHeader.from_text(header)
    with pysam.AlignmentFile(str(path), "wb", header=h) as f:
        for line in lines:
            f.write(pysam.AlignedSegment.fromstring(line, h))
    return _records_of(path)


def _split(sam_text):
    header = "".join(line for line in sam_text.splitlines(True) if line.startswith("@"))
    body = [line for line in sam_text.splitlines() if line and not line.startswith("@")]
    return header, body


@pytest.fixture(scope="module")
def mapped_sam(cli, example_index, tmp_path_factory):
    """Real records: pairs (mate fields, TLEN, XA, MD, unmapped mates) and single-end secondaries."""
    folder = tmp_path_factory.mktemp("bam")
    texts = []
    for name, args in (("pe", [R1, R2]), ("se", ["--secondary", R1])):
        out = folder / f"{name}.sam"
        rc, _, err = cli("map", "-t", "2", example_index, *args, "-o", out)
        assert rc == 0, err
        texts.append(out.read_text())
    return texts


def test_records_equal_htslibs_byte_for_byte(mapped_sam, tmp_path):
    for text in mapped_sam:
        header, body = _split(text)
        names, _ = sam._reference_dictionary(header)
        ours = sam_to_bam(("\n".join(body) + "\n").encode(), RefNames(names))
        assert ours == _htslib_bam(tmp_path, header, body)
        assert len(body) > 1000


def test_every_tag_type_and_integer_width_as_htslib_writes_them(tmp_path):
    header = "@HD\tVN:1.6\n@SQ\tSN:chrA\tLN:100000\n@SQ\tSN:b\tLN:70000\n@SQ\tSN:chrA_alt\tLN:5\n"
    values = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, -1, -128, -129, -32768,
              -32769, -(2**31)]
    lines = [f"r{i}\t0\tchrA\t{1 + i * 999}\t60\t5M1I2D3S\t=\t7\t-12\tACGTNACGT\tIIIII#III\tXI:i:{v}"
             for i, v in enumerate(values)]
    lines += [
        "u1\t4\t*\t0\t0\t*\t*\t0\t0\tACGTA\t*",  # unmapped, no qualities
        "u2\t77\t*\t0\t0\t*\t*\t0\t0\t*\t*",  # no sequence at all
        "s1\t0\tb\t65536\t3\t1=1X2N1P3M\tchrA_alt\t2\t0\tacgtn\tABCDE\tZZ:Z:text with spaces\tHH:H:1AE301\t"
        "AA:A:!\tFF:f:-1.5e3\tRG:Z:grp",
        "s2\t2048\tchrA\t16385\t255\t8H4M\tb\t1\t0\tACGT\t!!!!\tNM:i:0",  # a span across bins
        "s3\t0\tchrA\t100000\t0\t1M\t*\t0\t0\tA\t~",
    ]
    ours = sam_to_bam(("\n".join(lines) + "\n").encode(), RefNames(["chrA", "b", "chrA_alt"]))
    assert ours == _htslib_bam(tmp_path, header, lines)


def test_fields_at_the_limits_of_their_types_as_htslib_writes_them(tmp_path):
    header = "@HD\tVN:1.6\n@SQ\tSN:chrA\tLN:2147483647\n"
    seq = "ACGTNacgtnRYKMSWBDHV=" * 5 + "A"  # every IUPAC code, lower case too, an odd length
    cigar = "1M1000000N" * 50 + "2I" + f"{len(seq) - 52}M"  # 102 operations, a long reference span
    lines = [
        f"r1\t0\tchrA\t2147483647\t255\t4M\t=\t2147483647\t-2147483647\tACGT\t!!~~",
        f"r2\t1\tchrA\t+7\t0\t4M\tchrA\t1\t+2147483647\tACGT\tIIII\tXI:i:+5\tXJ:i:-0",
        f"{'n' * 254}\t0\tchrA\t100\t60\t{cigar}\t*\t0\t0\t{seq}\t{'I' * len(seq)}",
    ]
    ours = sam_to_bam(("\n".join(lines) + "\n").encode(), RefNames(["chrA"]))
    assert ours == _htslib_bam(tmp_path, header, lines)


def test_records_larger_than_their_lines_as_htslib_writes_them(tmp_path):
    # a bare unmapped record takes more room in BAM than in SAM: the output outgrows its first allocation
    header = "@HD\tVN:1.6\n@SQ\tSN:chrA\tLN:100\n"
    lines = [f"u{i}\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*" for i in range(30_000)]
    text = ("\n".join(lines) + "\n").encode()
    ours = sam_to_bam(text, RefNames(["chrA"]))
    assert len(ours) > 1.5 * len(text)
    assert ours == _htslib_bam(tmp_path, header, lines)


@pytest.mark.parametrize("line", [
    "r\t0\tnope\t1\t60\t4M\t*\t0\t0\tACGT\tIIII",  # a reference the header lacks
    "r\t0\tchrA\t1\t60\t4Q\t*\t0\t0\tACGT\tIIII",  # no such CIGAR operation
    "r\t0\tchrA\t1\t60\t4M\t*\t0\t0\tACGT\tIII",  # qualities of another length
    "r\t0\tchrA\tone\t60\t4M\t*\t0\t0\tACGT\tIIII",  # POS not a number
    "r\t0\tchrA\t1\t60\t4M\t*\t0\t0\tACGT",  # ten fields
    "r\t0\tchrA\t1\t60\t4M\t*\t0\t0\tACGT\tIIII\tXB:B:c,1",  # B arrays: not written by peanut-py
    "r\t0\tchrA\t 1\t60\t4M\t*\t0\t0\tACGT\tIIII",  # a space before POS
    "r\t0\tchrA\t1\t60\t4M\t*\t0\t2147483648\tACGT\tIIII",  # TLEN beyond 32 bits
    "r\t0\tchrA\t2147483648\t60\t4M\t*\t0\t0\tACGT\tIIII",  # POS beyond 32 bits
    "r\t-\tchrA\t1\t60\t4M\t*\t0\t0\tACGT\tIIII",  # a sign without digits
    "r\t0\tchrA\t1\t60\t4M\t*\t0\t0\tACGT\tIIII\tXI:i:99999999999999999999",  # beyond 64 bits
    "r\t0\tchrA\t1\t60\t4M\t*\t0\t0\tACGT\tII I",  # a quality below '!'
])
def test_a_line_bam_cannot_carry_is_an_error(line):
    with pytest.raises(ValueError, match="line 2"):
        sam_to_bam(("r0\t4\t*\t0\t0\t*\t*\t0\t0\tA\tI\n" + line + "\n").encode(), RefNames(["chrA"]))


def test_bgzf_blocks_are_valid_and_independent_of_how_the_stream_is_written():
    rng = np.random.default_rng(7)
    data = rng.integers(0, 4, 500_000, dtype=np.uint8).tobytes() + rng.bytes(200_000)  # incompressible tail
    outs = []
    for threads, piece in ((1, 1 << 20), (3, 1000), (2, 65_281)):
        got = []
        w = bgzf.BgzfWriter(got.append, threads)
        for a in range(0, len(data), piece):
            w.write(data[a:a + piece])
        w.close()
        outs.append(b"".join(got))
    assert outs[0] == outs[1] == outs[2]
    stream = outs[0]
    assert stream.endswith(bgzf.EOF_BLOCK) and gzip.decompress(stream) == data
    at = 0
    while at < len(stream):  # every block names its size (BSIZE - 1) and stays below 64 KiB
        assert stream[at:at + 4] == b"\x1f\x8b\x08\x04" and stream[at + 12:at + 16] == b"BC\x02\x00"
        size = struct.unpack_from("<H", stream, at + 16)[0] + 1
        assert size <= 65536
        (isize,) = struct.unpack_from("<I", stream, at + size - 4)
        assert isize <= bgzf.BLOCK_SIZE
        at += size
    assert at == len(stream)


def test_crc32_is_zlibs():
    data = gzip.decompress(R1.read_bytes())
    for n in list(range(40)) + [bgzf.BLOCK_SIZE, len(data)]:
        assert _bgzf.crc32(data[:n]) == zlib.crc32(data[:n])
        assert _bgzf.crc32(memoryview(data)[7:n]) == zlib.crc32(data[7:n])


def _framed_as_the_spec_says(block):
    """One BGZF block built field by field with struct and zlib (SAM v1.6, 4.1), the deflated body as
    bgzf.py's deflate makes it."""
    body = bgzf._deflate_body(block)
    size = 18 + len(body) + 8
    return (struct.pack("<4BI2BH2BHH", 31, 139, 8, 4, 0, 0, 255, 6, 66, 67, 2, size - 1) + body
            + struct.pack("<II", zlib.crc32(block), len(block)))


def test_blocks_are_framed_as_the_spec_says():
    rng = np.random.default_rng(11)
    blocks = [rng.integers(0, 4, bgzf.BLOCK_SIZE, dtype=np.uint8).tobytes(), b"x", b"",
              rng.bytes(bgzf.BLOCK_SIZE), memoryview(rng.bytes(5000))[3:4000]]
    assert bgzf.compress_blocks(blocks) == b"".join(_framed_as_the_spec_says(b) for b in blocks)
    with pytest.raises(ValueError, match="does not fit"):
        bgzf.compress_blocks([bytes(bgzf.BLOCK_SIZE + 1)])


def test_a_buffer_changed_after_it_was_written_is_written_as_it_was():
    data = bytearray(np.random.default_rng(5).integers(0, 4, 300_000, dtype=np.uint8).tobytes())
    expected = bytes(data)
    got = []
    w = bgzf.BgzfWriter(got.append, 2)
    w.write(data)
    data[:] = bytes(len(data))
    w.close()
    assert gzip.decompress(b"".join(got)) == expected


def test_bam_output_holds_the_sam_records_whatever_the_threads(cli, example_index, tmp_path):
    sam_out = tmp_path / "x.sam"
    rc, _, err = cli("map", "-t", "2", example_index, R1, R2, "-o", sam_out)
    assert rc == 0, err
    bams = []
    for threads, batch in (("1", "700"), ("3", "300")):
        out = tmp_path / f"t{threads}.bam"
        rc, _, err = cli("map", "-t", threads, "--batch-size", batch, example_index, R1, R2, "-o", out)
        assert rc == 0, err
        bams.append(out.read_bytes())
    # the @PG line holds the command line; the records and their blocks do not depend on threads or batches
    assert _records_of(tmp_path / "t1.bam") == _records_of(tmp_path / "t3.bam")
    header, body = _split(sam_out.read_text())
    with pysam.AlignmentFile(str(tmp_path / "t3.bam"), "rb") as f:
        assert [r.to_string() for r in f] == body
        assert [s["SN"] for s in f.header.to_dict()["SQ"]] == list(f.references)
    assert os.path.getsize(tmp_path / "t3.bam") < os.path.getsize(sam_out)
