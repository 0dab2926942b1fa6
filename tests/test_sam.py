"""sam.py: header, records (strands, unmapped, FASTA, empty reads), validation by pysam, samtools and Picard,
and atomic SAM/BAM output."""
import os
import random
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pysam
import pytest

import sam_oracle
from helpers import REPO, needs_tool, require_shared_data
from peanut_py import sam
from peanut_py.errors import PeanutError
from peanut_py.reads import read_batches, read_pair_batches

COMPLEMENT = {"A": "T", "C": "G", "G": "C", "T": "A", "N": "N", "R": "Y", "Y": "R", "K": "M", "M": "K",
              "B": "V", "V": "B", "D": "H", "H": "D", "S": "S", "W": "W"}


def ref_revcomp(seq):
    return "".join(COMPLEMENT[c] for c in reversed(seq))


def ref_nm_md(ref, start, cigar, seq):
    """NM and MD of `seq` (SAM SEQ, reference strand) aligned at `start` with `cigar`, written out per base."""
    i, q, nm, run, md = start, 0, 0, 0, []
    for n, op in re.findall(r"(\d+)([MIDS])", cigar):
        n = int(n)
        if op == "M":
            for k in range(n):
                if seq[q + k] == ref[i + k]:
                    run += 1
                else:
                    md += [str(run), ref[i + k]]
                    run, nm = 0, nm + 1
            i, q = i + n, q + n
        elif op == "I":
            q, nm = q + n, nm + n
        elif op == "D":
            md += [str(run), "^" + ref[i : i + n]]
            run, i, nm = 0, i + n, nm + n
        else:
            q += n
    return nm, "".join(md + [str(run)])


def mutate(seq, positions):
    out = list(seq)
    for p in positions:
        out[p] = "ACGT"[("ACGT".index(out[p]) + 1) % 4]
    return "".join(out)


def fastq(records):
    return "".join(f"@{n}\n{s}\n+\n{q}\n" for n, s, q in records)


