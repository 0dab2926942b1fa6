// One bit-vector size of kernels/myers.cl: included there once per WORDS (1..4), every name suffixed _w<WORDS>
// (WNAME), so that one program holds the four kernels (one build at start-up instead of four).

#define MAX_BAND (64 * WORDS - 1)

// ---- multi-word helpers (bit b of a vector is bit b & 63 of word b >> 6) -----------------------------

inline ulong WNAME(get_bit)(const ulong *v, int b)
{
    ulong r = 0;
#pragma unroll
    for (int w = 0; w < WORDS; w++)
        if (w == (b >> 6))
            r = (v[w] >> (b & 63)) & 1UL;
    return r;
}

inline void WNAME(set_bit)(ulong *v, int b)
{
#pragma unroll
    for (int w = 0; w < WORDS; w++)
        if (w == (b >> 6))
            v[w] |= 1UL << (b & 63);
}

inline void WNAME(shift_down)(ulong *v)  // row r moves to row r - 1: a right shift across words
{
#pragma unroll
    for (int w = 0; w + 1 < WORDS; w++)
        v[w] = (v[w] >> 1) | (v[w + 1] << 63);
    v[WORDS - 1] >>= 1;
}

// Semi-global banded edit distance in one frame of coordinates. Read base t is read[rstep * t]; reference
// base u of the frame (column u + 1) is global position gbase + gstep * u. Columns j_lo..j_hi are computed,
// d_lo <= j_lo <= d_hi. Returns the minimal value in row n over band columns (leftmost column in *col), or
// NO_ALIGNMENT when row n has no band cell in that column range.
int WNAME(banded_myers)(__global const uchar *read, long rstep, int n,
                 __global const uint *packed, __global const uint *ambiguous, long gbase, long gstep,
                 long d_lo, long d_hi, long j_lo, long j_hi, long *col)
{
    const int W = (int)(d_hi - d_lo + 1);
    const int w_W = W >> 6;  // bit W (the new bottom row) is bit_W in word w_W
    const ulong bit_W = 1UL << (W & 63);
    ulong VP[WORDS], VN[WORDS], B0[WORDS], B1[WORDS], B2[WORDS], B3[WORDS];
#pragma unroll
    for (int w = 0; w < WORDS; w++) {
        VP[w] = ~0UL;  // column j_lo: E(i) = i for every band row (and the virtual rows <= 0)
        VN[w] = 0;
        B0[w] = B1[w] = B2[w] = B3[w] = 0;
    }
    // Eq masks of the rows already in the window (rows 1..j_lo - d_lo when the contig clips the band), one
    // bit above where the first step wants them because every step starts with a shift.
    const long top0 = j_lo - d_hi;
    const long last = min((long)n, j_lo - d_lo);
    for (long r = max(1L, top0); r <= last; r++) {
        const uint c = read[rstep * (r - 1)];
        const int b = (int)(r - top0) + 1;
        if (c == 0) WNAME(set_bit)(B0, b);
        else if (c == 1) WNAME(set_bit)(B1, b);
        else if (c == 2) WNAME(set_bit)(B2, b);
        else if (c == 3) WNAME(set_bit)(B3, b);
    }

    // score = E(bottom row, j) until the bottom row reaches n, then E(n, j).
    bool have_n = (j_lo - d_lo >= n);
    int score = have_n ? n : (int)(j_lo - d_lo);
    int best = NO_ALIGNMENT;
    if (have_n && j_lo >= d_lo + n) {
        best = score;
        *col = j_lo;
    }

    for (long j = j_lo; j < j_hi; j++) {
        const long newbottom = j + 1 - d_lo;  // the row entering at bit W
        WNAME(shift_down)(B0);
        WNAME(shift_down)(B1);
        WNAME(shift_down)(B2);
        WNAME(shift_down)(B3);
        const uint c = newbottom <= n ? read[rstep * (newbottom - 1)] : 4u;
#pragma unroll
        for (int w = 0; w < WORDS; w++) {
            const ulong m = (w == w_W) ? bit_W : 0UL;
            B0[w] |= c == 0 ? m : 0UL;
            B1[w] |= c == 1 ? m : 0UL;
            B2[w] |= c == 2 ? m : 0UL;
            B3[w] |= c == 3 ? m : 0UL;
        }
        const long g = gbase + gstep * j;
        const uint base = ref_base(packed, g);
        const bool amb = ref_ambiguous(ambiguous, g);

        ulong X[WORDS], D0[WORDS], HP[WORDS], HN[WORDS];
        VP[0] &= ~1UL;   // helper row
        ulong carry = 0;
#pragma unroll
        for (int w = 0; w < WORDS; w++) {
            const ulong m = (w == w_W) ? bit_W : 0UL;
            VP[w] |= m;   // the left neighbour of the new bottom row is outside the band
            VN[w] &= ~m;
            const ulong eq = amb ? 0UL : (base == 0 ? B0[w] : base == 1 ? B1[w] : base == 2 ? B2[w] : B3[w]);
            X[w] = eq | VN[w];
            const ulong a = X[w] & VP[w];
            const ulong s = a + VP[w];
            const ulong s2 = s + carry;
            carry = (ulong)((s < a) | (s2 < s));
            D0[w] = (s2 ^ VP[w]) | X[w];
            HN[w] = VP[w] & D0[w];
            HP[w] = VN[w] | ~(VP[w] | D0[w]);
        }
        if (!have_n) {
            ulong d0_W = 0;
#pragma unroll
            for (int w = 0; w < WORDS; w++)
                d0_W |= (w == w_W) ? D0[w] & bit_W : 0UL;
            score += d0_W ? 0 : 1;
            have_n = (newbottom == n);
        } else {
            const int b = (int)(n - (j - d_hi));  // row n in this step's bit numbering
            score += (int)WNAME(get_bit)(HP, b) - (int)WNAME(get_bit)(HN, b);
        }
        WNAME(shift_down)(D0);
#pragma unroll
        for (int w = 0; w < WORDS; w++) {
            VN[w] = D0[w] & HP[w];
            VP[w] = HN[w] | ~(D0[w] | HP[w]);
        }
        if (have_n && j + 1 >= d_lo + n && (best == NO_ALIGNMENT || score < best)) {
            best = score;
            *col = j + 1;
        }
    }
    return best;
}

