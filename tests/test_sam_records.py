"""_sam_records.pyx (SAM text of single-end and paired chunks without the GIL) against the plain Python formatters
it replaced: per-read (per-pair) record selection here, sam_oracle.format_records for the lines. Byte-identical on
real reads and pairs, with the XA tag or 0x100 records, read groups, FASTA input, reverse-strand and unmapped
reads, and for pairs unmapped mates, mate fields, TLEN and MC; the pair placement with _pair_choice.pyx's Python
reference (pair_oracle.reference_choose_pairs, also tested in tests/test_pair_choice.py). The Python versions
replace Postprocessor's public format_chunk, format_pair_chunk and place_pairs in a subclass."""
import gzip
import itertools
import random
from types import SimpleNamespace

import numpy as np
import pytest

import pair_oracle
import sam_oracle
from align_oracle import check_consistency
from helpers import EXAMPLE, run_cli, sam_body
from pair_oracle import reference_choose_pairs
from peanut_py import sam_records
from peanut_py.align import cigar_string
from peanut_py.device_stage import DeviceResult, DeviceStage
from peanut_py.genome import HostGenome
from peanut_py.mapping import open_index
from peanut_py.insert_size import estimate_insert_size, insert_sample
from peanut_py.reads import read_batches, read_pair_batches
from peanut_py.options import MapOptions
from peanut_py.postprocess import Postprocessor
from peanut_py.hit_lists import merge_hits
from peanut_py.rescue import rescue_batch
from peanut_py.resident import ResidentReference

READS = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"
# what the formatter distinguishes: XA or 0x100 records, read groups, one or all strata
OPTION_SETS = [
    MapOptions(),
    MapOptions(secondary=True, read_group_id="grp1"),
    MapOptions(mode="all", max_hits=20, min_identity=0.7),
    MapOptions(mode="all", max_hits=20, min_identity=0.7, secondary=True),
]
OPTION_IDS = ["xa", "secondary-rg", "all-xa", "all-secondary"]


def xa_tag(names, offsets, contig, strand, aln, hits):
    """BWA's ``XA:Z:chr,±pos,CIGAR,NM;`` listing of the alignments ``hits`` (indices into ``aln``)."""
    xa = "".join(
        f"{names[contig[k]]},{'-' if strand[k] else '+'}{aln.pos[k] - offsets[contig[k]] + 1},"
        f"{cigar_string(aln.cigar[aln.cigar_offsets[k]:aln.cigar_offsets[k + 1]])},{aln.nm[k]};"
        for k in hits
    )
    return f"\tXA:Z:{xa}"


def reference_records(post, batch, r0, n_reads, report, first, strand, contig, aln, md, sub, mapq):
    """The records of a chunk as Postprocessor built them in Python before _sam_records.pyx."""
    opts = post.opts
    text, offsets = md
    md = [bytes(text[a:b]).decode() for a, b in zip(offsets[:-1], offsets[1:])]
    rec = {k: [] for k in ("read", "flag", "ref", "pos", "mapq", "cigar", "tags")}
    mapped = multi = 0
    for r in range(n_reads):
        k0 = int(first[r])
        if report[r] == 0 or aln.pos[k0] < 0:
            for key, v in zip(rec, (r0 + r, sam_records.FLAG_UNMAPPED, -1, -1, 0, "*", None)):
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
            values = (r0 + r, (sam_records.FLAG_REVERSE if strand[k] else 0) | (sam_records.FLAG_SECONDARY if k != k0 else 0),
                      int(contig[k]), int(aln.pos[k] - post.offsets[contig[k]]), int(mapq[r]) if k == k0 else 0,
                      cigar_string(aln.cigar[aln.cigar_offsets[k]:aln.cigar_offsets[k + 1]]),
                      tags if k == k0 else f"NM:i:{aln.nm[k]}\tMD:Z:{md[k]}\tAS:i:{aln.score[k]}")
            for key, v in zip(rec, values):
                rec[key].append(v)
    text = sam_oracle.format_records(batch, post.names, rec["read"], rec["flag"], rec["ref"], rec["pos"], mapq=rec["mapq"],
                              cigar=rec["cigar"], tags=rec["tags"], read_group_id=opts.read_group_id)
    return text, n_reads, {"mapped": mapped, "multi": multi}


