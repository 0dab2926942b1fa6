"""ResidentReference and filter_reference (Algorithm 2 + collapse) against brute-force q-gram matching."""
import gzip
import types

import numpy as np
import pytest

from peanut_py.device import Device
from peanut_py.errors import PeanutError
from peanut_py.filtration import filter_reference
from peanut_py.qgroup import QGroupIndex, ReadBuffer
from peanut_py.resident import ResidentReference
from test_qgroup import _CODE, random_reads, read_fastq_codes, ref_qgrams, ref_text

CONTIG_GAP = 1024


# ---------------------------------------------------------------- plain references

def build_reference(contigs, q, step, max_occ):
    """Padded layout of docs/architecture.md and the q-gram table: every all-ACGT q-gram at a contig-local
    position divisible by ``step``, q-grams occurring more than ``max_occ`` times dropped."""
    offsets, pos = [], CONTIG_GAP
    for c in contigs:
        offsets.append(pos)
        pos = (pos + len(c) + CONTIG_GAP + 15) // 16 * 16
    lengths = np.array([len(c) for c in contigs], dtype=np.int64)
    offsets = np.array(offsets, dtype=np.int64)
    total = (offsets[-1] + lengths[-1] + 15) // 16 * 16
    genome = np.full(total, 4, dtype=np.uint8)
    for o, c in zip(offsets, contigs):
        genome[o : o + len(c)] = c
    acgt = np.where(genome < 4, genome, 0).astype(np.uint32).reshape(-1, 16)
    packed = (acgt << (2 * np.arange(16, dtype=np.uint32))).sum(axis=1, dtype=np.uint64).astype(np.uint32)
    amb = np.zeros(len(genome) + (-len(genome)) % 32, dtype=bool)
    for o, c in zip(offsets, contigs):
        amb[o : o + len(c)] = np.asarray(c) > 3
    ambiguous = (amb.reshape(-1, 32).astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32)
    values, where = [], []
    weights = np.uint64(4) ** np.arange(q - 1, -1, -1, dtype=np.uint64)
    for o, c in zip(offsets, contigs):
        c = np.asarray(c)
        if len(c) < q:
            continue
        win = np.lib.stride_tricks.sliding_window_view(c, q)
        local = np.arange(len(win))
        ok = (win < 4).all(axis=1) & (local % step == 0)
        values.append((win[ok].astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64))
        where.append(local[ok] + o)
    g = np.concatenate(values)
    p = np.concatenate(where)
    order = np.lexsort((p, g))
    g, p = g[order], p[order]
    kmers, first, counts = np.unique(g, return_index=True, return_counts=True)
    keep = counts <= max_occ
    kept = np.repeat(keep, counts)
    kmers, counts = kmers[keep].astype(np.uint32), counts[keep]
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return dict(packed=packed, ambiguous=ambiguous, offsets=offsets, lengths=lengths, kmers=kmers,
                kmer_starts=starts, positions=p[kept].astype(np.uint32), genome=genome)


def brute_force_hits(ref, codes, offsets, q):
    """Every (read strand q-gram, kept reference q-gram) pair with equal value, as (rs, diagonal) sorted."""
    text, rs_start, pos_rs = ref_text(codes, offsets)
    g, t = ref_qgrams(text, rs_start, pos_rs, q)
    kmers, starts, positions = ref["kmers"].astype(np.uint64), ref["kmer_starts"], ref["positions"]
    k = np.searchsorted(kmers, g)
    found = k < len(kmers)
    found[found] = kmers[k[found]] == g[found]
    k, t = k[found], t[found]
    n_ref = starts[k + 1] - starts[k]
    t_rep = np.repeat(t, n_ref)
    first = np.repeat(starts[k], n_ref)
    within = np.arange(len(t_rep)) - np.repeat(np.cumsum(n_ref) - n_ref, n_ref)
    p = positions[first + within].astype(np.int64)
    rs = pos_rs[t_rep]
    diag = p - (t_rep.astype(np.int64) - rs_start[rs])
    assert (diag >= 0).all()
    order = np.lexsort((diag, rs))
    return rs[order].astype(np.uint32), diag[order].astype(np.uint32)


