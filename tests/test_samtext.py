"""samtext.pyx (SAM text of single-end chunks without the GIL) against the plain Python formatter it replaced:
per-read record selection here, sam.format_records for the lines. Byte-identical on real reads, with the
XA tag or 0x100 records, read groups, FASTA input, reverse-strand and unmapped reads."""
import gzip

import numpy as np
import pytest

from conftest import REPO
from peanut_py import sam
from peanut_py.align import cigar_string
from peanut_py.core import MappingCore
from peanut_py.device import Device
from peanut_py.mapping import open_index
from peanut_py.reads import read_batches
from peanut_py.report import MapOptions, Postprocessor, xa_tag
from peanut_py.resident import ResidentReference

READS = REPO / "index" / "example" / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"


def reference_records(post, batch, r0, n_reads, report, first, strand, contig, aln, md, sub, mapq):
    """The records of a chunk as Postprocessor built them in Python before samtext.pyx."""
    opts = post.opts
    text, offsets = md
    md = [bytes(text[a:b]).decode() for a, b in zip(offsets[:-1], offsets[1:])]
    rec = {k: [] for k in ("read", "flag", "ref", "pos", "mapq", "cigar", "tags")}
    mapped = multi = 0
    for r in range(n_reads):
        k0 = int(first[r])
        if report[r] == 0 or aln.pos[k0] < 0:
            for key, v in zip(rec, (r0 + r, sam.FLAG_UNMAPPED, -1, -1, 0, "*", None)):
                rec[key].append(v)
            continue
        mapped += 1
        others = [k for k in range(k0 + 1, k0 + int(report[r])) if aln.pos[k] >= 0]
        multi += bool(others)
        tags = f"NM:i:{aln.nm[k0]}\tMD:Z:{md[k0]}\tAS:i:{aln.score[k0]}"
        if sub[r] >= 0:
            tags += f"\tXS:i:{sub[r]}"
        if others and not opts.secondary:
            tags += xa_tag(post.names, post.offsets, contig, strand, aln, others)
        for k in [k0] + (others if opts.secondary else []):
            values = (r0 + r, (sam.FLAG_REVERSE if strand[k] else 0) | (sam.FLAG_SECONDARY if k != k0 else 0),
                      int(contig[k]), int(aln.pos[k] - post.offsets[contig[k]]), int(mapq[r]) if k == k0 else 0,
                      cigar_string(aln.cigar[aln.cigar_offsets[k]:aln.cigar_offsets[k + 1]]),
                      tags if k == k0 else f"NM:i:{aln.nm[k]}\tMD:Z:{md[k]}\tAS:i:{aln.score[k]}")
            for key, v in zip(rec, values):
                rec[key].append(v)
    text = sam.format_records(batch, post.names, rec["read"], rec["flag"], rec["ref"], rec["pos"], mapq=rec["mapq"],
                              cigar=rec["cigar"], tags=rec["tags"], read_group_id=opts.read_group_id)
    return text, n_reads, {"mapped": mapped, "multi": multi}


@pytest.fixture(scope="module")
def mapped_example(example_index):
    device = Device(None)
    index = open_index(example_index)
    resident = ResidentReference.from_index(device, index)
    genome = index.codes(0, int(index.offsets[-1] + index.lengths[-1]))
    yield device, index, resident, genome
    index.close()


def fasta_variant(tmp_path):
    """The example reads as FASTA (no qualities), some lowercase, one with an N run, one empty."""
    out = tmp_path / "reads.fa"
    with gzip.open(READS, "rt") as f, open(out, "w") as o:
        lines = f.read().splitlines()
        for i in range(0, len(lines), 4):
            seq = lines[i + 1]
            if i // 4 % 7 == 3:
                seq = seq.lower()
            if i // 4 == 10:
                seq = seq[:40] + "N" * 10 + seq[50:]
            if i // 4 == 11:
                seq = ""
            o.write(f">{lines[i][1:]}\n{seq}\n")
    return out


