// Mate rescue: affine-gap alignment score of a mate against the reference window its anchored mate allows.
//
// One work-item per task (a read strand of the rescue read buffer and a global reference window [lo, hi)).
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
// The program runs column by column; per task, scratch holds H, E and their start diagonals of the previous
// column for rows 0..m (4 (m + 1) ints from scratch_off[task]).
// Reference: tests/test_pairing.py (plain Python, same rules); results must be identical.

#define NEG_INF (-1073741824)
#define VALID_MIN (-536870912)

inline int ref_code(__global const uint *packed, __global const uint *ambiguous, long g)
{
    if ((ambiguous[g >> 5] >> (uint)(g & 31)) & 1u)
        return 4;
    return (int)((packed[g >> 4] >> (2 * (uint)(g & 15))) & 3u);
}

__kernel void rescue_align(const uint n_tasks,
                           __global const uint *task_rs,
                           __global const uint *task_lo,
                           __global const uint *task_hi,
                           __global const uint *packed,
                           __global const uint *ambiguous,
                           __global const uchar *text,
                           __global const uint *rs_start,
                           __global const ulong *scratch_off,
                           __global int *scratch,
                           const int A, const int B, const int O, const int E, const int ambig, const int clip,
                           const int local_mode,
                           __global int *out_score,
                           __global int *out_end_i,
                           __global int *out_end_j,
                           __global int *out_start_diag)
{
    const uint gid = get_global_id(0);
    if (gid >= n_tasks)
        return;
    const uint r0 = rs_start[task_rs[gid]];
    const int m = (int)(rs_start[task_rs[gid] + 1] - r0);
    __global const uchar *a = text + r0;
    const long lo = task_lo[gid];
    const int W = (int)(task_hi[gid] - task_lo[gid]);
    __global int *H = scratch + scratch_off[gid];
    __global int *Ev = H + (m + 1);
    __global int *HD = Ev + (m + 1);
    __global int *ED = HD + (m + 1);
    const int go = O + E, gext = E;

    int best = NEG_INF, best_i = -1, best_j = -1, best_d = 0;
    for (int i = 0; i <= m; i++) {  // column -1: nothing reachable
        H[i] = NEG_INF;
        Ev[i] = NEG_INF;
        HD[i] = 0;
        ED[i] = 0;
    }
    for (int j = 0; j <= W; j++) {
        const int b = j > 0 ? ref_code(packed, ambiguous, lo + j - 1) : 4;
        // row 0
        int diag = H[0], diag_d = HD[0];  // H(0, j-1), the diagonal predecessor of row 1
        int hup = 0, hup_d = j;           // H(0, j) = 0: an alignment may start at any column
        int f = NEG_INF, f_d = 0;         // F(0, j)
        H[0] = 0;
        HD[0] = j;
        Ev[0] = NEG_INF;
        for (int i = 1; i <= m; i++) {
            const int c = a[i - 1];
            const int s = (c == 4 || b == 4) ? -ambig : (c == b ? A : -B);
            const int d = j > 0 ? diag + s : NEG_INF;
            const int left_open = H[i] - go, left_ext = Ev[i] - gext;
            const int e = left_ext > left_open ? left_ext : left_open;
            const int e_d = left_ext > left_open ? ED[i] : HD[i];
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
                const int t = local_mode ? h - (i == m ? 0 : clip) : h;
                if (t > VALID_MIN && (t > best || (t == best && (j < best_j || (j == best_j && i > best_i))))) {
                    best = t;
                    best_i = i;
                    best_j = j;
                    best_d = h_d;
                }
            }
            diag = H[i];
            diag_d = HD[i];
            H[i] = h;
            HD[i] = h_d;
            Ev[i] = e;
            ED[i] = e_d;
            hup = h;
            hup_d = h_d;
        }
    }
    out_score[gid] = best_i < 0 ? NEG_INF : best;
    out_end_i[gid] = best_i;
    out_end_j[gid] = best_j;
    out_start_diag[gid] = best_d;
}