def collapse(rs, diag, gap):
    """The collapse rule: sorted hits of one read strand whose consecutive diagonals differ by <= gap merge."""
    if len(rs) == 0:
        z = np.zeros(0, np.uint32)
        return dict(rs=z, diag_lo=z, diag_hi=z, votes=z)
    brk = np.ones(len(rs), dtype=bool)
    brk[1:] = (rs[1:] != rs[:-1]) | (diag[1:].astype(np.int64) - diag[:-1] > gap)
    starts = np.flatnonzero(brk)
    return dict(rs=rs[starts], diag_lo=diag[starts], diag_hi=np.maximum.reduceat(diag, starts),
                votes=np.diff(np.append(starts, len(rs))).astype(np.uint32))


def assert_candidates_equal(got, want):
    for f in ("rs", "diag_lo", "diag_hi", "votes"):
        np.testing.assert_array_equal(got[f], want[f], err_msg=f)


# ---------------------------------------------------------------- inputs

def revcomp(s):
    s = np.asarray(s)
    return np.where(s[::-1] < 4, 3 - s[::-1], 4).astype(np.uint8)


def planted_genome(rng):
    """Three contigs with a segment planted five times (once reverse complemented), a tandem repeat and N runs."""
    contigs = [rng.integers(0, 4, n).astype(np.uint8) for n in (6000, 15000, 2500)]
    seg = rng.integers(0, 4, 300).astype(np.uint8)
    for c, at, s in ((0, 100, seg), (0, 4000, seg), (1, 7000, seg), (1, 12000, revcomp(seg)), (2, 2000, seg)):
        contigs[c][at : at + len(s)] = s
    contigs[1][3000:3300] = np.tile(np.array([0, 1, 2, 3, 3, 1], np.uint8), 50)
    contigs[0][2000:2050] = 4
    contigs[1][9000:9003] = 4
    return contigs


def sampled_reads(rng, contigs, n, lo=30, hi=250):
    """Reads copied from either strand of the contigs, with 2 % substitutions and a few indels, plus random
    reads, reads with N and reads shorter than q (some empty)."""
    reads = []
    for _ in range(n):
        c = contigs[rng.integers(len(contigs))]
        length = int(rng.integers(lo, hi + 1))
        start = int(rng.integers(0, len(c) - length))
        r = c[start : start + length].copy()
        sub = rng.random(length) < 0.02
        r[sub] = rng.integers(0, 4, sub.sum())
        if rng.random() < 0.2:
            at = int(rng.integers(1, length - 1))
            r = np.delete(r, at) if rng.random() < 0.5 else np.insert(r, at, rng.integers(0, 4))
        reads.append(revcomp(r) if rng.random() < 0.5 else r)
    reads += [rng.integers(0, 4, int(rng.integers(30, 200))).astype(np.uint8) for _ in range(20)]
    with_n = [r.copy() for r in reads[:10]]
    for r in with_n:
        r[len(r) // 3 : len(r) // 3 + 2] = 4
    reads += with_n
    reads += [rng.integers(0, 4, int(k)).astype(np.uint8) for k in rng.integers(0, 10, 10)]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in reads])]).astype(np.int64)
    return np.concatenate(reads).astype(np.uint8), offsets


def table_args(ref, q, step):
    return (ref["packed"], ref["ambiguous"], ref["offsets"], ref["lengths"], ref["kmers"], ref["kmer_starts"],
            ref["positions"], q, step)


@pytest.fixture(scope="session")
def device():
    return Device()


@pytest.fixture(scope="session")
def planted(device):
    """Planted genome, its reads, q = 11, step = 2, masking above 30 occurrences, and the device objects."""
    rng = np.random.default_rng(2024)
    contigs = planted_genome(rng)
    q, step = 11, 2
    ref = build_reference(contigs, q, step, max_occ=30)
    codes, offsets = sampled_reads(rng, contigs, 300)
    rb = ReadBuffer(device, codes, offsets)
    qi = QGroupIndex(device, rb, q)
    resident = ResidentReference(device, *table_args(ref, q, step))
    rs, diag = brute_force_hits(ref, codes, offsets, q)
    return dict(ref=ref, q=q, step=step, codes=codes, offsets=offsets, rb=rb, qi=qi, resident=resident,
                rs=rs, diag=diag)


