// Final alignment on the device: banded affine-gap (Gotoh) alignment with traceback, giving the CIGAR
// (run-length BAM ops), NM, AS and the aligned intervals of each (read, reference window) pair.
//
// This is peanut_py/align.pyx (align_core + traceback) in OpenCL C 1.2, line for line: the recurrences,
// the boundary conditions, the source priority (start > diagonal > deletion > insertion, gap ties open), the
// end-cell rule (best score, then smallest j, then largest i) and the traceback are those of
// docs/alignment.md, so the results are bit-for-bit those of align_batch. Change one, change both.
//
// One work-item per alignment (inter-task parallelism, Ren et al. ch. 5): a batch of validated hits is many
// short alignments of similar size, which keeps every work-item busy without synchronisation.
//
// Scratch (global memory, owned by the launch). Per work-item g there are four slots: traceback bytes
// (rows 1..m of the band, m * W cells, cell (i, k) at (i - 1) * W + k, k = j - i - lo), the band rows of H
// and F (W + 1 ints each, the last one a NEG_INF sentinel) and the reversed CIGAR ops (2 m + 3 uints).
// Element c of g's slot of size S lives at
//     INTERLEAVED = 1:  c * n_items + g     (cell-major: work-items g, g+1, ... touch consecutive addresses
//                                            at the same step, so a GPU coalesces their accesses; GACT
//                                            reported ~10x from interleaving traceback storage)
//     INTERLEAVED = 0:  g * S + c           (item-major: each work-item streams through its own slot, what a
//                                            CPU device's caches and prefetchers want)
// All work-items of one launch use the same slot sizes (the launch's maxima), so the index is an affine
// function of c and g; addresses are 64-bit (slots of a large batch exceed 2^32 bytes).
//
// Scoring is compiled in (-D MATCH, MISMATCH, GAP_OPEN, GAP_EXTEND, AMBIG, CLIP: align.pyx's A, B, O, E, ambig,
// clip), so the compiler folds it into the inner loop.

#ifndef INTERLEAVED
#define INTERLEAVED 1
#endif

#define NEG_INF (-1073741824)   // -2^30, as align.pyx
#define VALID_MIN (-536870912)  // -2^29: scores above this come from real paths

#define OP_M 0u
#define OP_I 1u
#define OP_D 2u
#define OP_S 4u

#define SRC_START 0
#define SRC_DIAG 1
#define SRC_E 2
#define SRC_F 3

#if INTERLEAVED
#define AT(c, slot) ((ulong)(c) * (ulong)n_items + (ulong)g)
#else
#define AT(c, slot) ((ulong)g * (ulong)(slot) + (ulong)(c))
#endif

inline int column_score(int rc, int fc)
{
    if (rc == 4 || fc == 4)
        return -AMBIG;
    return rc == fc ? MATCH : -MISMATCH;
}

// Outputs of a pair without alignment (read or band empty, nothing reachable, or no M column).
inline void set_unaligned(uint g, __global long *pos, __global long *ref_end, __global int *read_begin,
                          __global int *read_end, __global int *score, __global int *nm, __global uint *n_ops)
{
    pos[g] = -1;
    ref_end[g] = -1;
    read_begin[g] = 0;
    read_end[g] = 0;
    score[g] = 0;
    nm[g] = 0;
    n_ops[g] = 0;
}

