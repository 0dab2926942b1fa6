"""bwa, samtools and minimap2 habits on `peanut map` / `peanut index`: -M (accepted, changes nothing),
-U/--no-unmapped, --output-format sam|bam (BAM on a pipe), --quiet on both commands, a bad option reported by
the command with its usage line, and the compressions the READS help lists.

Every mapping run is a new process and the first one compiles the OpenCL kernels, so the runs are few and
shared: the module-scoped ``runs`` fixture maps one mixed input (real pairs of the bundled example, pairs of
random sequence that cannot map, and pairs with one random mate) once per option set.
"""
import bz2
import gzip
import lzma
import os
import random
import re
import subprocess
import sys

import pysam
import pytest

from helpers import EXAMPLE, REPO, fastq_records, run_cli, write_fastq
from peanut_py import reads as reads_module
from peanut_py.sam import drop_unmapped

R1 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"
R2 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"
N_REAL, N_RANDOM_PAIRS, N_HALF = 300, 40, 30  # real pairs; pairs of random reads; pairs with one random mate


def flag_of(line):
    return int(line.split("\t", 2)[1])


def kept_by_hit_only(line):
    """The rule of -U, written per line: drop unmapped reads whose mate is unmapped too (or that have none)."""
    flag = flag_of(line)
    return not (flag & 0x4 and (not flag & 0x1 or flag & 0x8))


def records(text):
    return [line for line in text.splitlines(keepends=True) if not line.startswith("@")]


def header_without_pg(text):
    return [line for line in text.splitlines(keepends=True) if line.startswith("@") and not line.startswith("@PG")]


def summary_counts(err):
    """The summary line of a run (reads, mapped, ... counts), without its timing."""
    lines = [line for line in err.splitlines() if " in: " in line or "reads in" in line]
    assert len(lines) == 1, err
    return re.sub(r"[\d.]+ s \([\d,]+ reads/s[^)]*\)", "", lines[0])


def run_bytes(*args, stdout_file=None):
    """``peanut ARGS`` with standard output a pipe, read as bytes (run_cli decodes it as text), or redirected
    into the regular file ``stdout_file`` as a shell's ``> FILE`` does (then returns its path)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]]
                                                                     if os.environ.get("PYTHONPATH") else [])))
    with open(stdout_file, "wb") if stdout_file else open(os.devnull) as redirect:
        proc = subprocess.run([sys.executable, "-m", "peanut_py", *map(str, args)], env=env,
                              stdout=redirect if stdout_file else subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=600)
    return proc.returncode, stdout_file or proc.stdout, proc.stderr.decode()


def pysam_records(path):
    with pysam.AlignmentFile(str(path), check_sq=False) as f:
        return [r.to_string() for r in f], {k: v for k, v in f.header.to_dict().items() if k != "PG"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Mate files of N_REAL real pairs, N_RANDOM_PAIRS pairs of random reads (both unmapped) and 2 * N_HALF pairs
    with one random mate (the other mapped), mixed; the mates written in all four compressions the reader
    knows besides plain text."""
    rng = random.Random(20261201)
    one, two = fastq_records(R1), fastq_records(R2)

    def random_read(name):
        seq = "".join(rng.choice("ACGT") for _ in range(len(one[0][1])))
        return name, seq, "I" * len(seq)

    pairs = [(one[i], two[i]) for i in range(N_REAL)]
    pairs += [(random_read(f"rnd{i}"), random_read(f"rnd{i}")) for i in range(N_RANDOM_PAIRS)]
    for i in range(N_HALF):
        mate1, mate2 = one[N_REAL + i], two[N_REAL + N_HALF + i]
        pairs.append((mate1, random_read(mate1[0])))
        pairs.append((random_read(mate2[0]), mate2))
    rng.shuffle(pairs)
    d = tmp_path_factory.mktemp("compat")
    write_fastq(d / "r1.fq", [p[0] for p in pairs])
    write_fastq(d / "r2.fq", [p[1] for p in pairs])
    files = {}
    for mate in ("r1", "r2"):
        plain = (d / f"{mate}.fq").read_bytes()
        for ext, compress in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress),
                              ("zst", _zstd_compress)):
            path = d / f"{mate}.fq.{ext}"
            path.write_bytes(compress(plain))
            files[mate, ext] = path
    files["dir"] = d
    return files


