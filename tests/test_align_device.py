"""peanut_py/kernels/affine.cl (align_device.align_batch_device) against _align.pyx's align_batch and the
plain-Python full-matrix Gotoh of tests/align_oracle.py: every output field and the MD strings must be
identical, on random pairs with planted edits and N bases, several scoring schemes, band edge cases, split
launches, and real NA12878 reads."""
import numpy as np
import pytest

# the reference implementation and the pair generators the CPU aligner's tests use too
from align_oracle import (BAM, BWA_MEM, FASTQ, REGION, load_region, make_batch, random_pair, ref_align,
                          require_real_data, to_codes)
from peanut_py.align_device import align_batch_device
from peanut_py.align import MAX_LENGTH, align_batch, cigar_string, md_batch

SCHEMES = {
    "bwa": BWA_MEM,                                        # 1/4/6/1, bwa-mem's defaults
    "sw": dict(A=2, B=3, O=5, E=2, ambig=2, clip=0),       # local mode is plain Smith-Waterman
    "ties": dict(A=1, B=1, O=1, E=1, ambig=1, clip=1),     # many equally scoring alignments
    "linear": dict(A=5, B=4, O=0, E=3, ambig=0, clip=12),  # linear gaps, free N
}
FIELDS = ("pos", "ref_end", "read_begin", "read_end", "score", "nm", "cigar", "cigar_offsets")


def assert_same_batch(got, want):
    for field in FIELDS:
        a, b = getattr(got, field), getattr(want, field)
        assert a.dtype == b.dtype and a.shape == b.shape, field
        if not np.array_equal(a, b):
            p = int(np.flatnonzero(a != b)[0]) if a.shape == b.shape else None
            pytest.fail(f"{field} differs first at index {p}: device {a[p]}, CPU {b[p]}")


def batch(pairs, rng):
    """align_batch arguments for (read, window, lo, hi) pairs: random global starts, per-pair local flags."""
    rseq, roff, fseq, foff = make_batch([(p[0], p[1]) for p in pairs])
    gs = rng.integers(1024, 1 << 40, size=len(pairs))
    lo = np.array([p[2] for p in pairs], dtype=np.int64)
    hi = np.array([p[3] for p in pairs], dtype=np.int64)
    return rseq, roff, fseq, foff, gs, lo, hi


def check_against_reference(args, local, res, md, sc, picks):
    """Pairs ``picks`` of a batch result against the full-matrix Python Gotoh."""
    rseq, roff, fseq, foff, gs, lo, hi = args
    aligned = 0
    for p in picks:
        read, win = rseq[roff[p]:roff[p + 1]], fseq[foff[p]:foff[p + 1]]
        want = ref_align(read, win, int(gs[p]), int(lo[p]), int(hi[p]), bool(local[p]), **sc)
        ops = res.cigar[res.cigar_offsets[p]:res.cigar_offsets[p + 1]]
        got = dict(pos=int(res.pos[p]), ref_end=int(res.ref_end[p]), read_begin=int(res.read_begin[p]),
                   read_end=int(res.read_end[p]), score=int(res.score[p]), nm=int(res.nm[p]),
                   cigar=cigar_string(ops), md=md[p])
        if want is None:
            assert got == dict(pos=-1, ref_end=-1, read_begin=0, read_end=0, score=0, nm=0, cigar="*", md=""), p
        else:
            assert got == want, p
            aligned += 1
    return aligned


# ------------------------------------------------------------------ random pairs with planted edits

@pytest.mark.parametrize("layout", ["item", "interleaved"])
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_random_pairs(device, scheme, layout):
    """1,200 planted pairs, local and semiglobal mixed in one batch: equal to align_batch everywhere and to the
    Python reference on 80 of them per mode."""
    sc = SCHEMES[scheme]
    rng = np.random.default_rng(sorted(SCHEMES).index(scheme))
    pairs = [random_pair(rng) for _ in range(1200)]
    args = batch(pairs, rng)
    local = rng.random(len(pairs)) < 0.5
    got = align_batch_device(device, *args, local, **sc, layout=layout)
    want = align_batch(*args, local, **sc)
    assert_same_batch(got, want)
    md = md_batch(*args[:5], got)
    assert md == md_batch(*args[:5], want)
    assert (got.pos >= 0).mean() > 0.8
    assert (got.read_begin > 0).any() and (got.nm > 0).any()  # the batch exercises clips and edits
    if layout == "item":  # the reference is slow; once per scheme is enough
        picks = np.concatenate([np.flatnonzero(local)[:80], np.flatnonzero(~local)[:80]])
        assert check_against_reference(args, local, got, md, sc, picks) > 130