// One work-item per candidate, or (use_selected) per entry of selected[0 .. n_candidates), a list of
// candidate indices (best-stratum selection, kernels/select.cl); results are written at the candidate index.
__kernel void WNAME(validate_hits)(const uint n_candidates,
                            __global const uint *selected,
                            const uint use_selected,
                            __global const uint *cand_rs,
                            __global const uint *cand_diag_lo,
                            __global const uint *cand_diag_hi,
                            __global const uint *packed,
                            __global const uint *ambiguous,
                            __global const uint *contig_offsets,
                            __global const uint *contig_ends,
                            const uint n_contigs,
                            __global const uchar *text,
                            __global const uint *rs_start,
                            __global const uint *max_errors,  // by read length, see validation.max_errors
                            __global int *out_dist,
                            __global uint *out_start,
                            __global uint *out_end,
                            __global uint *out_keep)
{
    const uint item = get_global_id(0);
    if (item >= n_candidates)
        return;
    const uint gid = use_selected ? selected[item] : item;
    const uint rs = cand_rs[gid];
    const uint r0 = rs_start[rs];
    const int n = (int)(rs_start[rs + 1] - r0);
    int dist = NO_ALIGNMENT;
    uint start = 0, end = 0;

    const long k = (long)max_errors[n];
    long d_lo = (long)cand_diag_lo[gid] - k;
    long d_hi = (long)cand_diag_hi[gid] + k;
    if (d_hi - d_lo + 1 > MAX_BAND) {  // keep the band's centre, shrink it to MAX_BAND diagonals
        d_lo += (d_hi - d_lo + 1 - MAX_BAND) / 2;
        d_hi = d_lo + MAX_BAND - 1;
    }
    // The candidate's contig: the last one starting at or before its last read base on diagonal diag_hi.
    const long probe = (long)cand_diag_hi[gid] + n - 1;
    uint lo = 0, hi = n_contigs;  // find the number of contigs with offset <= probe
    while (lo < hi) {
        const uint mid = (lo + hi) / 2;
        if ((long)contig_offsets[mid] <= probe)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (n > 0 && lo > 0) {
        const long c_start = contig_offsets[lo - 1], c_end = contig_ends[lo - 1];
        const long j_lo = max(c_start, d_lo), j_hi = min(c_end, d_hi + n);
        if (j_lo <= d_hi && j_lo <= j_hi) {
            long e = 0;
            dist = WNAME(banded_myers)(text + r0, 1, n, packed, ambiguous, 0, 1, d_lo, d_hi, j_lo, j_hi, &e);
            if (dist != NO_ALIGNMENT && dist <= k) {
                // Backward frame: column j' = e - j, diagonal d' = (e - n) - d, anchored at the end e.
                long s = 0;
                WNAME(banded_myers)(text + r0 + (n - 1), -1, n, packed, ambiguous, e - 1, -1,
                             (e - n) - d_hi, (e - n) - d_lo, 0, min(e - j_lo, (e - n) - d_lo + n), &s);
                start = (uint)(e - s);
                end = (uint)e;
            }
        }
    }
    out_dist[gid] = dist;
    out_start[gid] = start;
    out_end[gid] = end;
    out_keep[gid] = (dist != NO_ALIGNMENT && dist <= k) ? 1u : 0u;
}

#undef MAX_BAND
