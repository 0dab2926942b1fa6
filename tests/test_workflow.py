"""The Snakemake workflow (workflow/Snakefile) on the CPU device: each sample's merged BAM holds the same
records, in the same order, as one `peanut map` of the whole sample sorted by samtools (single-end, two files
of pairs, interleaved pairs; every sample in three chunks); the chunk splitter keeps what the mapper reads;
the insert size is estimated once per sample; bad input and settings end the run with one clear line."""
import gzip
import json
import os
import re
import shlex
import subprocess
import sys

import pysam
import pytest

from helpers import EXAMPLE, REPO, require_shared_data, run_cli

if sys.version_info < (3, 11):
    pytest.skip("Snakemake 8 and later need Python 3.11", allow_module_level=True)

sys.path.insert(0, str(REPO / "workflow" / "scripts"))
import split_reads  # noqa: E402  (workflow/scripts is not a package)

from peanut_py.reads import read_batches, read_interleaved_batches, read_pair_batches  # noqa: E402

R1 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"
R2 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"
SNAKEFILE = REPO / "workflow" / "Snakefile"
INSERT_SIZE = REPO / "workflow" / "scripts" / "insert_size.py"
CHUNK_SIZE = 700  # 2,000 reads or pairs: three chunks
PEANUT = f"{shlex.quote(sys.executable)} -m peanut_py"


def env():
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([full["PYTHONPATH"]] if full.get("PYTHONPATH") else []))
    return full


def write_config(path, samples, **settings):
    """A config file (YAML is a superset of JSON) with ``samples`` and the test's defaults."""
    config = {"samples": samples, "chunk_size": CHUNK_SIZE, "map_threads": 2, "peanut": PEANUT, "outdir": "out"}
    config.update(settings)
    path.write_text(json.dumps(config))
    return path


def snakemake(workdir, configfile, *extra, timeout=900):
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--configfile", str(configfile),
                           "-d", str(workdir), "--cores", "2", "--show-failed-logs", *extra],
                          env=env(), capture_output=True, text=True, timeout=timeout)


def interleave(path, reads, mates):
    """The pairs of two FASTQ files as one interleaved gzip FASTQ."""
    with gzip.open(reads, "rt") as a, gzip.open(mates, "rt") as b, gzip.open(path, "wt") as out:
        la, lb = a.read().splitlines(), b.read().splitlines()
        for i in range(0, len(la), 4):
            out.write("\n".join(la[i:i + 4] + lb[i:i + 4]) + "\n")
    return path


def view(path):
    """(header lines without @PG, record lines) of a BAM as `samtools view -h` writes them."""
    lines = pysam.view("-h", "--no-PG", str(path)).splitlines()
    return [l for l in lines if l.startswith("@") and not l.startswith("@PG")], [l for l in lines if l[:1] != "@"]


def whole_sorted(tmp_path, index, name, inputs, read_group, *options):
    """One `peanut map` of the whole input, sorted by samtools."""
    out = tmp_path / f"whole_{name}.bam"
    rc, _, err = run_cli("map", "-q", "-t", "2", "-R", read_group, *options, "-o", out, index, *inputs)
    assert rc == 0, err
    pysam.sort("-o", str(tmp_path / f"whole_{name}.sorted.bam"), str(out))
    return tmp_path / f"whole_{name}.sorted.bam"