def test_band_edge_cases(device):
    """Bands touching or crossing the window edges, bands outside the matrix, empty bands/reads/windows,
    insertion-only paths, all-N: device == CPU == Python reference (pos -1 where nothing aligns)."""
    rng = np.random.default_rng(99)
    win = rng.integers(0, 4, size=40).astype(np.uint8)
    read = win[5:30].copy()
    read[[3, 17]] = (read[[3, 17]] + 1) % 4
    m, n = read.size, win.size
    pairs = [(read, win, lo, hi) for lo, hi in [
        (-m, n), (-m - 50, n + 50), (0, n - m), (n - m, n - m), (n - m, n + 3), (n, n), (n, n + 9),  # right edge
        (-m, -m), (-m - 7, -m), (-m, -m + 3), (-3, 2), (0, 0), (5, 5), (4, 6),                       # left edge
        (3, 2), (n + 1, n + 9), (-m - 9, -m - 1), (10, -10),                                         # no cells
    ]]
    pairs += [
        (np.zeros(0, np.uint8), win, -5, 5),
        (read, np.zeros(0, np.uint8), -5, 5),
        (np.zeros(0, np.uint8), np.zeros(0, np.uint8), 0, 0),
        (np.array([0, 1, 2, 3, 0], np.uint8), np.array([0, 1], np.uint8), -4, -2),  # only insertion paths
        (np.array([4, 4, 4], np.uint8), np.array([4, 4, 4, 4], np.uint8), -2, 2),
        (np.array([0, 0, 0], np.uint8), np.array([1, 1, 1], np.uint8), 0, 0),
        (np.array([2], np.uint8), np.array([2], np.uint8), 0, 0),
    ]
    # the corners (0, n) and (m, 0) have no M column; the last seven bands have no cells at all
    aligned = [True] * 5 + [False] * 4 + [True] * 5 + [False] * 7
    args = batch(pairs, rng)
    for sc in SCHEMES.values():
        for mode in (True, False):
            local = np.full(len(pairs), mode)
            got = align_batch_device(device, *args, mode, **sc)
            assert_same_batch(got, align_batch(*args, mode, **sc))
            md = md_batch(*args[:5], got)
            check_against_reference(args, local, got, md, sc, range(len(pairs)))
            aligned[9] = mode  # row 0 has no band cell in the window: only a fresh (local) start gets there
            assert list(got.pos[:21] >= 0) == aligned


def test_tiny_pairs_random_bands_and_scores(device):
    """1,600 tiny pairs (reads 0-13, windows 0-17 bases, small alphabets, N in both) with bands anywhere around
    the matrix and random scores including zero A or B: device == CPU == Python reference."""
    rng = np.random.default_rng(2024)
    for rnd in range(8):
        sc = dict(A=int(rng.integers(0, 4)), B=int(rng.integers(0, 5)), O=int(rng.integers(0, 6)),
                  E=int(rng.integers(1, 3)), ambig=int(rng.integers(0, 3)), clip=int(rng.integers(0, 12)))
        pairs = []
        for _ in range(200):
            m, n, alphabet = int(rng.integers(0, 14)), int(rng.integers(0, 18)), int(rng.integers(1, 5))
            read = rng.integers(0, alphabet, size=m).astype(np.uint8)
            win = rng.integers(0, alphabet, size=n).astype(np.uint8)
            if rng.random() < 0.5 and min(m, n) > 0:
                a = int(rng.integers(0, n))
                read[:min(m, n - a)] = win[a:a + min(m, n - a)]
            read[rng.random(m) < 0.05] = 4
            win[rng.random(n) < 0.05] = 4
            lo = int(rng.integers(-m - 3, n + 3))
            pairs.append((read, win, lo, lo + int(rng.integers(-1, 12))))
        args = batch(pairs, rng)
        local = rng.random(len(pairs)) < 0.5
        got = align_batch_device(device, *args, local, **sc, layout=("item", "interleaved")[rnd % 2])
        assert_same_batch(got, align_batch(*args, local, **sc))
        check_against_reference(args, local, got, md_batch(*args[:5], got), sc, range(len(pairs)))


