"""peanut_py.align against a plain-Python full-matrix Gotoh reference, an independent MD/CIGAR/NM checker
(both in align_oracle.py), real NA12878 reads (and bwa's alignments of them), and itself across threads."""
import re
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

from align_oracle import (BAM, BWA_MEM, FASTQ, LETTERS, REGION, check_consistency, load_region, make_batch,
                          random_pair, ref_align, require_real_data, to_codes)
from peanut_py.align import (align, align_batch, cigar_string, cigar_tuples, clip_terminal_gaps, md_batch,
                             ungapped_shortcut)

SCHEMES = [
    BWA_MEM,
    dict(A=2, B=3, O=5, E=2, ambig=2, clip=0),     # plain Smith-Waterman in local mode
    dict(A=1, B=3, O=11, E=4, ambig=1, clip=100),  # expensive gaps, clipping nearly never pays
    dict(A=5, B=4, O=0, E=3, ambig=0, clip=12),    # linear gaps, free N
]


# ------------------------------------------------------------------ single pairs

def assert_same(got, want):
    if want is None:
        assert got.pos == -1 and got.cigar_string == "*" and len(got.cigar) == 0
        return
    assert dict(pos=got.pos, ref_end=got.ref_end, read_begin=got.read_begin, read_end=got.read_end,
                score=got.score, nm=got.nm, cigar=got.cigar_string, md=got.md) == want


# ------------------------------------------------------------------ random pairs with planted edits

@pytest.mark.parametrize("local", [True, False])
@pytest.mark.parametrize("scheme", range(len(SCHEMES)))
def test_random_pairs_match_reference(local, scheme):
    sc = SCHEMES[scheme]
    rng = np.random.default_rng(1000 * scheme + local)
    n_aligned = 0
    for _ in range(70):
        read, window, lo, hi = random_pair(rng)
        gstart = int(rng.integers(1024, 1 << 31))
        want = ref_align(read, window, gstart, lo, hi, local, **sc)
        got = align(read, window, gstart, lo, hi, local, **sc)
        assert_same(got, want)
        if want is not None:
            n_aligned += 1
            check_consistency(read, window, gstart, got)
            if not local:
                assert got.read_begin == 0 and got.read_end == read.size
    assert n_aligned >= 60


def test_degenerate_inputs_match_reference():
    cases = [
        (np.array([], np.uint8), np.array([0, 1], np.uint8), -5, 5),
        (np.array([0, 1], np.uint8), np.array([], np.uint8), -5, 5),
        (np.array([0], np.uint8), np.array([0], np.uint8), 3, 2),     # empty band
        (np.array([0, 1, 2], np.uint8), np.array([3, 3], np.uint8), -9, -5),   # band below the matrix
        (np.array([0, 1, 2, 3, 0], np.uint8), np.array([0, 1], np.uint8), -4, -2),  # only insertion paths
        (np.array([4, 4, 4], np.uint8), np.array([4, 4, 4, 4], np.uint8), -2, 2),
        (np.array([0, 0, 0], np.uint8), np.array([1, 1, 1], np.uint8), 0, 0),
    ]
    for read, window, lo, hi in cases:
        for local in (True, False):
            for sc in SCHEMES:
                got = align(read, window, 5000, lo, hi, local, **sc)
                want = ref_align(read, window, 5000, lo, hi, local, **sc)
                assert_same(got, want)
                if want is not None:
                    check_consistency(read, window, 5000, got)


def codes(s):
    return np.array(["ACGTN".index(c) for c in s], dtype=np.uint8)


def test_documented_rules():
    # deletion in a homopolymer is placed leftmost (diagonal preferred in the traceback)
    a = align(codes("GCATAAAACGTGCA"), codes("GCATAAAAACGTGCA"), 100, 0, 1, False)
    assert a.cigar_string == "4M1D10M" and a.md == "4^A10" and a.nm == 1 and a.pos == 100
    # ... insertion too
    a = align(codes("GCATTTTTTCGTGCA"), codes("GCATTTTTCGTGCA"), 0, -2, 2, False)
    assert a.cigar_string == "3M1I11M"
    # MD: 0 between adjacent mismatches and between a deletion and a following mismatch; N is a mismatch
    ref = codes("ACGTACGTACGTACGTACGTACGTAC")
    read = codes("ACGTACGT" + "GG" + "GTACGTA" + "G" + "GTACGTAC")
    a = align(read, ref, 0, 0, 0, False)
    assert a.md == "8A0C7C8" and a.nm == 3 and a.cigar_string == "26M"
    a = align(codes("ACGTACGTACNTACGT"), codes("ACGTACGTACGTACGT"), 0, 0, 0, False, **BWA_MEM)
    assert a.md == "10G5" and a.nm == 1 and a.score == 15 - BWA_MEM["ambig"]
    a = align(codes("ACGTACGTACCGTACGTGCA"), codes("ACGTACGTACTTCGTACGTGCA"), 0, 0, 4, False)
    assert a.cigar_string == "10M2D10M" and a.md == "10^TT10" and a.nm == 2
    # two placements of the deletion score the same; leftmost puts the mismatch right after it
    a = align(codes("ACGTACGTAG" + "C" + "GCATGCAGGTACGTGCA"), codes("ACGTACGTAGTTAAGCATGCAGGTACGTGCA"), 0, 0, 4, False)
    assert a.cigar_string == "10M3D18M" and a.md == "10^TTA0A17" and a.nm == 4
    # gap cost O + L*E; semiglobal keeps a mismatch at the read end, local clips it for clip < its cost
    a = align(codes("ACGTACGTACGTACGTACGG"), codes("ACGTACGTACGTACGTACGT"), 0, 0, 0, False)
    assert a.cigar_string == "20M" and a.score == 19 - 4
    # (clipping the last base gives 19 - clip, keeping it 19 - 4; ties go to the smaller reference end)
    read, ref = codes("ACGTACGTACGTACGTACGG"), codes("ACGTACGTACGTACGTACGT")
    a = align(read, ref, 0, 0, 0, True, clip=3)
    assert a.cigar_string == "19M1S" and a.score == 19 and a.ref_end == 19 and a.nm == 0 and a.md == "19"
    a = align(read, ref, 0, 0, 0, True, clip=4)
    assert a.cigar_string == "19M1S"
    a = align(read, ref, 0, 0, 0, True, clip=5)
    assert a.cigar_string == "20M" and a.score == 15
    # ties between end cells: smallest reference end wins
    a = align(codes("ACGT"), codes("ACGTTTACGT"), 50, 0, 6, False)
    assert a.pos == 50 and a.cigar_string == "4M"
    assert cigar_tuples(a.cigar) == [(0, 4)] and cigar_string(a.cigar) == "4M"