__kernel void gotoh_banded(const uint n_items,
                           __global const uchar *read_seq,
                           __global const long *read_off,
                           __global const uchar *ref_seq,
                           __global const long *ref_off,
                           __global const long *global_start,
                           __global const int *band_lo,
                           __global const int *band_hi,
                           __global const uchar *local_mode,
                           const ulong tb_slot,
                           const uint row_slot,
                           const uint op_slot,
                           __global uchar *tb,
                           __global int *H,
                           __global int *F,
                           __global uint *ops,
                           __global long *pos,
                           __global long *ref_end,
                           __global int *read_begin,
                           __global int *read_end,
                           __global int *score,
                           __global int *nm,
                           __global uint *n_ops,
                           __global int *overflow)
{
    const uint g = get_global_id(0);
    if (g >= n_items)
        return;
    __global const uchar *read = read_seq + read_off[g];
    __global const uchar *ref = ref_seq + ref_off[g];
    const int m = (int)(read_off[g + 1] - read_off[g]);
    const int n = (int)(ref_off[g + 1] - ref_off[g]);
    const int lo = max(band_lo[g], -m);  // diagonals outside [-m, n] hold no cells
    const int hi = min(band_hi[g], n);
    const int is_local = local_mode[g] != 0;
    const int go = GAP_OPEN + GAP_EXTEND, gext = GAP_EXTEND;

    set_unaligned(g, pos, ref_end, read_begin, read_end, score, nm, n_ops);
    if (m <= 0 || lo > hi)
        return;
    const int W = hi - lo + 1;

    // row 0: the alignment may begin at any reference position inside the band (free reference start)
    for (int k = 0; k < W; k++) {
        const int j = lo + k;
        H[AT(k, row_slot)] = (j >= 0 && j <= n) ? 0 : NEG_INF;
        F[AT(k, row_slot)] = NEG_INF;
    }
    H[AT(W, row_slot)] = NEG_INF;
    F[AT(W, row_slot)] = NEG_INF;

    const int start_value = -CLIP;
    int best_t = NEG_INF, best_i = -1, best_j = -1;
    for (int i = 1; i <= m; i++) {
        const int rc = read[i - 1];
        const int end_pen = i == m ? 0 : CLIP;
        const ulong row = (ulong)(i - 1) * (ulong)W;
        // band cells of this row inside the window [0, n]; the others are unreachable (those before j = 0 are
        // set now, those after j = n once the row is done: the row's last cell still reads (i-1, n) there)
        const int k_lo = i + lo < 0 ? -(i + lo) : 0;
        const int k_hi = min(n - (i + lo), W - 1);
        for (int k = 0; k < min(k_lo, W); k++) {
            H[AT(k, row_slot)] = NEG_INF;
            F[AT(k, row_slot)] = NEG_INF;
            tb[AT(row + k, tb_slot)] = 0;
        }
        int e = NEG_INF, hleft = NEG_INF;
        // H[k] still holds (i-1, j-1) when cell k is computed, H[k+1] and F[k+1] hold (i-1, j)
        int h_diag = k_lo <= k_hi ? H[AT(k_lo, row_slot)] : NEG_INF;
        for (int k = k_lo; k <= k_hi; k++) {
            const int j = i + lo + k;
            const int h_up = H[AT(k + 1, row_slot)];
            const int d = j > 0 ? h_diag + column_score(rc, ref[j - 1]) : NEG_INF;
            const int up_open = h_up - go;
            const int up_ext = F[AT(k + 1, row_slot)] - gext;
            const int f = up_ext > up_open ? up_ext : up_open;          // ties: open
            const int left_open = hleft - go;
            const int left_ext = e - gext;
            const int ee = left_ext > left_open ? left_ext : left_open;  // ties: open
            int h = max(max(d, ee), f);
            if (is_local)
                h = max(h, start_value);
            int src = SRC_F;
            if (h == ee)
                src = SRC_E;
            if (h == d)
                src = SRC_DIAG;
            if (is_local && h == start_value)
                src = SRC_START;
            tb[AT(row + k, tb_slot)] = (uchar)(src | ((left_ext > left_open) << 2) | ((up_ext > up_open) << 3));
            H[AT(k, row_slot)] = h;
            F[AT(k, row_slot)] = f;
            h_diag = h_up;
            e = ee;
            hleft = h;
            // candidate end cells: the last row (semiglobal) or any non-empty alignment (local)
            if ((is_local && src != SRC_START) || (!is_local && i == m)) {
                const int t = is_local ? h - end_pen : h;
                if (t > VALID_MIN && (t > best_t || (t == best_t && (j < best_j || (j == best_j && i > best_i))))) {
                    best_t = t;
                    best_i = i;
                    best_j = j;
                }
            }
        }
        for (int k = max(k_hi + 1, 0); k < W; k++) {
            H[AT(k, row_slot)] = NEG_INF;
            F[AT(k, row_slot)] = NEG_INF;
            tb[AT(row + k, tb_slot)] = 0;
        }
    }
    if (best_i < 0)
        return;

    // Traceback. Ops arrive from the alignment's end; they are run-length encoded in `run` and written to
    // the op slot in that (reversed) order; the compaction kernel reverses them.
    int i = best_i, j = best_j, state = SRC_START, n_m = 0, nm_count = 0, sc = 0;
    uint count = 0, run = 0;
    if (m - best_i > 0)
        ops[AT(count++, op_slot)] = (uint)(m - best_i) << 4 | OP_S;
    for (;;) {
        if (state == SRC_START && i == 0)
            break;  // row 0 (E and F never lead there)
        const uchar b = tb[AT((ulong)(i - 1) * (ulong)W + (ulong)(j - i - lo), tb_slot)];
        uint op;
        if (state == SRC_START) {  // in H
            const int s = b & 3;
            if (s == SRC_START)
                break;
            if (s != SRC_DIAG) {
                state = s;
                sc -= GAP_OPEN;  // the gap opened here (seen from the end) is paid once
                continue;
            }
            const int rc = read[i - 1], fc = ref[j - 1];
            const int cs = column_score(rc, fc);
            sc += cs;
            nm_count += (rc == 4 || fc == 4 || rc != fc);
            n_m++;
            op = OP_M;
            i--;
            j--;
        } else if (state == SRC_E) {  // deletion: consumes reference
            sc -= GAP_EXTEND;
            nm_count++;
            op = OP_D;
            j--;
            if (!(b & 4))
                state = SRC_START;
        } else {  // insertion: consumes read
            sc -= GAP_EXTEND;
            nm_count++;
            op = OP_I;
            i--;
            if (!(b & 8))
                state = SRC_START;
        }
        if (run != 0 && (run & 0xfu) == op) {
            run += 16;
        } else {
            if (run != 0) {
                if (count >= op_slot) {
                    atomic_inc(overflow);
                    return;
                }
                ops[AT(count++, op_slot)] = run;
            }
            run = 16u | op;
        }
    }
    if (n_m == 0)
        return;  // only gaps: reported as no alignment
    if (count + (run != 0) + (i > 0) > op_slot) {
        atomic_inc(overflow);
        return;
    }
    if (run != 0)
        ops[AT(count++, op_slot)] = run;
    if (i > 0)
        ops[AT(count++, op_slot)] = (uint)i << 4 | OP_S;
    pos[g] = global_start[g] + j;
    ref_end[g] = global_start[g] + best_j;
    read_begin[g] = i;
    read_end[g] = best_i;
    score[g] = sc;
    nm[g] = nm_count;
    n_ops[g] = count;
}

// Compaction: pair g's ops, reversed into alignment order, to cigar[cigar_off[g] ..] (cigar_off is the
// exclusive prefix sum of n_ops, computed by a pyopencl scan).
__kernel void compact_cigars(const uint n_items,
                             const uint op_slot,
                             __global const uint *ops,
                             __global const uint *n_ops,
                             __global const long *cigar_off,
                             __global uint *cigar)
{
    const uint g = get_global_id(0);
    if (g >= n_items)
        return;
    const uint count = n_ops[g];
    __global uint *out = cigar + cigar_off[g];
    for (uint t = 0; t < count; t++)
        out[t] = ops[AT(count - 1 - t, op_slot)];
}
