# C-level interface of the banded affine-gap aligner, for other Cython modules (e.g. postprocess.pyx)
# that want to align inside their own nogil loops. The algorithm is specified in docs/alignment.md.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

cdef struct Scoring:
    int32_t A       # match bonus
    int32_t B       # mismatch penalty
    int32_t O       # gap open penalty (a gap of length L costs O + L*E)
    int32_t E       # gap extension penalty
    int32_t ambig   # penalty for a column with N in the read or an ambiguous reference base (code 4)
    int32_t clip    # local mode: penalty per soft-clipped read end (bwa -L)
    int32_t shortcut  # 1: take the provably unique ungapped alignment without the DP (align.pyx, ungapped_unique)

# Work buffers of one thread; grown on demand, never shared.
cdef struct AlignWork:
    int32_t *H       # one band row of H (band_width + 1 entries, last one a NEG_INF sentinel)
    int32_t *F       # one band row of F
    uint8_t *tb      # traceback bytes, (read_length + 1) * band_width
    size_t tb_cap
    int32_t row_cap

cdef struct AlignResult:
    int64_t ref_begin   # window-relative position of the first reference base aligned; -1 = no alignment
    int64_t ref_end     # window-relative, exclusive
    int32_t read_begin  # first aligned read base (= length of the leading soft clip)
    int32_t read_end    # exclusive
    int32_t score       # AS: sum of M/I/D column scores (clip penalties excluded)
    int32_t nm          # mismatches (N included) + inserted + deleted bases
    int32_t n_cigar     # run-length ops written to the caller's cigar buffer

cdef void work_init(AlignWork *w) noexcept nogil
cdef void work_free(AlignWork *w) noexcept nogil

# Returns 0 on success, -1 when memory could not be allocated, -2 when cigar_cap is too small
# (2 * read_length + 3 always suffices). cigar receives BAM-encoded ops (len << 4 | op).
cdef int align_core(const uint8_t *read, int32_t m, const uint8_t *ref, int32_t n,
                    int32_t band_lo, int32_t band_hi, bint local, const Scoring *sc,
                    AlignWork *w, uint32_t *cigar, int32_t cigar_cap, AlignResult *out) noexcept nogil

# Writes the MD string (no NUL) for an alignment; returns its length. md_cap >= 3 * ref_span + 16 suffices.
cdef int32_t md_core(const uint8_t *read, const uint8_t *ref, int64_t ref_begin,
                     const uint32_t *cigar, int32_t n_cigar, char *md, int32_t md_cap) noexcept nogil