def test_md_of_given_cigars():
    """MD formatting on hand-made CIGARs (md_batch only reads pos/cigar from the result)."""
    from peanut_py.align import BatchAlignments

    def md_of(read, ref, cig):
        ops = np.array([int(n) << 4 | "MIDNS".index(op) for n, op in re.findall(r"(\d+)([MIDS])", cig)], np.uint32)
        res = BatchAlignments(np.array([7]), None, None, None, None, None, ops, np.array([0, ops.size]))
        return md_batch(codes(read), [0, len(read)], codes(ref), [0, len(ref)], [7], res)[0]

    assert md_of("ACGTA", "ACGTA", "5M") == "5"
    assert md_of("TCGTA", "ACGTA", "5M") == "0A4"
    assert md_of("ACGTT", "ACGTA", "5M") == "4A0"
    assert md_of("ACGTA", "ANGTA", "5M") == "1N3"           # ambiguous reference base
    assert md_of("ANGTA", "ACGTA", "5M") == "1C3"           # N in the read
    assert md_of("ACCCGTA", "ACGTA", "2M2I3M") == "5"
    assert md_of("ACGTATGAGG", "ACGTACTTGAGG", "5M2D5M") == "5^CT5"
    assert md_of("ACGTACAGG", "ACGTACTTGAGG", "5M3D4M") == "5^CTT0G3"
    assert md_of("ACGTATGAGG", "ACGTACTGAGG", "5M1D1I1D4M") == "5^C0^T4"   # D-I-D
    assert md_of("GGACGTA", "ACGTA", "2S5M") == "5"
    assert md_of("GGACGTAT", "ACGTA", "2S5M1S") == "5"


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        align(np.array([5], np.uint8), codes("A"), 0, 0, 0, True)
    with pytest.raises(ValueError):
        align(codes("A"), codes("A"), 0, 0, 0, True, O=0, E=0)
    with pytest.raises(ValueError):
        align(codes("A"), codes("A"), 0, 0, 0, True, B=-1)
    with pytest.raises(ValueError):
        align_batch(codes("AC"), [0, 1], codes("AC"), [0, 2], 0, 0, 0, True)


# ------------------------------------------------------------------ batch and threads

def batch_rows(res, md, p):
    c = res.cigar[res.cigar_offsets[p]:res.cigar_offsets[p + 1]]
    return (int(res.pos[p]), int(res.ref_end[p]), int(res.read_begin[p]), int(res.read_end[p]),
            int(res.score[p]), int(res.nm[p]), cigar_string(c), md[p])


def test_batch_equals_single_and_threads_equal_serial():
    rng = np.random.default_rng(7)
    pairs = [random_pair(rng) for _ in range(400)]
    rseq, roff, fseq, foff = make_batch(pairs)
    gs = rng.integers(1024, 1 << 40, size=len(pairs))
    lo = np.array([p[2] for p in pairs])
    hi = np.array([p[3] for p in pairs])
    local = rng.random(len(pairs)) < 0.5
    res = align_batch(rseq, roff, fseq, foff, gs, lo, hi, local, **BWA_MEM)
    md = md_batch(rseq, roff, fseq, foff, gs, res)
    assert res.cigar.dtype == np.uint32 and res.cigar_offsets[-1] == res.cigar.size
    for p, (read, window, l, h) in enumerate(pairs):
        one = align(read, window, int(gs[p]), int(l), int(h), bool(local[p]), **BWA_MEM)
        assert batch_rows(res, md, p) == (one.pos, one.ref_end, one.read_begin, one.read_end, one.score,
                                          one.nm, one.cigar_string, one.md)

    # four threads on overlapping slices at once, each with its own work buffers
    def run(chunk):
        a, b = chunk
        sub = make_batch(pairs[a:b])
        r = align_batch(sub[0], sub[1], sub[2], sub[3], gs[a:b], lo[a:b], hi[a:b], local[a:b], **BWA_MEM)
        return a, r, md_batch(sub[0], sub[1], sub[2], sub[3], gs[a:b], r)

    chunks = [(0, 400), (0, 150), (150, 400), (37, 311)] * 2
    with ThreadPoolExecutor(4) as ex:
        for a, r, m in ex.map(run, chunks):
            for p in range(len(r.pos)):
                assert batch_rows(r, m, p) == batch_rows(res, md, a + p)