@pytest.mark.parametrize("opts", [
    MapOptions(),
    MapOptions(secondary=True, read_group_id="grp1"),
    MapOptions(mode="all", max_hits=20, min_identity=0.7),
    MapOptions(mode="all", max_hits=20, min_identity=0.7, secondary=True),
], ids=["xa", "secondary-rg", "all-xa", "all-secondary"])
@pytest.mark.parametrize("fmt", ["fastq", "fasta"])
def test_same_text_as_the_python_formatter(mapped_example, opts, fmt, tmp_path, monkeypatch):
    device, index, resident, genome = mapped_example
    path = READS if fmt == "fastq" else fasta_variant(tmp_path)
    batch = next(read_batches(str(path)))
    core = MappingCore(device, resident, min_identity=opts.min_identity, best_stratum=opts.best_stratum_selection)
    result = core.map_batch(batch.codes, batch.offsets)
    post = Postprocessor(index, genome, opts)
    fast = [step() for step in post.chunk_steps(batch, result, 3)]
    monkeypatch.setattr(Postprocessor, "format_chunk", reference_records)
    slow = [step() for step in post.chunk_steps(batch, result, 3)]
    assert [(t.decode(), n, c) for t, n, c in fast] == slow
    text = b"".join(t for t, _, _ in fast).decode()
    flags = [int(line.split("\t")[1]) for line in text.splitlines()]
    # the input exercises what the formatter distinguishes
    assert any(f & sam.FLAG_REVERSE for f in flags) and any(f == 0 for f in flags)
    if opts.mode == "all":
        assert ("XA:Z:" in text) != opts.secondary
        assert any(f & sam.FLAG_SECONDARY for f in flags) == opts.secondary
    if fmt == "fasta":
        assert any(f & sam.FLAG_UNMAPPED for f in flags)  # at least the empty read
    assert ("\tRG:Z:grp1" in text) == (opts.read_group_id is not None)


def test_md_flat_equals_md_batch(mapped_example):
    """md_flat (the formatter's MD source) gives md_batch's strings for every aligned hit of real reads."""
    device, index, resident, genome = mapped_example
    opts = MapOptions(mode="all", max_hits=20, min_identity=0.7)
    batch = next(read_batches(str(READS)))
    result = MappingCore(device, resident, min_identity=0.7).map_batch(batch.codes, batch.offsets)
    post = Postprocessor(index, genome, opts)
    read = (result.rs >> 1).astype(np.int64)
    strand = (result.rs & 1).astype(bool)
    _, md_list, _ = post._align(batch, read, strand, result.ref_start, result.ref_end)
    aln, (text, offsets), _ = post._align(batch, read, strand, result.ref_start, result.ref_end, flat_md=True)
    flat = [bytes(text[a:b]).decode() for a, b in zip(offsets[:-1], offsets[1:])]
    assert len(flat) == len(md_list) > 2000 and flat == md_list
    assert sum(m == "" for m in flat) == int((aln.pos < 0).sum())


@pytest.mark.parametrize("extra", [[], ["-p"]], ids=["single", "paired"])
def test_align_on_device_gives_identical_sam(example_index, tmp_path, extra):
    """`peanut map --align-on device` (kernels/affine.cl from the postprocessing threads) writes the same
    SAM as the default CPU alignment, single-end and paired-end, with two threads."""
    from conftest import run_cli, sam_body

    if extra:
        reads = tmp_path / "interleaved.fq"
        with gzip.open(READS, "rt") as f1, gzip.open(str(READS).replace("_R1", "_R2"), "rt") as f2, \
                open(reads, "w") as o:
            a, b = f1.read().splitlines(), f2.read().splitlines()
            for i in range(0, len(a), 4):
                o.write("\n".join(a[i:i + 4] + b[i:i + 4]) + "\n")
    else:
        reads = READS
    outs = []
    for where in ("cpu", "device"):
        out = tmp_path / f"{where}.sam"
        rc, _, err = run_cli("map", str(example_index), str(reads), *extra, "-t", "2", "--align-on", where,
                             "-o", str(out))
        assert rc == 0, err
        outs.append(sam_body(out))
    assert len(outs[0]) > 2000 and outs[0] == outs[1]