def test_threads_share_a_device(device):
    """Several threads calling at once on overlapping slices get what one serial call gets."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(11)
    pairs = [random_pair(rng) for _ in range(400)]
    args = batch(pairs, rng)
    local = rng.random(len(pairs)) < 0.5
    whole = align_batch_device(device, *args, local, **BWA_MEM)

    def run(chunk):
        a, b = chunk
        sub = batch(pairs[a:b], rng)
        sub = (*sub[:4], args[4][a:b], args[5][a:b], args[6][a:b])
        return a, align_batch_device(device, *sub, local[a:b], **BWA_MEM, memory_budget=200_000)

    with ThreadPoolExecutor(4) as ex:
        for a, res in ex.map(run, [(0, 400), (0, 150), (150, 400), (37, 311)] * 2):
            for field in FIELDS[:6]:
                assert np.array_equal(getattr(res, field), getattr(whole, field)[a:a + res.pos.size])
            for p in range(res.pos.size):
                assert np.array_equal(res.cigar[res.cigar_offsets[p]:res.cigar_offsets[p + 1]],
                                      whole.cigar[whole.cigar_offsets[a + p]:whole.cigar_offsets[a + p + 1]])


def test_split_launches_give_identical_results(device):
    """A budget of a few pairs' scratch splits the batch into many launches (one pair per launch where a wide
    band does not fit); results equal one launch's and the CPU's, for both layouts."""
    rng = np.random.default_rng(5)
    pairs = [random_pair(rng) for _ in range(300)]
    big = rng.integers(0, 4, size=600).astype(np.uint8)
    pairs[150] = (big[100:400].copy(), big, -50, 350)  # one pair with a much larger matrix
    args = batch(pairs, rng)
    local = rng.random(len(pairs)) < 0.5
    want = align_batch(*args, local, **BWA_MEM)
    # slots are sized by the batch's largest pair (300 x 401 traceback bytes): 1 MB holds a few pairs' scratch
    for layout in ("item", "interleaved"):
        launches = []
        assert_same_batch(align_batch_device(device, *args, local, **BWA_MEM, layout=layout, launches=launches),
                          want)
        assert launches == [len(pairs)]
        launches = []
        got = align_batch_device(device, *args, local, **BWA_MEM, layout=layout, memory_budget=1_000_000,
                                 launches=launches)
        assert_same_batch(got, want)
        assert sum(launches) == len(pairs) and len(launches) > 3 and max(launches) > 1
        launches = []
        got = align_batch_device(device, *args, local, **BWA_MEM, layout=layout, memory_budget=1,
                                 launches=launches)
        assert_same_batch(got, want)
        assert launches == [1] * len(pairs)


def test_empty_batch_and_kernel_cache(device):
    empty = np.zeros(0, np.uint8)
    got = align_batch_device(device, empty, [0], empty, [0], 0, 0, 0, True)
    assert_same_batch(got, align_batch(empty, [0], empty, [0], 0, 0, 0, True))
    read = np.array([0, 1, 2, 3, 0, 1], np.uint8)
    align_batch_device(device, read, [0, 6], read, [0, 6], 0, 0, 0, True, A=3, B=7, O=2, E=2, ambig=0, clip=9)
    built = device.built_keys()
    assert any(k[:2] == ("program", "affine") and ("CLIP", 9) in k[2] for k in built)
    align_batch_device(device, read, [0, 6], read, [0, 6], 0, 0, 0, True, A=3, B=7, O=2, E=2, ambig=0, clip=9)
    assert device.built_keys() == built  # compiled once per device and scoring
    align_batch_device(device, read, [0, 6], read, [0, 6], 0, 0, 0, True, A=3, B=7, O=2, E=2, ambig=0, clip=8)
    new = device.built_keys() - built
    assert any(k[:2] == ("program", "affine") and ("CLIP", 8) in k[2] for k in new)


@pytest.mark.parametrize("call", [
    lambda f: f(np.array([5], np.uint8), [0, 1], np.array([0], np.uint8), [0, 1], 0, 0, 0, True),
    lambda f: f(np.array([0, 1], np.uint8), [0, 1], np.array([0, 1], np.uint8), [0, 2], 0, 0, 0, True),
    lambda f: f(np.array([0, 1], np.uint8), [0, 2], np.array([0, 1], np.uint8), [0, 1, 2], 0, 0, 0, True),
    lambda f: f(np.zeros(MAX_LENGTH + 1, np.uint8), [0, MAX_LENGTH + 1], np.array([0], np.uint8), [0, 1],
                0, 0, 0, True),
    lambda f: f(np.array([0], np.uint8), [0, 1], np.zeros(MAX_LENGTH + 1, np.uint8), [0, MAX_LENGTH + 1],
                0, 0, 0, True),
    lambda f: f(np.array([0], np.uint8), [0, 1], np.array([0], np.uint8), [0, 1], 0, 0, 0, True, O=0, E=0),
    lambda f: f(np.array([0], np.uint8), [0, 1], np.array([0], np.uint8), [0, 1], 0, 0, 0, True, B=-1),
    lambda f: f(np.array([0], np.uint8), [0, 1], np.array([0], np.uint8), [0, 1], 0, 0, 0, True, clip=1001),
])
def test_rejects_what_align_batch_rejects(device, call):
    with pytest.raises(ValueError) as cpu:
        call(align_batch)
    with pytest.raises(ValueError) as dev:
        call(lambda *a, **k: align_batch_device(device, *a, **k))
    assert str(dev.value) == str(cpu.value)


def test_rejects_unknown_layout(device):
    with pytest.raises(ValueError, match="layout"):
        align_batch_device(device, np.array([0], np.uint8), [0, 1], np.array([0], np.uint8), [0, 1], 0, 0, 0, True,
                           layout="diagonal")


# ------------------------------------------------------------------ real reads: NA12878 on GRCh37 chr20

@pytest.fixture(scope="module")
def real_batch():
    """~400 primary R1 reads of the FASTQ, in read orientation of the BAM, with windows +-10 around bwa's
    placement (band diagonals [0, 20]) and, for every fourth read, +-30 shifted by 7 (band [0, 60])."""
    require_real_data()
    pysam = pytest.importorskip("pysam")
    placed = {}
    with pysam.AlignmentFile(str(BAM)) as bam:
        for r in bam.fetch(until_eof=True):
            if r.is_unmapped or r.is_secondary or r.is_supplementary or not r.is_read1:
                continue
            if r.reference_name == "chr20" and REGION[0] + 200 <= r.reference_start < REGION[1] - 400:
                placed.setdefault(r.query_name, (r.reference_start, r.reference_end, r.is_reverse))
    comp = np.array([3, 2, 1, 0, 4], dtype=np.uint8)
    reads = []
    with pysam.FastxFile(str(FASTQ)) as f:
        for k, rec in enumerate(f):
            name = rec.name.split("/")[0]
            if k % 7 == 0 and name in placed:
                read = to_codes(rec.sequence)
                reads.append((comp[read[::-1]] if placed[name][2] else read, *placed[name][:2]))
            if len(reads) == 400:
                break
    assert len(reads) == 400
    ref = load_region(*REGION)
    pairs, gs = [], []
    for k, (read, start, end) in enumerate(reads):
        pad, shift = (30, 7) if k % 4 == 0 else (10, 0)
        a, b = start - pad + shift, end + pad + shift
        pairs.append((read, ref[a - REGION[0]:b - REGION[0]], 0, 2 * pad))
        gs.append(a)
    rseq, roff, fseq, foff = make_batch([(p[0], p[1]) for p in pairs])
    lo = np.array([p[2] for p in pairs])
    hi = np.array([p[3] for p in pairs])
    return rseq, roff, fseq, foff, np.array(gs, dtype=np.int64), lo, hi


@pytest.mark.parametrize("scheme", ["bwa", "sw"])
@pytest.mark.parametrize("mode", [True, False])
def test_real_reads(device, real_batch, scheme, mode):
    sc = SCHEMES[scheme]
    local = np.full(len(real_batch[4]), mode)
    got = align_batch_device(device, *real_batch, mode, **sc)
    assert_same_batch(got, align_batch(*real_batch, mode, **sc))
    md = md_batch(*real_batch[:5], got)
    assert (got.pos >= 0).all() and (got.nm > 0).mean() > 0.1
    assert check_against_reference(real_batch, local, got, md, sc, range(0, len(local), 8)) == 50
