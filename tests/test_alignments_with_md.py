"""align.alignments_with_md, Postprocessor.complete's one pass (terminal-gap clipping and MD without the GIL),
against the two functions it fuses, clip_terminal_gaps and md_flat (tested against a plain-Python statement
of the rule and an independent MD checker in test_align.py): on random pairs, edge cases, the example's real
reads as the postprocessor poses them, and input it must refuse rather than read beyond."""
import numpy as np
import pytest

from align_oracle import BWA_MEM, make_batch, random_pair
from helpers import EXAMPLE
from peanut_py.align import BatchAlignments, align_batch, alignments_with_md, clip_terminal_gaps, md_flat
from peanut_py.device_stage import DeviceStage
from peanut_py.genome import HostGenome
from peanut_py.mapping import open_index
from peanut_py.options import MapOptions
from peanut_py.postprocess import Postprocessor
from peanut_py.reads import read_batches
from peanut_py.resident import ResidentReference

SCHEMES = [
    BWA_MEM,
    dict(A=2, B=3, O=5, E=2, ambig=2, clip=0),
    dict(A=1, B=3, O=11, E=4, ambig=1, clip=100),
    dict(A=5, B=4, O=0, E=3, ambig=0, clip=12),
]


def two_steps(rseq, roff, fseq, foff, gstart, res, local, sc):
    """What Postprocessor.complete did before the fused pass: clip_terminal_gaps (local), then md_flat."""
    if local:
        res = clip_terminal_gaps(rseq, roff, fseq, foff, gstart, res, True, sc["A"], sc["B"], sc["O"], sc["E"],
                                 ambig=sc["ambig"], clip=sc["clip"])
    return res, md_flat(rseq, roff, fseq, foff, gstart, res)


