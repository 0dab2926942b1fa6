"""ResidentReference and filter_reference (Algorithm 2 + collapse + votes threshold) against brute-force q-gram
matching, and the sensitivity guarantee of the votes threshold (q-gram lemma) on planted reads."""
import gzip
import types

import numpy as np
import pytest

from peanut_py import filtration
from peanut_py.device import Device
from peanut_py.errors import PeanutError
from peanut_py.filtration import (
    collapse_slots,
    filter_reference,
    filter_tools,
    guaranteed_errors,
    min_votes_table,
    votes_threshold,
)
from peanut_py import layout
from peanut_py.qgroup import QGroupIndex, ReadBuffer
from peanut_py import resident as resident_mod
from peanut_py.resident import ResidentReference, _HostArray, chunk_bounds
from qgram_oracle import CODE, read_fastq_codes, ref_qgrams, ref_text

CONTIG_GAP = 1024


# ---------------------------------------------------------------- plain references

def bucket_table(kmers, starts, q, bits):
    """The bucket table of a CSR table (ascending distinct kmers, their starts): entry b is the number of
    positions whose q-gram value is below b << (2q - bits)."""
    edges = np.arange((1 << bits) + 1, dtype=np.uint64) << np.uint64(2 * q - bits)
    return np.asarray(starts, np.int64)[np.searchsorted(np.asarray(kmers, np.uint64), edges)]


def build_reference(contigs, q, step, max_occ, bucket_bits=None):
    """Padded layout of docs/architecture.md and the q-gram table: every all-ACGT q-gram at a contig-local
    position divisible by ``step``, q-grams occurring more than ``max_occ`` times dropped; as distinct kmers
    with CSR starts (for the brute force) and as the index's bucket table on ``bucket_bits`` bits (default:
    the index build's choice)."""
    from peanut_py.reference import bucket_bits_for

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
    masked = kmers[~keep].astype(np.uint32)
    kmers, counts = kmers[keep].astype(np.uint32), counts[keep]
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    bits = bucket_bits_for(len(g), q) if bucket_bits is None else bucket_bits
    return dict(packed=packed, ambiguous=ambiguous, offsets=offsets, lengths=lengths, kmers=kmers,
                kmer_starts=starts, buckets=bucket_table(kmers, starts, q, bits),
                positions=p[kept].astype(np.uint32), genome=genome, masked=masked)


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


