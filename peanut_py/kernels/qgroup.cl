// q-group index over a read buffer (PEANUT, Algorithm 1).
//
// Defines: Q (q-gram length, 4..16), S_STRIDE (S holds every S_STRIDE-th group: 1, 2, 4, 8 or 16; the groups
// in between add the popcounts of the preceding words of I, which lie in the same 64-byte line of I), FOLD
// (0 or 1, see below).
//
// Folding: with FOLD = 1, I, S and S' index the (Q-1)-base prefix of each q-gram (its key, g >> 2) instead of
// the q-gram, and O stays sorted by (q-gram, text position), so each key's slot of O holds its q-grams in
// order of their last base; INDEXPAIR(g) finds g's part of the slot by that base, kept for every entry of
// O in Ob.  The ranges it returns are exactly those of the unfolded index; what changes is that I and S
// shrink four-fold (q = 16: 512 + 256 MiB -> 128 + 64 MiB), which a CPU device pays for as fresh memory and
// in every pass over I.
// The text holds, per read strand rs = 2*read + strand, its bases (0..3, 4 = N) back to back; rs_start has
// n_rs + 1 entries and pos_rs maps every text position to its read strand.  A q-gram at text position t is
// indexed when it lies inside one forward read strand (rs even) and contains no code 4.

#include "qgroup_lookup.clh"
#include "sort_local.clh"

// The last FOLD bases of the (valid) q-gram at text position t: its place inside its key's slot.
inline uint folded_bases(__global const uchar *text, uint t)
{
    uint v = 0;
    for (uint k = Q - FOLD; k < Q; ++k) v = (v << 2) | text[t + k];
    return v;
}

// Sort key of the occurrence at text position t (< 2^31): O is ordered by (q-gram, t), and inside one key's
// slot the q-grams differ only in their folded bases.
inline ulong occurrence_key(__global const uchar *text, uint t)
{
#if FOLD > 0
    return ((ulong)folded_bases(text, t) << 32) | t;
#else
    return t;
#endif
}

// q-gram value at text position t (first base in the high bits); false when it leaves its read strand
// or contains an N.
inline bool text_qgram(__global const uchar *text, __global const uint *pos_rs,
                       __global const uint *rs_start, uint t, uint *g)
{
    if (t + Q > rs_start[pos_rs[t] + 1]) return false;
    uint v = 0;
    for (uint k = 0; k < Q; ++k) {
        uchar c = text[t + k];
        if (c > 3) return false;
        v = (v << 2) | c;
    }
    *g = v;
    return true;
}

// Largest rs with rs_start[rs] <= t; empty read strands share their start with the next one, so this is
// the strand that contains t.
inline uint strand_of(__global const uint *rs_start, uint n_rs, uint t)
{
    uint lo = 0, hi = n_rs;
    while (hi - lo > 1) {
        uint mid = lo + (hi - lo) / 2;
        if (rs_start[mid] <= t) lo = mid; else hi = mid;
    }
    return lo;
}

// Text = forward read then its reverse complement, for every read; built on the device so only the
// forward codes (1 byte per base) cross the bus.  rs_start[2r] = 2*offsets[r], so the read's codes start
// at rs_start[2r] / 2.
__kernel void build_text(__global const uchar *codes, __global const uint *rs_start, const uint n_rs,
                         const uint n_text, __global uchar *text, __global uint *pos_rs)
{
    uint t = get_global_id(0);
    if (t >= n_text) return;
    uint rs = strand_of(rs_start, n_rs, t);
    uint fwd = rs & ~1u;
    uint len = (rs_start[fwd + 2] - rs_start[fwd]) >> 1;
    uint src = rs_start[fwd] >> 1;
    uint k = t - rs_start[rs];
    uchar c;
    if (rs & 1u) {
        c = min(codes[src + len - 1 - k], (uchar)4);
        c = c < 4 ? (uchar)(3 - c) : (uchar)4;
    } else {
        c = min(codes[src + k], (uchar)4);
    }
    text[t] = c;
    pos_rs[t] = rs;
}

