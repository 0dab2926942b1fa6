// Filtration (PEANUT, Algorithm 2): reference q-grams against the q-group index of a read buffer, then the
// raw hits grouped by read strand, sorted by diagonal and collapsed into candidates on the device.
//
// Defines: Q, S_STRIDE, FOLD (as for qgroup.cl), STARTS_T (uint or ulong: type of the q-gram table's bucket
// starts), SUFFIX_BITS (2Q minus the bucket table's bits: the bits of a q-gram value below its bucket),
// EMIT_BLOCK (hits per work-item of the emit pass), SORT_BLOCK (slot entries sorted by insertion before
// merging), SORT_LOCAL (a power of two: slot entries that sort_slots_local sorts in local memory at once).
// The reference's q-gram table (docs/FORMAT.md) is P, the indexed positions sorted by (q-gram value,
// position), and a bucket table: bucket b holds positions[buckets[b] .. buckets[b + 1]), those whose q-gram
// value has the top bits b.  The value of a position is read from the packed sequence (qgram_at).
// Hits are produced for the read strands whose text lies in [t0, t1) only (read strands r0 .. r1 - 1), so
// that a buffer's hits can be processed in ranges of read strands of bounded size.
// A raw hit is one pair (reference position p of a kept q-gram, text position t of the same q-gram in the
// read buffer) on read strand rs = pos_rs[t]; it is stored as its diagonal p - (offset of t in rs) in the
// slot of rs: every read strand of the range owns one slot of a diagonal array, sized by the counting pass.
// Strands: the q-group index holds the forward read strands' q-grams only (qgroup.cl).  The reverse strand
// of a read holds value v at offset L - Q - k exactly where its forward strand holds rc(v) at offset k, so
// the reverse strand's occurrences of v are the index's occurrences of rc(v), moved (strand_occurrence).  A
// present kmer therefore carries a strand (present_strand): 0, the index's occurrences of its value as they
// are; 1, those of its value's reverse complement, on the reverse strands.  Hits are produced for the read
// strands r0 .. r1 - 1; the index's occurrences are restricted to the forward text [t0, t1) of their reads
// and to the strands in the bit mask `strands` (bit 0 forward, bit 1 reverse; both unless the range is one
// read strand).

#include "qgroup_lookup.clh"
#include "sort_local.clh"
#include "votes.clh"

#ifndef STARTS_T
#define STARTS_T uint
#endif
#ifndef EMIT_BLOCK
#define EMIT_BLOCK 32
#endif
#ifndef SORT_BLOCK
#define SORT_BLOCK 16
#endif
#ifndef SUFFIX_BITS
#define SUFFIX_BITS 0
#endif

// The sixteen 2-bit fields of y in reverse order, of which the top Q: the q-gram whose base k is field k of y
// (field k in bits 2k, 2k + 1).
inline uint reversed_fields(uint y)
{
    y = (y >> 16) | (y << 16);
    y = ((y >> 8) & 0x00FF00FFu) | ((y & 0x00FF00FFu) << 8);
    y = ((y >> 4) & 0x0F0F0F0Fu) | ((y & 0x0F0F0F0Fu) << 4);
    y = ((y >> 2) & 0x33333333u) | ((y & 0x33333333u) << 2);
    return Q == 16 ? y : y >> (32 - 2 * Q);
}

// q-gram value (first base in the highest bits) of the Q bases at global position p of the packed sequence
// (base g in bits 2 * (g & 15) of word g >> 4).  The second word is read only when the q-gram reaches into
// it, so a q-gram ending at the last base of the sequence reads nothing beyond it.
inline uint qgram_at(__global const uint *packed, uint p)
{
    uint w = p >> 4, o = p & 15u;
    ulong x = packed[w];
    if (o + Q > 16) x |= (ulong)packed[w + 1] << 32;
    return reversed_fields((uint)(x >> (2 * o)));  // base p + k in bits 2k, 2k + 1
}

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
                          __global const uint *O, __global const uchar *Ob, uint g, uint t0, uint t1,
                          uint *k_start, uint *k_end)
{
    uint ks, ke;
    index_pair(I, S, Sp, Ob, g, &ks, &ke);
    if (ks == ke || (O[ks] >= t0 && O[ke - 1] < t1)) {  // all of them (always so with a single range)
        *k_start = ks;
        *k_end = ke;
        return;
    }
    *k_start = lower_bound_O(O, ks, ke, t0);
    *k_end = lower_bound_O(O, *k_start, ke, t1);
}