# ------------------------------------------------------------------ ungapped shortcut

def shortcut_pair(rng):
    """Mostly what the shortcut is for (a read with 0-3 substitutions on one diagonal), and what it must refuse:
    tandem repeats (equal scores on other diagonals), N in read or window, reads hanging out of the window,
    an indel, bands that miss the true diagonal."""
    m = int(rng.integers(1, 120))
    pad = int(rng.integers(0, 12))
    period = int(rng.integers(1, 7))
    unit = rng.integers(0, 4, size=period).astype(np.uint8)
    kind = rng.random()
    if kind < 0.25:  # a tandem repeat under part or all of the read
        window = np.resize(unit, m + 2 * pad)
        a = int(rng.integers(0, window.size))
        window[:a] = rng.integers(0, 4, size=a)
    else:
        window = rng.integers(0, 4, size=m + 2 * pad).astype(np.uint8)
    read = window[pad:pad + m].copy()
    for p in rng.choice(m, size=min(m, int(rng.integers(0, 4))), replace=False):
        read[p] = (read[p] + int(rng.integers(1, 4))) % 4
    if rng.random() < 0.1:
        read[int(rng.integers(0, m))] = 4
    if rng.random() < 0.1:
        window[int(rng.integers(0, window.size))] = 4
    if rng.random() < 0.1 and m > 10:  # a one-base deletion from the read
        k = int(rng.integers(3, m - 3))
        read = np.concatenate([read[:k], read[k + 1:], window[pad + m:pad + m + 1]])
    w = int(rng.integers(0, 10))
    shift = int(rng.integers(-4, 5)) if rng.random() < 0.3 else 0
    return read, window, pad - w + shift, pad + w + shift


def assert_batch_same_without_shortcut(pairs, local, sc):
    """align_batch on (read, window, band_lo, band_hi) pairs gives the same fields with and without the
    ungapped shortcut."""
    rseq, roff, fseq, foff = make_batch(pairs)
    lo = np.array([p[2] for p in pairs])
    hi = np.array([p[3] for p in pairs])
    fast = align_batch(rseq, roff, fseq, foff, 5000, lo, hi, local, **sc)
    slow = align_batch(rseq, roff, fseq, foff, 5000, lo, hi, local, shortcut=False, **sc)
    for field in fast._fields:
        assert np.array_equal(getattr(fast, field), getattr(slow, field)), field


@pytest.mark.parametrize("scheme", range(len(SCHEMES)))
def test_ungapped_shortcut_equals_dynamic_program(scheme):
    """_align.pyx skips the DP where an ungapped, unclipped alignment is provably the unique optimum
    (docs/alignment.md, "Ungapped shortcut"): its result must be the DP's, field for field."""
    sc = SCHEMES[scheme]
    rng = np.random.default_rng(77 + scheme)
    pairs = [shortcut_pair(rng) for _ in range(3000)]
    local = rng.random(len(pairs)) < 0.5
    taken = 0
    for (read, window, lo, hi), loc in zip(pairs, local):
        decided = ungapped_shortcut(read, window, lo, hi, loc, **sc)
        dp = align(read, window, 5000, lo, hi, loc, shortcut=False, **sc)
        if decided is not None:
            taken += 1
            pos, score, nm = decided
            assert (dp.pos - 5000, dp.score, dp.nm, dp.cigar_string, dp.read_begin, dp.read_end) == (
                pos, score, nm, f"{read.size}M", 0, read.size)
    # with bwa-mem's scores most of these reads (0-1 substitution, unique) take the shortcut
    if scheme == 0:
        assert taken > 0.3 * len(pairs)
    assert_batch_same_without_shortcut(pairs, local, sc)
    # and a subset against the plain Python dynamic program
    for p in range(0, len(pairs), 15):
        read, window, l, h = pairs[p]
        assert_same(align(read, window, 5000, l, h, bool(local[p]), **sc),
                    ref_align(read, window, 5000, l, h, bool(local[p]), **sc))