# ---------------------------------------------------------------- ResidentReference

def test_resident_reference_arrays(device, planted):
    ref, res = planted["ref"], planted["resident"]
    assert not res.streamed
    np.testing.assert_array_equal(res.packed.get(), ref["packed"])
    np.testing.assert_array_equal(res.ambiguous.get(), ref["ambiguous"])
    np.testing.assert_array_equal(res.contig_offsets.get(), ref["offsets"])
    np.testing.assert_array_equal(res.contig_ends.get(), ref["offsets"] + ref["lengths"])
    np.testing.assert_array_equal(res.kmers.get(), ref["kmers"])
    np.testing.assert_array_equal(res.kmer_starts.get(), ref["kmer_starts"])
    np.testing.assert_array_equal(res.positions.get(), ref["positions"])
    assert (res.n_contigs, res.q, res.step) == (3, 11, 2)


def test_streamed_chunks_tile_the_table(device, planted):
    ref = planted["ref"]
    res = ResidentReference(device, *table_args(ref, 11, 2), table_budget=0, chunk_positions=1000)
    assert res.streamed and res.kmers is None and res.device_bytes < 100_000
    kmers, starts, positions = [], [0], []
    n_chunks = 0
    for c in res.qgram_chunks(max_kmers=400):  # streamed buffers are reused: read each chunk in its turn
        n_chunks += 1
        assert c.n_kmers <= 400 and c.n_positions <= 1000 and c.k_base == 0
        assert c.first_kmer == sum(len(k) for k in kmers)
        kmers.append(c.kmers.get()[: c.n_kmers])
        s = c.starts.get()[: c.n_kmers + 1].astype(np.int64)
        assert s[0] == 0 and s[-1] == c.n_positions
        starts.extend(s[1:] + starts[-1])
        positions.append(c.positions.get()[: c.n_positions])
    assert n_chunks >= len(ref["positions"]) // 1000
    np.testing.assert_array_equal(np.concatenate(kmers), ref["kmers"])
    np.testing.assert_array_equal(np.array(starts), ref["kmer_starts"])
    np.testing.assert_array_equal(np.concatenate(positions), ref["positions"])


def test_sequence_too_large_for_device_is_an_error(planted):
    ref = planted["ref"]
    tiny = Device(memory_cap=16 << 10)
    with pytest.raises(PeanutError, match="sequence"):
        ResidentReference(tiny, *table_args(ref, 11, 2))


# ---------------------------------------------------------------- filtration

def test_raw_hits_and_candidates_match_brute_force(device, planted):
    p = planted
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=8, keep_raw=True)
    np.testing.assert_array_equal(cand.raw["rs"], p["rs"])
    np.testing.assert_array_equal(cand.raw["diag"], p["diag"])
    assert cand.n_raw_hits == cand.raw_hits == len(p["rs"]) > 10_000
    want = collapse(p["rs"], p["diag"], 8)
    assert_candidates_equal(cand.to_host(), want)
    assert cand.n == len(want["rs"]) and int(want["votes"].sum()) == cand.n_raw_hits
    # The planted repeats give several candidates on some read strands; the tandem repeat merges many hits.
    assert np.bincount(want["rs"]).max() >= 5 and want["votes"].max() > 100


@pytest.mark.parametrize("gap", [0, 3, 50])
def test_collapse_gap(device, planted, gap):
    p = planted
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=gap)
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], gap))


def test_small_windows_and_chunks_give_identical_candidates(device, planted):
    p = planted
    want = collapse(p["rs"], p["diag"], 8)
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=8, max_hits_per_pass=5_000,
                            max_kmers_per_chunk=301)
    assert cand.n_ranges > 5 and cand.n_chunks > 10 * cand.n_ranges
    assert_candidates_equal(cand.to_host(), want)


def test_read_strand_with_more_hits_than_a_window(device, planted):
    # Windows smaller than the hits of single read strands: those strands are emitted in several windows
    # whose candidates are merged.
    p = planted
    per_strand = np.bincount(p["rs"])
    window = int(per_strand.max()) // 4
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=8, max_hits_per_pass=window,
                            max_kmers_per_chunk=997)
    assert (per_strand > window).sum() >= 3 and cand.n_windows > cand.n_ranges
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