@pytest.mark.slow
def test_workflow_equals_one_sorted_run(tmp_path):
    interleaved = interleave(tmp_path / "interleaved.fastq.gz", R1, R2)
    samples = {
        "single": {"reads": str(R1)},
        "pairs": {"reads": str(R1), "mates": str(R2), "read_group": r"@RG\tID:pairs\tSM:NA12878\tPL:ILLUMINA"},
        "interleaved": {"reads": str(interleaved), "interleaved": True},
    }
    config = write_config(tmp_path / "config.yaml", samples, reference=str(EXAMPLE / "chr20_slice.fa.gz"))
    run = snakemake(tmp_path, config)
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "out"
    index = out / "index" / "chr20_slice.peanut.h5"
    read_groups = {"single": r"@RG\tID:single\tSM:single", "pairs": samples["pairs"]["read_group"],
                   "interleaved": r"@RG\tID:interleaved\tSM:interleaved"}
    wholes = {
        "single": whole_sorted(tmp_path, index, "single", [R1], read_groups["single"]),
        "pairs": whole_sorted(tmp_path, index, "pairs", [R1, R2], read_groups["pairs"]),
        "interleaved": whole_sorted(tmp_path, index, "interleaved", [interleaved], read_groups["interleaved"], "-p"),
    }
    for name, whole in wholes.items():
        # three chunks, each mapped by its own job
        assert sorted(p.name for p in (out / "logs" / "map" / name).iterdir()) == [
            "chunk_00000.log", "chunk_00001.log", "chunk_00002.log"]
        header, records = view(out / f"{name}.bam")
        whole_header, whole_records = view(whole)
        assert len(records) == (2000 if name == "single" else 4000)
        assert records == whole_records, name
        assert header == whole_header, name
        assert header[0].startswith("@HD\tVN:1.6\tSO:coordinate")
        assert read_groups[name].replace(r"\t", "\t") in header
        rg = read_groups[name].split(r"\t")[1][3:]
        assert all(re.search(f"\tRG:Z:{rg}(\t|$)", r) for r in records)
        # the index: the reads of a region come back through it
        with pysam.AlignmentFile(str(out / f"{name}.bam")) as bam:
            contig = bam.references[0]
            fetched = sum(1 for _ in bam.fetch(contig, 50_000, 60_000))
            assert fetched == sum(1 for r in records if r.split("\t")[2] == contig
                                  and int(r.split("\t")[3]) <= 60_000 and _end(r) > 50_000)
    # the pairs' insert size was estimated once and given to every chunk
    flag, value = (out / "insert_size" / "pairs.txt").read_text().split()
    mean = float(value.split(",")[0])
    assert flag == "-I" and 300 < mean < 340
    for chunk in range(3):
        log = (out / "logs" / "map" / "pairs" / f"chunk_{chunk:05d}.log").read_text()
        assert f"insert size (FR): mean {mean:.1f}" in log and "(given with -I)" in log
    # chunks and unsorted chunk BAMs are temporary
    assert not (out / "chunks").exists() or not any((out / "chunks").iterdir())
    assert not any((out / "mapped").rglob("*.bam"))
    # a second run has nothing to do
    again = snakemake(tmp_path, config)
    assert again.returncode == 0 and "Nothing to be done" in again.stderr + again.stdout


def _end(sam_line):
    """1-based end of a SAM record's alignment (its start for an unmapped read)."""
    fields = sam_line.split("\t")
    span = sum(int(n) for n, op in re.findall(r"(\d+)([MDN=X])", fields[5])) if fields[5] != "*" else 1
    return int(fields[3]) + span - 1


def chunk_records(folder, pattern):
    """(name, sequence, qualities) of the chunk files matching ``pattern`` in chunk order, as peanut reads them."""
    files = sorted(folder.glob(pattern))
    out = []
    for path in files:
        for batch in read_batches(str(path)):
            quals = batch.quals or [None] * batch.n
            out += list(zip(batch.names, batch.seqs, quals))
    return files, out


def reader_records(batches):
    out = []
    for batch in batches:
        quals = batch.quals or [None] * batch.n
        out += list(zip(batch.names, batch.seqs, quals))
    return out


def test_split_keeps_what_the_mapper_reads(tmp_path):
    """phiX pairs with comments, lowercase bases, /1 and /2 and empty reads: the chunks, in order, hold the
    reads peanut-py reads from the originals; pairs are not cut; each chunk has chunk_size pairs but the last."""
    phix = require_shared_data("phix")
    one, two = phix / "phix.1.fastq", phix / "phix.2.fastq"
    n = split_reads.split_reads(str(tmp_path / "pairs"), 10, str(one), str(two))
    expected = reader_records(read_pair_batches(str(one), str(two)))
    assert n == 5 and len(expected) == 90
    files1, mates1 = chunk_records(tmp_path / "pairs", "chunk_*.1.fastq.gz")
    files2, mates2 = chunk_records(tmp_path / "pairs", "chunk_*.2.fastq.gz")
    assert [f.name[:11] for f in files1] == [f.name[:11] for f in files2] == [f"chunk_{i:05d}" for i in range(5)]
    assert mates1 == expected[0::2] and mates2 == expected[1::2]
    assert [sum(1 for _ in read_batches(str(f), max_reads=1)) for f in files1] == [10, 10, 10, 10, 5]
    assert any(b"" == seq for _, seq, _ in expected)  # empty reads went through

    # interleaved, and single-end FASTA
    inter = interleave(tmp_path / "inter.fastq.gz", R1, R2)
    assert split_reads.split_reads(str(tmp_path / "inter"), 700, str(inter), interleaved=True) == 3
    _, records = chunk_records(tmp_path / "inter", "chunk_*.fastq.gz")
    assert records == reader_records(read_interleaved_batches(str(inter)))
    fasta = require_shared_data("sarscov2", "MT192765.1.fasta")
    assert split_reads.split_reads(str(tmp_path / "fasta"), 1, str(fasta)) == 1
    files, records = chunk_records(tmp_path / "fasta", "chunk_*")
    assert [f.name for f in files] == ["chunk_00000.fasta.gz"]
    assert records == reader_records(read_batches(str(fasta))) and records[0][2] is None