@pytest.fixture(scope="module")
def mapped_example(device, example_index):
    index = open_index(example_index)
    resident = ResidentReference.from_index(device, index)
    genome = HostGenome.from_index(index)
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


@pytest.mark.parametrize("opts", OPTION_SETS, ids=OPTION_IDS)
@pytest.mark.parametrize("fmt", ["fastq", "fasta"])
def test_same_text_as_the_python_formatter(mapped_example, opts, fmt, tmp_path):
    device, index, resident, genome = mapped_example
    path = READS if fmt == "fastq" else fasta_variant(tmp_path)
    batch = next(read_batches(str(path)))
    core = DeviceStage(device, resident, min_identity=opts.min_identity, best_stratum=opts.best_stratum_selection)
    result = core.map_batch(batch.codes, batch.offsets)
    post = Postprocessor(index, genome, opts)
    fast = [step() for step in post.chunk_steps(batch, result, 3)]
    slow = [step() for step in PythonPostprocessor(index, genome, opts).chunk_steps(batch, result, 3)]
    assert [(t.decode(), n, c) for t, n, c in fast] == slow
    text = b"".join(t for t, _, _ in fast).decode()
    flags = [int(line.split("\t")[1]) for line in text.splitlines()]
    # the input exercises what the formatter distinguishes
    assert any(f & sam_records.FLAG_REVERSE for f in flags) and any(f == 0 for f in flags)
    if opts.mode == "all":
        assert ("XA:Z:" in text) != opts.secondary
        assert any(f & sam_records.FLAG_SECONDARY for f in flags) == opts.secondary
    if fmt == "fasta":
        assert any(f & sam_records.FLAG_UNMAPPED for f in flags)  # at least the empty read
    assert ("\tRG:Z:grp1" in text) == (opts.read_group_id is not None)


def test_md_of_the_aligned_hits_is_consistent(mapped_example):
    """The MD text the formatter receives (md_flat, from Postprocessor.align_hits) describes every aligned hit
    of real reads exactly: rebuilt from read, CIGAR and MD it gives the reference, and NM counts its edits
    (align_oracle.check_consistency); hits without alignment have an empty MD."""
    device, index, resident, genome = mapped_example
    opts = MapOptions(mode="all", max_hits=20, min_identity=0.7)
    batch = next(read_batches(str(READS)))
    result = DeviceStage(device, resident, min_identity=0.7).map_batch(batch.codes, batch.offsets)
    post = Postprocessor(index, genome, opts)
    read = (result.rs >> 1).astype(np.int64)
    strand = (result.rs & 1).astype(bool)
    aln, (text, offsets), _ = post.align_hits(batch, read, strand, result.ref_start, result.ref_end)
    md = [bytes(text[a:b]).decode() for a, b in zip(offsets[:-1], offsets[1:])]
    assert len(md) > 2000
    assert sum(m == "" for m in md) == int((aln.pos < 0).sum())
    complement = np.array([3, 2, 1, 0, 4], dtype=np.uint8)
    for k in np.flatnonzero(aln.pos >= 0):
        r = int(read[k])
        codes = batch.codes[batch.offsets[r]:batch.offsets[r + 1]]
        codes = complement[codes[::-1]] if strand[k] else codes
        lo, hi = int(aln.pos[k]) - 5, int(aln.ref_end[k]) + 5
        cigar = cigar_string(aln.cigar[aln.cigar_offsets[k]:aln.cigar_offsets[k + 1]])
        hit = SimpleNamespace(pos=int(aln.pos[k]), ref_end=int(aln.ref_end[k]), read_begin=int(aln.read_begin[k]),
                              read_end=int(aln.read_end[k]), nm=int(aln.nm[k]), cigar_string=cigar, md=md[k])
        check_consistency(codes, genome.codes(lo, hi), lo, hit)


@pytest.mark.parametrize("extra", [[], ["-p"], ["-p", "--batch-size", "700"]],
                         ids=["single", "paired", "paired-batches"])