def test_sort_length_avoids_the_pyopencl_scan_assertion():
    from pytools import uniform_interval_splitting

    from peanut_py.filtration import sort_length

    # The first-level scan of 4-bit radix passes on an H200: unit 256, 132 compute units.
    info = types.SimpleNamespace(wg_size=256, k_group_size=1)
    sorter = types.SimpleNamespace(scan_kernel=types.SimpleNamespace(
        first_level_scan_info=info, devices=[types.SimpleNamespace(max_compute_units=132)]))
    assert sort_length(sorter, 60_000) == 60_000
    assert sort_length(sorter, 70_000) > 101_376
    for n in (1, 65_536, 65_537, 80_000, 101_376, 101_377, 10**6, 10**9):
        m = sort_length(sorter, n)
        size, count = uniform_interval_splitting(m, 256, 396)
        assert m >= n and size >= count


def test_padded_sorts_give_identical_candidates(device, planted, monkeypatch):
    # Where sort_length pads (not on PoCL), the padding keys must sort last and be ignored.
    import peanut_py.filtration as filtration

    monkeypatch.setattr(filtration, "sort_length", lambda sorter, n: n + 777)
    p = planted
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=8, keep_raw=True,
                            max_hits_per_pass=int(np.bincount(p["rs"]).max() * 0.7))
    assert cand.n_windows > cand.n_ranges  # the merge (with its own padding) ran too
    np.testing.assert_array_equal(cand.raw["rs"], p["rs"])
    np.testing.assert_array_equal(cand.raw["diag"], p["diag"])
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


def test_per_position_variant_gives_identical_hits(device, planted):
    p = planted
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=8, per_position=True,
                            keep_raw=True, max_hits_per_pass=5000)
    np.testing.assert_array_equal(cand.raw["rs"], p["rs"])
    np.testing.assert_array_equal(cand.raw["diag"], p["diag"])
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


def test_streamed_table_gives_identical_candidates(device, planted):
    p = planted
    res = ResidentReference(device, *table_args(p["ref"], p["q"], p["step"]), table_budget=0, chunk_positions=2000)
    assert res.streamed
    cand = filter_reference(device, res, p["qi"], p["rb"], collapse_gap=8)
    assert cand.n_chunks >= len(p["ref"]["positions"]) // 2000
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


def test_uint64_starts_give_identical_candidates(device, planted):
    # Tables beyond 2^32 positions keep 64-bit CSR starts on the device; exercise that kernel variant.
    p = planted
    res = ResidentReference(device, *table_args(p["ref"], p["q"], p["step"]))
    res.kmer_starts, res.starts_dtype = res.kmer_starts.astype(np.uint64), np.uint64
    cand = filter_reference(device, res, p["qi"], p["rb"], collapse_gap=8, max_hits_per_pass=20_000)
    assert cand.n_ranges > 1
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


def test_memory_capped_device_streams_and_gives_identical_candidates(planted):
    p = planted
    # 1600 KiB: building a q = 11 index takes 1 MiB (I, S and scan scratch), so the ~140 KiB q-gram table
    # exceeds its share (half) of the remaining room.
    small = Device(memory_cap=1600 << 10)
    res = ResidentReference(small, *table_args(p["ref"], p["q"], p["step"]))
    assert res.streamed
    rb = ReadBuffer(small, p["codes"], p["offsets"])
    qi = QGroupIndex(small, rb, p["q"])
    cand = filter_reference(small, res, qi, rb, collapse_gap=8)
    assert cand.n_chunks > 1
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


def test_q_mismatch_is_an_error(device, planted):
    p = planted
    other_q = types.SimpleNamespace(q=p["q"] + 1)  # rejected before anything of it is used
    with pytest.raises(PeanutError, match="q="):
        filter_reference(device, p["resident"], other_q, p["rb"])