def test_ungapped_shortcut_refuses_ties_and_gaps():
    tandem = codes("ACACACACACACACACACACACAC")
    read = codes("ACACACACACAC")
    assert ungapped_shortcut(read, tandem, 0, 12, True, **BWA_MEM) is None  # every even diagonal ties
    assert ungapped_shortcut(read, tandem, 4, 5, True, **BWA_MEM) == (4, 12, 0)  # one even diagonal in the band
    rng = np.random.default_rng(5)
    window = rng.integers(0, 4, 60).astype(np.uint8)
    read = window[10:50].copy()
    read[[5, 30]] = (read[[5, 30]] + 1) % 4
    # two mismatches cost 10, more than a gap's 7, but no gapped or clipped alignment of this random window
    # comes within 10 of a perfect one (the reach check): the shortcut still decides, as the DP would
    assert ungapped_shortcut(read, window, 0, 20, True, **BWA_MEM) == (10, 40 - 10, 2) == dp_decision(read, window)
    read[30] = window[40]
    assert ungapped_shortcut(read, window, 0, 20, True, **BWA_MEM) == (10, 40 - 5, 1)
    read[12] = 4  # an N besides the mismatch: 5 + 2, within the reach check
    assert ungapped_shortcut(read, window, 0, 20, True, **BWA_MEM) == (10, 40 - 5 - 2, 2) == dp_decision(read, window)
    read = window[10:50].copy()
    read[[36, 38]] = (read[[36, 38]] + 1) % 4  # clipping the last 4 bases costs 5 + 4 < 10: the DP clips
    assert ungapped_shortcut(read, window, 0, 20, True, **BWA_MEM) is None
    assert align(read, window, 0, 0, 20, True, **BWA_MEM).cigar_string == "36M4S"
    assert ungapped_shortcut(read, window, 0, 20, False, **BWA_MEM) == (10, 40 - 10, 2)  # semiglobal: no clip
    # a one-base deletion before GGGGCGGGGGG leaves the read two mismatches from the window ungapped; the
    # deletion (7) beats them (10): left to the DP
    gapped = window.copy()
    gapped[40:51] = codes("GGGGCGGGGGG")
    read = np.concatenate([gapped[10:40], gapped[41:51]])
    assert ungapped_shortcut(read, gapped, 0, 20, True, **BWA_MEM) is None
    assert align(read, gapped, 0, 0, 20, True, **BWA_MEM).cigar_string == "30M1D10M"


def dp_decision(read, window, lo=0, hi=20, local=True, sc=BWA_MEM):
    """The DP's (window position, AS, NM) when its alignment is ungapped and unclipped, else None."""
    dp = align(read, window, 0, lo, hi, local, shortcut=False, **sc)
    return (dp.pos, dp.score, dp.nm) if dp.cigar_string == f"{read.size}M" else None


def reach_pair(rng):
    """Pairs at the edge of the reach check (_align.pyx no_rival_within): 0-3 substitutions, often within a
    few bases of a read end (a soft clip may win), tandem repeats and two-letter windows (a gap may realign
    the read as well), insertions and deletions of 1-3 bases, a deletion and an insertion close together,
    N, bands beside the truth."""
    m = int(rng.integers(1, 60))
    pad = int(rng.integers(0, 8))
    kind = rng.random()
    if kind < 0.3:
        window = np.resize(rng.integers(0, 4, int(rng.integers(1, 5))).astype(np.uint8), m + 2 * pad)
        a = int(rng.integers(0, window.size))
        if rng.random() < 0.5:
            window[:a] = rng.integers(0, 4, a)
    elif kind < 0.4:
        window = rng.integers(0, 2, m + 2 * pad).astype(np.uint8)
    else:
        window = rng.integers(0, 4, m + 2 * pad).astype(np.uint8)
    read = window[pad:pad + m].copy()
    for _ in range(int(rng.integers(0, 4))):
        end = int(rng.integers(0, min(m, 6)))
        p = int(rng.integers(0, m)) if rng.random() < 0.6 else (end if rng.random() < 0.5 else m - 1 - end)
        read[p] = (read[p] + int(rng.integers(1, 4))) % 4
    if rng.random() < 0.15:
        read[int(rng.integers(0, m))] = 4
    if rng.random() < 0.1:
        window[int(rng.integers(0, window.size))] = 4
    r = rng.random()
    if r < 0.15 and m > 4:
        k, n_del = int(rng.integers(1, m - 1)), int(rng.integers(1, 4))
        read = np.concatenate([read[:k], read[k + n_del:], window[pad + m:pad + m + n_del]])
    elif r < 0.3 and m > 4:
        k = int(rng.integers(1, m - 1))
        read = np.concatenate([read[:k], rng.integers(0, 4, int(rng.integers(1, 3))).astype(np.uint8), read[k:]])
    elif r < 0.4 and m > 12:  # a deletion and an insertion a few bases apart: two gaps, or substitutions
        k = int(rng.integers(1, m - 11))
        k2 = k + int(rng.integers(2, 10))
        read = np.concatenate([read[:k], read[k + 1:k2], rng.integers(0, 4, 1).astype(np.uint8), read[k2:]])
    w = int(rng.integers(0, 8))
    shift = int(rng.integers(-4, 5)) if rng.random() < 0.3 else 0
    return read.astype(np.uint8), window, pad - w + shift, pad + w + shift


REACH_SCHEMES = SCHEMES + [dict(A=1, B=4, O=6, E=1, ambig=1, clip=0), dict(A=1, B=1, O=1, E=0, ambig=0, clip=1),
                           dict(A=3, B=1, O=2, E=3, ambig=3, clip=0)]