// The q-gram value of every text position, computed once (valid[t] = 0: it lies on a reverse read strand,
// leaves its read strand or has an N).  The index holds the forward strands' q-grams only: a reverse
// strand's q-grams are its forward strand's reverse complements, which filtration looks up instead
// (filter.cl), so indexing them too would double the atomics of the passes below and the size of O.  The
// passes of Algorithm 1 below then do little more than their random accesses to I, S and the counters.  On a
// CPU this split matters: a work-item that computes its q-gram (a 16-step loop) before its random access
// leaves few cache misses in flight; mark_groups took 8x longer that way on PoCL.
__kernel void qgram_values(__global const uchar *text, __global const uint *pos_rs,
                           __global const uint *rs_start, const uint n_text, __global uint *value,
                           __global uchar *valid)
{
    uint t = get_global_id(0);
    if (t >= n_text) return;
    uint g = 0;
    valid[t] = (pos_rs[t] & 1u) == 0 && text_qgram(text, pos_rs, rs_start, t, &g);
    value[t] = g;
}

// Algorithm 1, lines 2-4: set bit j of group i for the key of every q-gram of the text.  The work-item that sets a bit
// first also counts it for its block of GROUP_BLOCK groups (block_count), so that S needs one pass over I.
#ifndef GROUP_BLOCK
#define GROUP_BLOCK 1024
#endif
__kernel void mark_groups(__global const uint *value, __global const uchar *valid, const uint n_text,
                          __global uint *I, __global uint *block_count)
{
    uint t = get_global_id(0);
    if (t >= n_text || !valid[t]) return;
    uint g = qgram_key(value[t]), bit = 1u << (g & 31u);
    if (!(atomic_or(&I[g >> 5], bit) & bit)) atomic_inc(&block_count[(g >> 5) / GROUP_BLOCK]);
}

// Algorithm 1, lines 5-8, one work-item per block: S of its groups from the block's first slot
// (block_start, the exclusive prefix sum of block_count); every S_STRIDE-th group is stored (GROUP_BLOCK is
// a multiple of S_STRIDE).  Unlike a generic scan this reads I once and needs no scratch as large as S (on
// a CPU device the first touch of fresh memory costs as much as the scan).
__kernel void group_starts(__global const uint *I, const uint n_groups, __global const uint *block_start,
                           const uint n_blocks, __global uint *S)
{
    uint b = get_global_id(0);
    if (b >= n_blocks) return;
    uint run = block_start[b];
    uint i = b * GROUP_BLOCK, end = min(n_groups, i + GROUP_BLOCK);
    for (; i < end; ++i) {
        if (i % S_STRIDE == 0) S[i / S_STRIDE] = run;
        run += popcount(I[i]);
    }
}

// Algorithm 1, lines 10-13: occurrences per distinct key (slot S[i] + j').  The q-gram value of every
// text position is replaced by its slot (NO_SLOT without a q-gram), so the fill touches neither I nor S.
#define NO_SLOT 0xffffffffu
__kernel void count_occurrences(__global uint *value_slot, __global const uchar *valid, const uint n_text,
                                __global const uint *I, __global const uint *S, __global uint *counts)
{
    uint t = get_global_id(0);
    if (t >= n_text) return;
    if (!valid[t]) { value_slot[t] = NO_SLOT; return; }
    uint slot = qgram_slot(I, S, qgram_key(value_slot[t]));
    value_slot[t] = slot;
    atomic_inc(&counts[slot]);
}

// Algorithm 1, lines 16-20: scatter positions through a per-slot cursor (a copy of S').  The order inside
// a slot depends on scheduling; sort_occurrences makes it ascending afterwards.
__kernel void fill_occurrences(__global const uint *slot_of, const uint n_text, __global uint *cursor,
                               __global uint *O)
{
    uint t = get_global_id(0);
    if (t >= n_text) return;
    uint slot = slot_of[t];
    if (slot != NO_SLOT) O[atomic_inc(&cursor[slot])] = t;
}

