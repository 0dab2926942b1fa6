"""The paired-end model: FR orientation, inserts, concordance and the concordant combinations of a chunk's hits.

Everything here is host-side arithmetic on validated hits (global padded coordinates, see
docs/architecture.md); it follows BWA-MEM (mem_pair), fed with peanut's edit-distance hits, and docs/paired.md
explains it.

Conventions:
- A pair's mates are reads ``2p`` (mate 1) and ``2p + 1`` (mate 2) of a batch.
- Orientation is FR (Illumina paired-end): one mate on the forward strand, the other on the reverse strand,
  the reverse mate's 3' end (its rightmost reference base) right of the forward mate's leftmost base.
- **Insert** of a forward hit ``[s_f, e_f)`` and a reverse hit ``[s_r, e_r)`` on one contig:
  ``e_r - s_f``, the template length from the forward mate's first base to the reverse mate's last. It is
  computed on the validated (semi-global, unclipped) hits, so clipping does not move it. A pair is
  **concordant** when the strands differ, the contig is the same and ``low <= insert <= high``.
"""
import numpy as np

from . import _pair_items

MAX_SAMPLE_INSERT = 10_000  # BWA's max_ins: longer inserts never enter the insert-size sample
UNIQUE_RATIO = 0.8  # a mate is unique when its runner-up's score is at most 0.8 of its best (BWA's MIN_RATIO)
PEN_UNPAIRED = 17  # BWA's -U: the score penalty for reporting the mates unpaired
MAX_PAIR_HITS = 64  # hits per mate considered for pairing (best first by edit distance)


def fr_insert(strand_a, start_a, end_a, strand_b, start_b, end_b):
    """Insert of two hits in FR orientation (vectorised): ``end(reverse) - start(forward)``; 0 when the
    strands are equal (no FR pair). Contigs are not checked here."""
    strand_a = np.asarray(strand_a)
    fwd_start = np.where(strand_a == 0, start_a, start_b).astype(np.int64)
    rev_end = np.where(strand_a == 0, end_b, end_a).astype(np.int64)
    return np.where(strand_a != np.asarray(strand_b), rev_end - fwd_start, 0)


def concordant(insert_size, contig_a, strand_a, start_a, end_a, contig_b, strand_b, start_b, end_b):
    """Whether two hits form a concordant FR pair (vectorised); never with ``insert_size`` None."""
    if insert_size is None:
        return np.zeros(np.shape(contig_a), dtype=bool)
    ins = fr_insert(strand_a, start_a, end_a, strand_b, start_b, end_b)
    return (
        (np.asarray(contig_a) == np.asarray(contig_b))
        & (np.asarray(strand_a) != np.asarray(strand_b))
        & (ins >= insert_size.low)
        & (ins <= insert_size.high)
    )


def hit_score(length, dist, scoring):
    """Alignment score estimated from an edit distance: every edit costs a match and a mismatch."""
    return scoring.match * length - (scoring.match + scoring.mismatch) * dist


def concordant_combinations(read, strand, start, end, contig, insert_size):
    """All concordant FR combinations of hits of mates ``read`` and ``read ^ 1`` (vectorised).

    Arrays describe candidate hits (any order): batch-local read index, strand, validated global
    ``[start, end)``, contig. Returns index arrays ``(fwd, rev)`` into them and the inserts, ordered by
    forward hit then reverse end. Every FR combination has exactly one forward hit, so looking up, for each
    forward hit, the mate's reverse hits ending in ``[start + low, start + high]`` finds all of them
    (without the GIL, in _pair_items.pyx; Postprocessor.plan_pairs uses the same code through
    pair_items.pair_items).
    """
    if insert_size is None:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    return _pair_items.concordant_combinations(i64(read), i64(strand), i64(start), i64(end), i64(contig),
                                               int(insert_size.low), int(insert_size.high))