def test_align_on_device_gives_identical_sam(example_index, tmp_path, extra):
    """`peanut map --align-on device` (peanut_py/kernels/affine.cl, one launch per batch from the pipeline's
    batch-step thread) writes the same SAM as the CPU alignment in the postprocessing threads, single-end and paired-end, in one
    batch and in several."""
    if "-p" in extra:
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
        assert ("batch step" in err) == (where == "device")
        outs.append(sam_body(out))
    assert len(outs[0]) > 2000 and outs[0] == outs[1]


def _texts(steps):
    return [(t if isinstance(t, str) else t.decode(), n, c) for t, n, c in (step() for step in steps)]


def _two_phase_texts(two_phase):
    """Run TwoPhaseSteps as the pipeline does: the plans (in reverse, as a pool may finish them), the join on
    their results in order, then the finishing steps."""
    planned = {k: plan() for k, plan in reversed(list(enumerate(two_phase.plans)))}
    return _texts(two_phase.join([planned[k] for k in range(len(two_phase.plans))]))


@pytest.mark.parametrize("opts", OPTION_SETS[:3], ids=OPTION_IDS[:3])
def test_two_phase_steps_equal_the_chunk_steps(mapped_example, opts):
    """Postprocessor.two_phase_steps (the chunks' plans, one device alignment for the batch, finishing steps)
    gives each chunk's text as chunk_steps (plan, CPU alignment and finish per chunk)."""
    from dataclasses import replace

    device, index, resident, genome = mapped_example
    batch = next(read_batches(str(READS)))
    core = DeviceStage(device, resident, min_identity=opts.min_identity, best_stratum=opts.best_stratum_selection)
    result = core.map_batch(batch.codes, batch.offsets)
    per_chunk = Postprocessor(index, genome, replace(opts, align_on="cpu"), device=device)
    batched = Postprocessor(index, genome, replace(opts, align_on="device"), device=device)
    assert (per_chunk.align_on, batched.align_on) == ("cpu", "device")
    for n_chunks in (1, 7):
        two_phase = batched.two_phase_steps(batch, result, n_chunks)
        assert len(two_phase.plans) == n_chunks
        assert _two_phase_texts(two_phase) == _texts(per_chunk.chunk_steps(batch, result, n_chunks))


def test_two_phase_steps_of_pairs_with_chunks_without_hits(mapped_example, tmp_path):
    """Pairs: one chunk per pair (so chunks without any hit, of random pairs, sit between others) give the same
    text through the batch's one device alignment as through the per-chunk CPU path."""
    device, index, resident, genome = mapped_example
    opts = MapOptions(secondary=True)
    batch = next(read_pair_batches(*pair_files(tmp_path, "fastq", True)))
    per_chunk = Postprocessor(index, genome, opts)
    batched = Postprocessor(index, genome, MapOptions(secondary=True, align_on="device"), device=device)
    result, insert_size = map_pair_batch(device, resident, per_chunk, batch, opts)
    n_pairs = batch.n // 2
    two_phase = batched.two_phase_steps(batch, result, n_pairs, insert_size, paired=True)
    expected = _texts(per_chunk.pair_chunk_steps(batch, result, n_pairs, insert_size))
    assert _two_phase_texts(two_phase) == expected
    assert len(expected) == n_pairs
    assert all(int(line.split("\t")[1]) & sam_records.FLAG_UNMAPPED
               for t, _, _ in expected[:3] for line in t.splitlines())


def test_align_on_auto_picks_the_device_on_gpus_with_few_threads():
    """--align-on auto: the device's aligner on a GPU (memory of its own) when the postprocessing pool is small
    or its size unknown, the pool's with more workers, on a CPU device (host memory) or without a device; cpu
    and device are taken as given."""
    from peanut_py.pipeline import postprocess_threads
    from peanut_py.postprocess import AUTO_DEVICE_MAX_WORKERS, resolve_align_on

    gpu, cpu = SimpleNamespace(host_memory=False), SimpleNamespace(host_memory=True)
    assert resolve_align_on("auto", gpu) == "device"
    assert [resolve_align_on("auto", gpu, postprocess_threads(t)) for t in (1, 4, 8, 9, 16)] == \
        ["device", "device", "device", "cpu", "cpu"]
    assert resolve_align_on("auto", gpu, AUTO_DEVICE_MAX_WORKERS + 1) == "cpu"
    assert resolve_align_on("auto", cpu, 1) == "cpu"
    assert resolve_align_on("auto", None) == "cpu"
    assert resolve_align_on("cpu", gpu, 1) == "cpu"
    assert resolve_align_on("device", cpu, 16) == "device"


