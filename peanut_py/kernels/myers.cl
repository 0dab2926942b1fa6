// Validation (PEANUT section 3.3): banded Myers/Hyyro bit-vector edit distance of every candidate.
//
// One work-item per candidate. The band of diagonals [d_lo, d_hi] (diagonal of cell (i, j) = j - i, where
// row i is the read prefix of length i and column j the reference prefix ending before base j) is held in
// WORDS 64-bit words that slide down one row per reference column (Hyyro 2003, as in RazerS 3 / SeqAn):
// bit 0 is a helper row just above the band, bits 1..W the band rows of the new column (W = band width).
// Cells outside the band are infinite. Two boundary rules make the bit-vector exact for that:
//   * helper row: its VP bit is cleared, so its horizontal delta is never -1 and no carry leaves it; its
//     value is then >= the cell to its left, and the vertical move out of it is never better than the
//     diagonal move into the top band row;
//   * new bottom row: its left neighbour (outside the band) gets vertical delta +1, so the horizontal move
//     out of it is never better than the diagonal move.
// Rows <= 0 that are still inside the first columns' window are virtual rows with value = row (Eq = 0);
// they keep row 0 at 0, i.e. the alignment may start in any band column (semi-global).
//
// A forward pass gives the minimal distance and the leftmost end column with it; a backward pass (same
// routine on the reversed read and reference, anchored at that end) gives the rightmost start with it.
// The Python reference in tests/test_validation.py is a plain dynamic program with the same rules.
//
// One program holds the kernel of every bit-vector size WORDS = 1..4 (validate_hits_w1 .. validate_hits_w4,
// kernels/myers_words.cl); validation.py runs each candidate with the smallest that its band needs.

#define NO_ALIGNMENT (-1)
#define WNAME(f) WNAME_(f, WORDS)
#define WNAME_(f, w) WNAME__(f, w)
#define WNAME__(f, w) f##_w##w

inline uint ref_base(__global const uint *packed, long g)
{
    return (packed[g >> 4] >> (2 * (uint)(g & 15))) & 3u;
}

inline uint ref_ambiguous(__global const uint *ambiguous, long g)
{
    return (ambiguous[g >> 5] >> (uint)(g & 31)) & 1u;
}

#define WORDS 1
#include "myers_words.clh"
#undef WORDS
#define WORDS 2
#include "myers_words.clh"
#undef WORDS
#define WORDS 3
#include "myers_words.clh"
#undef WORDS
#define WORDS 4
#include "myers_words.clh"
#undef WORDS

// Words of the bit-vector each item's band needs, at most max_words (the cap of validate_hits): the
// validation runs each class with the kernel compiled for it, so one wide band (a tandem repeat) no longer
// makes every candidate of the batch pay for the widest bit-vector.
__kernel void band_words(const uint n_items,
                         __global const uint *selected,
                         const uint use_selected,
                         __global const uint *cand_rs,
                         __global const uint *cand_diag_lo,
                         __global const uint *cand_diag_hi,
                         __global const uint *rs_start,
                         __global const uint *max_errors,
                         const uint max_words,
                         __global uint *words)
{
    const uint item = get_global_id(0);
    if (item >= n_items)
        return;
    const uint gid = use_selected ? selected[item] : item;
    const uint rs = cand_rs[gid];
    const uint n = rs_start[rs + 1] - rs_start[rs];
    // band_width + the helper bit, as validation.words_for_band
    const ulong bits = (ulong)(cand_diag_hi[gid] - cand_diag_lo[gid]) + 2 * (ulong)max_errors[n] + 2;
    words[item] = (uint)min((ulong)max_words, max((ulong)1, (bits + 63) / 64));
}