def apply_threshold(cand, offsets, table, masked_per_rs=None):
    """Candidates whose votes reach table[length of their read strand] (both strands of read r have its length),
    lowered by the read strand's masked q-grams (never below 1) when ``masked_per_rs`` is given."""
    lengths = np.diff(np.asarray(offsets, dtype=np.int64))
    need = table[lengths[cand["rs"] // 2]].astype(np.int64)
    if masked_per_rs is not None:
        need = np.maximum(1, need - masked_per_rs[cand["rs"]])
    keep = cand["votes"] >= need
    return {f: v[keep] for f, v in cand.items()}


def masked_per_strand(codes, offsets, q, masked):
    """Per read strand: how many of its q-grams (positions) have a masked value."""
    text, rs_start, pos_rs = ref_text(codes, offsets)
    g, t = ref_qgrams(text, rs_start, pos_rs, q)
    hit = np.isin(g, masked.astype(np.uint64))
    return np.bincount(pos_rs[t[hit]], minlength=len(rs_start) - 1).astype(np.int64)


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


def table_args(ref, q, step, buckets=None):
    return (ref["packed"], ref["ambiguous"], ref["offsets"], ref["lengths"],
            ref["buckets"] if buckets is None else buckets, ref["positions"], q, step)


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
    np.testing.assert_array_equal(res.buckets.get(), ref["buckets"])
    np.testing.assert_array_equal(res.positions.get(), ref["positions"])
    assert (res.n_contigs, res.q, res.step) == (3, 11, 2)
    # a few positions per bucket: the build's choice for this many positions
    assert res.n_buckets == len(ref["buckets"]) - 1 and 1 <= res.n_positions / res.n_buckets <= 4
    assert res.suffix_bits == 2 * 11 - res.bucket_bits


def test_cpu_device_uses_page_aligned_arrays_in_place(device, planted):
    """On a CPU device the resident reference wraps page-aligned host arrays instead of copying them (the
    buffer maps to the array's own memory); unaligned ones are copied into aligned memory first. Kernels
    see the same contents either way (test above and every filtration test)."""
    if not device.host_memory:
        pytest.skip("CPU OpenCL devices only: a GPU copies the reference into its own memory")
    import pyopencl as cl

    from peanut_py.reference import page_aligned_empty

    ref = planted["ref"]
    aligned = page_aligned_empty(ref["packed"].size, np.uint32)  # the sequence, page-aligned
    aligned[:] = ref["packed"]
    unaligned = np.empty(ref["ambiguous"].size + 1, np.uint32)[1:]  # the ambiguity bitmap, 4 bytes off
    unaligned[:] = ref["ambiguous"]
    assert aligned.ctypes.data % 4096 == 0 and unaligned.ctypes.data % 4096 != 0
    args = list(table_args(ref, 11, 2))
    args[:2] = aligned, unaligned
    res = ResidentReference(device, *args)
    for host, dev, same in ((aligned, res.packed, True), (unaligned, res.ambiguous, False)):
        mapped, _ = cl.enqueue_map_buffer(device.queue, dev.data, cl.map_flags.READ, 0, (host.size,), np.uint32)
        assert (mapped.ctypes.data == host.ctypes.data) == same
        assert mapped.ctypes.data % 4096 == 0
        np.testing.assert_array_equal(mapped, host)
        del mapped


def test_streamed_chunks_tile_the_table(device, planted):
    ref = planted["ref"]
    res = ResidentReference(device, *table_args(ref, 11, 2), table_budget=0, chunk_positions=1000)
    assert res.streamed and res.buckets is None and res.device_bytes < 100_000
    starts, positions = [0], []
    n_chunks = 0
    for c in res.qgram_chunks(max_buckets=400):  # streamed buffers are reused: read each chunk in its turn
        n_chunks += 1
        assert c.n_buckets <= 400 and c.n_positions <= 1000 and c.b_base == 0
        assert c.first_bucket == len(starts) - 1
        s = c.buckets.get()[: c.n_buckets + 1].astype(np.int64)
        assert s[0] == 0 and s[-1] == c.n_positions
        starts.extend(s[1:] + starts[-1])
        positions.append(c.positions.get()[: c.n_positions])
    assert n_chunks >= len(ref["positions"]) // 1000
    np.testing.assert_array_equal(np.array(starts), ref["buckets"])
    np.testing.assert_array_equal(np.concatenate(positions), ref["positions"])


def touched_reference(n_buckets, buckets_of_keys):
    """Touched-bucket words (bit b & 31 of word b >> 5) with the buckets ``buckets_of_keys`` set."""
    bits = np.zeros(((n_buckets + 31) // 32) * 32, bool)
    bits[np.asarray(buckets_of_keys, np.int64)] = True
    return np.packbits(bits.reshape(-1, 32)[:, ::-1], axis=1).view(">u4").ravel().astype(np.uint32)


@pytest.mark.parametrize("host_memory", [False, True])  # through staging buffers (a GPU's way); a CPU device's
@pytest.mark.parametrize("stage_bytes", [None, 256])  # chunks packed into staging buffers; into host arrays
@pytest.mark.parametrize("pack_min", [None, 8])  # each chunk packed by one thread; by several
def test_streamed_chunks_carry_exactly_the_touched_buckets(planted, monkeypatch, host_memory, stage_bytes,
                                                           pack_min):
    """A streamed chunk with ``touched`` holds, for every bucket of its range, the bucket's positions where
    its bit is set and none where it is not, with its starts rebased to the packed positions (NumPy's)."""
    if stage_bytes:
        monkeypatch.setattr(resident_mod, "STAGE_BYTES", stage_bytes)
    if pack_min:
        monkeypatch.setattr(resident_mod, "PACK_MIN_BUCKETS", pack_min)
    ref = planted["ref"]
    dev = Device(host_memory=host_memory)
    res = ResidentReference(dev, *table_args(ref, 11, 2), table_budget=0, chunk_positions=1000)
    full = np.asarray(ref["buckets"], np.int64)
    n_buckets = len(full) - 1
    rng = np.random.default_rng(5)
    for share in (0.0, 0.1, 0.5, 1.0):
        chosen = np.flatnonzero(rng.random(n_buckets) < share)
        touched = touched_reference(n_buckets, chosen)
        sizes = np.diff(full) * np.isin(np.arange(n_buckets), chosen)
        positions, n_chunks = [], 0
        for c in res.qgram_chunks(max_buckets=400, touched=touched):
            n_chunks += 1
            b0, b1 = c.first_bucket, c.first_bucket + c.n_buckets
            s = c.buckets.get()[: c.n_buckets + 1].astype(np.int64)
            np.testing.assert_array_equal(s, np.concatenate([[0], np.cumsum(sizes[b0:b1])]))
            assert c.n_positions == s[-1]
            positions.append(c.positions.get()[: c.n_positions])
        assert n_chunks >= len(ref["positions"]) // 1000
        expected = [ref["positions"][full[b] : full[b + 1]] for b in chosen]
        np.testing.assert_array_equal(np.concatenate(positions), np.concatenate([[]] + expected).astype(np.uint32))


@pytest.mark.parametrize("starts_dtype", [np.uint32, np.uint64])
def test_pack_touched_matches_numpy(starts_dtype):
    """pack_touched and touched_positions against NumPy on random tables, touched sets (empty to full, words
    skipped whole) and bucket ranges that start and end inside words."""
    from peanut_py._stream_pack import pack_touched, touched_positions

    rng = np.random.default_rng(17)
    for trial in range(1500):
        n_b = int(rng.integers(1, 300))
        sizes = rng.choice([0, 0, 1, 3, 11, 40], size=n_b)
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(starts_dtype)
        positions = rng.integers(0, 1 << 32, int(starts[-1]), dtype=np.uint32)
        bits = rng.random(((n_b + 31) // 32) * 32) < rng.choice([0.0, 0.05, 0.3, 1.0])
        touched = touched_reference(len(bits), np.flatnonzero(bits))
        b0 = int(rng.integers(0, n_b + 1))
        b1 = int(rng.integers(b0, n_b + 1))
        kept = [b for b in range(b0, b1) if bits[b]]
        expected = np.concatenate([np.zeros(0, np.uint32)] + [positions[starts[b] : starts[b + 1]] for b in kept])
        assert touched_positions(starts, touched, b0, b1) == len(expected), trial
        at = int(rng.integers(0, 5))
        out_starts = np.zeros(b1 - b0 + 1, np.uint32)
        out_positions = np.zeros(at + len(expected), np.uint32)
        assert pack_touched(starts, positions, touched, b0, b1, b0, out_starts, out_positions, at) == at + len(expected)
        np.testing.assert_array_equal(out_positions[at:], expected)
        held = np.where(bits[b0:b1], sizes[b0:b1], 0)
        np.testing.assert_array_equal(out_starts[: b1 - b0], at + np.cumsum(np.concatenate([[0], held]))[:-1])
        # every bucket, starts only (a chunk copied whole)
        assert pack_touched(starts, None, None, b0, b1, b0, out_starts, None, 0) == int(starts[b1] - starts[b0])
        np.testing.assert_array_equal(out_starts[: b1 - b0], (starts[b0:b1] - starts[b0]).astype(np.uint32))


def test_pack_touched_checks_its_arguments():
    from peanut_py._stream_pack import pack_touched, touched_positions

    starts = np.array([0, 2, 2, 5], np.uint32)
    positions = np.arange(5, dtype=np.uint32)
    touched = np.array([0b101], np.uint32)
    assert touched_positions(starts, touched, 0, 3) == 5 and touched_positions(starts, None, 1, 3) == 3
    out_s, out_p = np.zeros(4, np.uint32), np.zeros(5, np.uint32)
    assert pack_touched(starts, positions, touched, 0, 3, 0, out_s, out_p, 0) == 5
    assert out_s[:3].tolist() == [0, 2, 2] and out_p.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="outside"):
        touched_positions(starts, touched, 2, 4)
    with pytest.raises(ValueError, match="too short"):
        pack_touched(starts, positions, touched, 0, 3, 0, out_s, np.zeros(4, np.uint32), 0)
    with pytest.raises(ValueError, match="one entry per bucket"):
        pack_touched(starts, positions, touched, 0, 3, 1, out_s, out_p, 0)


@pytest.mark.parametrize("fold", [0, 1])
@pytest.mark.parametrize("bits", [22, 17, 12, 3])  # key shift below 0 (fold 1), 0 .. 4, 5 and beyond
def test_touched_buckets_match_numpy(device, planted, fold, bits):
    """touched_buckets sets the bit of every bucket that holds a key of the q-group index (where a folded key
    spans several buckets, all of them) and no other; touched_reverse adds exactly the buckets of the reverse
    strands' q-grams."""
    p = planted
    q = p["q"]
    qi = QGroupIndex(device, p["rb"], q, fold=fold)
    suffix = 2 * q - bits
    shift = suffix - 2 * fold
    keys = np.unique(read_keys(p, q, fold))
    if shift >= 0:
        buckets = keys >> shift
    else:
        buckets = (keys[:, None] << -shift) + np.arange(1 << -shift)[None, :]
    knl = filtration.filter_kernels(device, q, qi.s_stride, "uint", fold, suffix)
    n_buckets = 1 << bits
    n_words = (n_buckets + 31) // 32
    out = device.empty(n_words, np.uint32)
    device.launch(knl.touched_buckets, n_words, qi.I.data, np.uint64(n_buckets), np.uint32(n_words), out.data)
    np.testing.assert_array_equal(out.get(), touched_reference(n_buckets, np.unique(buckets.ravel())))
    device.launch(knl.touched_reverse, qi.n_distinct, p["rb"].text.data, qi.O.data, qi.Sp.data, qi.Ob.data,
                  np.uint32(qi.n_distinct), np.uint64(n_buckets), out.data)
    reverse = read_values(p, q, 1) >> suffix
    if bits >= 12:  # buckets the forward keys do not touch: the reverse strands add some
        assert not np.isin(reverse, buckets).all()
    np.testing.assert_array_equal(out.get(), touched_reference(n_buckets, np.union1d(buckets.ravel(), reverse)))


def test_chunk_bounds_match_a_greedy_scan():
    """chunk_bounds tiles the buckets greedily: each chunk takes buckets while their positions and count stay
    within the limits; a bucket alone above the position limit is a chunk of its own or no tiling."""
    rng = np.random.default_rng(7)
    for trial in range(200):
        sizes = rng.choice([0, 0, 1, 2, 5, 40], size=int(rng.integers(1, 60)))
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(rng.choice([np.uint32, np.uint64]))
        max_pos, max_b = int(rng.integers(1, 50)), int(rng.integers(1, 9))
        for whole in (False, True):
            expected, b = [0], 0
            while b < len(sizes):
                b1 = b
                while b1 < len(sizes) and b1 - b < max_b and starts[b1 + 1] - starts[b] <= max_pos:
                    b1 += 1
                if b1 == b:
                    if not whole:
                        expected = None
                        break
                    b1 = b + 1
                expected.append(b1)
                b = b1
            got = chunk_bounds(starts, max_pos, max_b, whole_buckets=whole)
            assert (got is None) == (expected is None), (trial, whole)
            if got is not None:
                assert got.tolist() == expected, (trial, whole)


def test_resident_parts_tile_the_table(device, planted):
    """Positions beyond one allocation: the table stays resident in parts of consecutive buckets, each with
    its starts rebased to the part."""
    ref = planted["ref"]
    res = ResidentReference(device, *table_args(ref, 11, 2), part_positions=700)
    assert not res.streamed and len(res.parts) >= len(ref["positions"]) // 700 and res.buckets is None
    starts, positions = [0], []
    for part in res.parts:
        assert part.first_bucket == len(starts) - 1 and part.b_base == 0 and part.n_positions <= 700
        s = part.buckets.get().astype(np.int64)
        assert len(s) == part.n_buckets + 1 and s[0] == 0 and s[-1] == part.n_positions
        starts.extend(s[1:] + starts[-1])
        positions.append(part.positions.get())
    np.testing.assert_array_equal(np.array(starts), ref["buckets"])
    np.testing.assert_array_equal(np.concatenate(positions), ref["positions"])
    assert res.device_bytes == sum(a.nbytes for a in (res.packed, res.ambiguous, res.contig_offsets,
                                                        res.contig_ends)) + 4 * (len(starts) + len(res.parts) - 1
                                                                                 + len(ref["positions"]))


@pytest.mark.parametrize("max_hits", [None, 5000])  # one range of read strands; several (the passes reused)
@pytest.mark.parametrize("max_buckets", [None, 300])
@pytest.mark.parametrize("bits", [None, 22])  # the build's choice; no suffix bits (a folded key spans buckets)
def test_table_in_parts_gives_identical_candidates(device, planted, max_hits, max_buckets, bits):
    p = planted
    ref = p["ref"]
    buckets = None if bits is None else bucket_table(ref["kmers"], ref["kmer_starts"], p["q"], bits)
    res = ResidentReference(device, *table_args(ref, p["q"], p["step"], buckets), part_positions=900)
    assert len(res.parts) > 2
    cand = filter_reference(device, res, p["qi"], p["rb"], collapse_gap=8, min_votes=1, max_hits_per_pass=max_hits,
                            max_buckets_per_chunk=max_buckets)
    assert cand.n_chunks >= len(res.parts) * cand.n_ranges
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


@pytest.mark.parametrize("stage_bytes", [None, 4096])  # the default; many pieces through each staging buffer
def test_gpu_streamed_table_through_page_locked_staging_gives_identical_candidates(planted, monkeypatch,
                                                                                  stage_bytes):
    """A device with its own memory copies the streamed table through page-locked staging buffers
    (CL_MEM_ALLOC_HOST_PTR), which count as device memory; run that path on the CPU device."""
    p = planted
    if stage_bytes:
        monkeypatch.setattr(resident_mod, "STAGE_BYTES", stage_bytes)
    gpu = Device(host_memory=False)
    res = ResidentReference(gpu, *table_args(p["ref"], p["q"], p["step"]), table_budget=0, chunk_positions=1500)
    staged = [res._host_table]
    assert res.streamed and all(len(h._stages) == resident_mod.STAGES for h in staged)
    assert res.device_bytes >= sum(h.device_bytes for h in staged) > 0
    rb = ReadBuffer(gpu, p["codes"], p["offsets"])
    qi = QGroupIndex(gpu, rb, p["q"])
    cand = filter_reference(gpu, res, qi, rb, collapse_gap=8, min_votes=1)
    assert cand.n_packed >= len(p["ref"]["positions"]) // 1500 and cand.n_gathered_chunks == 1
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


@pytest.mark.parametrize("host_memory", [False, True])  # staged (a GPU's way); copied directly (a CPU device)
def test_host_array_copies_slices_through_its_staging_buffers(monkeypatch, host_memory):
    import pyopencl.array as cla

    monkeypatch.setattr(resident_mod, "COPY_THREADS", 3)
    gpu = Device(host_memory=host_memory)
    values = np.random.default_rng(3).integers(0, 1 << 32, 500_000, dtype=np.uint64)
    host = _HostArray(gpu, values, np.uint32, stage_bytes=4 * 250_000)  # pieces of 250,000, each in 3 copies
    assert len(host._stages) == (0 if host_memory else resident_mod.STAGES)
    dest = cla.empty(gpu.queue, 500_000, np.uint32)
    for lo, hi in [(0, 500_000), (1000, 1030), (69_999, 210_001), (5, 499_999), (430_000, 500_000), (7, 7)]:
        host.copy_to(gpu.queue, dest, lo, hi)
        np.testing.assert_array_equal(dest.get()[: hi - lo], values[lo:hi].astype(np.uint32))


def test_sequence_too_large_for_device_is_an_error(planted):
    ref = planted["ref"]
    tiny = Device(memory_cap=16 << 10)
    with pytest.raises(PeanutError, match="sequence"):
        ResidentReference(tiny, *table_args(ref, 11, 2))


# ---------------------------------------------------------------- filtration

def read_values(p, q, strand):
    """The value of every q-gram of the planted buffer's forward (``strand`` 0) or reverse (1) read strands."""
    text, rs_start, pos_rs = ref_text(p["codes"], p["offsets"])
    g, t = ref_qgrams(text, rs_start, pos_rs, q)
    return g[pos_rs[t] % 2 == strand].astype(np.int64)


def read_keys(p, q, fold):
    """The key (q-gram value without its fold low bases) of every q-gram that the planted buffer's q-group
    index holds: those of the forward read strands."""
    return read_values(p, q, 0) >> (2 * fold)


@pytest.mark.parametrize("fold", [0, 1])
def test_key_ranks_match_numpy(device, planted, fold):
    """key_ranks gives, for a key, the slots of the q-group index below it and where they end in O: the
    distinct read keys and the read q-gram occurrences below it."""
    import pyopencl.array as cla

    p = planted
    q = p["q"]
    qi = QGroupIndex(device, p["rb"], q, fold=fold)
    keys_all = np.sort(read_keys(p, q, fold))
    distinct = np.unique(keys_all)
    rng = np.random.default_rng(11)
    n_keys = 1 << (2 * q - 2 * fold)
    probe = np.concatenate([[0, n_keys - 1], distinct[:5], distinct[-5:], distinct[::97] + 1,
                            rng.integers(0, n_keys, 200)]).clip(0, n_keys - 1).astype(np.uint32)
    knl = filtration.filter_kernels(device, q, qi.s_stride, "uint", fold, 2 * q - 10)
    out = cla.empty(device.queue, 2 * len(probe), np.uint32)
    device.launch(knl.key_ranks, len(probe), qi.I.data, qi.S.data, qi.Sp.data,
                  cla.to_device(device.queue, probe).data, np.uint32(len(probe)), out.data)
    got = out.get()
    np.testing.assert_array_equal(got[: len(probe)], np.searchsorted(distinct, probe))
    np.testing.assert_array_equal(got[len(probe) :], np.searchsorted(keys_all, probe))
    assert qi.n_occurrences == len(keys_all) and qi.n_distinct == len(distinct)


@pytest.mark.parametrize("slots", ["all", "chunk"])  # every slot's kmer sought; only those of the chunk's keys
@pytest.mark.parametrize("bits", [None, 3, 22])  # the build's choice, large buckets, one kmer per bucket
@pytest.mark.parametrize("fold", [0, 1])
def test_present_kmers_match_numpy(device, planted, fold, bits, slots):
    """present_kmers lists, in some order, exactly the kmers of a chunk of the table that occur on the read
    buffer's forward strands (strand 0, as themselves) and on its reverse strands (strand 1, as the reverse
    complement the index holds), each with its range of positions: in one launch over every slot, or as a
    chunk does it, the forward lookups over the slots of its keys and the reverse ones over every slot."""
    import pyopencl.array as cla

    p = planted
    ref, q = p["ref"], p["q"]
    qi = QGroupIndex(device, p["rb"], q, fold=fold)
    bits = bits or len(ref["buckets"]).bit_length() - 1
    buckets = bucket_table(ref["kmers"], ref["kmer_starts"], q, bits)
    res = ResidentReference(device, *table_args(ref, q, p["step"], buckets))
    knl = filtration.filter_kernels(device, q, qi.s_stride, "uint", fold, 2 * q - bits)
    # a chunk that starts inside the table: at the bucket of its tenth kmer
    first = max(1, int(ref["kmers"][len(ref["kmers"]) // 10]) >> (2 * q - bits))
    n = len(buckets) - 1 - first
    room = 2 * qi.n_occurrences
    values, ranges = cla.empty(device.queue, room, np.uint32), cla.empty(device.queue, 2 * room, np.uint32)
    strands = cla.empty(device.queue, room, np.uint8)
    n_present = cla.zeros(device.queue, 1, np.uint32)
    if slots == "chunk":  # forward lookups from the slot of the chunk's first key on (it runs to the table's end)
        shift = 2 * q - bits - 2 * fold
        key = first << shift if shift >= 0 else first >> -shift
        s0 = int(np.searchsorted(np.unique(read_keys(p, q, fold)), key))
        launches = [(s0, 1), (0, 2)]
    else:
        launches = [(0, 3)]
    for a, which in launches:
        device.launch(knl.present_kmers, qi.n_distinct - a, res.buckets.data, np.uint64(first), np.uint32(n),
                      np.uint32(first), res.positions.data, res.packed.data, p["rb"].text.data, qi.O.data,
                      qi.Sp.data, qi.Ob.data, np.uint32(a), np.uint32(qi.n_distinct), np.uint32(which), values.data,
                      strands.data, ranges.data, n_present.data)
    k = int(n_present.get()[0])
    got = np.stack([strands.get()[:k].astype(np.int64), values.get()[:k], *ranges.get()[: 2 * k].reshape(-1, 2).T])
    got = got[:, np.lexsort(got[::-1])]
    kmers, starts = ref["kmers"], ref["kmer_starts"]
    in_chunk = kmers.astype(np.uint64) >= np.uint64(first) << np.uint64(2 * q - bits)
    want = []
    for strand in (0, 1):
        j = np.flatnonzero(in_chunk & np.isin(kmers, np.unique(read_values(p, q, strand))))
        value = kmers[j] if strand == 0 else reverse_complement_values(kmers[j], q)
        want.append(np.stack([np.full(len(j), strand), value, starts[j], starts[j + 1]]))
        assert 0 < len(j) < np.isin(kmers, np.unique(read_values(p, q, strand))).sum()
    want = np.concatenate(want, axis=1).astype(np.int64)
    want = want[:, np.lexsort(want[::-1])]
    np.testing.assert_array_equal(got, want)


def reverse_complement_values(values, q):
    """The reverse complements of q-gram values (first base in the high bits)."""
    values = np.asarray(values, np.int64)
    out = np.zeros_like(values)
    for i in range(q):
        out = (out << 2) | (3 - ((values >> (2 * i)) & 3))
    return out


def test_raw_hits_and_candidates_match_brute_force(device, planted):
    p = planted
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=8, min_votes=1, keep_raw=True)
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
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=gap, min_votes=1)
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], gap))


@pytest.mark.parametrize("fold,scatter", [(0, True), (1, True), (1, False)])
def test_small_windows_and_chunks_give_identical_candidates(device, planted, fold, scatter):
    # Ranges of read strands: the occurrences of a q-gram are cut to [t0, t1) inside its part of O.  The slot
    # sizes counted by per-position writes (CPU devices) or by atomics (GPUs).
    p = planted
    want = collapse(p["rs"], p["diag"], 8)
    qi = QGroupIndex(device, p["rb"], p["q"], fold=fold)
    cand = filter_reference(device, p["resident"], qi, p["rb"], collapse_gap=8, min_votes=1,
                            max_hits_per_pass=5_000, max_buckets_per_chunk=61, scatter_counts=scatter)
    assert cand.n_ranges > 5 and cand.n_chunks > 10 * cand.n_ranges
    assert_candidates_equal(cand.to_host(), want)


@pytest.mark.slow
def test_read_strand_with_more_hits_than_a_window(device, planted):
    # Windows smaller than the hits of single read strands: those strands are emitted in several windows
    # whose candidates are merged.
    p = planted
    per_strand = np.bincount(p["rs"])
    window = int(per_strand.max()) // 4
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=8, min_votes=1,
                            max_hits_per_pass=window, max_buckets_per_chunk=997)
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


@pytest.mark.slow
def test_padded_sorts_give_identical_candidates(device, planted):
    # Where sort_length pads (not on PoCL), the padding keys must sort last and be ignored.
    p = planted
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=8, min_votes=1, keep_raw=True,
                            max_hits_per_pass=int(np.bincount(p["rs"]).max() * 0.7), sort_padding=777)
    assert cand.n_windows > cand.n_ranges  # the merge (with its own padding) ran too
    np.testing.assert_array_equal(cand.raw["rs"], p["rs"])
    np.testing.assert_array_equal(cand.raw["diag"], p["diag"])
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


@pytest.mark.parametrize("streamed", [False, True])  # a streamed table's chunks carry the touched buckets only
def test_per_position_variant_gives_identical_hits(device, planted, streamed):
    p = planted
    res = p["resident"] if not streamed else ResidentReference(
        device, *table_args(p["ref"], p["q"], p["step"]), table_budget=0, chunk_positions=2000)
    assert res.streamed == streamed
    cand = filter_reference(device, res, p["qi"], p["rb"], collapse_gap=8, min_votes=1, per_position=True,
                            keep_raw=True, max_hits_per_pass=5000)
    np.testing.assert_array_equal(cand.raw["rs"], p["rs"])
    np.testing.assert_array_equal(cand.raw["diag"], p["diag"])
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


@pytest.mark.parametrize("max_hits", [None, 5000])  # one range of read strands; several
# present positions packed once and joined into one chunk; packed but kept apart (too little memory to join
# them); the table streamed again for every pass
@pytest.mark.parametrize("gather", ["joined", "apart", None])
def test_streamed_table_gives_identical_candidates(device, planted, monkeypatch, gather, max_hits):
    p = planted
    res = ResidentReference(device, *table_args(p["ref"], p["q"], p["step"]), table_budget=0, chunk_positions=2000)
    assert res.streamed
    n_stream_chunks = len(res._chunk_bounds(filtration.MAX_CHUNK_BUCKETS)) - 1
    assert n_stream_chunks >= len(p["ref"]["positions"]) // 2000
    args = dict(collapse_gap=8, min_votes=1, max_hits_per_pass=max_hits)
    if gather is None:
        monkeypatch.setattr(filtration, "GATHER_SHARE", 0.0)
    elif gather == "apart":  # room to keep the packed chunks, not to join them
        joined = filter_reference(device, res, p["qi"], p["rb"], **args)
        free = 0.75 * device.global_mem - (res.device_bytes + p["qi"].device_bytes + p["rb"].device_bytes)
        monkeypatch.setattr(filtration, "JOIN_SHARE", 1.5 * joined.gathered_bytes / free)
    cand = filter_reference(device, res, p["qi"], p["rb"], **args)
    assert cand.gathered == (gather is not None) and (cand.n_ranges > 1) == (max_hits is not None)
    if gather is None:
        assert cand.n_chunks >= n_stream_chunks * cand.n_ranges and cand.n_packed == 0
    else:
        assert cand.n_packed > 5 and cand.gathered_bytes > 4 * len(p["rs"])
        assert cand.n_gathered_chunks == (1 if gather == "joined" else cand.n_packed)
        assert cand.n_chunks == cand.n_gathered_chunks * cand.n_ranges
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


def test_uint64_starts_give_identical_candidates(device, planted):
    # Tables beyond 2^32 positions keep 64-bit bucket starts on the device; exercise that kernel variant.
    p = planted
    res = ResidentReference(device, *table_args(p["ref"], p["q"], p["step"]), starts_dtype=np.uint64)
    assert res.starts_dtype == np.uint64 and res.buckets.dtype == np.uint64 and res.starts_ctype == "ulong"
    cand = filter_reference(device, res, p["qi"], p["rb"], collapse_gap=8, min_votes=1, max_hits_per_pass=20_000)
    assert cand.n_ranges > 1
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


def test_memory_capped_device_streams_and_gives_identical_candidates(device, planted):
    p = planted
    # Usable memory (3/4) = the fixed part of a q = 11 index (I and S: 768 KiB, folded 192 KiB) + 90 KiB: the
    # ~50 KiB q-gram table exceeds its share (half) of the remaining room.
    fixed = layout.index_fixed_bytes(p["q"], fold=layout.default_fold(device))
    # (the plans only: at this toy size the scans' temporaries outweigh the 90 KiB, see Device)
    small = Device(memory_cap=int((fixed + (90 << 10)) / 0.75), hold_to_cap=False)
    # A capped device's largest allocation keeps the real device's share of its memory, which PoCL sets from
    # the host's free memory (a quarter to a half): at this toy size that share can fall below I alone, which
    # no real device of this kind would be asked to hold. The streaming is what this test is about.
    small.max_alloc = max(small.max_alloc, fixed)
    res = ResidentReference(small, *table_args(p["ref"], p["q"], p["step"]))
    assert res.streamed
    rb = ReadBuffer(small, p["codes"], p["offsets"])
    qi = QGroupIndex(small, rb, p["q"])
    cand = filter_reference(small, res, qi, rb, collapse_gap=8, min_votes=1)
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


# ---------------------------------------------------------------- read-strand slots

def slot_reference(slots, lengths, r0, table, gap):
    """Per slot: sorted diagonals, clusters by the collapse rule, those reaching table[length] kept."""
    parts = [collapse(np.full(len(d), r0 + i, np.uint32), np.sort(d), gap) for i, d in enumerate(slots) if len(d)]
    cand = {f: np.concatenate([c[f] for c in parts]).astype(np.uint32) for f in parts[0]}
    keep = cand["votes"] >= table[lengths[cand["rs"]]]
    return {f: v[keep] for f, v in cand.items()}, len(cand["rs"])


# the slot sort by one work-item per slot; by a work-group per slot with the build's local block and with a
# small one (most slots then sorted in several local blocks and finished by the group's merge passes), in
# groups of several sizes (one work-item; fewer than a slot's blocks; not dividing the slots' sizes)
@pytest.mark.parametrize("by_group,sort_local,group", [(False, None, None), (True, None, None), (True, 64, None),
                                                       (True, 64, 1), (True, 16, 8), (True, 32, 4)])
def test_collapse_slots_with_many_hits_and_empty_slots(device, monkeypatch, by_group, sort_local, group):
    """The per-read-strand sort and collapse kernels on hand-made slots: empty slots, slots at the insertion
    sort's and the local sort's block sizes, and slots of 10^4..10^5 hits that are random, ascending,
    descending, made of runs (as the emit pass writes them) or all duplicates; thresholds depend on the read
    strand's length."""
    import pyopencl.array as cla

    from peanut_py.filtration import EMIT_BLOCK, SORT_BLOCK

    monkeypatch.setattr(filtration, "SLOT_SORT_BY_GROUP", by_group)
    if group is not None:
        monkeypatch.setattr(filtration, "SORT_GROUP", group)
    local = sort_local or filtration.SORT_LOCAL
    rng = np.random.default_rng(11)

    def runs(m):
        cuts = np.sort(rng.choice(np.arange(1, m), size=min(m - 1, 40), replace=False))
        return np.concatenate([np.sort(r) for r in np.split(rng.integers(0, 1 << 20, m), cuts)])

    kinds = {"random": lambda m: rng.integers(0, 1 << 20, m),
             "ascending": lambda m: np.sort(rng.integers(0, 1 << 20, m)),
             "descending": lambda m: np.sort(rng.integers(0, 1 << 20, m))[::-1], "runs": runs,
             "duplicates": lambda m: np.full(m, 777), "dense": lambda m: rng.integers(0, m * 3, m),
             "top": lambda m: (0xFFFFFFFF - rng.integers(0, 20, m)).astype(np.uint64)}
    spec = [(0, "random"), (1, "random"), (0, "random"), (SORT_BLOCK, "descending"), (SORT_BLOCK + 1, "random"),
            (60_000, "random"), (3, "descending"), (20_000, "ascending"), (25_000, "descending"), (0, "random"),
            (40_000, "runs"), (5_000, "duplicates"), (30_000, "dense"), (2 * SORT_BLOCK + 5, "runs"), (0, "random"),
            (2, "ascending"), (local, "random"), (local - 1, "dense"), (local + 1, "runs"), (3 * local + 7, "top"),
            (local // 2 + 3, "top"), (2 * local, "descending")]
    slots = [kinds[k](m).astype(np.uint32) for m, k in spec]
    r0, gap = 3, 8
    lengths = rng.integers(0, 1025, r0 + len(slots) + 2)
    rs_start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint32)
    table = rng.integers(1, 6, 1025).astype(np.uint32)
    table[lengths[r0 + 11]] = 5000  # the all-duplicates slot has exactly 5000 votes: kept at >= 5000
    sizes = np.array([len(d) for d in slots])
    slot_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint32)
    total = int(slot_start[-1])
    dev = lambda a: cla.to_device(device.queue, a)  # noqa: E731
    defines = {} if sort_local is None else {"SORT_LOCAL": sort_local}
    knl = device.kernels("filter", Q=16, S_STRIDE=layout.S_STRIDE, STARTS_T="uint", EMIT_BLOCK=EMIT_BLOCK,
                         SORT_BLOCK=SORT_BLOCK, **defines)
    assert (filtration.slot_sort_group(device, knl) is not None) == by_group
    assert group is None or filtration.slot_sort_group(device, knl) == group
    raw = []
    cand = collapse_slots(device, knl, filter_tools(device), dev(np.concatenate(slots)), total, dev(slot_start), len(slots),
                          dev(rs_start), r0, dev(table), gap, raw=raw)
    want, n_all = slot_reference(slots, lengths, r0, table, gap)
    assert_candidates_equal(cand.to_host(), want)
    assert cand.n_collapsed == n_all > cand.n > 0
    assert 5000 in want["votes"] and np.bincount(want["rs"]).max() > 1000
    assert want["diag_hi"].max() == 0xFFFFFFFF  # diagonals equal to the local sort's padding
    got_rs, got_diag = raw[0]
    np.testing.assert_array_equal(got_rs, np.repeat(np.arange(r0, r0 + len(slots)), sizes))
    np.testing.assert_array_equal(got_diag, np.concatenate([np.sort(d) for d in slots]))


def test_slot_sort_by_group_on_devices_with_their_own_memory(device):
    """The work-group slot sort is the choice of devices with their own memory (GPUs) only, in a group size
    that the kernel allows; CPU devices keep one work-item per slot."""
    cpu, gpu = Device(host_memory=True), Device(host_memory=False)
    knl = {d: filtration.filter_kernels(d, 11, layout.S_STRIDE, "uint", 0, 0) for d in (cpu, gpu)}
    assert filtration.slot_sort_group(cpu, knl[cpu]) is None
    group = filtration.slot_sort_group(gpu, knl[gpu])
    assert group is not None and group & (group - 1) == 0 and group <= min(filtration.SORT_GROUP, gpu.max_work_group)


@pytest.fixture(scope="session")
def repeat_slots(device):
    """A genome with a 6 kb tandem repeat (period 7, 1 % mutations): reads inside it give read strands with
    ~10^5 raw hits (slots sorted over many merge passes); q = 12, step 1, no masking."""
    rng = np.random.default_rng(77)
    unit = rng.integers(0, 4, 7).astype(np.uint8)
    genome = rng.integers(0, 4, 30_000).astype(np.uint8)
    rep = np.tile(unit, 6000 // 7 + 1)[:6000]
    mut = rng.random(len(rep)) < 0.01
    rep[mut] = rng.integers(0, 4, mut.sum())
    genome[10_000:16_000] = rep
    q, step = 12, 1
    ref = build_reference([genome], q, step, max_occ=10**6)
    reads = [genome[a : a + n].copy() for a, n in zip(rng.integers(10_000, 15_700, 8), rng.integers(100, 300, 8))]
    reads += [genome[a : a + 150].copy() for a in rng.integers(0, 29_000, 40)]
    reads += [np.zeros(0, np.uint8), rng.integers(0, 4, 11).astype(np.uint8)]  # empty slots
    order = rng.permutation(len(reads))
    reads = [revcomp(reads[i]) if i % 3 == 0 else reads[i] for i in order]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in reads])]).astype(np.int64)
    codes = np.concatenate(reads).astype(np.uint8)
    rb = ReadBuffer(device, codes, offsets)
    rs, diag = brute_force_hits(ref, codes, offsets, q)
    return dict(ref=ref, q=q, step=step, codes=codes, offsets=offsets, rb=rb, qi=QGroupIndex(device, rb, q),
                resident=ResidentReference(device, *table_args(ref, q, step)), rs=rs, diag=diag)