def _zstd_compress(data):
    try:
        from compression import zstd
    except ImportError:
        from backports import zstd
    return zstd.compress(data)


@pytest.fixture(scope="module")
def runs(example_index, inputs):
    """(rc, output, stderr) of each mapping run, by name; outputs as text (SAM) or a path (BAM)."""
    d, idx = inputs["dir"], str(example_index)
    r1, r2 = str(inputs["r1", "gz"]), str(inputs["r2", "bz2"])
    out = {}

    def to_file(name, *args, suffix="sam"):
        path = d / f"{name}.{suffix}"
        rc, _, err = run_cli("map", *args, "-o", str(path))
        out[name] = (rc, path.read_text() if rc == 0 and suffix == "sam" else path, err)

    to_file("se", idx, r1)
    out["se_U"] = run_cli("map", "--quiet", "-U", idx, r1)
    to_file("pe", idx, r1, r2)
    to_file("pe_U", "--no-unmapped", idx, r1, r2)
    # the other two compressions, with -M: the output must equal the plain run's
    out["pe_M"] = run_cli("map", "-M", "-q", idx, str(inputs["r1", "zst"]), str(inputs["r2", "xz"]))
    out["pe_bam_pipe"] = run_bytes("map", "-q", "--output-format", "bam", idx, r1, r2)
    # a name that says nothing: the explicit format decides (samtools' long name, upper case)
    to_file("pe_U_bam", "-q", "-U", "--output-fmt", "BAM", idx, r1, r2, suffix="out")
    # `-o /dev/fd/1 > FILE`: the descriptor's name is a link to a regular file, written in place (never a
    # temporary file beside the link renamed onto it). /dev/fd/1 rather than /dev/stdout: if that ever
    # regresses, the temporary file cannot be created in /proc and the run fails, while a root process would
    # replace the /dev/stdout link itself
    out["se_bam_fd"] = run_bytes("map", "-q", "--output-format", "bam", idx, r1, "-o", "/dev/fd/1",
                                 stdout_file=d / "se_fd.bam")
    for name, (rc, _, err) in out.items():
        assert rc == 0, f"{name}: {err}"
    return out


# --- -M ---------------------------------------------------------------------------------------------------------

def test_bwa_M_is_accepted_and_changes_nothing(runs):
    plain, marked = runs["pe"][1], runs["pe_M"][1]
    assert records(marked) == records(plain) and header_without_pg(marked) == header_without_pg(plain)
    assert "\tCL:peanut map -M -q " in marked  # the run did see -M
    # nothing for -M to mark: no supplementary records or SA tags in either output
    assert not any(flag_of(line) & 0x800 or "\tSA:Z:" in line for line in records(plain))


# --- -U / --no-unmapped -------------------------------------------------------------------------------------------

def test_no_unmapped_single_end(runs):
    plain, hits = runs["se"][1], runs["se_U"][1]
    dropped = [line for line in records(plain) if not kept_by_hit_only(line)]
    assert len(dropped) >= N_RANDOM_PAIRS + N_HALF  # the random reads: the input has something to drop
    assert records(hits) == [line for line in records(plain) if kept_by_hit_only(line)]
    assert not any(flag_of(line) & 0x4 for line in records(hits))
    assert header_without_pg(hits) == header_without_pg(plain)
    assert runs["se_U"][2] == ""  # --quiet


def test_no_unmapped_pairs_keep_a_pair_with_one_mapped_mate(runs):
    plain, hits = runs["pe"][1], runs["pe_U"][1]
    both_unmapped = [line for line in records(plain) if flag_of(line) & 0xC == 0xC]
    assert len(both_unmapped) >= 2 * N_RANDOM_PAIRS
    assert records(hits) == [line for line in records(plain) if kept_by_hit_only(line)]
    assert not any(flag_of(line) & 0xC == 0xC for line in records(hits))
    # unmapped mates of mapped reads stay, so every kept record's mate is in the output too
    lonely = [line for line in records(hits) if flag_of(line) & 0x4]
    assert len(lonely) >= N_HALF
    names = {}
    for line in records(hits):
        if not flag_of(line) & 0x100:
            names.setdefault(line.split("\t", 1)[0], []).append(flag_of(line) & 0xC0)
    assert all(sorted(v) == [0x40, 0x80] for v in names.values())
    assert header_without_pg(hits) == header_without_pg(plain)


