"""Validation: banded Myers edit distance on the device against a plain dynamic-programming reference.

The reference below is the definition: semi-global unit-cost edit distance of the whole read strand against
the reference, only over cells (i, j) with diagonal j - i in the band and reference columns in the contig;
the end is the leftmost column of row n with the minimal distance, the start the rightmost band start whose
alignment to that end costs that distance (computed by a backward dynamic program to the fixed end).
"""
import bisect
import gzip
import itertools
import random
from collections import Counter
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pyopencl.array as cla
import pytest

from device_inputs import COMPLEMENT, read_buffer
from helpers import require_shared_data
from peanut_py.errors import PeanutError
from peanut_py.validation import (
    NO_ALIGNMENT,
    ValidatedHits,
    max_band,
    max_errors,
    max_errors_table,
    validate_candidates,
    validate_hits,
)

CONTIG_GAP = 1024
INF = 1 << 40


# ---------------------------------------------------------------------------------------------------------
# inputs in the shapes of resident.py / qgroup.py / filtration.py (host building and packing done here; the
# read buffer is device_inputs.read_buffer)


class Genome:
    """Contigs in padded global coordinates: codes (0..3, 0 in gaps) and the ambiguity flag per base."""

    def __init__(self, contigs):
        offsets, ends, pos = [], [], CONTIG_GAP
        for seq in contigs:
            offsets.append(pos)
            ends.append(pos + len(seq))
            pos = (pos + len(seq) + CONTIG_GAP + 15) // 16 * 16
        total = pos + 64
        self.codes = np.zeros(total, dtype=np.uint8)
        self.amb = np.ones(total, dtype=bool)  # gaps count as ambiguous; the kernel never reads them anyway
        for seq, o in zip(contigs, offsets):
            seq = np.asarray(seq, dtype=np.uint8)
            self.codes[o : o + len(seq)] = np.where(seq < 4, seq, 0)
            self.amb[o : o + len(seq)] = seq >= 4
        self.offsets = np.array(offsets, dtype=np.int64)
        self.ends = np.array(ends, dtype=np.int64)

    def resident(self, queue):
        total = len(self.codes)
        words = np.zeros((total + 15) // 16 * 16, dtype=np.uint32)
        words[:total] = self.codes
        packed = (words.reshape(-1, 16) << (2 * np.arange(16, dtype=np.uint32))).sum(axis=1, dtype=np.uint64)
        bits = np.zeros((total + 31) // 32 * 32, dtype=np.uint64)
        bits[:total] = self.amb
        amb = (bits.reshape(-1, 32) << np.arange(32, dtype=np.uint64)).sum(axis=1)
        return SimpleNamespace(
            packed=cla.to_device(queue, packed.astype(np.uint32)),
            ambiguous=cla.to_device(queue, amb.astype(np.uint32)),
            contig_offsets=cla.to_device(queue, self.offsets.astype(np.uint32)),
            contig_ends=cla.to_device(queue, self.ends.astype(np.uint32)),
            n_contigs=len(self.offsets),
        )


def candidate_set(queue, rs, diag_lo, diag_hi):
    order = np.lexsort((np.asarray(diag_lo), np.asarray(rs)))
    arrays = {
        name: np.asarray(a, dtype=np.uint32)[order]
        for name, a in (("rs", rs), ("diag_lo", diag_lo), ("diag_hi", diag_hi))
    }
    dev = SimpleNamespace(
        n=len(order),
        votes=cla.to_device(queue, np.ones(max(len(order), 1), np.uint32)),
        **{k: cla.to_device(queue, v if len(v) else np.zeros(1, np.uint32)) for k, v in arrays.items()},
    )
    return dev, arrays


# ---------------------------------------------------------------------------------------------------------
# the reference: plain banded dynamic programming


def band_of(n, lo, hi, min_identity, words):
    """(k, bands): the diagonal bands [d_lo, d_hi] the kernel validates a candidate in. One band of the
    candidate's diagonals and k on either side when it fits the cap; else tiles of the candidate's diagonals,
    each with its k neighbours on either side (one band only when even a single diagonal's does not fit: then
    the band's centre, shrunk to the cap)."""
    k = max_errors(n, min_identity)
    d_lo, d_hi = lo - k, hi + k
    cap = max_band(words)
    if d_hi - d_lo + 1 <= cap:
        return k, [(d_lo, d_hi)]
    span = cap - 2 * k - 1
    if span < 0:
        d_lo += (d_hi - d_lo + 1 - cap) // 2
        return k, [(d_lo, d_lo + cap - 1)]
    return k, [(t - k, min(hi, t + span) + k) for t in range(lo, hi + 1, span + 1)]


def reference_one(genome, strand, lo, hi, min_identity, words, stats=None):
    """(dist, start, end, keep) of one candidate by full dynamic programming inside the clipped band (the
    tile with the least distance, ties to the leftmost end, where the kernel tiles a wide candidate).

    ``stats`` (a Counter) records which situations the candidate exercises, so tests can check coverage.
    """
    n = len(strand)
    k, bands = band_of(n, lo, hi, min_identity, words)
    i = bisect.bisect_right(genome.offsets.tolist(), hi + n - 1) - 1
    if n == 0 or i < 0:
        return NO_ALIGNMENT, 0, 0, 0
    c_start, c_end = int(genome.offsets[i]), int(genome.ends[i])
    if stats is not None:
        d_lo, d_hi = bands[0][0], bands[-1][1]
        stats["capped band"] += d_hi - d_lo < hi - lo + 2 * k
        stats["tiled band"] += len(bands) > 1
        stats["band over 63"] += max(b - a for a, b in bands) + 1 > 63
        stats["clipped at contig start"] += c_start > d_lo
        stats["clipped at contig end"] += c_end < d_hi + n
        stats["ambiguous in window"] += bool(genome.amb[max(c_start, d_lo):min(c_end, d_hi + n)].any())
        stats["read with N"] += bool((np.asarray(strand) == 4).any())
        stats["wide candidate"] += hi > lo
    best = None
    for d_lo, d_hi in bands:
        found = reference_band(genome, strand, d_lo, d_hi, c_start, c_end)
        if found is not None and (best is None or found[:2] < best[:2]):
            best = found
    if best is None:
        return NO_ALIGNMENT, 0, 0, 0
    dist, end, d_lo, d_hi, j_lo = best
    if dist > k:
        return int(dist), 0, 0, 0
    return int(dist), reference_start(genome, strand, d_lo, d_hi, j_lo, end, dist), end, 1


def _cost(genome, read, n):
    def cost(j):  # cost of rows 1..n against reference base j - 1 (column j)
        g = j - 1
        if genome.amb[g]:
            return np.ones(n, np.int64)
        return ((read != genome.codes[g]) | (read == 4)).astype(np.int64)
    return cost


def reference_band(genome, strand, d_lo, d_hi, c_start, c_end):
    """The forward pass in one band clipped to the contig: (least distance in row n, its leftmost end column,
    d_lo, d_hi, first column), or None when row n has no cell in the band."""
    n = len(strand)
    j_lo, j_hi = max(c_start, d_lo), min(c_end, d_hi + n)
    if j_lo > d_hi or j_lo > j_hi:
        return None
    rows = np.arange(n + 1, dtype=np.int64)
    read = np.asarray(strand, dtype=np.int64)
    cost = _cost(genome, read, n)
    # forward: E[i][j] = best alignment of read[:i] ending at column j
    E = {}
    prev = None
    for j in range(j_lo, j_hi + 1):
        a = np.full(n + 1, INF, np.int64)
        if prev is not None:
            a[1:] = prev[:-1] + cost(j)
            a = np.minimum(a, prev + 1)
        a[0] = 0
        mask = (j - rows >= d_lo) & (j - rows <= d_hi)
        a[~mask] = INF
        col = np.minimum.accumulate(a - rows) + rows  # vertical moves
        col[~mask] = INF
        col[col >= INF] = INF
        E[j] = col
        prev = col
    ends = [j for j in range(j_lo, j_hi + 1) if E[j][n] < INF]
    if not ends:
        return None
    dist = min(E[j][n] for j in ends)
    return int(dist), min(j for j in ends if E[j][n] == dist), d_lo, d_hi, j_lo


def reference_start(genome, strand, d_lo, d_hi, j_lo, end, dist):
    """The rightmost start of an alignment of cost ``dist`` ending at column ``end`` inside the band."""
    n = len(strand)
    rows = np.arange(n + 1, dtype=np.int64)
    read = np.asarray(strand, dtype=np.int64)
    cost = _cost(genome, read, n)
    # backward: B[i][j] = cheapest path from (i, j) to (n, end) inside the band
    nxt = None
    starts = []
    for j in range(end, j_lo - 1, -1):
        a = np.full(n + 1, INF, np.int64)
        if nxt is None:
            a[n] = 0
        else:
            a[:n] = nxt[1:] + cost(j + 1)
            a = np.minimum(a, nxt + 1)
        mask = (j - rows >= d_lo) & (j - rows <= d_hi)
        a[~mask] = INF
        col = (np.minimum.accumulate((a + rows)[::-1]))[::-1] - rows  # vertical moves downwards
        col[~mask] = INF
        col[col >= INF] = INF
        if col[0] == dist:
            starts.append(j)
        nxt = col
    assert starts, "an optimal alignment must start somewhere"
    return max(starts)


def reference_all(genome, host_reads, cands, min_identity, words, stats=None):
    out = [
        reference_one(genome, host_reads.strands[rs], lo, hi, min_identity, words, stats)
        for rs, lo, hi in zip(cands["rs"].tolist(), cands["diag_lo"].tolist(), cands["diag_hi"].tolist())
    ]
    return np.array(out, dtype=np.int64).reshape(-1, 4)


def device_all(device, res, rb, cands, min_identity, words, max_words=4):
    """``words=None``: each candidate with the fewest words its band needs (at most ``max_words``), which
    must equal the reference capped at ``max_words``."""
    dist, start, end, keep = validate_candidates(device, res, rb, cands, min_identity, words=words,
                                                 max_words=max_words)
    return np.stack([dist.get(), start.get(), end.get(), keep.get()], axis=1).astype(np.int64)


def assert_same(dev, ref, cands, strands):
    bad = np.nonzero((dev != ref).any(axis=1))[0]
    if len(bad):
        i = bad[0]
        raise AssertionError(
            f"{len(bad)} of {len(ref)} candidates differ; first #{i}: rs={cands['rs'][i]} "
            f"diag={cands['diag_lo'][i]}..{cands['diag_hi'][i]} n={len(strands[cands['rs'][i]])} "
            f"device={dev[i].tolist()} reference={ref[i].tolist()}"
        )


# ---------------------------------------------------------------------------------------------------------


def levenshtein(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        new = [i]
        for j, y in enumerate(b, 1):
            new.append(min(row[j - 1] + (x != y or x == 4), row[j] + 1, new[j - 1] + 1))
        row = new
    return row[-1]


def test_reference_matches_brute_force_definition():
    """Without band limits the reference is min over all substrings, with the documented tie-breaking."""
    rng = random.Random(5)
    for _ in range(40):
        ref = [rng.randrange(4) for _ in range(rng.randrange(8, 16))]
        read = [rng.choice([0, 0, 1, 2, 3, 4]) for _ in range(rng.randrange(1, 7))]
        genome = Genome([ref])
        o = int(genome.offsets[0])
        pairs = {(s, e): levenshtein(read, ref[s:e]) for s in range(len(ref) + 1) for e in range(s, len(ref) + 1)}
        best = min(pairs.values())
        end = min(e for (s, e), d in pairs.items() if d == best)
        start = max(s for (s, e), d in pairs.items() if d == best and e == end)
        # a band wide enough for everything: identity 0 gives k = n
        dist, s, e, keep = reference_one(genome, read, o - 20, o + 20, 0.0, words=4)
        assert (dist, s - o, e - o, keep) == (best, start, end, 1)


def test_max_errors_is_exact():
    assert max_errors(100, 0.8) == 20
    assert max_errors(101, 0.8) == 20
    assert max_errors(10, 0.9) == 1
    assert max_errors(20, 0.95) == 1
    assert max_errors(3, 0.7) == 0  # 2/3 < 0.7
    assert max_errors(50, 1.0) == 0 and max_errors(50, 0.0) == 50
    for mi in (0.7, 0.8, 0.85, 0.9, 0.95, 0.99):
        f = Fraction(str(mi))
        table = max_errors_table(400, mi)
        for n in range(1, 401):
            k = max_errors(n, mi)
            assert Fraction(n - k, n) >= f and (k == n or Fraction(n - k - 1, n) < f)
            assert table[n] == k
    with pytest.raises(PeanutError):
        max_errors(100, 1.5)


def mutate(rng, seq, n_err, n_alphabet_err=0):
    """Plant n_err random substitutions / insertions / deletions (and Ns) into seq (list of codes)."""
    seq = list(seq)
    for _ in range(n_err):
        p = rng.randrange(len(seq))
        kind = rng.random()
        if kind < 0.5:
            seq[p] = (seq[p] + rng.randrange(1, 4)) % 4
        elif kind < 0.75:
            seq.insert(p, rng.randrange(4))
        elif len(seq) > 1:
            del seq[p]
    for _ in range(n_alphabet_err):
        seq[rng.randrange(len(seq))] = 4
    return seq


def random_genome(rng, sizes, n_amb=30):
    contigs = []
    for size in sizes:
        c = [rng.randrange(4) for _ in range(size)]
        for _ in range(n_amb):  # scattered ambiguous bases and a short N run
            c[rng.randrange(size)] = 4
        p = rng.randrange(size - 10)
        c[p : p + 6] = [4] * 6
        contigs.append(c)
    return Genome(contigs), contigs


def random_case(rng, genome, contigs, n_reads, lengths, max_err_rate, span_max):
    """Reads taken from the contigs (some overhanging contig ends) with planted errors, plus candidates."""
    reads, rs, lo, hi = [], [], [], []
    for r in range(n_reads):
        ci = rng.randrange(len(contigs))
        contig, off = contigs[ci], int(genome.offsets[ci])
        n = rng.choice(lengths)
        where = rng.random()
        if where < 0.15:
            s = rng.randrange(-n // 8, 3)  # near the contig start, maybe overhanging
        elif where < 0.3:
            s = len(contig) - n + rng.randrange(-3, n // 8)  # near the end
        else:
            s = rng.randrange(0, len(contig) - n)
        piece = [contig[p] if 0 <= p < len(contig) else rng.randrange(4) for p in range(s, s + n)]
        strand_seq = mutate(rng, piece, rng.randrange(int(n * max_err_rate) + 1), rng.randrange(3))
        strand = rng.randrange(2)
        read = strand_seq if strand == 0 else COMPLEMENT[np.array(strand_seq[::-1], np.uint8)].tolist()
        reads.append(read)
        true_diag = off + s
        for cand in range(rng.randrange(1, 4)):
            if cand == 2:  # the other strand, usually junk
                d, this_rs = true_diag, 2 * r + 1 - strand
            else:
                d, this_rs = true_diag + rng.randrange(-6, 7), 2 * r + strand
            width = rng.randrange(span_max + 1) if rng.random() < 0.5 else 0
            rs.append(this_rs)
            lo.append(max(0, d - rng.randrange(width + 1)))
            hi.append(lo[-1] + width)
    return reads, rs, lo, hi


def run_case(device, seed, n_reads, lengths, max_err_rate, span_max, min_identity, words_list, contig_sizes, expect=()):
    rng = random.Random(seed)
    genome, contigs = random_genome(rng, contig_sizes)
    reads, rs, lo, hi = random_case(rng, genome, contigs, n_reads, lengths, max_err_rate, span_max)
    q = device.queue
    res = genome.resident(q)
    rb, host = read_buffer(q, reads)
    cands, arrays = candidate_set(q, rs, lo, hi)
    stats = Counter()
    for words in words_list:
        # ("auto", m): per-candidate word classes capped at m words, against the reference capped there
        cap = words[1] if isinstance(words, tuple) else words
        ref = reference_all(genome, host, arrays, min_identity, cap, stats)
        dev = device_all(device, res, rb, cands, min_identity, None if isinstance(words, tuple) else words, cap)
        assert_same(dev, ref, arrays, host.strands)
        stats["kept"] += int(ref[:, 3].sum())
        stats["dropped"] += int((ref[:, 3] == 0).sum())
    stats["odd strand"] = int((arrays["rs"] % 2).sum())
    for situation in ("kept", "dropped", "odd strand", "clipped at contig start", "clipped at contig end",
                      "ambiguous in window", "read with N", "wide candidate") + tuple(expect):
        assert stats[situation] > 0, f"the case should exercise: {situation} ({dict(stats)})"
    return genome, res, rb, host, cands, arrays


def test_short_reads_one_word(device):
    run_case(device, 1, 60, [30, 40, 64, 100], 0.12, 8, 0.8, [1], [3000, 700])


def test_long_reads_many_words_and_capped_bands(device):
    """250-300 bp at identity 0.8: k = 50..60, bands of 101..221 diagonals; words=1 and 2 cap them; per
    candidate word classes (the default) give the same as one size for all."""
    run_case(device, 2, 22, [250, 300], 0.1, 100, 0.8, [4, 2, 1, ("auto", 4), ("auto", 2)], [4000],
             expect=["capped band", "tiled band", "band over 63"])


def test_word_classes_mix_every_size(device):
    """Short and long reads with narrow and wide candidates in one batch need 1, 2, 3 and 4 words; each class
    runs with its own kernel and the results equal the reference (capped at 4 words)."""
    genome, res, rb, host, cands, arrays = run_case(device, 11, 60, [40, 100, 250], 0.08, 240, 0.8,
                                                    [("auto", 4)], [5000, 3000], expect=["tiled band"])
    from peanut_py.validation import words_for_band

    lengths = np.diff(rb.rs_start_host.astype(np.int64))[arrays["rs"]]
    needed = [words_for_band(int(hi - lo) + 2 * max_errors(int(n), 0.8) + 1)
              for lo, hi, n in zip(arrays["diag_lo"], arrays["diag_hi"], lengths)]
    assert {1, 2, 3, 4} <= set(min(w, 4) for w in needed)


def test_mixed_lengths_identity_09(device):
    run_case(device, 3, 40, [31, 77, 150, 213], 0.1, 30, 0.9, [2], [2500, 1500, 400])


def test_indels_at_the_band_edge(device):
    """A k-base deletion (or insertion) drifts the path exactly to the band edge; k + 1 leaves it."""
    rng = random.Random(7)
    genome, contigs = random_genome(rng, [2000], n_amb=0)
    off = int(genome.offsets[0])
    reads, rs, lo, hi = [], [], [], []
    for r, (n, kind, extra) in enumerate(itertools.product([40, 100, 200], ["del", "ins"], [0, 1])):
        k = max_errors(n, 0.9)
        s = 500 + 10 * r
        if kind == "del":  # the reference has k (+1) extra bases in the middle of the read
            piece = contigs[0][s : s + n // 2] + contigs[0][s + n // 2 + k + extra : s + n + k + extra]
        else:
            piece = contigs[0][s : s + n // 2] + [rng.randrange(4) for _ in range(k + extra)]
            piece += contigs[0][s + n // 2 : s + n - k - extra]
        reads.append(piece)
        for d_lo, d_hi in ((s, s), (s - 3, s), (s, s + 2)):
            rs.append(2 * r)
            lo.append(off + d_lo)
            hi.append(off + d_hi)
    q = device.queue
    res, (rb, host) = genome.resident(q), read_buffer(q, reads)
    cands, arrays = candidate_set(q, rs, lo, hi)
    for words in (1, 2):
        ref = reference_all(genome, host, arrays, 0.9, words)
        assert_same(device_all(device, res, rb, cands, 0.9, words), ref, arrays, host.strands)
    # exactly k deletions on a point candidate: the path runs along the band edge and is found at cost k
    k100 = max_errors(100, 0.9)
    r100 = list(itertools.product([40, 100, 200], ["del", "ins"], [0, 1])).index((100, "del", 0))
    i = next(i for i in range(len(rs)) if arrays["rs"][i] == 2 * r100 and arrays["diag_lo"][i] == arrays["diag_hi"][i])
    assert tuple(ref[i][[0, 3]]) == (k100, 1)


def test_wide_candidate_in_a_satellite_finds_the_exact_copy_off_its_centre(device):
    """A cluster chained through a short-period repeat (a GGAAT satellite with rare variants, as in human
    satellites) spans more diagonals than one band holds. The read matches one place exactly, near the
    candidate's edge, and the satellite's other places with a mismatch or more: validation in tiles finds the
    exact copy, where the band's centre alone (the kernel before tiles) finds only a one-mismatch copy."""
    rng = random.Random(29)
    unit = [2, 2, 0, 0, 3]  # GGAAT
    sat = unit * 120
    for p in rng.sample(range(len(sat)), 14):  # sparse variants at random places: the copies differ
        sat[p] = 1
    flank = [rng.randrange(4) for _ in range(400)]
    genome, contigs = Genome([flank + sat + flank]), [flank + sat + flank]
    off = int(genome.offsets[0])
    truth = 400 + 470  # the exact copy, off the candidate's centre
    read = contigs[0][truth : truth + 100]
    text = "".join(map(str, contigs[0]))
    assert text.count("".join(map(str, read))) == 1  # the only exact copy
    lo, hi = off + 400, off + 400 + 480  # the chained cluster: 481 diagonals, with k = 20 a band of 521
    q = device.queue
    res, (rb, host) = genome.resident(q), read_buffer(q, [read])
    cands, arrays = candidate_set(q, [0], [lo], [hi])
    ref = reference_all(genome, host, arrays, 0.8, 4)
    assert_same(device_all(device, res, rb, cands, 0.8, None), ref, arrays, host.strands)
    dist, start, end, keep = ref[0]
    assert (dist, keep, start, end) == (0, 1, off + truth, off + truth + 100)
    # the band's centre alone (255 diagonals around the middle) does not reach the exact copy's diagonal
    k = max_errors(100, 0.8)
    centre_lo = lo - k + (hi - lo + 2 * k + 1 - max_band(4)) // 2
    assert not centre_lo <= off + truth <= centre_lo + max_band(4) - 1
    best_in_centre = reference_band(genome, read, centre_lo, centre_lo + max_band(4) - 1, off, off + len(contigs[0]))
    assert best_in_centre[0] >= 1


def test_compaction_keeps_candidate_order_and_filters_identity(device):
    genome, res, rb, host, cands, arrays = run_case(
        device, 4, 50, [50, 100, 120], 0.25, 10, 0.8, [1], [3000, 3000]
    )
    for mi in (0.8, 0.9, 0.95):
        ref = reference_all(genome, host, arrays, mi, 1)
        hits = validate_hits(device, res, rb, cands, min_identity=mi)
        assert isinstance(hits, ValidatedHits)
        h = hits.to_host()
        keep = np.nonzero(ref[:, 3])[0]
        assert hits.n == len(keep) > 0
        np.testing.assert_array_equal(h["candidate"], keep)
        np.testing.assert_array_equal(h["rs"], arrays["rs"][keep])
        np.testing.assert_array_equal(h["dist"], ref[keep, 0])
        np.testing.assert_array_equal(h["ref_start"], ref[keep, 1])
        np.testing.assert_array_equal(h["ref_end"], ref[keep, 2])
        lengths = np.diff(rb.rs_start_host.astype(np.int64))[h["rs"]]
        assert ((lengths - h["dist"]) / lengths >= mi - 1e-12).all()
        assert (np.diff(h["rs"].astype(np.int64)) >= 0).all()
        failed = np.nonzero(ref[:, 3] == 0)[0]
        assert all(
            d == NO_ALIGNMENT or (n - d) / n < mi
            for d, n in zip(ref[failed, 0], np.diff(rb.rs_start_host.astype(np.int64))[arrays["rs"][failed]])
        )


def test_no_candidates(device):
    rng = random.Random(9)
    genome, _ = random_genome(rng, [500])
    rb, _ = read_buffer(device.queue, [[0, 1, 2, 3] * 10])
    cands, _ = candidate_set(device.queue, [], [], [])
    hits = validate_hits(device, genome.resident(device.queue), rb, cands)
    assert hits.n == 0 and all(len(v) == 0 for v in hits.to_host().values())


# ---------------------------------------------------------------------------------------------------------
# real reads against the real reference

REGION = (9_900_000, 10_200_000)


@pytest.fixture(scope="session")
def chr20_region():
    fa = require_shared_data("human", "GRCh37_chr20.fa.gz")
    lut = np.full(256, 4, dtype=np.uint8)
    for i, c in enumerate(b"ACGT"):
        lut[c] = lut[c + 32] = i
    chunks, pos = [], 0
    with gzip.open(fa, "rb") as f:
        assert f.readline().startswith(b">20")
        for line in f:
            line = line.rstrip()
            if pos + len(line) > REGION[0]:
                chunks.append(line)
            pos += len(line)
            if pos >= REGION[1]:
                break
    seq = b"".join(chunks)
    first = pos - len(seq)
    seq = seq[REGION[0] - first : REGION[1] - first]
    return lut[np.frombuffer(seq, dtype=np.uint8)]


def test_real_reads_against_chr20(device, chr20_region):
    pysam = pytest.importorskip("pysam")
    bam_path = require_shared_data("human", "NA12878_S1.chr20.10_10p1mb.bam")
    fq_path = require_shared_data("human", "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz")
    lut = np.full(256, 4, dtype=np.uint8)
    for i, c in enumerate(b"ACGT"):
        lut[c] = lut[c + 32] = i
    fastq = {}
    with gzip.open(fq_path, "rt") as f:
        for header, seq, _, _ in itertools.zip_longest(*[f] * 4):
            name = header[1:].split()[0].removesuffix("/1")
            fastq[name] = lut[np.frombuffer(seq.strip().encode(), dtype=np.uint8)]
            if len(fastq) >= 400:
                break
    genome = Genome([chr20_region])
    off = int(genome.offsets[0])
    reads, rs, lo, hi, truth = [], [], [], [], []
    with pysam.AlignmentFile(str(bam_path), "rb") as bam:
        for a in bam.fetch(until_eof=True):
            if a.is_unmapped or a.is_secondary or a.is_supplementary or not a.is_read1:
                continue
            if a.query_name not in fastq or a.reference_name not in ("20", "chr20"):
                continue
            if not REGION[0] + 500 <= a.reference_start < REGION[1] - 500:
                continue
            r = len(reads)
            reads.append(fastq.pop(a.query_name))
            clip = a.cigartuples[0][1] if a.cigartuples[0][0] == 4 else 0
            diag = off + a.reference_start - REGION[0] - clip
            strand = int(a.is_reverse)
            unclipped = all(op != 4 for op, _ in a.cigartuples)
            # the BAM's diagonal, a wide candidate around it, and two decoys: other strand, shifted by 41
            for this_rs, d, w in (
                (2 * r + strand, diag, 0),
                (2 * r + strand, diag - 2, 4),
                (2 * r + 1 - strand, diag, 0),
                (2 * r + strand, diag + 41, 0),
            ):
                rs.append(this_rs)
                lo.append(d)
                hi.append(d + w)
            truth.append((2 * r + strand, diag, a.get_tag("NM"), unclipped))
    assert len(reads) >= 150, "the BAM should place most of the first FASTQ reads in the region"
    q = device.queue
    res, (rb, host) = genome.resident(q), read_buffer(q, reads)
    cands, arrays = candidate_set(q, rs, lo, hi)
    ref = reference_all(genome, host, arrays, 0.8, 1)
    dev = device_all(device, res, rb, cands, 0.8, 1)
    assert_same(dev, ref, arrays, host.strands)

    # real behaviour: BWA's alignment lies in the band, so its NM bounds our distance from above
    point = {
        (int(r), int(lo)): i
        for i, (r, lo, hi) in enumerate(zip(arrays["rs"], arrays["diag_lo"], arrays["diag_hi"]))
        if lo == hi
    }
    kept = decoys_kept = 0
    for rs_true, diag, nm, unclipped in truth:
        d, s, e, keep = ref[point[(rs_true, diag)]]
        kept += keep
        if unclipped:
            assert keep and d <= nm, (rs_true, diag, nm, d)
        decoys_kept += ref[point[(rs_true ^ 1, diag)]][3] + ref[point[(rs_true, diag + 41)]][3]
    assert kept >= 0.95 * len(truth)
    assert decoys_kept <= 0.05 * 2 * len(truth)
    hits = validate_hits(device, res, rb, cands, min_identity=0.8).to_host()
    np.testing.assert_array_equal(hits["candidate"], np.nonzero(ref[:, 3])[0])