@pytest.mark.parametrize("scheme", range(len(REACH_SCHEMES)))
def test_ungapped_shortcut_reach_check_equals_dynamic_program(scheme):
    """Beyond the simple bounds (a mismatch cheaper than a gap or a clip) the shortcut decides only where no
    gapped or clipped alignment can come as close to a perfect one (docs/alignment.md): batches with and
    without the shortcut must be identical. Without either half of the check (gaps, clips) these pairs
    differ for most schemes."""
    sc = REACH_SCHEMES[scheme]
    rng = np.random.default_rng(300 + scheme)
    pairs = [reach_pair(rng) for _ in range(6000)]
    local = rng.random(len(pairs)) < 0.6
    assert_batch_same_without_shortcut(pairs, local, sc)
    # the reach check decides a share of its own: pairs whose penalty reaches a gap's or a clip's cost
    bound = min(sc["O"] + sc["E"], sc["A"] + sc["clip"])
    beyond = 0
    for (read, window, l, h), loc in zip(pairs, local):
        decided = ungapped_shortcut(read, window, l, h, loc, **sc)
        if decided is not None and read.size * sc["A"] - decided[1] >= (bound if loc else sc["O"] + sc["E"]):
            beyond += 1
    if scheme == 0:
        assert beyond > 0.05 * len(pairs)


def two_gap_pair(rng):
    """Pairs for the reach check's two-gap case and its screen (_align.pyx rivals_screened): 3-4 substitutions
    (with bwa-mem's scores a penalty of 15-20, at or above two gaps' cost), often near a read end or near
    each other, in random, tandem-repeat and two-letter windows; some also with an indel of 1-4 bases near
    the substitutions; or a deletion and an insertion a few bases apart with 0-2 substitutions, which the
    read's ungapped alignment sees as a few mismatches; bands up to 21 diagonals wide, some beside the
    truth."""
    m = int(rng.integers(20, 160))
    pad = int(rng.integers(0, 12))
    kind = rng.random()
    if kind < 0.35:
        window = np.resize(rng.integers(0, 4, int(rng.integers(1, 7))).astype(np.uint8), m + 2 * pad + 4)
        a = int(rng.integers(0, window.size))
        if rng.random() < 0.5:
            window[:a] = rng.integers(0, 4, a)
        else:
            window[a:] = rng.integers(0, 4, window.size - a)
    elif kind < 0.45:
        window = rng.integers(0, 2, m + 2 * pad + 4).astype(np.uint8)
    else:
        window = rng.integers(0, 4, m + 2 * pad + 4).astype(np.uint8)
    read = window[pad:pad + m].copy()
    centre = int(rng.integers(0, m))
    indel = rng.random()
    for _ in range(int(rng.integers(0, 3) if indel >= 0.6 else rng.integers(3, 5))):
        r = rng.random()
        if r < 0.3:
            p = int(rng.integers(0, min(m, 8))) if rng.random() < 0.5 else m - 1 - int(rng.integers(0, min(m, 8)))
        elif r < 0.6:
            p = min(max(centre + int(rng.integers(-10, 11)), 0), m - 1)
        else:
            p = int(rng.integers(0, m))
        read[p] = (read[p] + int(rng.integers(1, 4))) % 4
    if rng.random() < 0.1:
        read[int(rng.integers(0, m))] = 4
    k = min(max(centre + int(rng.integers(-8, 9)), 1), m - 6)
    if indel < 0.2:
        n_del = int(rng.integers(1, 5))
        read = np.concatenate([read[:k], read[k + n_del:], window[pad + m:pad + m + n_del]])
    elif indel < 0.4:
        read = np.concatenate([read[:k], rng.integers(0, 4, int(rng.integers(1, 5))).astype(np.uint8), read[k:]])
    elif indel >= 0.6:  # a deletion and an insertion (or the other way round) 2-9 bases apart
        k2 = min(k + int(rng.integers(2, 10)), m - 1)
        n_del, n_ins = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        ins = rng.integers(0, 4, n_ins).astype(np.uint8)
        if rng.random() < 0.5:
            read = np.concatenate([read[:k], read[k + n_del:k2], ins, read[k2:]])
        else:
            read = np.concatenate([read[:k], ins, read[k:k2], read[k2 + n_del:]])
        read = np.concatenate([read, window[pad + m:pad + m + 4]])[:m]
    w = int(rng.integers(0, 11))
    shift = int(rng.integers(-4, 5)) if rng.random() < 0.3 else 0
    return read.astype(np.uint8), window, pad - w + shift, pad + w + shift


@pytest.mark.parametrize("scheme", range(len(REACH_SCHEMES)))
def test_ungapped_shortcut_two_gaps_equals_dynamic_program(scheme):
    """Reads whose penalty reaches two gaps' cost, beside indels and repeats (two_gap_pair): the shortcut's
    cheap screen and the full reach check must together decide exactly as the dynamic program, field for
    field; with bwa-mem's scores a share of them is decided at a penalty of two gaps or more."""
    sc = REACH_SCHEMES[scheme]
    rng = np.random.default_rng(500 + scheme)
    pairs = [two_gap_pair(rng) for _ in range(4000)]
    local = rng.random(len(pairs)) < 0.6
    assert_batch_same_without_shortcut(pairs, local, sc)
    two_gaps = 2 * (sc["O"] + sc["E"])
    beyond = 0
    for (read, window, l, h), loc in zip(pairs, local):
        decided = ungapped_shortcut(read, window, l, h, loc, **sc)
        if decided is not None and read.size * sc["A"] - decided[1] >= two_gaps:
            beyond += 1
    if scheme == 0:
        assert beyond > 0.05 * len(pairs)


