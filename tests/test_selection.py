"""Best-stratum selection (selection.py, peanut_py/kernels/select.cl) against a NumPy statement of its rule, and its promise on real
reads: the same best stratum as validating every candidate."""
from types import SimpleNamespace

import numpy as np
import pyopencl.array as cla
import pysam
import pytest

from helpers import EXAMPLE, run_cli
from peanut_py.device_stage import DeviceStage
from peanut_py.filtration import DEFAULT_COLLAPSE_GAP, guaranteed_votes
from peanut_py.mapping import open_index
from peanut_py.ranking import rank_hits
from peanut_py.reads import read_batches
from peanut_py.resident import ResidentReference
from peanut_py.selection import BestStratumSelection

Q, STEP = 16, 1


def reference_selection(rs, votes, dist, keep, lengths, masked, n_reads, margin, delta, ratio, q, step, gap):
    """Leaders and rivals by the rule in peanut_py/selection.py, one read at a time."""
    leaders = np.zeros(len(rs), bool)
    rivals = np.zeros(len(rs), bool)
    for r in range(n_reads):
        idx = np.flatnonzero((rs >> 1) == r)
        if len(idx) == 0:
            continue
        vmax = int(votes[idx].max())
        lead = idx[votes[idx] + margin >= vmax]
        leaders[lead] = True
        ok = lead[keep[lead] == 1]
        k1 = int(dist[ok].min()) if len(ok) else None
        ratio_votes = -(-vmax * ratio[0] // ratio[1])
        for c in idx:
            if leaders[c]:
                continue
            if k1 is None:
                need = 0
            else:
                n, m = int(lengths[rs[c]]), int(masked[rs[c]])
                need = min(guaranteed_votes(n, q, step, k1, gap) - m,
                           max(guaranteed_votes(n, q, step, k1 + delta, gap) - m, ratio_votes))
            rivals[c] = votes[c] >= need
    return leaders, rivals


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_selection_matches_the_rule(device, seed):
    rng = np.random.default_rng(seed)
    n_reads = 300
    lengths = rng.integers(30, 260, n_reads).repeat(2)  # both strands of a read have its length
    rs_start = np.zeros(2 * n_reads + 1, np.uint32)
    rs_start[1:] = np.cumsum(lengths)
    per_rs = rng.choice([0, 1, 3, 20, 200], 2 * n_reads, p=[0.2, 0.3, 0.3, 0.15, 0.05])
    rs = np.repeat(np.arange(2 * n_reads, dtype=np.uint32), per_rs)
    n = len(rs)
    votes = rng.integers(1, 90, n).astype(np.uint32)
    dist = rng.integers(0, 25, n).astype(np.int32)
    keep = (rng.random(n) < 0.7).astype(np.uint32)
    masked = rng.choice([0, 0, 0, 2, 10], 2 * n_reads).astype(np.uint32)
    q = device.queue
    cand = SimpleNamespace(n=n, rs=cla.to_device(q, rs), votes=cla.to_device(q, votes))
    buffer = SimpleNamespace(n_rs=2 * n_reads, rs_start=cla.to_device(q, rs_start))
    calls = []

    def validate(selected, out=None):
        # stands in for the Myers kernel: the "true" distance of every candidate it is given
        sel = selected.get()
        calls.append(sel)
        if out is None:
            out = (np.full(n, -1, np.int32), np.zeros(n, np.uint32), np.zeros(n, np.uint32), np.zeros(n, np.uint32))
        else:
            out = tuple(a.get() for a in out)
        d, s, e, k = out
        d[sel], k[sel] = dist[sel], keep[sel]
        return tuple(cla.to_device(q, a) for a in (d, s, e, k))

    margin, delta, ratio = 16, 3, (1, 2)
    select = BestStratumSelection(device, Q, STEP, DEFAULT_COLLAPSE_GAP, masked_per_rs=cla.to_device(q, masked),
                                  lead_margin=margin, delta=delta, ratio=ratio)
    d_out, _, _, k_out = select.run(validate, cand, buffer)
    leaders, rivals = reference_selection(rs, votes, dist, keep, lengths, masked, n_reads, margin, delta, ratio,
                                          Q, STEP, DEFAULT_COLLAPSE_GAP)
    assert len(calls) == 2
    np.testing.assert_array_equal(calls[0], np.flatnonzero(leaders))
    np.testing.assert_array_equal(calls[1], np.flatnonzero(rivals))
    assert 0 < rivals.sum() < (~leaders).sum()  # the random input exercises both outcomes
    chosen = leaders | rivals
    np.testing.assert_array_equal(k_out.get(), np.where(chosen, keep, 0))
    np.testing.assert_array_equal(d_out.get(), np.where(chosen, dist, -1))
    assert select.counts == {"leaders": int(leaders.sum()), "rivals": int(rivals.sum()), "candidates": n}


def best_stratum(result, n_reads):
    """Per read: the fewest edits and the best-stratum hits as (strand, start, end) after duplicate removal."""
    order, ptr, _ = rank_hits(result.rs, result.ref_start, result.dist, n_reads)
    out = []
    for r in range(n_reads):
        hits = order[ptr[r]:ptr[r + 1]]
        if len(hits) == 0:
            out.append(None)
            continue
        d = result.dist[hits[0]]
        out.append((int(d), sorted((int(result.rs[h] & 1), int(result.ref_start[h]), int(result.ref_end[h]))
                                   for h in hits if result.dist[h] == d)))
    return out


@pytest.mark.slow
def test_same_best_stratum_on_real_reads(device, chr20_index, shared_data):
    """NA12878 chr20 reads: selection validates far fewer candidates, and every read's best edit distance
    and best-stratum loci (within the duplicate window of 8 bp) are those of validating every candidate."""
    index = open_index(chr20_index)
    resident = ResidentReference.from_index(device, index)
    batch = next(read_batches(str(shared_data / "human" / "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz"),
                              max_reads=8000))
    full = DeviceStage(device, resident).map_batch(batch.codes, batch.offsets)
    sel = DeviceStage(device, resident, best_stratum=True).map_batch(batch.codes, batch.offsets)
    assert full.validated == full.candidates and sel.candidates == full.candidates
    assert sel.validated < 0.5 * full.validated
    a, b = best_stratum(full, batch.n), best_stratum(sel, batch.n)
    for r, (x, y) in enumerate(zip(a, b)):
        assert (x is None) == (y is None), r
        if x is None:
            continue
        assert x[0] == y[0], r
        assert len(x[1]) == len(y[1]), r
        for (s1, b1, e1), (s2, b2, e2) in zip(x[1], y[1]):
            assert s1 == s2 and abs(b1 - b2) <= 8 and abs(e1 - e2) <= 8, (r, x, y)
    index.close()


def test_validate_all_gives_the_same_primary_hits(example_index, tmp_path):
    """`peanut map` with and without --validate-all: every read's primary placement is the same."""
    reads = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"
    outs = []
    for extra in ([], ["--validate-all"]):
        out = tmp_path / f"out{len(outs)}.sam"
        rc, _, err = run_cli("map", str(example_index), str(reads), "-o", str(out), *extra)
        assert rc == 0, err
        with pysam.AlignmentFile(str(out)) as f:
            outs.append([(r.query_name, r.flag, r.reference_id, r.reference_start, r.cigarstring,
                          r.get_tag("NM") if r.has_tag("NM") else None) for r in f if not r.is_secondary])
    assert len(outs[0]) == len(outs[1]) == 2000
    assert outs[0] == outs[1]