def test_problems_concatenated_and_solutions_sliced(mapped_example):
    """Solving several chunks' alignment problems as one (concatenate_problems) and cutting the solution
    (slice_alignments) gives each chunk's own solution, CIGAR offsets included."""
    from peanut_py.postprocess import concatenate_problems, slice_alignments

    device, index, resident, genome = mapped_example
    batch = next(read_batches(str(READS)))
    result = DeviceStage(device, resident).map_batch(batch.codes, batch.offsets)
    post = Postprocessor(index, genome, MapOptions())
    plans = [post.plan(batch, result, *b)[0] for b in post.chunk_bounds(batch, result, 4)]
    plans.insert(2, plans[0]._replace(read_codes=plans[0].read_codes[:0], read_off=np.zeros(1, np.int64),
                                      ref_codes=plans[0].ref_codes[:0], ref_off=np.zeros(1, np.int64),
                                      win_lo=plans[0].win_lo[:0], band_lo=plans[0].band_lo[:0],
                                      band_hi=plans[0].band_hi[:0], contig=plans[0].contig[:0]))
    whole = post.solve(concatenate_problems(plans))
    a = 0
    for problems in plans:
        own, cut = post.solve(problems), slice_alignments(whole, a, a + problems.n)
        a += problems.n
        for field in own._fields:
            assert np.array_equal(getattr(own, field), getattr(cut, field)), field
    assert a == len(whole.pos) > 1000


# --- pairs ------------------------------------------------------------------------------------------------------

READS2 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"