@pytest.mark.parametrize("fold,scatter", [(0, True), (1, True), (1, False)])
@pytest.mark.parametrize("min_votes", [1, "auto", "masked"])
def test_read_strands_with_10e5_hits(device, repeat_slots, min_votes, fold, scatter):
    p = dict(repeat_slots)
    p["qi"] = QGroupIndex(device, p["rb"], p["q"], fold=fold)  # long slots of O: folded lookups search them
    per_strand = np.bincount(p["rs"], minlength=p["rb"].n_rs)
    assert per_strand.max() > 50_000 and (per_strand == 0).sum() >= 4
    masked, m = None, None
    if min_votes == "masked":  # any value list works: here a fifth of the reads' q-gram values
        text, rs_start, pos_rs = ref_text(p["codes"], p["offsets"])
        g, _ = ref_qgrams(text, rs_start, pos_rs, p["q"])
        values = np.unique(g)
        masked = np.sort(np.random.default_rng(5).choice(values, len(values) // 5, replace=False)).astype(np.uint32)
        m = masked_per_strand(p["codes"], p["offsets"], p["q"], masked)
        min_votes = "auto"
    table = min_votes_table(min_votes, p["q"], p["step"])
    want = apply_threshold(collapse(p["rs"], p["diag"], 8), p["offsets"], table, m)
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], min_votes=min_votes, masked_kmers=masked,
                            keep_raw=True, scatter_counts=scatter)
    np.testing.assert_array_equal(cand.raw["rs"], p["rs"])
    np.testing.assert_array_equal(cand.raw["diag"], p["diag"])
    assert_candidates_equal(cand.to_host(), want)
    # Windows below one read strand's hits: windows are sorted as one slot each, merged, then thresholded.
    cand = filter_reference(device, p["resident"], p["qi"], p["rb"], min_votes=min_votes, masked_kmers=masked,
                            max_hits_per_pass=int(per_strand.max()) // 3, max_buckets_per_chunk=5000,
                            scatter_counts=scatter)
    assert cand.n_windows > cand.n_ranges
    assert_candidates_equal(cand.to_host(), want)
    if m is not None:
        assert (m > 0).sum() > 50 and len(want["rs"]) > len(apply_threshold(collapse(p["rs"], p["diag"], 8),
                                                                             p["offsets"], table)["rs"])