def assert_same(got, want):
    """Every field and the MD strings equal, dtype and all (the MD text up to its last string)."""
    (aln, (text, off)), (want_aln, (want_text, want_off)) = got, want
    for name in BatchAlignments._fields:
        a, b = getattr(aln, name), getattr(want_aln, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert off.dtype == want_off.dtype and np.array_equal(off, want_off)
    assert text.dtype == np.uint8 and bytes(text[:off[-1]]) == bytes(want_text[:want_off[-1]])


def fused(rseq, roff, fseq, foff, gstart, res, local, sc):
    return alignments_with_md(rseq, roff, fseq, foff, gstart, res, local, sc["A"], sc["B"], sc["O"], sc["E"],
                              ambig=sc["ambig"], clip=sc["clip"])


def gap_near_end_pair(rng, flank=None):
    """A read with a gap of 1-8 bases ``flank`` (else 2-14) bases from one or both ends, a few substitutions."""
    m = int(rng.integers(40, 90))
    window = rng.integers(0, 4, size=m + 60).astype(np.uint8)
    src = list(window[20:20 + m + 20])
    read = list(src[:m])
    ends = ("left", "right") if flank is None else ("left",)
    for end in ends:
        if flank is None and rng.random() < 0.3:
            continue
        at = int(rng.integers(2, 15)) if flank is None else flank
        length = int(rng.integers(1, 9)) if flank is None else 5
        if flank is None and rng.random() < 0.5:  # insertion into the read
            ins = list(rng.integers(0, 4, size=length))
            read = read[:at] + ins + read[at:] if end == "left" else read[:m - at] + ins + read[m - at:]
        else:  # deletion from the read
            read = read[:at] + src[at + length:at + length + m] if end == "left" else \
                read[:m - at] + src[m - at + length:m + length]
    read = np.array(read[:m], dtype=np.uint8)
    if flank is None:
        sub = rng.random(read.size) < 0.03
        read[sub] = (read[sub] + 1) % 4
    return read, window


def batch_of(pairs, rng, band=(0, 40)):
    rseq, roff, fseq, foff = make_batch(pairs)
    gstart = np.sort(rng.integers(0, 1 << 40, size=len(pairs))).astype(np.int64)
    return rseq, roff, fseq, foff, gstart, band


@pytest.mark.parametrize("local", [True, False])
@pytest.mark.parametrize("scheme", range(len(SCHEMES)))
def test_random_pairs_equal_the_two_steps(scheme, local):
    """Reads with gaps near their ends, and random_pair's reads (Ns, ambiguous window bases, reads of one
    base, bands off the truth or covering the whole matrix, some pairs without alignment)."""
    sc = SCHEMES[scheme]
    rng = np.random.default_rng(31 * scheme + local)
    pairs = [gap_near_end_pair(rng) for _ in range(250)]
    rseq, roff, fseq, foff, gstart, (lo, hi) = batch_of(pairs, rng)
    res = align_batch(rseq, roff, fseq, foff, gstart, lo, hi, local, **sc)
    got, want = fused(rseq, roff, fseq, foff, gstart, res, local, sc), two_steps(rseq, roff, fseq, foff, gstart,
                                                                                   res, local, sc)
    assert_same(got, want)
    if local and sc is BWA_MEM:  # the clip happened on many of them
        assert (got[0].read_begin != res.read_begin).sum() + (got[0].read_end != res.read_end).sum() >= 20
    if not local:
        assert got[0] is res

    random = [random_pair(rng) for _ in range(300)]
    rseq, roff, fseq, foff = make_batch(random)
    gstart = rng.integers(0, 1 << 40, size=len(random)).astype(np.int64)
    lo = np.array([p[2] for p in random])
    hi = np.array([p[3] for p in random])
    res = align_batch(rseq, roff, fseq, foff, gstart, lo, hi, local, **sc)
    assert_same(fused(rseq, roff, fseq, foff, gstart, res, local, sc),
                two_steps(rseq, roff, fseq, foff, gstart, res, local, sc))


@pytest.mark.parametrize("local", [True, False])
def test_edge_cases_equal_the_two_steps(local):
    """No pair; no pair aligned (bands outside the matrix); every pair's flank and gap clipped; no gap."""
    sc = BWA_MEM
    rng = np.random.default_rng(8)
    empty = np.zeros(0, np.uint8), np.zeros(1, np.int64), np.zeros(0, np.uint8), np.zeros(1, np.int64), \
        np.zeros(0, np.int64)
    res = align_batch(*empty[:5], 0, 0, local, **sc)
    got = fused(*empty, res, local, sc)
    assert_same(got, two_steps(*empty, res, local, sc))
    assert got[0].pos.size == 0 and got[1][1].tolist() == [0]

    pairs = [gap_near_end_pair(rng) for _ in range(40)]
    rseq, roff, fseq, foff, gstart, _ = batch_of(pairs, rng)
    res = align_batch(rseq, roff, fseq, foff, gstart, 500, 600, local, **sc)
    assert (res.pos == -1).all()
    got = fused(rseq, roff, fseq, foff, gstart, res, local, sc)
    assert_same(got, two_steps(rseq, roff, fseq, foff, gstart, res, local, sc))
    assert got[1][1].tolist() == [0] * 41 and got[0].cigar.size == 0

    # a flank of 7-11 bases before a 5-base deletion never pays for it (at most 11, not above 6 + 5), though
    # the dynamic program mostly keeps it (it scores above the clip's 5; a flank the substitutions of the
    # window's random bases cost more the program clips itself)
    pairs = [gap_near_end_pair(rng, flank=int(f)) for f in rng.integers(7, 12, size=60)]
    rseq, roff, fseq, foff, gstart, _ = batch_of(pairs, rng)
    res = align_batch(rseq, roff, fseq, foff, gstart, 0, 40, local, **sc)
    got = fused(rseq, roff, fseq, foff, gstart, res, local, sc)
    assert_same(got, two_steps(rseq, roff, fseq, foff, gstart, res, local, sc))
    if local:
        assert (got[0].read_begin > 0).all() and (got[0].read_begin > res.read_begin).sum() >= 50

    windows = [rng.integers(0, 4, size=130).astype(np.uint8) for _ in range(50)]
    pairs = [(w[15:115].copy(), w) for w in windows]
    rseq, roff, fseq, foff, gstart, _ = batch_of(pairs, rng)
    res = align_batch(rseq, roff, fseq, foff, gstart, 10, 20, local, **sc)
    got = fused(rseq, roff, fseq, foff, gstart, res, local, sc)
    assert_same(got, two_steps(rseq, roff, fseq, foff, gstart, res, local, sc))
    assert (got[0].nm == 0).all() and bytes(got[1][0][:got[1][1][-1]]) == b"100" * 50


@pytest.fixture(scope="module")
def example_problems(device, example_index):
    """The example's real reads mapped on the device: the alignment problems of every hit, as
    Postprocessor.alignment_problems poses them (the arrays complete receives)."""
    index = open_index(example_index)
    try:
        resident = ResidentReference.from_index(device, index)
        post = Postprocessor(index, HostGenome.from_index(index), MapOptions(mode="all", max_hits=20,
                                                                             min_identity=0.7))
        batch = next(read_batches(str(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz")))
        result = DeviceStage(device, resident, min_identity=0.7).map_batch(batch.codes, batch.offsets)
        problems = post.alignment_problems(batch, (result.rs >> 1).astype(np.int64), (result.rs & 1).astype(bool),
                                           result.ref_start, result.ref_end)
    finally:
        index.close()
    assert problems.n > 2000
    return problems


@pytest.mark.parametrize("local", [True, False])
def test_real_reads_equal_the_two_steps(example_problems, local):
    p = example_problems
    args = (p.read_codes, p.read_off, p.ref_codes, p.ref_off, p.win_lo)
    res = align_batch(*args, p.band_lo, p.band_hi, local, **BWA_MEM)
    got = fused(*args, res, local, BWA_MEM)
    assert_same(got, two_steps(*args, res, local, BWA_MEM))
    assert (got[0].pos >= 0).mean() > 0.9


def test_refuses_input_it_would_read_beyond():
    """Wrong dtypes, counts that differ, offsets outside the sequences and CIGARs longer than their read or
    window raise ValueError; nothing is read out of bounds."""
    rng = np.random.default_rng(3)
    pairs = [gap_near_end_pair(rng) for _ in range(20)]
    rseq, roff, fseq, foff, gstart, _ = batch_of(pairs, rng)
    args = [rseq, roff, fseq, foff, gstart]
    res = align_batch(*args, 0, 40, True, **BWA_MEM)
    fused(*args, res, True, BWA_MEM)  # as made: accepted
    for k, wrong in ((0, rseq.astype(np.int64)), (1, roff.astype(np.int32)), (4, gstart[:-1]),
                     (1, np.concatenate([roff[:5], roff[5:] + 10**6])), (3, foff[::-1].copy())):
        bad = list(args)
        bad[k] = wrong
        with pytest.raises(ValueError):
            fused(*bad, res, True, BWA_MEM)
    cigar = res.cigar.copy()
    cigar[res.cigar_offsets[3]] += 1000 << 4  # the first op of pair 3 runs far beyond its read
    for local in (True, False):
        with pytest.raises(ValueError, match="alignment 3 does not fit"):
            fused(*args, res._replace(cigar=cigar), local, BWA_MEM)
        with pytest.raises(ValueError):
            fused(*args, res._replace(score=res.score.astype(np.int64)), local, BWA_MEM)
        with pytest.raises(ValueError):
            fused(*args, res._replace(cigar_offsets=res.cigar_offsets[:-1]), local, BWA_MEM)