def long_read_pair(rng):
    """A 100-200 base read as sequencers give them, on a window with room for the band: 0-6 substitutions, each
    often next to a multiple of 8 (the aligner compares eight columns at a time), N runs in read or window,
    long matching stretches, an indel of 1-6 bases in a third of the reads, now and then a low-complexity
    window; bands 1-40 diagonals wide, some beside the truth."""
    m = int(rng.integers(100, 201))
    pad = int(rng.integers(0, 24))
    if rng.random() < 0.15:
        window = np.resize(rng.integers(0, 4, int(rng.integers(1, 4))).astype(np.uint8), m + 2 * pad + 8)
        window[:int(rng.integers(0, window.size))] = rng.integers(0, 4)
    else:
        window = rng.integers(0, 4, m + 2 * pad + 8).astype(np.uint8)
    read = window[pad:pad + m].copy()
    for _ in range(int(rng.integers(0, 7))):
        p = 8 * int(rng.integers(0, m // 8)) + int(rng.integers(-1, 2)) if rng.random() < 0.6 else int(rng.integers(m))
        p = min(max(p, 0), m - 1)
        read[p] = (read[p] + int(rng.integers(1, 4))) % 4
    if rng.random() < 0.15:
        a = int(rng.integers(0, m))
        read[a:a + int(rng.integers(1, 10))] = 4
    if rng.random() < 0.1:
        a = int(rng.integers(0, window.size))
        window[a:a + int(rng.integers(1, 10))] = 4
    r = rng.random()
    if r < 0.15:
        k = int(rng.integers(1, m - 1))
        read = np.concatenate([read[:k], read[k + int(rng.integers(1, 7)):], window[pad + m:pad + m + 6]])[:m]
    elif r < 0.3:
        k = int(rng.integers(1, m - 1))
        read = np.concatenate([read[:k], rng.integers(0, 4, int(rng.integers(1, 7))).astype(np.uint8), read[k:]])[:m]
    w = int(rng.integers(0, 20))
    shift = int(rng.integers(-6, 7)) if rng.random() < 0.3 else 0
    return read.astype(np.uint8), window, pad - w + shift, pad + w + shift


@pytest.mark.parametrize("scheme", range(len(REACH_SCHEMES)))
def test_long_reads_match_reference(scheme):
    """Reads of sequencer length, where the shortcut's eight-column steps and the dynamic program's passes
    over bands wider than a vector run in full: the batch equals itself without the shortcut, and a sample
    equals the plain Python dynamic program (align_oracle.ref_align)."""
    sc = REACH_SCHEMES[scheme]
    rng = np.random.default_rng(900 + scheme)
    pairs = [long_read_pair(rng) for _ in range(1500)]
    local = rng.random(len(pairs)) < 0.6
    assert_batch_same_without_shortcut(pairs, local, sc)
    for p in range(0, len(pairs), 30):
        read, window, l, h = pairs[p]
        got = align(read, window, 5000, l, h, bool(local[p]), **sc)
        assert_same(got, ref_align(read, window, 5000, l, h, bool(local[p]), **sc))
        if got.pos >= 0:
            check_consistency(read, window, 5000, got)


def test_empty_batch():
    res = align_batch(np.zeros(0, np.uint8), [0], np.zeros(0, np.uint8), [0], 0, 0, 0, True)
    assert res.pos.size == 0 and res.cigar.size == 0 and list(res.cigar_offsets) == [0]


# ------------------------------------------------------------------ real reads: NA12878 on GRCh37 chr20

@pytest.fixture(scope="module")
def real_pairs():
    require_real_data()
    pysam = pytest.importorskip("pysam")
    ref = load_region(*REGION)
    fq = {}
    with pysam.FastxFile(str(FASTQ)) as f:
        for rec in f:
            fq[rec.name.split("/")[0]] = rec.sequence
    comp = np.array([3, 2, 1, 0, 4], dtype=np.uint8)
    pairs, seen = [], set()
    with pysam.AlignmentFile(str(BAM)) as bam:  # no index: stream it
        for r in bam.fetch(until_eof=True):
            if r.is_unmapped or r.is_secondary or r.is_supplementary or not r.is_read1:
                continue
            if r.reference_name != "chr20" or not REGION[0] + 200 <= r.reference_start < REGION[1] - 400:
                continue
            if r.query_name in seen or r.query_name not in fq or r.has_tag("NM") is False:
                continue
            seen.add(r.query_name)
            read = to_codes(fq[r.query_name])
            if r.is_reverse:
                read = comp[read[::-1]]
            assert "".join(LETTERS[c] for c in read) == r.query_sequence
            pairs.append((read, r.reference_start, r.reference_end, r.cigarstring, r.get_tag("NM")))
    assert len(pairs) > 10000
    return ref, pairs


def real_batch(ref, pairs, pad):
    reads, wins, gs = [], [], []
    for read, start, end, _, _ in pairs:
        a, b = start - pad, end + pad
        reads.append(read)
        wins.append(ref[a - REGION[0]:b - REGION[0]])
        gs.append(a)
    return reads, wins, np.array(gs, dtype=np.int64)


def test_real_reads_match_reference_and_are_consistent(real_pairs):
    ref, pairs = real_pairs
    pick = pairs[::90]  # ~150 reads keep the Python reference quick
    reads, wins, gs = real_batch(ref, pick, 10)
    for p, (read, win) in enumerate(zip(reads, wins)):
        for local, sc in ((True, BWA_MEM), (False, BWA_MEM), (False, SCHEMES[2])):
            got = align(read, win, int(gs[p]), 0, 20, local, **sc)
            assert_same(got, ref_align(read, win, int(gs[p]), 0, 20, local, **sc))
            check_consistency(read, win, int(gs[p]), got)


def test_real_reads_agree_with_bwa(real_pairs, record_property):
    """bwa 0.6.1 (aln) aligned these reads end to end with its own scores and quality-trimmed some read ends
    (soft clips our aligner has no reason to make), so agreement is measured on all reads (reported) and on
    the reads bwa did not clip (asserted)."""
    ref, pairs = real_pairs
    reads, wins, gs = real_batch(ref, pairs, 10)
    rseq, roff, fseq, foff = make_batch(list(zip(reads, wins)))
    unclipped = np.array(["S" not in p[3] for p in pairs])
    rates = {}
    for name, local, sc in (("semiglobal", False, BWA_MEM), ("local", True, BWA_MEM)):
        res = align_batch(rseq, roff, fseq, foff, gs, 0, 20, local, **sc)
        agree = np.zeros(len(pairs), dtype=bool)
        for p, (_, start, _, bam_cigar, bam_nm) in enumerate(pairs):
            c = cigar_string(res.cigar[res.cigar_offsets[p]:res.cigar_offsets[p + 1]])
            agree[p] = c == bam_cigar and int(res.nm[p]) == bam_nm and int(res.pos[p]) == start
        rates[name] = agree.mean()
        rates[name + "_unclipped"] = agree[unclipped].mean()
    for k, v in rates.items():
        record_property(f"bwa_agreement_{k}", float(v))
    print(f"\nagreement with the BAM (CIGAR, NM and POS equal) over {len(pairs)} reads "
          f"({unclipped.sum()} not clipped by bwa): " + ", ".join(f"{k} {v:.4f}" for k, v in rates.items()))
    assert unclipped.mean() > 0.9
    assert rates["semiglobal_unclipped"] > 0.99
    assert rates["local_unclipped"] > 0.98


# ------------------------------------------------------------------ terminal gaps (clip_terminal_gaps)

def ref_clip_terminal_gaps(read, window, gstart, aln, A, B, O, E, ambig, clip):
    """The rule of docs/alignment.md ("Terminal gaps") on one Alignment, in plain Python: while the
    alignment is M, gap, more... at an end and the flank's column scores (plus A per inserted base) do not
    exceed the gap's cost, soft-clip the flank and the gap. Returns (pos, ref_end, read_begin, read_end,
    score, nm, cigar string)."""
    if aln.pos < 0:
        return (-1, -1, aln.read_begin, aln.read_end, aln.score, aln.nm, "*")
    ops = [(n, op) for op, n in cigar_tuples(aln.cigar) if op != 4]  # (length, BAM op)
    qb, qe, rb, re_, score = aln.read_begin, aln.read_end, aln.pos - gstart, aln.ref_end - gstart, aln.score

    def col(a, b):
        return -ambig if a == 4 or b == 4 else (A if a == b else -B)

    while len(ops) >= 3 and ops[0][1] == 0 and ops[1][1] in (1, 2):
        (k, _), (length, op) = ops[0], ops[1]
        seg = sum(col(read[qb + x], window[rb + x]) for x in range(k))
        cost = O + length * E
        if seg + (length * A if op == 1 else 0) > cost:
            break
        qb += k + (length if op == 1 else 0)
        rb += k + (length if op == 2 else 0)
        score += cost - seg
        ops = ops[2:]
    while len(ops) >= 3 and ops[-1][1] == 0 and ops[-2][1] in (1, 2):
        (k, _), (length, op) = ops[-1], ops[-2]
        seg = sum(col(read[qe - k + x], window[re_ - k + x]) for x in range(k))
        cost = O + length * E
        if seg + (length * A if op == 1 else 0) > cost:
            break
        qe -= k + (length if op == 1 else 0)
        re_ -= k + (length if op == 2 else 0)
        score += cost - seg
        ops = ops[:-2]
    nm, q, r = 0, qb, rb
    for n, op in ops:
        if op == 0:
            nm += sum(read[q + x] != window[r + x] or read[q + x] == 4 or window[r + x] == 4 for x in range(n))
            q, r = q + n, r + n
        elif op == 1:
            nm, q = nm + n, q + n
        else:
            nm, r = nm + n, r + n
    cig = ([(qb, "S")] if qb else []) + [(n, "MIDNS"[op]) for n, op in ops] + \
        ([(len(read) - qe, "S")] if qe < len(read) else [])
    return (gstart + rb, gstart + re_, qb, qe, score, nm, "".join(f"{n}{op}" for n, op in cig))


def terminal_gap_pair(rng):
    """A read with a gap of 1-8 bases 3-14 bases from one or both ends (and some substitutions)."""
    m = int(rng.integers(40, 90))
    window = rng.integers(0, 4, size=m + 60).astype(np.uint8)
    src = list(window[20:20 + m + 20])
    read = list(src[:m])
    for end in ("left", "right"):
        if rng.random() < 0.7:
            at = int(rng.integers(3, 15))
            length = int(rng.integers(1, 9))
            if rng.random() < 0.5:  # deletion from the read
                read = read[:at] + src[at + length:at + length + m] if end == "left" else \
                    read[:m - at] + src[m - at + length:m + length]
            else:  # insertion into the read
                ins = list(rng.integers(0, 4, size=length))
                read = read[:at] + ins + read[at:] if end == "left" else read[:m - at] + ins + read[m - at:]
    read = np.array(read[:m], dtype=np.uint8)
    sub = rng.random(read.size) < 0.03
    read[sub] = (read[sub] + 1) % 4
    return read, window


@pytest.mark.parametrize("scheme", range(len(SCHEMES)))
def test_clip_terminal_gaps_matches_reference(scheme):
    """clip_terminal_gaps equals the Python statement of the rule on reads with gaps near their ends, the
    result is a consistent alignment (CIGAR, NM, MD against the window) whose AS is its column and gap
    scores, and semiglobal pairs and pairs without alignment are left alone."""
    sc = SCHEMES[scheme]
    rng = np.random.default_rng(77 + scheme)
    pairs = [terminal_gap_pair(rng) for _ in range(300)]
    rseq, roff, fseq, foff = make_batch(pairs)
    gstart = np.arange(len(pairs), dtype=np.int64) * 1000 + 5000
    local = (np.arange(len(pairs)) % 5 != 0).astype(np.uint8)  # every fifth pair semiglobal
    res = align_batch(rseq, roff, fseq, foff, gstart, 0, 40, local, sc["A"], sc["B"], sc["O"], sc["E"],
                      ambig=sc["ambig"], clip=sc["clip"])
    got = clip_terminal_gaps(rseq, roff, fseq, foff, gstart, res, local, sc["A"], sc["B"], sc["O"], sc["E"],
                             ambig=sc["ambig"], clip=sc["clip"])
    md = md_batch(rseq, roff, fseq, foff, gstart, got)
    changed = 0
    for p, (read, window) in enumerate(pairs):
        before = align(read, window, int(gstart[p]), 0, 40, bool(local[p]), **sc)
        row = batch_rows(got, md, p)
        if local[p]:
            want = ref_clip_terminal_gaps(read, window, int(gstart[p]), before, **sc)
        else:
            want = (before.pos, before.ref_end, before.read_begin, before.read_end, before.score, before.nm,
                    before.cigar_string)
        assert row[:7] == want, (p, row, want, before.cigar_string)
        changed += row[6] != before.cigar_string
        if row[0] >= 0:
            aln = SimpleNamespace(pos=row[0], ref_end=row[1], read_begin=row[2], read_end=row[3], nm=row[5],
                                  cigar_string=row[6], md=row[7])
            check_consistency(read, window, int(gstart[p]), aln)
            cols = score_of(read, window, int(gstart[p]), aln, sc)
            assert cols == row[4], (p, row)
    assert changed < len(pairs) // 2
    if sc is BWA_MEM:  # with a clip penalty of 5 the dynamic program keeps many unpaid flanks
        assert changed >= 20


def score_of(read, window, gstart, aln, sc):
    """Column and gap scores of an alignment (AS, clips excluded)."""
    total, q, r = 0, aln.read_begin, aln.pos - gstart
    for n, op in re.findall(r"(\d+)([MIDS])", aln.cigar_string):
        n = int(n)
        if op == "M":
            for x in range(n):
                a, b = read[q + x], window[r + x]
                total += -sc["ambig"] if a == 4 or b == 4 else (sc["A"] if a == b else -sc["B"])
            q, r = q + n, r + n
        elif op == "I":
            total, q = total - sc["O"] - n * sc["E"], q + n
        elif op == "D":
            total, r = total - sc["O"] - n * sc["E"], r + n
    return total


def test_clip_terminal_gaps_on_the_documented_case():
    """A 7-base flank and a 5-base deletion (7 - 11 < 0) become 7S; a 14-base flank keeps its 6-base
    insertion (14 + 6 > 12): bwa-mem's choices on these simulated reads (docs/alignment.md)."""
    rng = np.random.default_rng(5)
    window = rng.integers(0, 4, size=160).astype(np.uint8)
    read = np.concatenate([window[20:27], window[32:125]])  # 7M5D93M
    res = align_batch(read, [0, 100], window, [0, 160], 0, 0, 30, True)
    out = clip_terminal_gaps(read, [0, 100], window, [0, 160], 0, res, True)
    assert cigar_string(res.cigar) == "7M5D93M" and cigar_string(out.cigar) == "7S93M"
    assert (out.pos[0], out.score[0], out.nm[0]) == (32, 93, 0)
    read = np.concatenate([window[20:28], rng.integers(0, 4, size=6).astype(np.uint8), window[28:114]])
    res = align_batch(read, [0, 100], window, [0, 160], 0, -10, 30, True)
    out = clip_terminal_gaps(read, [0, 100], window, [0, 160], 0, res, True)
    assert cigar_string(out.cigar) == cigar_string(res.cigar) == "8M6I86M"
