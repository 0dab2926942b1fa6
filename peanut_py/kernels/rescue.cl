// Mate rescue: affine-gap alignment score of a mate against the reference window its anchored mate allows.
//
// One work-group per task (a read strand of the rescue read buffer and a global reference window [lo, hi)).
// The dynamic program is the one of docs/alignment.md (align.pyx) without a band: read a[0..m) against
// window b[0..W), cell (i, j) after i read and j window bases; row 0 is free (H(0, j) = 0, any start column);
//   D = H(i-1, j-1) + s(a[i-1], b[j-1])   (j > 0)
//   E = max(H(i, j-1) - (O+E), E(i, j-1) - E)     deletion, ties open
//   F = max(H(i-1, j) - (O+E), F(i-1, j) - E)     insertion, ties open
//   H = max(D, E, F[, -clip if LOCAL])            source priority: start > diagonal > deletion > insertion
// s = +A equal, -B different, -ambig for a read N or an ambiguous reference base. End cells: LOCAL any cell
// not a fresh start, scored H - (i == m ? 0 : clip); semi-global row m only, scored H. Best end: highest
// score, then smallest j, then largest i (align.pyx's rule).
// Besides the score and the end cell, each cell carries the diagonal j - i where its alignment starts (a
// fresh start at (i, j), or row 0 at column j), so the host gets the start and end diagonals of the best
// alignment without a traceback: the final alignment (align.pyx, banded around them) is cheap.
//
// Why a work-group per task: one work-item walking a whole window (~380 x 100 cells for 100 bp mates) is a
// chain of dependent memory accesses, and a batch has only a few hundred windows, far too few to hide its
// latency (the mapping core's queue would stall behind it). Here the read's rows are split
// into consecutive blocks of R rows, one block per work-item, and the work-items sweep the window's columns
// as a wavefront: at step s, work-item t computes column j = s - t of its rows, taking the cell above its
// first row (H, its start diagonal, F and its start diagonal at row i0 - 1, column j) from what work-item
// t - 1 left in `bnd` one step earlier, and the diagonal predecessor H(i0 - 1, j - 1) from what it took the
// step before. One barrier per step; W + 1 + blocks - 1 steps. Each work-item keeps the best end among its
// cells; the order above is total, so the group's best (reduced by work-item 0) does not depend on the
// split. A group of one work-item is the plain column-by-column program (what CPU devices run).
// `col` (local) holds H, E and their start diagonals of the previous column for rows 1..m (4 x rows_cap).
// Reference: tests/test_pairing.py (plain Python, same rules); results must be identical.

#define NEG_INF (-1073741824)
#define VALID_MIN (-536870912)

inline int ref_code(__global const uint *packed, __global const uint *ambiguous, long g)
{
    if ((ambiguous[g >> 5] >> (uint)(g & 31)) & 1u)
        return 4;
    return (int)((packed[g >> 4] >> (2 * (uint)(g & 15))) & 3u);
}

inline bool better_end(int t, int i, int j, int best, int best_i, int best_j)
{
    return t > best || (t == best && (j < best_j || (j == best_j && i > best_i)));
}