def on_device(dev, p, fold=None):
    """The read buffer, q-group index and resident reference of fixture ``p`` built on ``dev``."""
    rb = ReadBuffer(dev, p["codes"], p["offsets"])
    qi = QGroupIndex(dev, rb, p["q"]) if fold is None else QGroupIndex(dev, rb, p["q"], fold=fold)
    return rb, qi, ResidentReference(dev, *table_args(p["ref"], p["q"], p["step"]))


@pytest.mark.parametrize("max_hits", [None, 5000])  # one range of read strands; several
def test_gpu_slot_sort_gives_identical_candidates_on_planted_reads(planted, max_hits):
    """A device with its own memory sorts each slot by a work-group in local memory (sort_slots_local); run
    that path on the CPU device: the raw hits and candidates equal the brute force's."""
    p = planted
    gpu = Device(host_memory=False)
    rb, qi, res = on_device(gpu, p)
    cand = filter_reference(gpu, res, qi, rb, collapse_gap=8, min_votes=1, keep_raw=True,
                            max_hits_per_pass=max_hits)
    assert cand.n_ranges == 1 if max_hits is None else cand.n_ranges > 5
    np.testing.assert_array_equal(cand.raw["rs"], p["rs"])
    np.testing.assert_array_equal(cand.raw["diag"], p["diag"])
    assert_candidates_equal(cand.to_host(), collapse(p["rs"], p["diag"], 8))


