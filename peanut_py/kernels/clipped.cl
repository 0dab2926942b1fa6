// Local mode: which candidates of a read without a (good) validated hit get a local alignment of the whole read
// (peanut_py/clipped.py; docs/mapping.md, "Local mode: a read is judged by its aligned part").
//
// Candidates are sorted by read strand rs = 2 * read + strand; read r owns the candidates of rs 2r and
// 2r + 1.  A read with a validated hit (has_hit[r] != 0) has none chosen.  Otherwise its candidates with at
// least ceil(vmax * ratio_num / ratio_den) votes (vmax: its most voted candidate; BWA-MEM drops chains below
// half the best chain's weight in the same spirit) are chosen, the most voted first and, among equal
// votes, in candidate order, until max_per_read are chosen.  chosen[c] = 1 for a chosen candidate, else 0.
// Reference: tests/test_clipped.py (NumPy, same rule); results must be identical.

#include "rs_range.clh"

// One work-item per read.
__kernel void mark_clipped(const uint n_reads, const uint n_cand, __global const uint *rs,
                           __global const uint *votes, __global const uchar *has_hit, const uint max_per_read,
                           const uint ratio_num, const uint ratio_den, __global uint *chosen)
{
    const uint r = get_global_id(0);
    if (r >= n_reads) return;
    const uint lo = lower_bound_rs(rs, n_cand, 2 * r);
    const uint hi = lower_bound_rs(rs, n_cand, 2 * r + 2);
    for (uint c = lo; c < hi; ++c) chosen[c] = 0u;
    if (has_hit[r] || lo == hi) return;
    uint vmax = 0;
    for (uint c = lo; c < hi; ++c) vmax = max(vmax, votes[c]);
    const uint need = (uint)(((ulong)vmax * ratio_num + ratio_den - 1) / ratio_den);
    // vote levels from the top: each round takes the highest level below the previous one
    uint taken = 0, above = 0xffffffffu;
    while (taken < max_per_read) {
        uint level = 0;
        for (uint c = lo; c < hi; ++c)
            if (votes[c] < above && votes[c] >= need && votes[c] > level) level = votes[c];
        if (level == 0) break;
        for (uint c = lo; c < hi && taken < max_per_read; ++c)
            if (votes[c] == level) {
                chosen[c] = 1u;
                ++taken;
            }
        above = level;
    }
}

// One work-item per read: has_hit[r] = 1 when the read has a validated hit (hit_rs[0 .. n_hits), sorted by
// read strand) whose edit distance is at most half of validation's bound max_errors[length]: its whole-read
// hits stand.  A read whose best hit has more is "weak" (often a clipped end forced into an edit-distance
// alignment) and is judged locally, as a read without hits is.  peanut_py/_hit_lists.pyx (weak_read_flags)
// states the same rule on the host, where the weak reads' own hits are taken.
__kernel void read_has_hit(const uint n_reads, const uint n_hits, __global const uint *hit_rs,
                           __global const int *hit_dist, __global const uint *rs_start,
                           __global const uint *max_errors, __global uchar *has_hit)
{
    const uint r = get_global_id(0);
    if (r >= n_reads) return;
    const uint lo = lower_bound_rs(hit_rs, n_hits, 2 * r);
    const uint hi = lower_bound_rs(hit_rs, n_hits, 2 * r + 2);
    int best = INT_MAX;
    for (uint i = lo; i < hi; ++i) best = min(best, hit_dist[i]);
    const uint length = rs_start[2 * r + 1] - rs_start[2 * r];
    has_hit[r] = (uchar)(lo < hi && best <= (int)(max_errors[length] / 2u));
}