def test_no_unmapped_keeps_the_summary_of_all_reads(runs):
    assert summary_counts(runs["pe_U"][2]) == summary_counts(runs["pe"][2])
    n_pairs = N_REAL + N_RANDOM_PAIRS + 2 * N_HALF
    assert f"{n_pairs:,} pairs ({2 * n_pairs:,} reads) in" in runs["pe_U"][2]


def _reference_drop(text):
    return "".join(line for line in text.splitlines(keepends=True)
                   if line.startswith("@") or not re.match(r"[^\t]*\t\d+\t", line) or kept_by_hit_only(line))


@pytest.mark.parametrize("seed", range(5))
def test_drop_unmapped_agrees_with_the_per_line_rule(seed):
    """Every FLAG value, names of any length, str or bytes, the last newline present or not, lines without a
    FLAG kept (a header line, a malformed line)."""
    rng = random.Random(seed)
    flags = list(range(4096)) + [65535, 2048 + 4]
    rng.shuffle(flags)
    lines = [f"{'q' * rng.randint(1, 60)}{i}\t{f}\t*\t0\t0\t*\t*\t0\t0\tACGT\tIIII\tXA:Z:c,+1,4M,0;\n"
             for i, f in enumerate(flags)]
    lines[rng.randrange(len(lines))] = "@CO\ta header line\n"
    lines[rng.randrange(len(lines))] = "broken\tline\n"
    lines[rng.randrange(len(lines))] = "broken\t4x\tline\n"
    text = "".join(lines)
    if seed % 2:
        text = text[:-1]
    expected = _reference_drop(text)
    assert drop_unmapped(text).decode() == expected
    assert drop_unmapped(text.encode()).decode() == expected
    kept = text.encode()[:200].rsplit(b"\n", 1)[0] + b"\n"
    assert drop_unmapped(kept).decode() == _reference_drop(kept.decode())
    assert drop_unmapped(b"") == b""
    assert drop_unmapped(b"r\t4\t*\t0\t0\t*\t*\t0\t0\tA\tI\n") == b""
    assert drop_unmapped(b"r\t77\t*\t0\t0\t*\t*\t0\t0\tA\tI") == b""


# --- --output-format ------------------------------------------------------------------------------------------

def test_bam_to_a_pipe_equals_the_sam_run(runs, inputs):
    rc, data, _ = runs["pe_bam_pipe"]
    assert data[:4] == b"\x1f\x8b\x08\x04"  # BGZF, not SAM text
    bam = inputs["dir"] / "from_pipe.bam"
    bam.write_bytes(data)
    sam = inputs["dir"] / "pe.sam"
    assert pysam_records(bam) == pysam_records(sam)
    assert len(pysam_records(bam)[0]) == len(records(runs["pe"][1]))


def test_explicit_bam_format_with_no_unmapped_to_a_file_of_any_name(runs, inputs):
    path = runs["pe_U_bam"][1]
    with open(path, "rb") as f:
        assert f.read(4) == b"\x1f\x8b\x08\x04"
    plain = inputs["dir"] / "pe_U.sam"  # the SAM run with -U
    assert pysam_records(path) == pysam_records(plain)
    with pysam.AlignmentFile(str(path)) as f:
        flags = [r.flag for r in f]
    assert len(flags) < len(records(runs["pe"][1])) and not any(flag & 0xC == 0xC for flag in flags)
    assert not list(inputs["dir"].glob(".pe_U_bam*"))  # no temporary file left


def test_bam_into_a_descriptor_name_of_a_regular_file(runs, inputs):
    _, path, err = runs["se_bam_fd"]
    assert err == ""
    assert pysam_records(path) == pysam_records(inputs["dir"] / "se.sam")


def test_descriptor_names_are_written_in_place(tmp_path):
    from peanut_py.sam import is_special_file

    regular = tmp_path / "out.sam"
    regular.write_text("")
    link = tmp_path / "link.sam"
    link.symlink_to(regular)
    assert not is_special_file(regular) and not is_special_file(link) and not is_special_file(tmp_path)
    assert not is_special_file(tmp_path / "absent.sam")
    for name in ("/dev/stdout", "/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"):
        assert is_special_file(name), name  # whatever the descriptor is (a file, a pipe, a terminal)
    assert is_special_file("/dev/null")


