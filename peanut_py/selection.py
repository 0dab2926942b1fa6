"""Best-stratum selection: validate a read's strongest candidates first, then only the rivals that matter.

In mode ``best`` a read reports its best stratum, and its MAPQ needs its closest rivals; reads in repeats
have hundreds of weak candidates (on simulated reads most candidates belong to a tenth of the reads, and
their validated hits have 10-20 edits) that cannot change either. Two validation rounds
on the device (``kernels/select.cl``):

1. *leaders*: each read's candidates within ``lead_margin`` votes of its most voted one;
2. *rivals*: with k1 = the fewest edits among the read's validated leaders, the other candidates whose
   votes reach ``min(G(k1), max(G(k1 + delta), ceil(ratio * vmax)))``, G = the q-gram lemma's guaranteed
   votes (``filtration.guaranteed_votes``, lowered by the read strand's masked q-grams).

Every hit with <= k1 edits has a candidate with >= G(k1) votes, so the best stratum comes out exactly as
without selection (the sensitivity guarantee is untouched); rivals with up to k1 + delta edits are found
unless they keep less than ``ratio`` of the best candidate's votes (BWA-MEM drops chains below half the best
chain's weight in the same spirit). Reads without a validated leader validate all their candidates.
"""
import numpy as np

from .scans import where

LEAD_MARGIN = None  # votes below the read's most voted candidate still validated first; None = q
DELTA = 3  # rival edits beyond the best that are always found (when the ratio allows)
RATIO = (1, 2)  # rivals keep at least this share of the best candidate's votes

PHASE_LEADER = 1
PHASE_RIVAL = 2


def select_kernels(device, q, step, collapse_gap):
    """The kernels of ``kernels/select.cl`` (and the compaction they feed), built once per device."""
    where(device)
    return device.kernels("select", Q=int(q), STEP=int(step), GAP=int(collapse_gap))


class BestStratumSelection:
    """The two validation rounds of one batch; ``counts`` after ``run``: candidates validated per round."""

    def __init__(self, device, q, step, collapse_gap, masked_per_rs=None, lead_margin=LEAD_MARGIN, delta=DELTA,
                 ratio=RATIO):
        self.device = device
        self.masked_per_rs = masked_per_rs
        self.lead_margin = q if lead_margin is None else int(lead_margin)
        self.delta = int(delta)
        self.ratio = tuple(int(x) for x in ratio)
        self.knl = select_kernels(device, q, step, collapse_gap)
        self.counts = {}

    def _select(self, phase, want):
        n = phase.size
        out = self.device.empty(n, np.uint32)
        count = self.device.empty(1, np.uint32)
        where(self.device)(phase, np.uint32(want), count, np.uint32(0), out, count, size=n, queue=self.device.queue)
        m = int(count.get()[0])
        return out[:m]

    def run(self, validate, candidates, read_buffer):
        """``validate(selected, out=None)`` validates the candidates listed in ``selected`` into ``out``
        (validation.validate_candidates); returns the per-candidate (dist, start, end, keep) arrays."""
        device = self.device
        n = int(candidates.n)
        n_reads = read_buffer.n_rs // 2
        if n == 0 or n_reads == 0:
            return validate(device.empty(0, np.uint32)[:0])
        phase = device.empty(n, np.uint32)[:n]
        vmax, k1 = (device.empty(n_reads, np.uint32) for _ in range(2))
        device.launch(self.knl.mark_leaders, n_reads, np.uint32(n_reads), np.uint32(n), candidates.rs.data,
                      candidates.votes.data, np.uint32(self.lead_margin), vmax.data, k1.data, phase.data)
        leaders = self._select(phase, PHASE_LEADER)
        out = validate(leaders)
        dist, _, _, keep = out
        device.launch(self.knl.best_leader_edits, n, np.uint32(n), candidates.rs.data, phase.data, dist.data,
                      keep.data, k1.data)
        masked, use_masked = ((self.masked_per_rs, 1) if self.masked_per_rs is not None else (vmax, 0))
        device.launch(self.knl.mark_rivals, n, np.uint32(n), vmax.data, k1.data, candidates.rs.data,
                      candidates.votes.data, read_buffer.rs_start.data, masked.data, np.uint32(use_masked),
                      np.uint32(self.delta), np.uint32(self.ratio[0]), np.uint32(self.ratio[1]), phase.data)
        rivals = self._select(phase, PHASE_RIVAL)
        out = validate(rivals, out=out)
        self.counts = {"leaders": int(leaders.size), "rivals": int(rivals.size), "candidates": n}
        return out