__kernel void rescue_align(const uint n_tasks,
                           __global const uint *task_rs,
                           __global const uint *task_lo,
                           __global const uint *task_hi,
                           __global const uint *packed,
                           __global const uint *ambiguous,
                           __global const uchar *text,
                           __global const uint *rs_start,
                           const int A, const int B, const int O, const int E, const int ambig, const int clip,
                           const int local_mode,
                           const int rows_cap,
                           __local int *col,
                           __local int *bnd,
                           __local int *red,
                           __global int *out_score,
                           __global int *out_end_i,
                           __global int *out_end_j,
                           __global int *out_start_diag)
{
    const uint task = get_group_id(0);
    if (task >= n_tasks)
        return;  // the whole group: no barrier is skipped by part of it
    const int t = (int)get_local_id(0), T = (int)get_local_size(0);
    const uint r0 = rs_start[task_rs[task]];
    const int m = (int)(rs_start[task_rs[task] + 1] - r0);
    __global const uchar *a = text + r0;
    const long lo = task_lo[task];
    const int W = (int)(task_hi[task] - task_lo[task]);
    const int R = (m + T - 1) / T;                 // rows per work-item
    const int blocks = R > 0 ? (m + R - 1) / R : 0;  // work-items holding rows
    const int i0 = t * R + 1, i1 = min(i0 + R - 1, m);
    __local int *H = col, *Ev = col + rows_cap, *HD = col + 2 * rows_cap, *ED = col + 3 * rows_cap;  // row i at [i - 1]
    const int go = O + E, gext = E;

    int best = NEG_INF, best_i = -1, best_j = -1, best_d = 0;
    for (int i = i0; i <= i1; i++) {  // column -1: nothing reachable
        H[i - 1] = NEG_INF;
        Ev[i - 1] = NEG_INF;
        HD[i - 1] = 0;
        ED[i - 1] = 0;
    }
    int above_h = NEG_INF, above_hd = 0;  // H(i0 - 1, j - 1) and its start diagonal
    const int steps = W + 1 + (blocks > 0 ? blocks - 1 : 0);
    for (int s = 0; s < steps; s++) {
        const int j = s - t;
        if (t < blocks && j >= 0 && j <= W) {
            const int b = j > 0 ? ref_code(packed, ambiguous, lo + j - 1) : 4;
            int diag, diag_d, hup, hup_d, f, f_d;
            if (t == 0) {  // row 0: H(0, j) = 0, an alignment may start at any column
                diag = j > 0 ? 0 : NEG_INF;
                diag_d = j > 0 ? j - 1 : 0;
                hup = 0;
                hup_d = j;
                f = NEG_INF;
                f_d = 0;
            } else {
                __local const int *in = bnd + 4 * (((s - 1) & 1) * T + t - 1);
                diag = above_h;
                diag_d = above_hd;
                hup = in[0];
                hup_d = in[1];
                f = in[2];
                f_d = in[3];
                above_h = hup;
                above_hd = hup_d;
            }
            for (int i = i0; i <= i1; i++) {
                const int c = a[i - 1];
                const int sc = (c == 4 || b == 4) ? -ambig : (c == b ? A : -B);
                const int d = j > 0 ? diag + sc : NEG_INF;
                const int left_open = H[i - 1] - go, left_ext = Ev[i - 1] - gext;
                const int e = left_ext > left_open ? left_ext : left_open;
                const int e_d = left_ext > left_open ? ED[i - 1] : HD[i - 1];
                const int up_open = hup - go, up_ext = f - gext;
                f_d = up_ext > up_open ? f_d : hup_d;
                f = up_ext > up_open ? up_ext : up_open;
                int h = max(max(d, e), f);
                if (local_mode)
                    h = max(h, -clip);
                int h_d = f_d;  // priority written as overrides: start > diagonal > deletion > insertion
                if (h == e)
                    h_d = e_d;
                if (h == d)
                    h_d = diag_d;
                const bool start = local_mode && h == -clip;
                if (start)
                    h_d = j - i;
                if ((local_mode && !start) || (!local_mode && i == m)) {
                    const int sc_end = local_mode ? h - (i == m ? 0 : clip) : h;
                    if (sc_end > VALID_MIN && better_end(sc_end, i, j, best, best_i, best_j)) {
                        best = sc_end;
                        best_i = i;
                        best_j = j;
                        best_d = h_d;
                    }
                }
                diag = H[i - 1];
                diag_d = HD[i - 1];
                H[i - 1] = h;
                HD[i - 1] = h_d;
                Ev[i - 1] = e;
                ED[i - 1] = e_d;
                hup = h;
                hup_d = h_d;
            }
            __local int *out = bnd + 4 * ((s & 1) * T + t);
            out[0] = hup;
            out[1] = hup_d;
            out[2] = f;
            out[3] = f_d;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    red[4 * t] = best;
    red[4 * t + 1] = best_i;
    red[4 * t + 2] = best_j;
    red[4 * t + 3] = best_d;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t == 0) {
        for (int u = 1; u < T; u++) {
            if (red[4 * u + 1] >= 0
                && (best_i < 0 || better_end(red[4 * u], red[4 * u + 1], red[4 * u + 2], best, best_i, best_j))) {
                best = red[4 * u];
                best_i = red[4 * u + 1];
                best_j = red[4 * u + 2];
                best_d = red[4 * u + 3];
            }
        }
        out_score[task] = best_i < 0 ? NEG_INF : best;
        out_end_i[task] = best_i;
        out_end_j[task] = best_j;
        out_start_diag[task] = best_d;
    }
}