inline void sift_down(__global uint *a, __global const uchar *text, uint root, uint n)
{
    uint v = a[root];
    ulong kv = occurrence_key(text, v);
    for (;;) {
        uint child = 2 * root + 1;
        if (child >= n) break;
        ulong kc = occurrence_key(text, a[child]);
        if (child + 1 < n) {
            ulong kr = occurrence_key(text, a[child + 1]);
            if (kr > kc) { ++child; kc = kr; }
        }
        if (kc <= kv) break;
        a[root] = a[child];
        root = child;
    }
    a[root] = v;
}

// One work-item per slot of S': sort its occurrences by (folded bases, position), i.e. O by (q-gram,
// position), so O does not depend on the order in which fill_occurrences' atomics were served.  That order
// is mostly ascending already (work-items are scheduled roughly in id order), so insertion sort runs first
// with a budget of element moves; if the slot turns out to be badly out of order (budget spent), heapsort
// (in place, O(n log n)) finishes it.  Slots of up to 32 entries always complete by insertion.
// Unfolded, a slot of more than group_above entries (0: none) is left to sort_occurrences_group instead: its
// number goes to big (big_counts[0] counts them; big_counts[1] sums the entries of those above SORT_LOCAL,
// the scratch their merges need).  On a GPU one work-item per slot keeps its whole SIMD group waiting for
// the longest slot among them, and the repeats of a read buffer make slots of thousands of entries.
__kernel void sort_occurrences(__global const uint *Sp, const uint n_slots, __global const uchar *text,
                               __global uint *O, __global uchar *Ob, const uint group_above,
                               __global uint *big, __global uint *big_counts)
{
    uint s = get_global_id(0);
    if (s >= n_slots) return;
    uint lo = Sp[s], n = Sp[s + 1] - lo;
#if FOLD == 0
    if (group_above && n > group_above) {
        big[atomic_inc(&big_counts[0])] = s;
        if (n > SORT_LOCAL) atomic_add(&big_counts[1], n);
        return;
    }
#endif
    __global uint *a = O + lo;
    ulong budget = 8 * (ulong)n + 512, moves = 0;
    for (uint x = 1; x < n; ++x) {
        uint v = a[x], y = x;
        ulong kv = occurrence_key(text, v);
        while (y > 0 && occurrence_key(text, a[y - 1]) > kv && moves < budget) { a[y] = a[y - 1]; --y; ++moves; }
        a[y] = v;  // fills the hole even when the budget stopped the shifting: still a permutation
        if (moves >= budget) {
            for (uint r = n / 2; r-- > 0;) sift_down(a, text, r, n);
            for (uint end = n - 1; end > 0; --end) {
                uint t = a[0]; a[0] = a[end]; a[end] = t;
                sift_down(a, text, 0, end);
            }
            break;
        }
    }
#if FOLD > 0
    // The folded bases next to O, so that lookups read a few bytes in a row rather than the text.
    for (uint x = 0; x < n; ++x) Ob[lo + x] = (uchar)folded_bases(text, a[x]);
#endif
}

#if FOLD == 0
// One work-group per slot listed by sort_occurrences (big): its entries, text positions, sorted ascending by
// the whole group, in local memory up to SORT_LOCAL entries, else in blocks of SORT_LOCAL merged in passes
// through its own part of scratch (taken from scratch_cursor; which part a slot gets does not change O).
__kernel void sort_occurrences_group(__global const uint *Sp, __global const uint *big, __global uint *O,
                                     __global uint *scratch, __global uint *scratch_cursor)
{
    __local uint buf[SORT_LOCAL];
    __local uint scratch_lo;
    uint s = big[get_group_id(0)];
    uint lo = Sp[s], n = Sp[s + 1] - lo;  // the same for the whole group
    __global uint *d = O + lo;
    if (n <= SORT_LOCAL) {
        sort_block_local(d, n, buf);
        return;
    }
    if (get_local_id(0) == 0) scratch_lo = atomic_add(scratch_cursor, n);
    barrier(CLK_LOCAL_MEM_FENCE);
    sort_run_group(d, n, buf, scratch + scratch_lo);
}
#endif