def quals(rng, n):
    return "".join(chr(rng.randint(35, 74)) for _ in range(n))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """A reference, single-end and paired reads cut from it, and the records describing their alignments."""
    d = tmp_path_factory.mktemp("sam")
    rng = random.Random(11)
    contigs = {"chrA": "".join(rng.choice("ACGT") for _ in range(2000)),
               "chrB": "".join(rng.choice("ACGT") for _ in range(1500))}
    ref_path = d / "ref.fa"
    ref_path.write_text("".join(f">{k}\n" + textwrap.fill(v, 60) + "\n" for k, v in contigs.items()))
    ref_names = list(contigs)
    A, B = contigs["chrA"], contigs["chrB"]

    # (name, read as sequenced, ref, 0-based pos, cigar, reverse, secondary)
    aligned = [
        ("fwd_exact", A[100:150], "chrA", 100, "50M", False),
        ("fwd_mism", mutate(B[200:260], [3, 40]), "chrB", 200, "60M", False),
        ("rev_mism", ref_revcomp(mutate(A[300:350], [10])), "chrA", 300, "50M", True),
        ("fwd_ins", A[600:620] + "TT" + A[620:648], "chrA", 600, "20M2I28M", False),
        ("rev_del", ref_revcomp(B[700:725] + B[728:753]), "chrB", 700, "25M3D25M", True),
        ("soft", "GGGGG" + A[900:945], "chrA", 900, "5S45M", False),
    ]
    single = [(n, s, quals(rng, len(s))) for n, s, *_ in aligned]
    single += [("unmapped", "ACGTNACGTTTGACA", quals(rng, 15)), ("emptyread", "", "")]
    se_path = d / "se.fq"
    se_path.write_text(fastq(single))
    (se_batch,) = list(read_batches(str(se_path)))

    rows = []  # (read, flag, ref_id, pos, mapq, cigar, next_ref, next_pos, tlen, tags)
    for i, (name, seq, ref, pos, cigar, rev) in enumerate(aligned):
        sam_seq = ref_revcomp(seq) if rev else seq
        nm, md = ref_nm_md(contigs[ref], pos, cigar, sam_seq)
        tags = f"NM:i:{nm}\tMD:Z:{md}\tAS:i:{100 - 5 * nm}\tXS:i:0"
        rows.append((i, 16 if rev else 0, ref_names.index(ref), pos, 60, cigar, -1, -1, 0, tags))
    rows.append((0, 256, 1, 1000, 0, "50M", -1, -1, 0, "NM:i:9"))  # a secondary hit of fwd_exact: SEQ/QUAL '*'
    rows.append((6, 4, -1, -1, 0, "*", -1, -1, 0, None))
    rows.append((7, 4, -1, -1, 0, "*", -1, -1, 0, None))

    # Pairs: 'pp' properly paired (mate 2 reverse), 'half' mate 1 mapped and mate 2 unmapped placed beside it.
    m1, m2 = A[1200:1250], ref_revcomp(A[1350:1400])
    h1, h2 = B[50:100], "TTTTTTTTTTGGGGGGGGGGCCCCCCCCCC"
    r1 = [("pp/1", m1, quals(rng, 50)), ("half/1", h1, quals(rng, 50))]
    r2 = [("pp/2", m2, quals(rng, 50)), ("half/2", h2, quals(rng, 30))]
    p1, p2 = d / "pe_1.fq", d / "pe_2.fq"
    p1.write_text(fastq(r1))
    p2.write_text(fastq(r2))
    (pe_batch,) = list(read_pair_batches(str(p1), str(p2)))
    pe_rows = [
        (0, 99, 0, 1200, 60, "50M", 0, 1350, 200, "NM:i:0\tMD:Z:50"),
        (1, 147, 0, 1350, 60, "50M", 0, 1200, -200, "NM:i:0\tMD:Z:50"),
        (2, 73, 1, 50, 60, "50M", 1, 50, 0, "NM:i:0\tMD:Z:50"),
        (3, 133, 1, 50, 0, "*", 1, 50, 0, None),
    ]
    return dict(dir=d, ref_path=ref_path, contigs=contigs, ref_names=ref_names, se_batch=se_batch, rows=rows,
                pe_batch=pe_batch, pe_rows=pe_rows, single=single, pairs=(r1, r2))


def records_text(batch, rows, ref_names, rg="grp1"):
    cols = list(zip(*rows))
    return sam_oracle.format_records(
        batch, ref_names, np.array(cols[0]), np.array(cols[1]), np.array(cols[2]), np.array(cols[3]),
        mapq=np.array(cols[4]), cigar=list(cols[5]), next_ref_id=np.array(cols[6]), next_pos=np.array(cols[7]),
        tlen=np.array(cols[8]), tags=list(cols[9]), read_group_id=rg,
    )


