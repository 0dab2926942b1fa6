// Best-stratum candidate selection: which candidates of a read are worth validating when only its best
// stratum and its closest rivals are reported (mode best).  See peanut_py/selection.py and docs/core.md
// ("Selection") for the rule and why it keeps the best stratum exact.
//
// Defines: Q, STEP, GAP (the filtration's q, sampling step and collapse gap).
// Candidates are sorted by read strand rs = 2 * read + strand; a read owns the candidates of rs 2r and
// 2r + 1.  phase[c]: 0 = not (yet) selected, 1 = leader (validated first), 2 = rival (validated second).

#include "rs_range.clh"

#define PHASE_LEADER 1u
#define PHASE_RIVAL 2u
#define NO_LEADER 0xFFFFFFFFu  // read_k1 of a read without a validated leader

// Votes that the candidate of an occurrence with e edits of a read strand of length n is guaranteed to
// have (filtration.guaranteed_votes, the q-gram lemma with sampling step and collapse gap).
inline long lemma_votes(long n, long e)
{
    const long preserved = n - Q + 1 - e * Q;
    const long num = preserved - (e + 1) * (STEP - 1);
    const long hits = num > 0 ? (num + STEP - 1) / STEP : 0;
    const long pieces = e / (GAP + 1) + 1;
    return (hits + pieces - 1) / pieces;
}

// One work-item per read: its most voted candidate's votes, and the leaders: the candidates within
// `lead_margin` votes of the most voted one (the likely best stratum).  read_k1 is reset for
// best_leader_edits.
__kernel void mark_leaders(const uint n_reads, const uint n_cand, __global const uint *rs,
                           __global const uint *votes, const uint lead_margin, __global uint *read_vmax,
                           __global uint *read_k1, __global uint *phase)
{
    const uint r = get_global_id(0);
    if (r >= n_reads) return;
    const uint lo = lower_bound_rs(rs, n_cand, 2 * r);
    const uint hi = lower_bound_rs(rs, n_cand, 2 * r + 2);
    uint vmax = 0;
    for (uint c = lo; c < hi; ++c) vmax = max(vmax, votes[c]);
    for (uint c = lo; c < hi; ++c) phase[c] = votes[c] + lead_margin >= vmax ? PHASE_LEADER : 0u;
    read_vmax[r] = vmax;
    read_k1[r] = NO_LEADER;
}

// One work-item per candidate, after the leaders were validated: k1 of each read (read_k1) = the fewest
// edits of its validated leaders, NO_LEADER where none was kept.  Per candidate rather than per read: a read
// in a masked repeat can have thousands of candidates, which one work-item would walk alone.
__kernel void best_leader_edits(const uint n_cand, __global const uint *rs, __global const uint *phase,
                                __global const int *dist, __global const uint *keep, __global uint *read_k1)
{
    const uint c = get_global_id(0);
    if (c >= n_cand || phase[c] != PHASE_LEADER || !keep[c]) return;
    atomic_min(&read_k1[rs[c] >> 1], (uint)dist[c]);
}

// One work-item per candidate that is not a leader: it becomes a rival when its votes reach
//     min(G(k1), max(G(k1 + delta), ceil(vmax * ratio_num / ratio_den)))
// (G = lemma_votes of its read strand, lowered by the strand's masked q-grams as in filtration): every
// occurrence with <= k1 edits keeps a candidate with G(k1) votes, so the best stratum is complete; rivals
// with up to k1 + delta edits are complete too unless they fall below the ratio of the best candidate.
// A read without a validated leader has all its candidates selected.
__kernel void mark_rivals(const uint n_cand, __global const uint *read_vmax, __global const uint *read_k1,
                          __global const uint *rs, __global const uint *votes, __global const uint *rs_start,
                          __global const uint *masked_per_rs, const uint use_masked, const uint delta,
                          const uint ratio_num, const uint ratio_den, __global uint *phase)
{
    const uint c = get_global_id(0);
    if (c >= n_cand || phase[c] == PHASE_LEADER) return;
    const uint s = rs[c], r = s >> 1, k1 = read_k1[r];
    long need = 0;
    if (k1 != NO_LEADER) {
        const long ratio_votes = ((long)read_vmax[r] * ratio_num + ratio_den - 1) / ratio_den;
        const long n = (long)(rs_start[s + 1] - rs_start[s]);
        const long m = use_masked ? (long)masked_per_rs[s] : 0L;
        need = min(lemma_votes(n, k1) - m, max(lemma_votes(n, (long)k1 + delta) - m, ratio_votes));
    }
    phase[c] = (long)votes[c] >= need ? PHASE_RIVAL : 0u;
}