def test_split_refuses_what_the_mapper_refuses(tmp_path):
    bad = tmp_path / "bad.fastq"
    bad.write_text("@r1\nACGT\n+\nIIII\n@r2\nAC*T\n+\nIIII\n")
    proc = subprocess.run([sys.executable, str(REPO / "workflow" / "scripts" / "split_reads.py"), str(tmp_path / "o"),
                           "1", str(bad)], env=env(), capture_output=True, text=True)
    assert proc.returncode == 1
    assert not list((tmp_path / "o").iterdir())  # the chunk written before the bad record is gone
    assert proc.stderr.strip().splitlines() == [
        f"peanut: error: {bad}, record 2: invalid character '*' in the sequence of read 'r2'"]


def test_insert_size_estimated_once(tmp_path, example_index):
    """The estimate written for the chunks is the one a whole run makes, to the last bit; without one (pairs
    that map nowhere) a sample in one chunk goes on, one in several chunks is refused."""
    from peanut_py.insert_size import parse_insert_size

    out = tmp_path / "pairs.txt"
    proc = subprocess.run([sys.executable, str(INSERT_SIZE), str(out), "700", str(example_index), str(R1), str(R2),
                           "--map-options", "-i 0.9"], env=env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    flag, value = out.read_text().split()
    given = parse_insert_size(value)
    rc, _, err = run_cli("map", "-t", "2", "-i", "0.9", "-o", tmp_path / "whole.sam", example_index, R1, R2)
    assert rc == 0
    line = next(l for l in err.splitlines() if "insert size (FR)" in l)
    assert flag == "-I" and f"mean {given.mean:.1f}, std {given.std:.1f}, concordant {given.low}..{given.high}" in line
    assert float(value.split(",")[0]) == given.mean and 300 < given.mean < 340

    phix = require_shared_data("phix")  # phiX reads do not map to the chr20 slice
    args = [str(example_index), str(phix / "phix.1.fastq"), str(phix / "phix.2.fastq")]
    one = subprocess.run([sys.executable, str(INSERT_SIZE), str(out), "100", *args], env=env(), capture_output=True,
                         text=True)
    assert one.returncode == 0, one.stderr
    assert out.read_text() == "\n"
    several = subprocess.run([sys.executable, str(INSERT_SIZE), str(out), "10", *args], env=env(),
                             capture_output=True, text=True)
    assert several.returncode == 1
    lines = several.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"peanut: error: {phix / 'phix.1.fastq'}: fewer than 10 uniquely")
    assert "insert_size" in lines[0]


@pytest.mark.parametrize("settings, message", [
    ({"map_options": "-o x.bam"}, "map_options: -o is set by the workflow"),
    ({"map_options": "--secondary -t4"}, "map_options: -t4 is set by the workflow"),
    ({"samples": {"s": {"mates": "b.fq"}}}, "sample s: give at least its reads file"),
    ({"samples": {"s": {"reads": "a.fq", "mates": "b.fq", "interleaved": True}}}, "not both"),
    ({"samples": {"s": {"reads": "a.fq", "insert_sizes": "300"}}}, "sample s: unknown setting insert_sizes"),
    ({"chunk_size": 0}, "chunk_size must be at least 1"),
    ({"reference": None}, "give the reference FASTA"),
])
def test_bad_settings_are_refused_before_any_job(tmp_path, settings, message):
    base = {"samples": {"s": {"reads": str(R1)}}, "reference": str(EXAMPLE / "chr20_slice.fa.gz")}
    base.update(settings)
    config = write_config(tmp_path / "config.yaml", **base)
    run = snakemake(tmp_path, config, "-n")
    assert run.returncode != 0
    assert message in run.stderr + run.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_bad_reads_fail_the_sample_with_one_line(tmp_path, example_index):
    """Mates that end early: the split fails, naming the original file and record, and no BAM is left."""
    short = tmp_path / "short_R2.fastq"
    with gzip.open(R2, "rt") as f:
        short.write_text("".join(f.readlines()[:4000]))
    config = write_config(tmp_path / "config.yaml", {"s": {"reads": str(R1), "mates": str(short),
                                                           "insert_size": "300,30"}},
                          index=str(example_index))
    run = snakemake(tmp_path, config)
    assert run.returncode != 0
    text = run.stderr + run.stdout
    assert (f"peanut: error: {short}, record 1001: ends after 1000 records but {R1} has more (the two files of "
            "pairs must be equally long)") in text
    assert not (tmp_path / "out" / "s.bam").exists()