#define INDEX_ARGS __global const uint *I, __global const uint *S, __global const uint *Sp, \
                   __global const uint *O, __global const uchar *Ob, const uint t0, const uint t1, \
                   const uint strands

// Reverse complement of a q-gram value (first base in the high bits): every base complemented (~), their
// order reversed (the last base, field 0 of g, becomes the first).
inline uint qgram_rc(uint g) { return reversed_fields(~g); }

// Read strand and offset of the occurrence at forward text position t, taken on `strand` (see above): as it
// is, or moved to the reverse strand, where the reverse complement of its q-gram starts at L - Q - k.
inline void strand_occurrence(__global const uint *pos_rs, __global const uint *rs_start, uint t, uint strand,
                              uint *rs, uint *off)
{
    uint r = pos_rs[t], k = t - rs_start[r];
    if (strand) {
        *off = rs_start[r + 1] - rs_start[r] - Q - k;
        *rs = r + 1;
    } else {
        *off = k;
        *rs = r;
    }
}

// Kmers of the chunk that occur in the read buffer, appended in any order as their value (present_value[j])
// and their range of the chunk's positions (present_range[2j], present_range[2j + 1]).  One work-item per
// slot of the q-group index (a distinct q-gram, or with FOLD up to 4^FOLD of them): each distinct q-gram
// is looked up in its bucket of the chunk by binary search on the values of the bucket's positions, read
// from the packed sequence.  So the pass costs a few lookups per distinct q-gram of the read buffer,
// whatever the size of the genome, and the list is never longer than the buffer's distinct q-grams; the
// counting and emit passes and their per-kmer arrays run over it only.  The order only decides where runs
// land in the slots, which are sorted afterwards.

// The q-gram value at text position t of the read buffer (an entry of O: its q bases are all ACGT).
inline uint read_qgram(__global const uchar *text, uint t)
{
    uint g = 0;
    for (uint i = 0; i < Q; ++i) g = (g << 2) | text[t + i];
    return g;
}