@pytest.mark.parametrize("min_votes", [1, "auto"])
def test_gpu_slot_sort_of_read_strands_larger_than_local_memory(repeat_slots, min_votes):
    """The work-group slot sort where read strands have more hits than one local block (sorted in blocks,
    then merged), next to small and empty slots, in one range and in windows below a read strand's hits."""
    p = repeat_slots
    per_strand = np.bincount(p["rs"], minlength=p["rb"].n_rs)
    assert (per_strand > 4 * filtration.SORT_LOCAL).sum() >= 4
    assert ((per_strand > 0) & (per_strand <= filtration.SORT_LOCAL)).sum() >= 20 and (per_strand == 0).sum() >= 4
    gpu = Device(host_memory=False)
    rb, qi, res = on_device(gpu, p)
    table = min_votes_table(min_votes, p["q"], p["step"])
    want = apply_threshold(collapse(p["rs"], p["diag"], 8), p["offsets"], table)
    cand = filter_reference(gpu, res, qi, rb, min_votes=min_votes, keep_raw=True)
    np.testing.assert_array_equal(cand.raw["rs"], p["rs"])
    np.testing.assert_array_equal(cand.raw["diag"], p["diag"])
    assert_candidates_equal(cand.to_host(), want)
    cand = filter_reference(gpu, res, qi, rb, min_votes=min_votes, max_hits_per_pass=int(per_strand.max()) // 3)
    assert cand.n_windows > cand.n_ranges > 1
    assert_candidates_equal(cand.to_host(), want)


def test_gpu_masked_counts_by_work_groups(repeat_slots):
    """A device with its own memory counts each masked value's occurrences with a work-group striding over
    them (count_masked); run that path on the CPU device, with values of hundreds of occurrences: the counts
    per read strand and the thresholds they lower equal the brute force's."""
    p = repeat_slots
    text, rs_start, pos_rs = ref_text(p["codes"], p["offsets"])
    g, _ = ref_qgrams(text, rs_start, pos_rs, p["q"])
    values, counts = np.unique(g, return_counts=True)
    pick = np.random.default_rng(7).random(len(values)) < 0.2
    pick[np.argmax(counts)] = True  # the most frequent value among them
    masked = values[pick].astype(np.uint32)
    assert counts[pick].max() > 4 * filtration.MASKED_GROUP  # several strides of a group
    m = masked_per_strand(p["codes"], p["offsets"], p["q"], masked)
    gpu = Device(host_memory=False)
    rb, qi, res = on_device(gpu, p)
    table = min_votes_table("auto", p["q"], p["step"])
    cand = filter_reference(gpu, res, qi, rb, masked_kmers=masked)
    np.testing.assert_array_equal(cand.masked_per_rs.get()[: rb.n_rs], m)
    assert_candidates_equal(cand.to_host(), apply_threshold(collapse(p["rs"], p["diag"], 8), p["offsets"], table, m))


# ---------------------------------------------------------------- votes threshold

def test_votes_threshold_values():
    # The brief's examples, q = 16, step 1, gap 8.
    assert [(guaranteed_errors(n, 16), votes_threshold(n, 16)) for n in (100, 101, 150)] == [(5, 5), (5, 6), (8, 7)]
    for q in (11, 16):
        for s in (1, 2, 3, 4):
            for n in range(0, 1025):
                e = guaranteed_errors(n, q, s)
                # Pigeonhole: e edits leave e + 1 pieces with n - e bases or more; one of them holds q + s - 1
                # bases (so a sampled q-gram) iff n - e > (e + 1) (q + s - 2), i.e. n >= (e + 1) (q + s - 1).
                assert n >= (e + 1) * (q + s - 1) and not n >= (e + 2) * (q + s - 1)
                t = votes_threshold(n, q, s)
                assert t >= 1 and (e >= 0 or t == 1)
                if s == 1 and 0 <= e <= 8:
                    assert t == n - q + 1 - q * e  # the plain q-gram lemma at e_g edits
    # Long reads: e_g > gap, the occurrence may split into two candidates (n = 250: e_g = 14, t = ceil(11 / 2)).
    assert votes_threshold(250, 16, 1, collapse_gap=8) == 6 and votes_threshold(250, 16, 1, collapse_gap=14) == 11
    table = min_votes_table("auto", 16, 1)
    # Below q nothing is guaranteed; 16..31 bp: e_g = 0, every q-gram must hit; 32 bp: e_g = 1, one hit.
    assert (table[:16] == 1).all() and list(table[16:33]) == list(range(1, 17)) + [1]
    assert table[100] == 5 and len(table) == 1025
    assert (min_votes_table(None, 16, 1) == table).all() and (min_votes_table(3, 16, 1) == 3).all()
    for bad in (0, -2, 1.5, "x", True):
        with pytest.raises(PeanutError, match="min_votes"):
            min_votes_table(bad, 16, 1)


def plant(rng, genome, n, e, mode, q, allowed=None):
    """A read of exactly n bases copied from ``genome`` with e edits; returns (read, start of the copy), which
    lies where ``allowed`` (bool per genome position) is set, if given.

    modes: "mixed" (random substitutions/insertions/deletions at random places), "spread" (the same kinds,
    evenly spaced, each destroying q q-grams), "drift" (only insertions or only deletions, evenly spaced:
    the diagonal drifts by e), "split" (up to 12 insertions or deletions in a row in the middle, which
    splits the occurrence into two candidates when more than the collapse gap, and substitutions spread over
    the rest), "tight" (substitutions at q - 1, 2q - 1, ...: exactly n - q + 1 - e q q-grams survive)."""
    if mode == "tight":
        kinds = ["S"] * e
    elif mode == "split":
        burst = min(e, 12)
        kinds = [rng.choice(["I", "D"])] * burst + ["S"] * (e - burst)
    elif mode == "drift":
        kinds = [rng.choice(["I", "D"])] * e
    else:
        kinds = list(rng.choice(["S", "I", "D"], e))
    length = n - kinds.count("I") + kinds.count("D")
    if mode == "tight":
        where = [k * q + q - 1 for k in range(e)]
    elif mode == "split":
        mid = length // 2
        others = np.setdiff1d(np.arange(length), np.arange(mid, mid + burst))
        spread = others[np.linspace(0, len(others) - 1, e - burst + 2).astype(int)[1:-1]]
        where = list(range(mid, mid + burst)) + list(spread)
    elif mode in ("spread", "drift"):
        where = list(np.linspace(0, length - 1, e + 2).astype(int)[1:-1])
    else:
        where = list(rng.choice(length, size=e, replace=False))
    assert len(set(where)) == e
    while True:
        start = int(rng.integers(0, len(genome) - length))
        src = genome[start : start + length]
        if (src < 4).all() and (allowed is None or allowed[start]):
            break
    edits = dict(zip(where, rng.permutation(kinds) if mode == "mixed" else kinds))
    read = []
    for i, base in enumerate(src):
        kind = edits.get(i)
        if kind == "S":
            read.append((base + int(rng.integers(1, 4))) % 4)
        elif kind == "I":
            read += [int(rng.integers(0, 4)), base]
        elif kind != "D":
            read.append(base)
    assert len(read) == n
    return np.array(read, np.uint8), start


def planted_reads(rng, contigs, offsets, q, step, n_reads, lo=50, hi=250, modes=("mixed", "spread", "drift"),
                  tight_hi=None, allowed=None):
    """Reads with exactly guaranteed_errors(n) edits, half of them reverse complemented; returns codes,
    offsets and per read (read strand holding the copy, global diagonal of the copy, edits, mode).
    "tight" reads are at most ``tight_hi`` long; with ``allowed`` (bool per position of contig 0), every
    second read starts where it is set."""
    reads, truth = [], []
    for r in range(n_reads):
        mode = modes[r % len(modes)]
        n = int(rng.integers(lo, (min(hi, tight_hi) if mode == "tight" and tight_hi else hi) + 1))
        e = guaranteed_errors(n, q, step)
        c = int(rng.integers(len(contigs)))
        read, start = plant(rng, contigs[c], n, e, mode, q, allowed if r % 2 and c == 0 else None)
        strand = int(rng.integers(2))
        reads.append(revcomp(read) if strand else read)
        truth.append((2 * r + strand, int(offsets[c]) + start, e, mode))
    read_offsets = np.concatenate([[0], np.cumsum([len(x) for x in reads])]).astype(np.int64)
    return np.concatenate(reads).astype(np.uint8), read_offsets, truth


def covering_votes(cand, rs, diag, e, count=False):
    """Largest votes among candidates of read strand rs whose diagonal range meets [diag - e, diag + e]
    (with ``count``: how many there are)."""
    lo, hi = cand["diag_lo"].astype(np.int64), cand["diag_hi"].astype(np.int64)
    on = (cand["rs"] == rs) & (lo <= diag + e) & (hi >= diag - e)
    if count:
        return int(on.sum())
    return int(cand["votes"][on].max()) if on.any() else 0


@pytest.mark.parametrize("q,step,gap", [(16, 1, 8), (16, 1, 2), (12, 1, 8), (16, 2, 8), (12, 3, 4), (16, 4, 8)])
def test_threshold_guarantee_by_brute_force(q, step, gap):
    """Host-only check of the bound behind votes_threshold: reads with exactly e_g edits (random, evenly
    spread, drifting; 40..600 bp) planted in a random genome keep a covering candidate with at least t(n)
    votes; at step 1 the bound is reached exactly (so t(n) + 1 would lose reads)."""
    rng = np.random.default_rng(1000 * q + 10 * step + gap)
    genome = rng.integers(0, 4, 60_000).astype(np.uint8)
    ref = build_reference([genome], q, step, max_occ=10**9)
    modes = ("mixed", "spread", "drift", "split") + (("tight",) if step == 1 else ())
    # Tight reads have e_g <= gap (below that the two-piece bound of long reads applies, which is not tight).
    codes, offsets, truth = planted_reads(rng, [genome], ref["offsets"], q, step, 500, lo=40, hi=600, modes=modes,
                                          tight_hi=(gap + 2) * q - 1)
    rs, diag = brute_force_hits(ref, codes, offsets, q)
    cand = collapse(rs, diag, gap)
    lengths = np.diff(offsets)
    tight = split = 0
    for r, (strand_rs, true_diag, e, mode) in enumerate(truth):
        t = votes_threshold(int(lengths[r]), q, step, gap)
        v = covering_votes(cand, strand_rs, true_diag, e)
        assert v >= t, (r, int(lengths[r]), e, mode, v, t)
        if mode == "tight":
            assert e <= gap and v == t
            tight += 1
        split += mode == "split" and covering_votes(cand, strand_rs, true_diag, e, count=True) > 1
    assert tight == (100 if step == 1 else 0) and split >= 10


@pytest.mark.slow
def test_min_votes_matches_numpy(device, planted):
    p = planted
    full = collapse(p["rs"], p["diag"], 8)
    window = int(np.bincount(p["rs"]).max()) // 4
    for min_votes in (2, 7, "auto", None):
        table = min_votes_table(min_votes, p["q"], p["step"], 8)
        want = apply_threshold(full, p["offsets"], table)
        cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=8, min_votes=min_votes)
        assert_candidates_equal(cand.to_host(), want)
        assert cand.n_collapsed == len(full["rs"]) > cand.n == len(want["rs"]) > 0
        if min_votes not in (7, "auto"):
            continue
        # Strands with more hits than a window: the threshold applies after the windows are merged.
        cand = filter_reference(device, p["resident"], p["qi"], p["rb"], collapse_gap=8, min_votes=min_votes,
                                max_hits_per_pass=window, max_buckets_per_chunk=997)
        assert cand.n_windows > cand.n_ranges
        assert_candidates_equal(cand.to_host(), want)