@pytest.mark.parametrize("fmt,name", [("sam", "x.bam"), ("bam", "x.sam"), ("bam", "x.SAM")])
def test_output_format_contradicting_the_name_is_refused(example_index, inputs, tmp_path, fmt, name):
    out = tmp_path / name
    rc, stdout, err = run_cli("map", "--output-format", fmt, str(example_index), str(inputs["r1", "gz"]),
                              "-o", str(out))
    assert rc == 1 and stdout == ""
    assert err.count("\n") == 1 and err.startswith(f"peanut: error: {out}: --output-format {fmt} contradicts"), err
    assert os.listdir(tmp_path) == []


# --- --quiet and -q -----------------------------------------------------------------------------------------------

def test_index_quiet_and_q_keeps_meaning_qgram_length(tmp_path):
    from peanut_py.reference import ReferenceIndex

    out = tmp_path / "q12.h5"
    rc, stdout, err = run_cli("index", "--quiet", "-q", "12", str(EXAMPLE / "chr20_slice.fa.gz"), "-o", str(out))
    assert rc == 0 and stdout == "" and err == "", err
    with ReferenceIndex(str(out)) as index:
        assert index.q == 12
    rc, _, err = run_cli("index", "-q", "12", str(EXAMPLE / "chr20_slice.fa.gz"), "-o", str(tmp_path / "loud.h5"))
    assert rc == 0 and "[peanut] indexed" in err  # what --quiet silenced


def test_map_q_is_quiet(runs):
    assert runs["pe_M"][2] == ""  # -q
    assert "[peanut]" in runs["pe"][2]


def test_help_explains_both_meanings_of_q():
    _, index_help, _ = run_cli("index", "--help")
    _, map_help, _ = run_cli("map", "--help")
    index_help, map_help = " ".join(index_help.split()), " ".join(map_help.split())
    assert "--quiet no progress" in index_help and "-q is the q-gram length here" in index_help
    assert re.search(r"-q Q q-gram length.*-q is this, not --quiet as in `peanut map`", index_help)
    assert "-q, --quiet no progress or summary on stderr (in `peanut index`, -q is the q-gram length" in map_help


# --- errors of one command ----------------------------------------------------------------------------------------

MAP_USAGE = "usage: peanut map [options] INDEX.h5 READS [MATES]"
INDEX_USAGE = "usage: peanut index [options] REF.fa[.gz]"


@pytest.mark.parametrize("args,usage,named", [
    (["map", "--bogus", "idx.h5", "r.fq"], MAP_USAGE, "--bogus"),
    (["map", "-t", "x", "idx.h5", "r.fq"], MAP_USAGE, "-t/--threads"),
    (["map", "idx.h5", "r1.fq", "r2.fq", "r3.fq"], MAP_USAGE, "r3.fq"),
    (["map", "--output-format", "cram", "idx.h5", "r.fq"], MAP_USAGE, "--output-format"),
    (["map", "-U", "17", "idx.h5", "r1.fq", "r2.fq"], MAP_USAGE, "-U/--no-unmapped takes no value"),  # bwa's
    (["map", "idx.h5", "r1.fq", "-U", "17"], MAP_USAGE, "-U/--no-unmapped takes no value"),
    (["index", "--bogus", "ref.fa"], INDEX_USAGE, "--bogus"),
    (["index", "-q", "x", "ref.fa"], INDEX_USAGE, "-q"),
])
def test_a_bad_option_gives_the_commands_usage_and_one_line(args, usage, named):
    rc, out, err = run_cli(*args)
    lines = err.splitlines()
    assert rc == 2 and out == "" and len(lines) == 2, err
    assert lines[0] == usage
    assert lines[1].startswith(f"peanut {args[0]}: error: ") and named in lines[1], err


# --- compressed reads -----------------------------------------------------------------------------------------

def test_map_help_lists_the_compressions_the_reader_knows(runs):
    _, map_help, _ = run_cli("map", "--help")
    text = " ".join(map_help.split())
    reads_help = text[text.index("READS FASTQ or FASTA"):text.index("MATES second mates")]
    for name in reads_module._COMPRESSION_NAME.values():
        assert name in reads_help, (name, reads_help)
    assert "plain or gzip" not in reads_help
    # and the runs above read gzip, bzip2 (pe), zstd and xz (pe_M) alike
    assert records(runs["pe_M"][1]) == records(runs["pe"][1])
