// Filtration (PEANUT, Algorithm 2): reference q-grams against the q-group index of a read buffer, then the
// raw hits collapsed into candidates on the device.
//
// Defines: Q, SAMPLE_S (as for qgroup.cl), STARTS_T (uint or ulong: type of the q-gram table's CSR starts),
// EMIT_BLOCK (hits per work-item of the emit pass).  Hits are produced for the read strands whose text lies
// in [t0, t1) only, so that a buffer's hits can be processed in ranges of read strands of bounded size.
// A raw hit is one pair (reference position p of a kept q-gram, text position t of the same q-gram in the
// read buffer); it is stored as one ulong key (rs << diag_bits) | diagonal with diagonal = p - offset of t in
// its read strand, so that sorting keys sorts hits by (rs, diagonal).

#define QGROUP_LOOKUP_ONLY
#include "qgroup.cl"

#ifndef STARTS_T
#define STARTS_T uint
#endif
#ifndef EMIT_BLOCK
#define EMIT_BLOCK 32
#endif

// First entry of O[lo .. hi) (ascending within a q-gram) that is >= t.
inline uint lower_bound_O(__global const uint *O, uint lo, uint hi, uint t)
{
    while (lo < hi) {
        uint mid = lo + (hi - lo) / 2;
        if (O[mid] < t) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// INDEXPAIR restricted to the read strands whose text lies in [t0, t1): the text is in read-strand order
// and each q-gram's occurrences are ascending, so they form one sub-range.
inline void index_pair_in(__global const uint *I, __global const uint *S, __global const uint *Sp,
                          __global const uint *O, uint g, uint t0, uint t1, uint *k_start, uint *k_end)
{
    uint ks, ke;
    index_pair(I, S, Sp, g, &ks, &ke);
    *k_start = lower_bound_O(O, ks, ke, t0);
    *k_end = lower_bound_O(O, *k_start, ke, t1);
}

#define INDEX_ARGS __global const uint *I, __global const uint *S, __global const uint *Sp, \
                   __global const uint *O, const uint t0, const uint t1

// Counting pass (Algorithm 2, lines 1-4), one work-item per distinct reference kmer of the chunk: kmers are
// sorted, so neighbouring work-items look up neighbouring words of I.  A kmer with n_ref reference positions
// and n_read occurrences in the selected read strands yields n_ref * n_read hits.
__kernel void count_hits(__global const uint *kmers, __global const STARTS_T *starts, const ulong k_base,
                         const uint n_k, INDEX_ARGS, __global ulong *counts)
{
    uint k = get_global_id(0);
    if (k >= n_k) return;
    ulong kk = k_base + k;
    uint ks, ke;
    index_pair_in(I, S, Sp, O, kmers[kk], t0, t1, &ks, &ke);
    counts[k] = (ulong)(ke - ks) * (ulong)(starts[kk + 1] - starts[kk]);
}

// Emit pass (lines 8-14) for the hits numbered [w0, w1) of the chunk (offsets = exclusive prefix sum of
// counts), written to keys[out_base ..].  Hit number offsets[k] + a * n_read + b pairs reference position a
// with read occurrence b of kmer k.  Work-item u emits the EMIT_BLOCK hits from w0 + u * EMIT_BLOCK: every
// work-item does the same amount of work however skewed the hits per kmer are (a kmer kept 1000 times in
// the reference meeting a q-gram that 10^4 reads share would otherwise leave one work-item with 10^7 hits);
// its first kmer is found by binary search in offsets.
__kernel void emit_hits(__global const uint *kmers, __global const STARTS_T *starts, const ulong k_base,
                        const uint n_k, INDEX_ARGS, __global const uint *positions,
                        __global const uint *pos_rs, __global const uint *rs_start,
                        __global const ulong *offsets, const ulong w0, const ulong w1, const uint diag_bits,
                        __global ulong *keys, const ulong out_base)
{
    ulong h = w0 + (ulong)get_global_id(0) * EMIT_BLOCK;
    if (h >= w1) return;
    ulong h_end = min(h + EMIT_BLOCK, w1);
    // Last kmer whose range starts at or before h: the one containing h (kmers without hits share their
    // offset with the next kmer, and h is below the total).
    uint lo = 0, hi = n_k;
    while (hi - lo > 1) {
        uint mid = lo + (hi - lo) / 2;
        if (offsets[mid] <= h) lo = mid; else hi = mid;
    }
    for (uint k = lo; h < h_end; ++k) {
        ulong kk = k_base + k;
        uint ks, ke;
        index_pair_in(I, S, Sp, O, kmers[kk], t0, t1, &ks, &ke);
        uint n_read = ke - ks;
        ulong p0 = starts[kk], base = offsets[k];
        ulong stop = min(h_end, base + (starts[kk + 1] - p0) * n_read);
        if (h >= stop) continue;
        ulong a = p0 + (h - base) / n_read;
        uint b = (uint)((h - base) % n_read);
        uint p = positions[a];
        for (; h < stop; ++h) {
            uint t = O[ks + b];
            uint rs = pos_rs[t];
            keys[out_base + (h - w0)] = ((ulong)rs << diag_bits) | (ulong)(p - (t - rs_start[rs]));
            if (++b == n_read) {
                b = 0;
                if (h + 1 < stop) p = positions[++a];
            }
        }
    }
}

// Per-position variant of the two passes (the paper's loop over P): one work-item per reference position of
// the chunk; its kmer is found by binary search in the CSR starts.
inline ulong kmer_of_position(__global const STARTS_T *starts, ulong k_base, uint n_k, ulong j)
{
    ulong lo = k_base, hi = k_base + n_k;  // starts[lo] <= j < starts[hi]
    while (hi - lo > 1) {
        ulong mid = lo + (hi - lo) / 2;
        if (starts[mid] <= j) lo = mid; else hi = mid;
    }
    return lo;
}

__kernel void count_hits_by_position(__global const uint *kmers, __global const STARTS_T *starts,
                                     const ulong k_base, const uint n_k, INDEX_ARGS, const ulong first,
                                     const uint n_pos, __global ulong *counts)
{
    uint x = get_global_id(0);
    if (x >= n_pos) return;
    ulong kk = kmer_of_position(starts, k_base, n_k, first + x);
    uint ks, ke;
    index_pair_in(I, S, Sp, O, kmers[kk], t0, t1, &ks, &ke);
    counts[x] = ke - ks;
}

__kernel void emit_hits_by_position(__global const uint *kmers, __global const STARTS_T *starts,
                                    const ulong k_base, const uint n_k, INDEX_ARGS, const ulong first,
                                    const uint n_pos, __global const uint *positions,
                                    __global const uint *pos_rs, __global const uint *rs_start,
                                    __global const ulong *offsets, const ulong w0, const ulong w1,
                                    const uint diag_bits, __global ulong *keys, const ulong out_base)
{
    uint x = get_global_id(0);
    if (x >= n_pos) return;
    ulong kk = kmer_of_position(starts, k_base, n_k, first + x);
    uint ks, ke;
    index_pair_in(I, S, Sp, O, kmers[kk], t0, t1, &ks, &ke);
    ulong base = offsets[x];
    ulong lo = max(base, w0), hi = min(base + (ke - ks), w1);
    uint p = positions[first + x];
    for (ulong h = lo; h < hi; ++h) {
        uint t = O[ks + (uint)(h - base)];
        uint rs = pos_rs[t];
        keys[out_base + h - w0] = ((ulong)rs << diag_bits) | (ulong)(p - (t - rs_start[rs]));
    }
}

// Collapse, after the keys are sorted: cluster c spans keys[first[c] .. first[c + 1]) (first[n_c] = n);
// consecutive diagonals of one read strand inside a cluster differ by at most the collapse gap.
__kernel void collapse_raw(__global const ulong *keys, const uint n, __global const uint *first, const uint n_c,
                           const uint diag_bits, __global uint *rs, __global uint *diag_lo,
                           __global uint *diag_hi, __global uint *votes)
{
    uint c = get_global_id(0);
    if (c >= n_c) return;
    uint s = first[c], e = c + 1 < n_c ? first[c + 1] : n;
    ulong mask = ((ulong)1 << diag_bits) - 1;
    rs[c] = (uint)(keys[s] >> diag_bits);
    diag_lo[c] = (uint)(keys[s] & mask);
    diag_hi[c] = (uint)(keys[e - 1] & mask);
    votes[c] = e - s;
}

// Merge of candidate intervals sorted by (rs, lo) (from several hit windows or chunks): cluster c spans
// entries first[c] .. first[c + 1]; it keeps the first lo, the largest hi and the sum of the votes.
__kernel void merge_intervals(__global const uint *rs_in, __global const uint *lo_in, __global const uint *hi_in,
                              __global const uint *votes_in, const uint n, __global const uint *first,
                              const uint n_c, __global uint *rs, __global uint *diag_lo, __global uint *diag_hi,
                              __global uint *votes)
{
    uint c = get_global_id(0);
    if (c >= n_c) return;
    uint s = first[c], e = c + 1 < n_c ? first[c + 1] : n;
    uint hi = hi_in[s], v = votes_in[s];
    for (uint x = s + 1; x < e; ++x) {
        hi = max(hi, hi_in[x]);
        v += votes_in[x];
    }
    rs[c] = rs_in[s];
    diag_lo[c] = lo_in[s];
    diag_hi[c] = hi;
    votes[c] = v;
}