// First entry of positions[lo .. hi) (ascending by q-gram value) whose q-gram is >= g.
inline STARTS_T search_bucket(__global const uint *positions, __global const uint *packed, STARTS_T lo,
                              STARTS_T hi, uint g)
{
    while (lo < hi) {
        STARTS_T mid = lo + (hi - lo) / 2;
        if (qgram_at(packed, positions[mid]) < g) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Appends kmer g (as the index's value `value` on `strand`) to the present list when the chunk holds it:
// the chunk holds buckets first_bucket .. first_bucket + n_b - 1, at entries b_base .. of its bucket table.
inline void find_kmer(uint g, uint value, uint strand, __global const STARTS_T *buckets, ulong b_base, uint n_b,
                      uint first_bucket, __global const uint *positions, __global const uint *packed,
                      __global uint *present_value, __global uchar *present_strand,
                      __global STARTS_T *present_range, __global uint *n_present)
{
    uint b = g >> SUFFIX_BITS;
    if (b < first_bucket || b - first_bucket >= n_b) return;
    ulong e = b_base + (b - first_bucket);
    STARTS_T end = buckets[e + 1];
    STARTS_T lo = search_bucket(positions, packed, buckets[e], end, g);
    if (lo == end || qgram_at(packed, positions[lo]) != g) return;
    // the value's positions follow (most values have one or two); a long run is searched
    STARTS_T hi = lo + 1;
    while (hi < end && hi - lo < 4 && qgram_at(packed, positions[hi]) == g) ++hi;
    if (hi - lo == 4) hi = g == 0xFFFFFFFFu ? end : search_bucket(positions, packed, hi, end, g + 1);
    uint j = atomic_inc(n_present);
    present_value[j] = value;
    present_strand[j] = (uchar)strand;
    present_range[2 * j] = lo;
    present_range[2 * j + 1] = hi;
}

// One past the last entry of O[k .. end) (one slot) with the q-gram of entry k: folded, a slot holds up to
// 4^FOLD values told apart by Ob; unfolded, one.
inline uint value_end(__global const uchar *Ob, uint k, uint end)
{
#if FOLD > 0
    uint next = k + 1;
    while (next < end && Ob[next] == Ob[k]) ++next;
    return next;
#else
    return end;
#endif
}

// One work-item per slot s0 <= s < s1 of the q-group index (a key; folded, up to 4^FOLD values told apart
// by Ob).  Each value g of the slot is sought as itself (strand 0, with bit 0 of `strands`) and as rc(g)
// (strand 1, bit 1): the forward lookups of a chunk need only the slots whose keys can fall into its buckets
// (see key_ranks), the reverse ones any slot.
__kernel void present_kmers(__global const STARTS_T *buckets, const ulong b_base, const uint n_b,
                            const uint first_bucket, __global const uint *positions, __global const uint *packed,
                            __global const uchar *text, __global const uint *O, __global const uint *Sp,
                            __global const uchar *Ob, const uint s0, const uint s1, const uint strands,
                            __global uint *present_value, __global uchar *present_strand,
                            __global STARTS_T *present_range, __global uint *n_present)
{
    uint s = s0 + get_global_id(0);
    if (s >= s1) return;
    for (uint k = Sp[s], end = Sp[s + 1]; k < end; k = value_end(Ob, k, end)) {
        uint g = read_qgram(text, O[k]);
        if (strands & 1u)
            find_kmer(g, g, 0, buckets, b_base, n_b, first_bucket, positions, packed, present_value, present_strand,
                      present_range, n_present);
        if (strands & 2u)
            find_kmer(qgram_rc(g), g, 1, buckets, b_base, n_b, first_bucket, positions, packed, present_value,
                      present_strand, present_range, n_present);
    }
}

// A streamed table's buckets that the read buffer touches: bit j of touched[w] is set where bucket 32w + j
// may hold a q-gram whose key I marks (a key is a value without its FOLD_BITS low bits, a bucket one without
// its SUFFIX_BITS).  The host copies only those buckets' positions across the bus (resident.py): no q-gram
// of the reads falls into the others, so the hits are those of the whole table.
#define KEY_SHIFT (SUFFIX_BITS - 2 * FOLD)  // bits of a key below its bucket's; negative: a key spans buckets
inline uint bucket_touched(__global const uint *I, ulong b)
{
#if KEY_SHIFT >= 5
    uint any = 0;
    for (ulong w = b << (KEY_SHIFT - 5), end = (b + 1) << (KEY_SHIFT - 5); w < end; ++w) any |= I[w];
    return any != 0;
#elif KEY_SHIFT >= 0
    ulong k = b << KEY_SHIFT;
    return (I[k >> 5] >> (k & 31u)) & ((1u << (1u << KEY_SHIFT)) - 1u);
#else
    ulong k = b >> (-(KEY_SHIFT));
    return (I[k >> 5] >> (k & 31u)) & 1u;
#endif
}

__kernel void touched_buckets(__global const uint *I, const ulong n_buckets, const uint n_words,
                              __global uint *touched)
{
    uint w = get_global_id(0);
    if (w >= n_words) return;
    uint bits = 0;
    for (uint j = 0; j < 32u; ++j) {
        ulong b = 32ul * w + j;
        if (b < n_buckets && bucket_touched(I, b)) bits |= 1u << j;
    }
    touched[w] = bits;
}

// The buckets of the reverse complements of the read buffer's q-grams (which the reverse strands hold; I
// marks the forward strands' keys only), added to touched: one work-item per slot of the q-group index.
__kernel void touched_reverse(__global const uchar *text, __global const uint *O, __global const uint *Sp,
                              __global const uchar *Ob, const uint n_slots, const ulong n_buckets,
                              __global uint *touched)
{
    uint s = get_global_id(0);
    if (s >= n_slots) return;
    for (uint k = Sp[s], end = Sp[s + 1]; k < end; k = value_end(Ob, k, end)) {
        ulong b = qgram_rc(read_qgram(text, O[k])) >> SUFFIX_BITS;
        if (b < n_buckets) atomic_or(&touched[b >> 5], 1u << (b & 31u));
    }
}

// out[i] = the slots of the q-group index whose keys are below keys[i], out[n + i] = where they end in O
// (Sp[out[i]]): slots out[0] .. out[1] - 1 hold exactly the keys keys[0] .. keys[1] - 1, so the present
// kmers of a chunk of the q-gram table are sought only among the slots of its keys.
__kernel void key_ranks(__global const uint *I, __global const uint *S, __global const uint *Sp,
                        __global const uint *keys, const uint n, __global uint *out)
{
    uint i = get_global_id(0);
    if (i >= n) return;
    uint slot = qgram_slot(I, S, keys[i]);
    out[i] = slot;
    out[n + i] = Sp[slot];
}

// n_ref[j] = the reference positions of present kmer j (the sizes that gather_positions packs).
__kernel void present_sizes(__global const STARTS_T *present_range, const uint n_present, __global ulong *n_ref)
{
    uint j = get_global_id(0);
    if (j >= n_present) return;
    n_ref[j] = (ulong)(present_range[2 * j + 1] - present_range[2 * j]);
}

// The positions of the present kmers of a streamed chunk, packed: kmer j's positions[lo .. hi) go to
// out[start[j] ..] and its range becomes the packed one, so that the passes over the read buffer no longer
// need the chunk (ranges are STARTS_T, the 32-bit starts of a streamed chunk: the packed total is bounded
// below 2^32 by the caller).
__kernel void gather_positions(__global STARTS_T *present_range, const uint n_present,
                               __global const uint *positions, __global const ulong *start, __global uint *out)
{
    uint j = get_global_id(0);
    if (j >= n_present) return;
    STARTS_T lo = present_range[2 * j], hi = present_range[2 * j + 1];
    ulong o = start[j];
    for (STARTS_T k = lo; k < hi; ++k) out[o + (k - lo)] = positions[k];
    present_range[2 * j] = (STARTS_T)o;
    present_range[2 * j + 1] = (STARTS_T)(o + (hi - lo));
}

// Counting pass (Algorithm 2, lines 1-4), one work-item per present kmer j.  A kmer with n_ref
// reference positions and n_read occurrences in the selected read strands yields n_ref * n_read hits.  The
// occurrences' range of O is kept (occ[2j], occ[2j + 1]; empty where the kmer's strand is not selected) for
// the emit pass, which so looks nothing up in the q-group index.  count_rs says how each occurrence's n_ref
// hits reach the hit count of its read strand (rs_hits[rs - r0], the size of its slot): 0 not at all, 1 by
// atomic_add, 2 by writing n_ref at the occurrence's text position on its strand (hits_at[t - t0]; every
// text position holds one q-gram, so no two work-items write one entry), which strand_hits then sums per
// read strand.  On a CPU device the atomics, contended by every core, cost most of the pass, and the
// writes and the sum a small part of it.  uint counters wrap only when a range has 2^32 hits or more; such a
// range exceeds every hit window and is split before its slot sizes are used.
__kernel void count_hits(__global const uint *present_value, __global const uchar *present_strand,
                         __global const STARTS_T *present_range, const uint n_present, INDEX_ARGS,
                         __global const uint *pos_rs, __global const uint *rs_start, const uint r0,
                         const uint count_rs, __global uint *rs_hits, __global ulong *counts, __global uint *occ,
                         __global uint *hits_at)
{
    uint j = get_global_id(0);
    if (j >= n_present) return;
    uint strand = present_strand[j];
    uint ks = 0, ke = 0;
    if ((strands >> strand) & 1u) index_pair_in(I, S, Sp, O, Ob, present_value[j], t0, t1, &ks, &ke);
    ulong n_ref = present_range[2 * j + 1] - present_range[2 * j];
    counts[j] = (ulong)(ke - ks) * n_ref;
    occ[2 * j] = ks;
    occ[2 * j + 1] = ke;
    for (uint b = ks; b < ke && count_rs; ++b) {
        uint rs, off;
        strand_occurrence(pos_rs, rs_start, O[b], strand, &rs, &off);
        if (count_rs == 1) atomic_add(&rs_hits[rs - r0], (uint)n_ref);
        else hits_at[rs_start[rs] + off - t0] = (uint)n_ref;
    }
}

// rs_hits[s] += the hits that count_hits wrote at the text positions of read strand r0 + s (hits_at holds
// the text from t0, zero where no counted occurrence lies).
__kernel void strand_hits(__global const uint *hits_at, __global const uint *rs_start, const uint r0,
                          const uint n_rs, const uint t0, __global uint *rs_hits)
{
    uint s = get_global_id(0);
    if (s >= n_rs) return;
    uint sum = 0;
    for (uint t = rs_start[r0 + s]; t < rs_start[r0 + s + 1]; ++t) sum += hits_at[t - t0];
    rs_hits[s] += sum;
}

// Emit pass (lines 8-14) for the hits numbered [w0, w1) of the chunk (offsets = exclusive prefix sum of
// counts over the present kmers, occ = their occurrences from the counting pass).  Hit number offsets[j] +
// b * n_ref + a pairs read occurrence b with reference position a of present kmer j, so consecutive hits
// of one occurrence are one run of its read strand: the run takes its place in the slot with one
// atomic_add on the slot's cursor and is written in table order (ascending positions, hence ascending
// diagonals, which the slot sort then finds as runs).  Work-item u emits the EMIT_BLOCK hits from w0 + u *
// EMIT_BLOCK: every work-item does the same amount of work however skewed the hits per kmer are (a kmer
// kept 1000 times in the reference meeting a q-gram that 10^4 reads share would otherwise leave one
// work-item with 10^7 hits); its first kmer is found by binary search in offsets.
__kernel void emit_hits(__global const uchar *present_strand, __global const STARTS_T *present_range,
                        const uint n_present, __global const uint *O, __global const uint *occ,
                        __global const uint *positions, __global const uint *pos_rs,
                        __global const uint *rs_start, __global const ulong *offsets, const ulong w0,
                        const ulong w1, const uint r0, __global uint *cursor, __global uint *diags)
{
    ulong h = w0 + (ulong)get_global_id(0) * EMIT_BLOCK;
    if (h >= w1) return;
    ulong h_end = min(h + EMIT_BLOCK, w1);
    // Last kmer whose range starts at or before h: the one containing h (kmers without hits share their
    // offset with the next kmer, and h is below the total).
    uint lo = 0, hi = n_present;
    while (hi - lo > 1) {
        uint mid = lo + (hi - lo) / 2;
        if (offsets[mid] <= h) lo = mid; else hi = mid;
    }
    for (uint j = lo; h < h_end; ++j) {
        // Kmers whose hits all lie before h (none at all, e.g. occurrences outside [t0, t1)): skip them.
        if (j + 1 < n_present && offsets[j + 1] <= h) continue;
        uint ks = occ[2 * j], ke = occ[2 * j + 1];
        ulong p0 = present_range[2 * j], n_ref = present_range[2 * j + 1] - p0, base = offsets[j];
        ulong stop = min(h_end, base + n_ref * (ulong)(ke - ks));
        if (h >= stop) continue;
        uint b = ks + (uint)((h - base) / n_ref);
        ulong a = (h - base) % n_ref;
        uint strand = present_strand[j];
        while (h < stop) {
            uint run = (uint)min(stop - h, n_ref - a);
            uint rs, off;
            strand_occurrence(pos_rs, rs_start, O[b], strand, &rs, &off);
            uint at = atomic_add(&cursor[rs - r0], run);
            for (uint i = 0; i < run; ++i) diags[at + i] = positions[p0 + a + i] - off;
            h += run;
            a = 0;
            ++b;
        }
    }
}

// Per-position variant of the two passes (the paper's loop over P): one work-item per position first + x of
// the chunk, its q-gram value v read from the packed sequence; its hits are the index's occurrences of v
// (strand 0) then those of rc(v) (strand 1), each selected strand's.  Every hit is a run of its own.
inline void position_ranges(__global const uint *I, __global const uint *S, __global const uint *Sp,
                            __global const uint *O, __global const uchar *Ob, uint t0, uint t1, uint strands,
                            uint v, uint *ks, uint *ke)
{
    ks[0] = ke[0] = ks[1] = ke[1] = 0;
    if (strands & 1u) index_pair_in(I, S, Sp, O, Ob, v, t0, t1, &ks[0], &ke[0]);
    if (strands & 2u) index_pair_in(I, S, Sp, O, Ob, qgram_rc(v), t0, t1, &ks[1], &ke[1]);
}

__kernel void count_hits_by_position(__global const uint *packed, __global const uint *positions, INDEX_ARGS,
                                     const ulong first, const uint n_pos, __global const uint *pos_rs,
                                     __global const uint *rs_start, const uint r0, const uint count_rs,
                                     __global uint *rs_hits, __global ulong *counts)
{
    uint x = get_global_id(0);
    if (x >= n_pos) return;
    uint ks[2], ke[2];
    position_ranges(I, S, Sp, O, Ob, t0, t1, strands, qgram_at(packed, positions[first + x]), ks, ke);
    counts[x] = (ke[0] - ks[0]) + (ke[1] - ks[1]);
    if (count_rs)
        for (uint strand = 0; strand < 2; ++strand)
            for (uint b = ks[strand]; b < ke[strand]; ++b) {
                uint rs, off;
                strand_occurrence(pos_rs, rs_start, O[b], strand, &rs, &off);
                atomic_inc(&rs_hits[rs - r0]);
            }
}

__kernel void emit_hits_by_position(__global const uint *packed, __global const uint *positions, INDEX_ARGS,
                                    const ulong first, const uint n_pos, __global const uint *pos_rs,
                                    __global const uint *rs_start, __global const ulong *offsets, const ulong w0,
                                    const ulong w1, const uint r0, __global uint *cursor, __global uint *diags)
{
    uint x = get_global_id(0);
    if (x >= n_pos) return;
    uint p = positions[first + x];
    uint ks[2], ke[2];
    position_ranges(I, S, Sp, O, Ob, t0, t1, strands, qgram_at(packed, p), ks, ke);
    ulong base = offsets[x];
    for (uint strand = 0; strand < 2; ++strand) {
        ulong lo = max(base, w0), hi = min(base + (ke[strand] - ks[strand]), w1);
        for (ulong h = lo; h < hi; ++h) {
            uint rs, off;
            strand_occurrence(pos_rs, rs_start, O[ks[strand] + (uint)(h - base)], strand, &rs, &off);
            diags[atomic_inc(&cursor[rs - r0])] = p - off;
        }
        base += ke[strand] - ks[strand];
    }
}

// ---- per-slot sort and collapse

inline void insertion_sort(__global uint *a, uint n)
{
    for (uint x = 1; x < n; ++x) {
        uint v = a[x], y = x;
        while (y > 0 && a[y - 1] > v) { a[y] = a[y - 1]; --y; }
        a[y] = v;
    }
}

// One past the ascending run of a that starts at i < n.
inline uint run_end(__global const uint *a, uint i, uint n)
{
    for (++i; i < n && a[i - 1] <= a[i]; ++i) {}
    return i;
}

// Merges the ascending runs src[i .. m) and src[m .. e) into dst[i .. e).
inline void merge_runs(__global const uint *src, uint i, uint m, uint e, __global uint *dst)
{
    uint x = i, y = m, o = i;
    while (x < m && y < e) {  // branch-free step: the runs interleave at random, a branch would mispredict
        uint a = src[x], b = src[y], take_b = b < a;
        dst[o++] = take_b ? b : a;
        y += take_b;
        x += 1 - take_b;
    }
    while (x < m) dst[o++] = src[x++];
    while (y < e) dst[o++] = src[y++];
}

// Sorts a[0 .. n) ascending, with tmp[0 .. n) as scratch: blocks of SORT_BLOCK by insertion, then natural
// merge passes (adjacent ascending runs merged pairwise) until one run is left.  A slot is a union of
// ascending runs (one per emitted run, see emit_hits), so a slot that already is one run costs one look, and
// k runs cost ceil(log2 k) passes: sequential, cache-friendly work for one work-item.
inline void sort_slot(__global uint *a, __global uint *tmp, uint n)
{
    if (n <= SORT_BLOCK) { insertion_sort(a, n); return; }
    for (uint i = 0; i < n; i += SORT_BLOCK) insertion_sort(a + i, min((uint)SORT_BLOCK, n - i));
    __global uint *src = a, *dst = tmp;
    for (;;) {
        if (run_end(src, 0, n) == n) break;
        for (uint i = 0; i < n;) {
            uint m = run_end(src, i, n);
            if (m == n) {  // a last run without partner
                for (; i < n; ++i) dst[i] = src[i];
                break;
            }
            uint e = run_end(src, m, n);
            merge_runs(src, i, m, e, dst);
            i = e;
        }
        __global uint *swap = src; src = dst; dst = swap;
    }
    if (src != a)
        for (uint i = 0; i < n; ++i) a[i] = src[i];
}

// Collapse rule: in a sorted slot, a cluster ends where the next diagonal is more than gap larger; it is
// kept as a candidate when its votes (raw hits) reach slot_threshold (votes.clh).

// Occurrences of the masked q-gram values in the read buffer, per read strand: masked value m on the
// forward strands, and where the index holds rc(m), m on the reverse strands.  A work-group per value, its
// work-items striding over the value's occurrences: a value frequent enough in the genome to be masked is
// often frequent in the reads too, and one work-item would walk its thousands of occurrences alone.
__kernel void count_masked(__global const uint *masked, const uint n_masked, __global const uint *I,
                           __global const uint *S, __global const uint *Sp, __global const uint *O,
                           __global const uchar *Ob, __global const uint *pos_rs, __global uint *masked_per_rs)
{
    uint k = get_group_id(0);
    if (k >= n_masked) return;
    for (uint strand = 0; strand < 2; ++strand) {
        uint ks, ke;
        index_pair(I, S, Sp, Ob, strand ? qgram_rc(masked[k]) : masked[k], &ks, &ke);
        for (uint b = ks + get_local_id(0); b < ke; b += get_local_size(0))
            atomic_inc(&masked_per_rs[pos_rs[O[b]] + strand]);
    }
}

#define THRESHOLD_ARGS __global const uint *rs_start, const uint r0, __global const uint *min_votes, \
                       __global const uint *masked_per_rs, const uint use_masked, const uint gap

// Clusters of the sorted diagonals d[0 .. n) (collapse rule above): all of them, and those with at least
// need votes.
inline void count_clusters_global(__global const uint *d, uint n, uint gap, uint need, uint *kept, uint *all)
{
    uint k = 0, a = 0, c0 = 0;
    for (uint i = 1; i <= n; ++i) {
        if (i < n && d[i] - d[i - 1] <= gap) continue;
        ++a;
        k += i - c0 >= need;
        c0 = i;
    }
    *kept = k;
    *all = a;
}

// One work-item per slot (read strand r0 + s): sort its diagonals, then count its clusters (n_all) and
// those that pass the votes threshold (n_kept).  Slot s is diags[slot_start[s] .. slot_start[s + 1]).
__kernel void sort_slots(__global uint *diags, __global uint *scratch, __global const uint *slot_start,
                         const uint n_slots, THRESHOLD_ARGS, __global uint *n_kept, __global uint *n_all)
{
    uint s = get_global_id(0);
    if (s >= n_slots) return;
    uint lo = slot_start[s], n = slot_start[s + 1] - lo;
    __global uint *d = diags + lo;
    sort_slot(d, scratch + lo, n);
    uint need = slot_threshold(rs_start, min_votes, masked_per_rs, use_masked, r0 + s);
    uint kept, all;
    count_clusters_global(d, n, gap, need, &kept, &all);
    n_kept[s] = kept;
    n_all[s] = all;
}

// Clusters of the sorted diagonals d[0 .. n) counted by the work-group: each work-item looks at the cluster
// starts of its stride and at most need - 1 entries after each (enough to tell whether the cluster reaches
// need votes); the counts meet in local counters.  Every work-item of the group calls it; the totals are
// valid for work-item 0 after the closing barrier.
#define COUNT_CLUSTERS_GROUP(NAME, SPACE)                                                                    \
    inline void NAME(SPACE const uint *d, uint n, uint gap, uint need, __local uint *counts, uint *kept,     \
                     uint *all)                                                                              \
    {                                                                                                        \
        uint lid = get_local_id(0), size = get_local_size(0), k = 0, a = 0;                                  \
        if (lid == 0) counts[0] = counts[1] = 0;                                                             \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                        \
        for (uint i = lid; i < n; i += size) {                                                               \
            if (i > 0 && d[i] - d[i - 1] <= gap) continue;                                                   \
            uint j = i + 1;                                                                                  \
            while (j < n && j - i < need && d[j] - d[j - 1] <= gap) ++j;                                     \
            ++a;                                                                                             \
            k += j - i >= need;                                                                              \
        }                                                                                                    \
        if (a) {                                                                                             \
            atomic_add(&counts[0], k);                                                                       \
            atomic_add(&counts[1], a);                                                                       \
        }                                                                                                    \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                        \
        *kept = counts[0];                                                                                   \
        *all = counts[1];                                                                                    \
    }
COUNT_CLUSTERS_GROUP(count_clusters_group_global, __global)
COUNT_CLUSTERS_GROUP(count_clusters_group_local, __local)

// sort_slots with one work-group per slot (global size n_slots times the local size), for devices with
// their own memory: there one work-item per slot walks far-apart slots in global memory, nothing coalesces,
// and the largest slots keep their work-items busy long after the others.  A slot of up to SORT_LOCAL
// entries is sorted in local memory by the whole group.  A larger one is sorted in blocks of SORT_LOCAL
// entries the same way, then merged by the whole group in passes over global memory (scratch the other
// buffer), so that the largest slots of a range take log2(n / SORT_LOCAL) passes of n / group size steps
// instead of one work-item's n log n.  The group then counts the clusters.
// Results equal sort_slots' (equal diagonals are indistinguishable).
__kernel void sort_slots_local(__global uint *diags, __global uint *scratch, __global const uint *slot_start,
                               const uint n_slots, THRESHOLD_ARGS, __global uint *n_kept, __global uint *n_all)
{
    __local uint buf[SORT_LOCAL];
    __local uint counts[2];
    uint s = get_group_id(0), lid = get_local_id(0);
    if (s >= n_slots) return;  // never so when launched as above; the whole group leaves
    uint lo = slot_start[s], n = slot_start[s + 1] - lo;  // the same for the whole group
    __global uint *d = diags + lo;
    uint need = slot_threshold(rs_start, min_votes, masked_per_rs, use_masked, r0 + s);
    uint kept, all;
    if (n <= SORT_LOCAL) {
        sort_block_local(d, n, buf);
        count_clusters_group_local(buf, n, gap, need, counts, &kept, &all);
    } else {
        sort_run_group(d, n, buf, scratch + lo);
        count_clusters_group_global(d, n, gap, need, counts, &kept, &all);
    }
    if (lid == 0) {
        n_kept[s] = kept;
        n_all[s] = all;
    }
}

// Writes the kept clusters of every sorted slot from cand_start[s] (exclusive prefix sum of n_kept):
// candidates come out sorted by (rs, diag_lo).
__kernel void write_candidates(__global const uint *diags, __global const uint *slot_start, const uint n_slots,
                               THRESHOLD_ARGS, __global const uint *cand_start, __global uint *rs,
                               __global uint *diag_lo, __global uint *diag_hi, __global uint *votes)
{
    uint s = get_global_id(0);
    if (s >= n_slots) return;
    uint lo = slot_start[s], n = slot_start[s + 1] - lo;
    __global const uint *d = diags + lo;
    uint need = slot_threshold(rs_start, min_votes, masked_per_rs, use_masked, r0 + s);
    uint c = cand_start[s], c0 = 0;
    for (uint i = 1; i <= n; ++i) {
        if (i < n && d[i] - d[i - 1] <= gap) continue;
        if (i - c0 >= need) {
            rs[c] = r0 + s;
            diag_lo[c] = d[c0];
            diag_hi[c] = d[i - 1];
            votes[c] = i - c0;
            ++c;
        }
        c0 = i;
    }
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