# ---------------------------------------------------------------- real genomes and reads

def read_fasta_codes(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    seqs, cur = [], []
    with opener(path, "rb") as f:
        for line in f:
            if line.startswith(b">"):
                if cur:
                    seqs.append(CODE[np.frombuffer(b"".join(cur), np.uint8)])
                cur = []
            else:
                cur.append(line.strip())
    if cur:
        seqs.append(CODE[np.frombuffer(b"".join(cur), np.uint8)])
    return seqs


def check_real(device, contigs, codes, offsets, q, step, max_occ, gap=8, fold=None):
    ref = build_reference(contigs, q, step, max_occ)
    rb = ReadBuffer(device, codes, offsets)
    qi = QGroupIndex(device, rb, q, fold=fold)
    res = ResidentReference(device, *table_args(ref, q, step))
    cand = filter_reference(device, res, qi, rb, collapse_gap=gap, min_votes=1, keep_raw=True)
    rs, diag = brute_force_hits(ref, codes, offsets, q)
    np.testing.assert_array_equal(cand.raw["rs"], rs)
    np.testing.assert_array_equal(cand.raw["diag"], diag)
    assert_candidates_equal(cand.to_host(), collapse(rs, diag, gap))
    return cand


@pytest.mark.parametrize("fold", [0, 1])
def test_sarscov2_real_reads(device, shared_data, fold):
    genome = read_fasta_codes(shared_data / "sarscov2" / "MT192765.1.fasta")
    c1, o1 = read_fastq_codes(shared_data / "sarscov2" / "ERR5069949_100pairs_R1.fastq.gz", 100)
    c2, o2 = read_fastq_codes(shared_data / "sarscov2" / "ERR5069949_100pairs_R2.fastq.gz", 100)
    codes, offsets = np.concatenate([c1, c2]), np.concatenate([o1, o2[1:] + o1[-1]])
    cand = check_real(device, genome, codes, offsets, q=12, step=1, max_occ=1000, fold=fold)
    # Nearly every read has a hit, on one of its two strands.
    assert len(np.unique(cand.to_host()["rs"] // 2)) > 180


@pytest.fixture(scope="session")
def chr20_codes(shared_data):
    return read_fasta_codes(shared_data / "human" / "GRCh37_chr20.fa.gz")[0]


@pytest.mark.parametrize("fold", [0, 1])
def test_chr20_slice_real_reads(device, shared_data, chr20_codes, fold):
    region = chr20_codes[9_950_000:10_150_000]
    codes, offsets = read_fastq_codes(shared_data / "human" / "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz", 1500)
    cand = check_real(device, [region], codes, offsets, q=16, step=2, max_occ=100, fold=fold)
    assert cand.n_raw_hits > 1500 * 20


def test_from_index_matches_brute_force(device, shared_data, sarscov2_index):
    """The HDF5 index of peanut_py.reference, uploaded with from_index, filtered against real reads."""
    from peanut_py.reference import ReferenceIndex

    with ReferenceIndex(sarscov2_index) as ri:
        res = ResidentReference.from_index(device, ri)
        positions = ri.positions()
        kmers, first = np.unique(ri.qgram_values(positions), return_index=True)
        ref = dict(kmers=kmers, kmer_starts=np.append(first, len(positions)), positions=positions)
        np.testing.assert_array_equal(res.buckets.get(), bucket_table(kmers, ref["kmer_starts"], ri.q, ri.bucket_bits))
        np.testing.assert_array_equal(res.packed.get(), ri.packed())
        np.testing.assert_array_equal(res.ambiguous.get(), ri.ambiguity_bitmap())
        np.testing.assert_array_equal(res.contig_ends.get(), ri.offsets + ri.lengths)
        q = ri.q
    codes, offsets = read_fastq_codes(shared_data / "sarscov2" / "ERR5069949_100pairs_R1.fastq.gz", 100)
    rb = ReadBuffer(device, codes, offsets)
    cand = filter_reference(device, res, QGroupIndex(device, rb, q), rb, collapse_gap=8, min_votes=1, keep_raw=True)
    rs, diag = brute_force_hits(ref, codes, offsets, q)
    np.testing.assert_array_equal(cand.raw["rs"], rs)
    np.testing.assert_array_equal(cand.raw["diag"], diag)
    assert_candidates_equal(cand.to_host(), collapse(rs, diag, 8))
    assert len(np.unique(rs // 2)) > 90


@pytest.mark.parametrize("step", [1, 2])
def test_votes_threshold_keeps_planted_reads_on_chr20(device, chr20_codes, step):
    """The guarantee on a real genome, through the device: reads of 50..250 bp with exactly e_g(n) edits
    (mixed, spread, drifting, split), planted in GRCh37 chr20 9.9-10.2 Mb (windows without N), against an
    unmasked q = 16 table, keep a candidate covering the true diagonal (+-e) under the automatic threshold;
    the device candidates equal the NumPy collapse with the same threshold."""
    region = chr20_codes[9_900_000:10_200_000]
    q = 16
    rng = np.random.default_rng(20 + step)
    ref = build_reference([region], q, step, max_occ=10**9)
    codes, offsets, truth = planted_reads(rng, [region], ref["offsets"], q, step, 300,
                                          modes=("mixed", "spread", "drift", "split"))
    rb = ReadBuffer(device, codes, offsets)
    res = ResidentReference(device, *table_args(ref, q, step))
    cand = filter_reference(device, res, QGroupIndex(device, rb, q), rb)
    got = cand.to_host()
    rs, diag = brute_force_hits(ref, codes, offsets, q)
    assert_candidates_equal(got, apply_threshold(collapse(rs, diag, 8), offsets, min_votes_table(None, q, step)))
    lengths = np.diff(offsets)
    for r, (strand_rs, true_diag, e, mode) in enumerate(truth):
        t = votes_threshold(int(lengths[r]), q, step)
        assert covering_votes(got, strand_rs, true_diag, e) >= t, (r, int(lengths[r]), e, mode)
    # The threshold removes candidates (chance hits of single q-grams, repeats).
    assert cand.n_collapsed - cand.n > 100


def test_masked_qgrams_lower_the_threshold(device, chr20_codes):
    """Masking repetitive q-grams (here: more than 2 occurrences in chr20 9.9-10.2 Mb) removes hits of an
    occurrence; with the masked values known, the automatic threshold of a read strand drops by its number of
    masked q-grams, and planted reads with e_g edits (half of them at masked q-grams) keep a covering
    candidate whenever masking leaves any guarantee (t(n) > masked q-grams), and otherwise whenever their
    occurrence still has a raw hit (brute force); without the adjustment some of them lose it.  Device
    candidates equal the NumPy reference."""
    region = chr20_codes[9_900_000:10_200_000]
    q, step = 16, 1
    rng = np.random.default_rng(66)
    ref = build_reference([region], q, step, max_occ=2)
    assert len(ref["masked"]) > 500
    # Every second read starts within 40 bases before a masked q-gram of the region.
    win = np.lib.stride_tricks.sliding_window_view(region, q)
    value = (np.minimum(win, 3).astype(np.uint64) * (np.uint64(4) ** np.arange(q - 1, -1, -1, dtype=np.uint64))).sum(1)
    is_masked = np.isin(value, ref["masked"].astype(np.uint64)) & (win < 4).all(1)
    allowed = np.convolve(np.r_[is_masked, np.zeros(q - 1, bool)], np.ones(40), mode="full")[39:39 + len(region)] > 0
    codes, offsets, truth = planted_reads(rng, [region], ref["offsets"], q, step, 400,
                                          modes=("mixed", "spread", "drift", "split"), allowed=allowed)
    rb = ReadBuffer(device, codes, offsets)
    res = ResidentReference(device, *table_args(ref, q, step))
    qi = QGroupIndex(device, rb, q)
    cand = filter_reference(device, res, qi, rb, masked_kmers=ref["masked"])
    got = cand.to_host()
    rs, diag = brute_force_hits(ref, codes, offsets, q)
    m = masked_per_strand(codes, offsets, q, ref["masked"])
    table = min_votes_table(None, q, step)
    assert_candidates_equal(got, apply_threshold(collapse(rs, diag, 8), offsets, table, m))
    # A fixed threshold ignores the masked q-grams.
    fixed = filter_reference(device, res, qi, rb, min_votes=4, masked_kmers=ref["masked"]).to_host()
    assert_candidates_equal(fixed, apply_threshold(collapse(rs, diag, 8), offsets, np.full_like(table, 4)))
    plain = filter_reference(device, res, qi, rb, min_votes="auto", masked_kmers=[]).to_host()
    lengths = np.diff(offsets)
    checked = rescued = heavy = heavy_without_hits = 0
    for r, (strand_rs, true_diag, e, mode) in enumerate(truth):
        t = votes_threshold(int(lengths[r]), q, step)
        if m[strand_rs] >= t:
            # Masking may have removed every hit of the occurrence; the threshold is then 1, so the
            # occurrence keeps a candidate exactly when a raw hit of it is left.
            on = (rs == strand_rs) & (np.abs(diag.astype(np.int64) - true_diag) <= e)
            assert (covering_votes(got, strand_rs, true_diag, e) > 0) == on.any(), (r, mode)
            heavy += 1
            heavy_without_hits += not on.any()
            rescued += on.any() and covering_votes(plain, strand_rs, true_diag, e) == 0
            continue
        assert covering_votes(got, strand_rs, true_diag, e) >= max(1, t - m[strand_rs]), (r, mode)
        checked += 1
        rescued += covering_votes(plain, strand_rs, true_diag, e) == 0
    # Without the adjustment some of these reads lose their candidate; both cases of masking occur.
    assert checked > 250 and (m > 0).sum() > 100 and rescued >= 5
    assert heavy - heavy_without_hits >= 50 and heavy_without_hits >= 1, (heavy, heavy_without_hits)
