"""The per-chunk bookkeeping of paired-end postprocessing (docs/paired.md), computed without the GIL by the
private ``_pair_items``: the hits a chunk of pairs aligns (its *items*) and their concordant combinations,
the combinations' scores for the pair choice, and from the choice each read's primary and other reported
items and the inputs of the MAPQ model.

Items are in (read, rank) order: per read, ranks 0..n_align-1 (primary, reported hits, XS; n_align =
min(reported + 1, kept)), then the candidates of a concordant combination (ranks below MAX_PAIR_HITS) not
among them.  A chunk's reads are 0..n_reads-1 (batch reads first_read..), mates 2p and 2p + 1.
"""
from typing import NamedTuple

import numpy as np

from . import _pair_items
from .pairs import MAX_PAIR_HITS


class PairItems(NamedTuple):
    """A chunk's items and concordant combinations.

    Per read: its kept hits, ranks aligned (``n_align``), reported hits (``report``) and its items
    ``item_ptr[r]:item_ptr[r + 1]``.  Per item: its rank, hit (index into the chunk's hits), batch read, strand
    (bool), validated global [start, end).  Per combination (grouped by pair, as
    pair_choice.choose_pairs needs): the forward and reverse hit's items, the forward hit's chunk read and
    rank, the reverse hit's rank and the insert."""

    kept: np.ndarray
    n_align: np.ndarray
    report: np.ndarray
    item_ptr: np.ndarray
    item_rank: np.ndarray
    item_hit: np.ndarray
    item_read: np.ndarray
    item_strand: np.ndarray
    item_start: np.ndarray
    item_end: np.ndarray
    fwd_item: np.ndarray
    rev_item: np.ndarray
    fwd_read: np.ndarray
    fwd_rank: np.ndarray
    rev_rank: np.ndarray
    insert: np.ndarray

    @property
    def n(self):
        """The number of items."""
        return len(self.item_rank)


class ChosenItems(NamedTuple):
    """Per read: the primary item (-1 without a kept hit) and whether it aligned (``mapped``); the primary's
    score (-1 unmapped), the best other score (``sub``, -1 without), the aligned length and the close rivals
    (``n_sub``) for mapq.mapq_model; ``tied`` (hits with the primary's edit distance: MAPQ 0), ``unseen_ties``
    (a rival the filtration may miss could score as well), the pair's MAPQ and ``boost`` (the pair raises the
    mate's MAPQ) for mapq.pair_mapq.  Per pair: ``proper``.  The other reported items of read r:
    ``rep_item[rep_ptr[r]:rep_ptr[r + 1]]``, in rank order."""

    prim: np.ndarray
    mapped: np.ndarray
    score: np.ndarray
    sub: np.ndarray
    aligned_len: np.ndarray
    n_sub: np.ndarray
    tied: np.ndarray
    unseen_ties: np.ndarray
    q_pe: np.ndarray
    boost: np.ndarray
    proper: np.ndarray
    rep_ptr: np.ndarray
    rep_item: np.ndarray


def _bounds(insert_size):
    return (False, 0, 0) if insert_size is None else (True, int(insert_size.low), int(insert_size.high))


def pair_items(rs, start, end, order, ptr, report, contig_offsets, insert_size, first_read=0,
               max_pair_hits=MAX_PAIR_HITS):
    """The items and concordant combinations of a chunk's reads, from its hits (read-strand id ``rs``
    (uint32), validated global ``[start, end)`` (uint32, int64)) ranked by ranking.rank_hits (``order``,
    ``ptr``) and strata_counts (``report``, int32).  Each read's best ``max_pair_hits`` kept hits are
    candidates; their concordant FR combinations are those of pairs.concordant_combinations (none without
    ``insert_size``), on contigs from ``contig_offsets``."""
    arrays = _pair_items.pair_items(rs, start, end, order, ptr, report, contig_offsets, *_bounds(insert_size),
                                    first_read, max_pair_hits)
    return PairItems(*arrays[:2], report, *arrays[2:])


def combination_scores(items, pos, score):
    """From the items' alignments (``pos`` -1 where none, ``score``): each read's own score (its rank-0 item's
    score where aligned, else 0) and the combinations whose two items aligned, as pair_choice.choose_pairs
    takes them: (own, pair, rank of mate 1's hit, of mate 2's, forward hit's score, reverse hit's, insert)."""
    return _pair_items.combination_scores(items.kept, items.item_ptr, items.fwd_item, items.rev_item,
                                          items.fwd_read, items.fwd_rank, items.rev_rank, items.insert, pos, score)


def chosen_items(items, chosen, paired, q_pe, aln, contig, dist, order, ptr, unseen, insert_size):
    """ChosenItems of the pair choice (``chosen`` rank per read, ``paired`` and ``q_pe`` per pair, as
    pair_choice.choose_pairs returns them), from the items' alignments (align.BatchAlignments, ``contig`` per
    item), the chunk's hits' edit distances ``dist`` with their ranking (``order``, ``ptr``) and each read's
    unseen rival score (mapq.unseen_rival_score)."""
    return ChosenItems(*_pair_items.chosen_items(
        items.kept, items.n_align, items.report, items.item_ptr, items.item_rank, items.item_hit,
        items.item_strand.view(np.uint8), items.item_start, items.item_end, chosen,
        np.asarray(paired, dtype=bool).view(np.uint8), q_pe, aln.pos, aln.score, aln.read_begin, aln.read_end,
        contig, dist, order, ptr, np.asarray(unseen, dtype=np.int64), *_bounds(insert_size)))


def without_ties(mapq, tied):
    """MAPQ (int64) with 0 where the read's chosen hit is tied (ChosenItems.tied)."""
    return _pair_items.without_ties(mapq, tied)


def raised_where(boost, raised, mapq):
    """The pair-raised MAPQ (mapq.pair_mapq) where ``boost`` (ChosenItems.boost), else ``mapq``."""
    return _pair_items.raised_where(boost, raised, mapq)


__all__ = ["ChosenItems", "PairItems", "chosen_items", "combination_scores", "pair_items", "raised_where",
           "without_ties"]