@pytest.fixture(scope="module")
def written(scenario):
    """The scenario written as SAM and as BAM through open_output."""
    s = scenario
    header = sam.sam_header(
        s["ref_names"], [len(v) for v in s["contigs"].values()], md5s=["0" * 32, None],
        read_group="@RG\\tID:grp1\\tSM:sample1\\tPL:ILLUMINA", program_command_line="peanut map\tref.h5 r.fq",
    )
    text = records_text(s["se_batch"], s["rows"], s["ref_names"])
    text += records_text(s["pe_batch"], s["pe_rows"], s["ref_names"])
    paths = {}
    for fmt in ("sam", "bam"):
        paths[fmt] = str(s["dir"] / f"out.{fmt}")
        with sam.open_output(paths[fmt], header) as w:
            half = text.index("\n", len(text) // 2) + 1
            w.write(text[:half])
            w.write(text[half:])
    return dict(header=header, text=text, **paths)


# --- header ---------------------------------------------------------------------------------------------------


def test_header_lines():
    h = sam.sam_header(["c1", "c2"], [100, np.int64(2000)], md5s=["a" * 32, None],
                       read_group="@RG\\tID:x\\tSM:y", program_command_line="peanut map -R '@RG\\tID:x' i.h5 r.fq",
                       version="9.9")
    lines = h.splitlines()
    assert h.endswith("\n")
    assert lines[0] == "@HD\tVN:1.6\tSO:unsorted"
    assert lines[1] == f"@SQ\tSN:c1\tLN:100\tM5:{'a' * 32}"
    assert lines[2] == "@SQ\tSN:c2\tLN:2000"
    assert lines[3] == "@RG\tID:x\tSM:y"
    assert lines[4].startswith("@PG\tID:peanut\tPN:peanut-py\tVN:9.9\tCL:peanut map -R")
    assert lines[4].count("\t") == 4
    parsed = pysam.AlignmentHeader.from_text(h).to_dict()
    assert [sq["SN"] for sq in parsed["SQ"]] == ["c1", "c2"] and parsed["RG"][0]["ID"] == "x"


def test_read_group_parsing():
    assert sam.parse_read_group("@RG\\tID:a b\\tSM:s") == ("@RG\tID:a b\tSM:s", "a b")
    assert sam.parse_read_group("@RG\tID:t\tLB:l") == ("@RG\tID:t\tLB:l", "t")
    for bad, fragment in [("@RG\\tSM:s", "no ID"), ("RG\\tID:x", "must start with"), ("@RG\\tID:x\\tbad", "TAG:VALUE"),
                          ("@RG\\tID:\\tSM:s", "no ID"), ("@RG\\tID:x\nSM:y", "single line")]:
        with pytest.raises(PeanutError, match=fragment):
            sam.parse_read_group(bad)


# --- records --------------------------------------------------------------------------------------------------


def test_reverse_complement_reference():
    rng = random.Random(12)
    for _ in range(50):
        seq = "".join(rng.choice("ACGTNRYKMBVDHSW") for _ in range(rng.randint(0, 40)))
        assert sam_oracle.reverse_complement(seq.encode()) == ref_revcomp(seq).encode()


def test_records_read_back_by_pysam(scenario, written):
    s = scenario
    with pysam.AlignmentFile(written["sam"]) as f:
        recs = list(f)
    single = s["single"]
    assert len(recs) == len(s["rows"]) + len(s["pe_rows"])
    for rec, row in zip(recs, s["rows"]):
        read, flag, ref_id, pos, mapq, cigar, _, _, _, tags = row
        name, seq, qual = single[read]
        assert rec.query_name == name and rec.flag == flag and rec.get_tag("RG") == "grp1"
        if flag & 4:
            assert rec.reference_name is None and rec.reference_start == -1
        else:
            assert rec.reference_name == s["ref_names"][ref_id] and rec.reference_start == pos
            assert rec.cigarstring == cigar and rec.mapping_quality == mapq
        if flag & 256 or not seq:
            assert rec.query_sequence is None and rec.query_qualities is None
            continue
        # The read as sequenced comes back from the reverse-complemented SEQ and the reversed QUAL.
        assert rec.get_forward_sequence() == seq
        assert "".join(chr(q + 33) for q in rec.get_forward_qualities()) == qual
        expected_seq = ref_revcomp(seq) if flag & 16 else seq
        assert rec.query_sequence == expected_seq
        assert "".join(chr(q + 33) for q in rec.query_qualities) == (qual[::-1] if flag & 16 else qual)
        if tags:
            assert rec.get_tag("NM") == int(re.search(r"NM:i:(\d+)", tags).group(1))
            assert rec.get_tag("MD") == re.search(r"MD:Z:(\S+)", tags).group(1)
            assert rec.has_tag("AS") and rec.has_tag("XS")
    pe = recs[len(s["rows"]):]
    assert [r.flag for r in pe] == [99, 147, 73, 133]
    assert [r.query_name for r in pe] == ["pp", "pp", "half", "half"]
    assert pe[0].next_reference_start == 1350 and pe[0].template_length == 200
    assert pe[3].reference_name == "chrB" and pe[3].reference_start == 50 and pe[3].is_unmapped
    assert pe[1].get_forward_sequence() == s["pairs"][1][0][1]


def test_empty_read_and_unmapped_lines(written):
    lines = {l.split("\t")[0]: l.split("\t") for l in written["text"].splitlines()}
    assert lines["emptyread"][1:11] == ["4", "*", "0", "0", "*", "*", "0", "0", "*", "*"]
    assert lines["unmapped"][9] == "ACGTNACGTTTGACA" and lines["unmapped"][2:4] == ["*", "0"]
    assert all(l[-1] == "RG:Z:grp1" for l in lines.values())


@needs_tool("samtools")
def test_tools_accept_output(scenario, written):
    for fmt in ("sam", "bam"):
        subprocess.run(["samtools", "quickcheck", written[fmt]], check=True)
        count = subprocess.run(["samtools", "view", "-c", written[fmt]], check=True, capture_output=True, text=True)
        assert int(count.stdout) == len(scenario["rows"]) + len(scenario["pe_rows"])
    # The BAM holds exactly the SAM's records.
    views = [subprocess.run(["samtools", "view", written[fmt]], check=True, capture_output=True, text=True).stdout
             for fmt in ("sam", "bam")]
    assert views[0] == views[1] == written["text"]
    # samtools recomputes NM and MD from the reference and warns about every difference.
    calmd = subprocess.run(["samtools", "calmd", written["bam"], str(scenario["ref_path"])],
                           capture_output=True, text=True)
    assert calmd.returncode == 0 and "different" not in calmd.stderr, calmd.stderr


@needs_tool("PicardCommandLine", "Picard (Debian picard-tools)")
@needs_tool("samtools")
def test_picard_validates(scenario, written, tmp_path):
    ref = tmp_path / "ref.fa"
    shutil.copy(scenario["ref_path"], ref)
    # Picard's reference walk (the NM check) needs coordinate order and cannot count mismatches of a SEQ '*':
    # validate a sorted copy without the secondary record with R= as well.
    primary, sorted_bam = str(tmp_path / "primary.bam"), str(tmp_path / "sorted.bam")
    subprocess.run(["samtools", "view", "-b", "-F", "0x100", "-o", primary, written["bam"]], check=True)
    subprocess.run(["samtools", "sort", "-o", sorted_bam, primary], check=True, capture_output=True)
    for path, extra in ((written["sam"], []), (written["bam"], []), (sorted_bam, [f"R={ref}"])):
        # QUAL '*' (empty reads, secondary records) is valid SAM; Picard warns about it, so that one is ignored.
        run = subprocess.run(["PicardCommandLine", "ValidateSamFile", f"I={path}", "MODE=VERBOSE",
                              "IGNORE=QUALITY_NOT_STORED"] + extra,
                             capture_output=True, text=True)
        report = run.stdout + run.stderr
        assert run.returncode == 0 and "No errors found" in report, report[-3000:]


def test_fasta_reads_have_star_quality(tmp_path):
    path = tmp_path / "r.fa"
    path.write_text(">a\nACGTT\n>b\nGGA\n")
    (batch,) = list(read_batches(str(path)))
    text = sam_oracle.format_records(batch, ["c"], [0, 1], [0, 16], [0, 0], [9, 19], mapq=[60, 60], cigar=["5M", "3M"])
    f = [l.split("\t") for l in text.splitlines()]
    assert f[0][3] == "10" and f[0][9:] == ["ACGTT", "*"]
    assert f[1][9:] == ["TCC", "*"]  # reverse strand: reverse complement, QUAL still '*'
    header = sam.sam_header(["c"], [100])
    sam_path = tmp_path / "x.sam"
    sam_path.write_text(header + text)
    with pysam.AlignmentFile(str(sam_path)) as sf:
        recs = list(sf)
    assert recs[0].query_qualities is None and recs[1].get_forward_sequence() == "GGA"


def test_format_unmapped(scenario):
    pe = sam_oracle.format_unmapped(scenario["pe_batch"], read_group_id="g")
    fields = [l.split("\t") for l in pe.splitlines()]
    assert [f[1] for f in fields] == ["77", "141", "77", "141"]
    assert [f[0] for f in fields] == ["pp", "pp", "half", "half"]
    assert all(f[2:9] == ["*", "0", "0", "*", "*", "0", "0"] and f[-1] == "RG:Z:g" for f in fields)
    se = sam_oracle.format_unmapped(scenario["se_batch"]).splitlines()
    assert [l.split("\t")[1] for l in se] == ["4"] * scenario["se_batch"].n
    assert se[0].split("\t")[9] == scenario["single"][0][1]


def test_mapq_default_and_rnext(scenario):
    batch = scenario["se_batch"]
    text = sam_oracle.format_records(batch, ["x", "y"], [0, 0, 6], [0, 0, 4], [0, 1, -1], [5, 5, -1],
                              next_ref_id=[1, 1, -1], next_pos=[9, 9, -1])
    f = [l.split("\t") for l in text.splitlines()]
    assert f[0][4] == "255" and f[0][6:8] == ["y", "10"]
    assert f[1][6] == "="
    assert f[2][4] == "0" and f[2][6:8] == ["*", "0"]


# --- writers --------------------------------------------------------------------------------------------------

HEADER = sam.sam_header(["c"], [1000])
LINE = "r\t0\tc\t1\t60\t4M\t*\t0\t0\tACGT\tIIII\n"


def test_output_format_choice():
    assert sam.output_format(None) == "sam" and sam.output_format("-") == "sam"
    assert sam.output_format("x.BAM") == "bam" and sam.output_format("x.sam") == "sam"
    assert sam.output_format("x.txt") == "sam" and sam.output_format("x.sam", "bam") == "bam"
    with pytest.raises(PeanutError):
        sam.output_format("x.cram")
    with pytest.raises(PeanutError):
        sam.output_format("x.sam", "cram")


def test_stdout(capsys):
    for path in (None, "-"):
        with sam.open_output(path, HEADER) as w:
            w.write(LINE)
        assert capsys.readouterr().out == HEADER + LINE


@pytest.mark.parametrize("ext", ["sam", "bam"])
def test_close_renames_and_leaves_no_temporary(tmp_path, ext):
    path = tmp_path / f"o.{ext}"
    w = sam.open_output(str(path), HEADER)
    assert not path.exists() and len(os.listdir(tmp_path)) == 1  # only the hidden temporary file
    w.write(LINE)
    w.close()
    w.close()  # idempotent
    assert os.listdir(tmp_path) == [path.name]
    with pysam.AlignmentFile(str(path)) as f:
        assert [r.query_name for r in f] == ["r"]


@pytest.mark.parametrize("ext", ["sam", "bam"])
def test_abort_and_exception_leave_nothing(tmp_path, ext):
    path = tmp_path / f"o.{ext}"
    w = sam.open_output(str(path), HEADER)
    w.write(LINE)
    w.abort()
    w.close()  # after abort: nothing to rename, no error
    assert os.listdir(tmp_path) == []
    with pytest.raises(RuntimeError):
        with sam.open_output(str(path), HEADER) as w:
            w.write(LINE)
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("ext", ["sam", "bam"])
def test_abort_keeps_previous_output(tmp_path, ext):
    path = tmp_path / f"o.{ext}"
    path.write_bytes(b"previous run")
    with pytest.raises(KeyboardInterrupt):
        with sam.open_output(str(path), HEADER) as w:
            w.write(LINE)
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == [path.name] and path.read_bytes() == b"previous run"


def test_unwritable_destination(tmp_path):
    with pytest.raises(PeanutError, match="cannot write"):
        sam.open_output(str(tmp_path / "missing_dir" / "o.sam"), HEADER)


def test_invalid_record_in_bam_aborts(tmp_path):
    path = tmp_path / "o.bam"
    with pytest.raises(ValueError):
        with sam.open_output(str(path), HEADER) as w:
            w.write(LINE + "r\t0\n")
    assert os.listdir(tmp_path) == []


SCRIPT = """
import os, signal, sys, time
sys.path.insert(0, {root!r})
from peanut_py import sam
# Ctrl-C as in a terminal, also when the tests run where SIGINT is ignored (a background job)
signal.signal(signal.SIGINT, signal.default_int_handler)
w = sam.open_output({path!r}, {header!r})
w.write({line!r} * 1000)
if {mode!r} == "sigint":
    with w:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)
else:
    sys.exit(3)  # leaves the writer open: the atexit hook must delete its temporary file
"""


@pytest.mark.parametrize("mode", ["sigint", "exit"])
@pytest.mark.parametrize("ext", ["sam", "bam"])
def test_interrupted_process_leaves_no_file(tmp_path, mode, ext):
    out = tmp_path / "out"
    out.mkdir()
    code = SCRIPT.format(root=str(REPO), path=str(out / f"o.{ext}"), header=HEADER, line=LINE, mode=mode)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if mode == "sigint":
        assert run.returncode != 0 and "KeyboardInterrupt" in run.stderr
    else:
        assert run.returncode == 3
    assert os.listdir(out) == []


def test_phix_records_equal_strobealign_lines():
    """Formatting strobealign's alignments of the phix torture reads reproduces its lines exactly
    (reverse-strand SEQ/QUAL, lowercase input, empty reads, unmapped mates placed beside their mate)."""
    d = str(require_shared_data("phix"))
    (batch,) = list(read_pair_batches(os.path.join(d, "phix.1.fastq"), os.path.join(d, "phix.2.fastq")))
    with open(os.path.join(d, "phix.pe.sam")) as f:
        lines = [line for line in f if not line.startswith("@")]
    ref_names = ["NC_001422.1"]
    index = {(name, i % 2): i for i, name in enumerate(batch.names)}
    cols = {k: [] for k in ("read", "flag", "ref", "pos", "mapq", "cigar", "nref", "npos", "tlen", "tags")}
    for line in lines:
        f = line.rstrip("\n").split("\t")
        flag = int(f[1])
        ref = ref_names.index(f[2]) if f[2] != "*" else -1
        cols["read"].append(index[(f[0], 0 if flag & 0x40 else 1)])
        cols["flag"].append(flag)
        cols["ref"].append(ref)
        cols["pos"].append(int(f[3]) - 1)
        cols["mapq"].append(int(f[4]))
        cols["cigar"].append(f[5])
        cols["nref"].append(ref if f[6] == "=" else (-1 if f[6] == "*" else ref_names.index(f[6])))
        cols["npos"].append(int(f[7]) - 1)
        cols["tlen"].append(int(f[8]))
        cols["tags"].append("\t".join(t for t in f[11:] if not t.startswith("RG:")) or None)
    text = sam_oracle.format_records(batch, ref_names, cols["read"], cols["flag"], cols["ref"], cols["pos"],
                              mapq=cols["mapq"], cigar=cols["cigar"], next_ref_id=cols["nref"],
                              next_pos=cols["npos"], tlen=cols["tlen"], tags=cols["tags"], read_group_id="1")
    assert text.splitlines(True) == lines
    assert sum(1 for fl in cols["flag"] if fl & 16) > 30  # many reverse-strand records checked