def test_no_hits(device, planted):
    p = planted
    rb = ReadBuffer(device, np.zeros(5, np.uint8), np.array([0, 5]))  # shorter than q: no q-grams at all
    cand = filter_reference(device, p["resident"], QGroupIndex(device, rb, p["q"]), rb)
    assert cand.n == 0 and cand.n_raw_hits == 0 and all(len(v) == 0 for v in cand.to_host().values())


# ---------------------------------------------------------------- real genomes and reads

def read_fasta_codes(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    seqs, cur = [], []
    with opener(path, "rb") as f:
        for line in f:
            if line.startswith(b">"):
                if cur:
                    seqs.append(_CODE[np.frombuffer(b"".join(cur), np.uint8)])
                cur = []
            else:
                cur.append(line.strip())
    if cur:
        seqs.append(_CODE[np.frombuffer(b"".join(cur), np.uint8)])
    return seqs


def check_real(device, contigs, codes, offsets, q, step, max_occ, gap=8):
    ref = build_reference(contigs, q, step, max_occ)
    rb = ReadBuffer(device, codes, offsets)
    qi = QGroupIndex(device, rb, q)
    res = ResidentReference(device, *table_args(ref, q, step))
    cand = filter_reference(device, res, qi, rb, collapse_gap=gap, keep_raw=True)
    rs, diag = brute_force_hits(ref, codes, offsets, q)
    np.testing.assert_array_equal(cand.raw["rs"], rs)
    np.testing.assert_array_equal(cand.raw["diag"], diag)
    assert_candidates_equal(cand.to_host(), collapse(rs, diag, gap))
    return cand


def test_sarscov2_real_reads(device, shared_data):
    genome = read_fasta_codes(shared_data / "sarscov2" / "MT192765.1.fasta")
    c1, o1 = read_fastq_codes(shared_data / "sarscov2" / "ERR5069949_100pairs_R1.fastq.gz", 100)
    c2, o2 = read_fastq_codes(shared_data / "sarscov2" / "ERR5069949_100pairs_R2.fastq.gz", 100)
    codes, offsets = np.concatenate([c1, c2]), np.concatenate([o1, o2[1:] + o1[-1]])
    cand = check_real(device, genome, codes, offsets, q=12, step=1, max_occ=1000)
    # Nearly every read has a hit, on one of its two strands.
    assert len(np.unique(cand.to_host()["rs"] // 2)) > 180


def test_chr20_slice_real_reads(device, shared_data):
    chr20 = read_fasta_codes(shared_data / "human" / "GRCh37_chr20.fa.gz")[0]
    region = chr20[9_950_000:10_150_000]
    codes, offsets = read_fastq_codes(shared_data / "human" / "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz", 1500)
    cand = check_real(device, [region], codes, offsets, q=16, step=2, max_occ=100)
    assert cand.n_raw_hits > 1500 * 20


def test_from_index_matches_brute_force(device, shared_data, sarscov2_index):
    """The HDF5 index of peanut_py.reference, uploaded with from_index, filtered against real reads."""
    from peanut_py.reference import ReferenceIndex

    with ReferenceIndex(sarscov2_index) as ri:
        res = ResidentReference.from_index(device, ri)
        ref = dict(kmers=ri.kmers(), kmer_starts=ri.kmer_starts(), positions=ri.positions())
        np.testing.assert_array_equal(res.packed.get(), ri.packed())
        np.testing.assert_array_equal(res.ambiguous.get(), ri.ambiguity_bitmap())
        np.testing.assert_array_equal(res.contig_ends.get(), ri.offsets + ri.lengths)
        q = ri.q
    codes, offsets = read_fastq_codes(shared_data / "sarscov2" / "ERR5069949_100pairs_R1.fastq.gz", 100)
    rb = ReadBuffer(device, codes, offsets)
    cand = filter_reference(device, res, QGroupIndex(device, rb, q), rb, collapse_gap=8, keep_raw=True)
    rs, diag = brute_force_hits(ref, codes, offsets, q)
    np.testing.assert_array_equal(cand.raw["rs"], rs)
    np.testing.assert_array_equal(cand.raw["diag"], diag)
    assert_candidates_equal(cand.to_host(), collapse(rs, diag, 8))
    assert len(np.unique(rs // 2)) > 90