def reference_pair_records(post, batch, r0, n_reads, prim, rep_ptr, rep_item, strand, contig, aln, md, mapped, sub,
                           mapq, proper):
    """The records of a chunk of pairs as Postprocessor built them in Python before _sam_records.pyx."""
    opts = post.opts
    names, offsets = post.names, post.offsets
    reported = [rep_item[rep_ptr[r]:rep_ptr[r + 1]].tolist() for r in range(n_reads)]
    if md is not None:
        text, md_off = md
        md = [bytes(text[a:b]).decode() for a, b in zip(md_off[:-1], md_off[1:])]
    cols = ([], [], [], [], [], [], [], [], [], [])  # read flag ref pos mapq cigar nref npos tlen tags
    counts = {"mapped": 0, "multi": 0, "proper": 0, "mate_unmapped": 0}

    def add(*values):
        for col, v in zip(cols, values):
            col.append(v)

    def cigar_of(k):
        return cigar_string(aln.cigar[aln.cigar_offsets[k]:aln.cigar_offsets[k + 1]])

    for p in range(n_reads // 2):
        info = []
        for r in (2 * p, 2 * p + 1):
            if not mapped[r]:
                info.append(None)
                continue
            k = int(prim[r])
            c = int(contig[k])
            info.append((c, int(aln.pos[k] - offsets[c]), int(aln.ref_end[k] - offsets[c]), bool(strand[k]),
                         cigar_of(k)))
        tlen = (0, 0)
        if info[0] and info[1] and info[0][0] == info[1][0]:
            tlen = pair_oracle.template_length(info[0][1], info[0][2], info[1][1], info[1][2])
        secondary = []
        for m, r in enumerate((2 * p, 2 * p + 1)):
            me, mate = info[m], info[1 - m]
            flag = pair_oracle.pair_flags(m == 0, me is not None, mate is not None, bool(me and me[3]),
                                      bool(mate and mate[3]), bool(proper[p]))
            # an unmapped read sits at its mate's position, a mapped read's unmapped mate at the read's
            place = me or mate
            if me is None:
                add(r0 + r, flag, place[0] if place else -1, place[1] if place else -1, 0, "*",
                    place[0] if place else -1, place[1] if place else -1, 0, f"MC:Z:{mate[4]}" if mate else None)
                continue
            mate_place = mate or me
            counts["mapped"] += 1
            counts["proper"] += bool(flag & sam_records.FLAG_PROPER_PAIR)
            counts["mate_unmapped"] += mate is None
            k0 = int(prim[r])
            others = reported[r]
            if others:
                counts["multi"] += 1
            tags = f"NM:i:{aln.nm[k0]}\tMD:Z:{md[k0]}"
            if mate:
                tags += f"\tMC:Z:{mate[4]}"
            tags += f"\tAS:i:{aln.score[k0]}"
            if sub[r] >= 0:
                tags += f"\tXS:i:{sub[r]}"
            if others and not opts.secondary:
                tags += xa_tag(names, offsets, contig, strand, aln, others)
            add(r0 + r, flag, me[0], me[1], int(mapq[r]), me[4], mate_place[0], mate_place[1], tlen[m], tags)
            if opts.secondary:
                base = flag & (sam_records.FLAG_PAIRED | sam_records.FLAG_READ1 | sam_records.FLAG_READ2 | sam_records.FLAG_MATE_UNMAPPED
                               | sam_records.FLAG_MATE_REVERSE)
                for k in others:
                    c = int(contig[k])
                    secondary.append((
                        r0 + r, base | sam_records.FLAG_SECONDARY | (sam_records.FLAG_REVERSE if strand[k] else 0), c,
                        int(aln.pos[k] - offsets[c]), 0, cigar_of(k), mate_place[0], mate_place[1], 0,
                        f"NM:i:{aln.nm[k]}\tMD:Z:{md[k]}\tAS:i:{aln.score[k]}",
                    ))
        for rec in secondary:
            add(*rec)
    read, flag, ref, pos, mq, cigar, nref, npos, tlen, tags = cols
    text = sam_oracle.format_records(batch, names, read, flag, ref, pos, mapq=mq, cigar=cigar, next_ref_id=nref,
                              next_pos=npos, tlen=tlen, tags=tags, read_group_id=opts.read_group_id)
    return text, n_reads, counts


class PythonPostprocessor(Postprocessor):
    """Postprocessor with the plain Python records and pair placement in place of the Cython ones."""

    format_chunk = reference_records
    format_pair_chunk = reference_pair_records

    def place_pairs(self, *args):
        return reference_choose_pairs(*args, self.opts.scoring)


def pair_files(tmp_path, fmt, junk):
    """The example pairs as given (fastq), as FASTA with lowercase reads, an N run and an empty mate (fasta),
    or with mates replaced by random sequence (junk: some mate 1, some mate 2 and the first three pairs whole),
    so that reads with unmapped mates and unmapped reads placed at their mates' positions occur."""
    rng = random.Random(3)
    out = []
    for mate, path in enumerate((READS, READS2)):
        with gzip.open(path, "rt") as f:
            lines = f.read().splitlines()
        recs = []
        for i in range(0, len(lines), 4):
            p, seq, qual = i // 4, lines[i + 1], lines[i + 3]
            if fmt == "fasta":
                if p % 7 == 3 + mate:
                    seq = seq.lower()
                if p == 10 + mate:
                    seq = seq[:40] + "N" * 10 + seq[50:]
                if p == 11 and mate == 1:
                    seq = qual = ""
            if junk and (p < 3 or p % 13 == 5 + 4 * mate):
                seq = "".join(rng.choice("ACGT") for _ in seq)
            recs.append((lines[i][1:], seq, qual))
        path = tmp_path / f"r{mate + 1}.{'fa' if fmt == 'fasta' else 'fq'}"
        with open(path, "w") as o:
            for name, seq, qual in recs:
                o.write(f">{name}\n{seq}\n" if fmt == "fasta" else f"@{name}\n{seq}\n+\n{qual}\n")
        out.append(str(path))
    return out


def map_pair_batch(device, resident, post, batch, opts, with_insert_size=True):
    """The device result of a batch of pairs as map_paired.py gets it: mapped, insert size estimated from the
    batch, mates rescued."""
    core = DeviceStage(device, resident, min_identity=opts.min_identity, best_stratum=opts.best_stratum_selection)
    result = core.map_batch(batch.codes, batch.offsets)
    if not with_insert_size:
        return result, None
    base = (result.rs, result.ref_start, result.ref_end, result.dist)
    insert_size = estimate_insert_size(insert_sample(*base, batch.lengths, post.offsets, opts.scoring))
    extra, _ = rescue_batch(device, resident, batch, *base, insert_size, opts, post.offsets, post.ends)
    if len(extra[0]):
        rs, start, end, dist = merge_hits(base, extra)
        result = DeviceResult(rs=rs, ref_start=start, ref_end=end, dist=dist, raw_hits=result.raw_hits,
                              candidates=result.candidates, seconds=result.seconds)
    return result, insert_size


@pytest.fixture(scope="module")
def mapped_split(device, tmp_path_factory):
    """The example slice cut into 8 contigs of 25 kb: the pairs across a cut have their mates on two contigs."""
    from peanut_py.reference import build_index

    with gzip.open(EXAMPLE / "chr20_slice.fa.gz", "rt") as f:
        seq = "".join(f.read().splitlines()[1:])
    d = tmp_path_factory.mktemp("split")
    with open(d / "split.fa", "w") as o:
        for i in range(0, len(seq), 25_000):
            o.write(f">part{i // 25_000}\n{seq[i:i + 25_000]}\n")
    build_index(d / "split.fa", d / "split.h5", command_line="tests/test_sam_records.py")
    index = open_index(d / "split.h5")
    resident = ResidentReference.from_index(device, index)
    genome = HostGenome.from_index(index)
    yield device, index, resident, genome
    index.close()


@pytest.mark.parametrize("opts", OPTION_SETS, ids=OPTION_IDS)
@pytest.mark.parametrize("fmt, junk, split", [("fastq", False, False), ("fasta", False, False),
                                              ("fastq", True, False), ("fastq", False, True)],
                         ids=["fastq", "fasta", "junk-mates", "split-contigs"])
def test_pairs_same_text_as_the_python_formatter(request, opts, fmt, junk, split, tmp_path):
    """process_pairs (_pair_choice.pyx + sam_records.format_pairs) gives the old Python placement and records."""
    device, index, resident, genome = request.getfixturevalue("mapped_split" if split else "mapped_example")
    batch = next(read_pair_batches(*pair_files(tmp_path, fmt, junk)))
    post = Postprocessor(index, genome, opts)
    result, insert_size = map_pair_batch(device, resident, post, batch, opts)
    fast = [step() for step in post.pair_chunk_steps(batch, result, 3, insert_size)]
    python = PythonPostprocessor(index, genome, opts)
    slow = [step() for step in python.pair_chunk_steps(batch, result, 3, insert_size)]
    assert [(t.decode(), n, c) for t, n, c in fast] == slow
    text = b"".join(t for t, _, _ in fast).decode()
    recs = [line.split("\t") for line in text.splitlines()]
    flags = [int(r[1]) for r in recs]
    # the input exercises what the formatter distinguishes
    assert sum(n for _, n, _ in fast) == batch.n == 4000
    assert sum(c["proper"] for _, _, c in fast) > 3000
    assert any(f & sam_records.FLAG_REVERSE for f in flags) and any(f & sam_records.FLAG_MATE_REVERSE for f in flags)
    assert any(int(r[8]) < 0 for r in recs) and any(int(r[8]) > 0 for r in recs)
    if split:  # mates on two contigs: RNEXT names the mate's, TLEN 0
        across = [r for r in recs if r[6] not in ("=", "*")]
        assert len(across) > 10 and all(r[8] == "0" for r in across)
    assert sum("\tMC:Z:" in line for line in text.splitlines()) > 3000
    if opts.mode == "all":
        assert ("XA:Z:" in text) != opts.secondary
        assert any(f & sam_records.FLAG_SECONDARY for f in flags) == opts.secondary
    if junk:
        counts = [c for _, _, c in fast]
        assert sum(c["mate_unmapped"] for c in counts) > 100
        assert any(f & sam_records.FLAG_UNMAPPED and not f & sam_records.FLAG_MATE_UNMAPPED for f in flags)  # at its mate's place
        assert any(f & sam_records.FLAG_UNMAPPED and f & sam_records.FLAG_MATE_UNMAPPED for f in flags)  # the junk pairs
        assert any(f & sam_records.FLAG_MATE_UNMAPPED and not f & sam_records.FLAG_UNMAPPED for f in flags)
        if opts.secondary and opts.mode == "all":
            assert any(f & sam_records.FLAG_SECONDARY and f & sam_records.FLAG_MATE_UNMAPPED for f in flags)
    if fmt == "fasta":
        assert all(r[10] == "*" for r in recs)
    assert ("\tRG:Z:grp1" in text) == (opts.read_group_id is not None)


def test_pairs_without_insert_size_and_chunks_without_hits(mapped_example, tmp_path):
    """No insert size (nothing paired or proper) and a chunk of pairs none of whose reads has a hit."""
    device, index, resident, genome = mapped_example
    opts = MapOptions(secondary=True)
    batch = next(read_pair_batches(*pair_files(tmp_path, "fastq", True)))
    post = Postprocessor(index, genome, opts)
    result, _ = map_pair_batch(device, resident, post, batch, opts, with_insert_size=False)
    cut = int(np.searchsorted(result.rs >> 1, 6))
    assert cut == 0  # the first three pairs are random sequence
    runs = []
    for formatter in (post, PythonPostprocessor(index, genome, opts)):
        empty = formatter.process_pairs(batch, result, 0, 6, 0, 0, None)
        steps = [step() for step in formatter.pair_chunk_steps(batch, result, 2, None)]
        runs.append(([(t if isinstance(t, str) else t.decode(), n, c) for t, n, c in [empty] + steps]))
    assert runs[0] == runs[1]
    empty_text = runs[0][0][0]
    assert [int(line.split("\t")[1]) for line in empty_text.splitlines()] == [77, 141] * 3
    text = "".join(t for t, _, _ in runs[0][1:])
    assert not any(int(line.split("\t")[1]) & sam_records.FLAG_PROPER_PAIR for line in text.splitlines())
    assert sum(c["mapped"] for _, _, c in runs[0][1:]) > 3500


@pytest.mark.parametrize("first, mapped, mate_mapped, reverse, mate_reverse, proper",
                         list(itertools.product([False, True], repeat=6)))
def test_pair_flags_equal_pairing(first, mapped, mate_mapped, reverse, mate_reverse, proper):
    args = (first, mapped, mate_mapped, reverse, mate_reverse, proper)
    assert sam_records.pair_flags(*args) == pair_oracle.pair_flags(*args)


def test_template_length_equals_pairing():
    rng = random.Random(2)
    for _ in range(20000):
        pos_a, pos_b = rng.randint(0, 1000), rng.choice([rng.randint(0, 1000), None])
        pos_b = pos_a if pos_b is None else pos_b  # equal POS: mate 1 is the leftmost
        end_a, end_b = pos_a + rng.randint(1, 300), pos_b + rng.randint(1, 300)
        tlen = sam_records.template_length_a(pos_a, end_a, pos_b, end_b)
        assert (tlen, -tlen) == pair_oracle.template_length(pos_a, end_a, pos_b, end_b)


def test_rescue_windows_in_ranges_of_pairs_equal_one_call(mapped_example, tmp_path):
    """rescue.batch_windows (the windows of a batch computed in ranges of pairs on a pool, as the rescue stage
    of paired mapping does) equals rescue_windows over the whole batch, for any number of ranges."""
    from concurrent.futures import ThreadPoolExecutor

    from peanut_py.rescue import batch_windows, rescue_windows

    device, index, resident, genome = mapped_example
    opts = MapOptions()
    batch = next(read_pair_batches(*pair_files(tmp_path, "fastq", True)))
    post = Postprocessor(index, genome, opts)
    result, insert_size = map_pair_batch(device, resident, post, batch, opts)
    base = (result.rs, result.ref_start, result.ref_end, result.dist)
    whole = rescue_windows(*base, batch.lengths, insert_size, post.offsets, post.ends)
    assert whole.n > 50
    with ThreadPoolExecutor(3) as pool:
        for n_chunks in (1, 2, 3, 7, 2000, 5000):
            parts = batch_windows(*base, batch.lengths, insert_size, post.offsets, post.ends, pool, n_chunks)
            for field in ("read", "strand", "lo", "hi"):
                np.testing.assert_array_equal(getattr(parts, field), getattr(whole, field))
