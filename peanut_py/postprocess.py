"""Postprocessing (PEANUT section 3.4): from a chunk's validated hits to SAM text.

Per read: duplicate removal and strata (ranking.py), the final banded affine-gap alignment of every reported
hit (align.py, or align_device.py on the device), MAPQ (mapq.py) and the SAM records (sam_records.py); pairs
are placed by pair_choice.py under the pair model of pairs.py.  One call handles one chunk of a batch, so a
thread pool can work on several chunks at once; the output does not depend on how reads are chunked.

Each chunk is processed in three steps: a plan (ranking, and the alignment problems it needs solved), the
solution of those problems (the aligner), and its finish (MAPQ, placement, SAM text).  On the CPU the pool
runs all three per chunk (``chunk_steps``); with the device aligner, ``two_phase_steps`` lets the pool plan
the chunks, solves the whole batch's problems in one device call (the pipeline's batch-step thread) and
leaves the chunks' finishing steps to the pool, so that the device sees one large launch per batch instead
of one small launch per chunk and thread.
"""
from functools import partial
from typing import NamedTuple

import numpy as np

from . import _hit_windows, _single_end
from .align import align_batch, alignments_with_md
from .mapq import MaskedQgrams, close_rival, close_rival_gap, mapq_model, pair_mapq, unseen_rival_score
from .pair_choice import choose_pairs
from .pair_items import chosen_items, combination_scores, pair_items, raised_where, without_ties
from .pipeline import TwoPhaseSteps
from .ranking import expand, gather_read_strands, rank_hits, strata_counts
from .sam_records import format_pairs, format_single_end

# the alignment window extends this far beyond the validated interval, and the band this far beyond the
# diagonals of the validated alignment's two ends (edit-distance and affine optima can differ slightly)
WINDOW_PAD = 16
BAND_PAD = 8


ALIGN_ON = ("auto", "cpu", "device")
# --align-on auto: the device aligns when the postprocessing pool has at most this many workers
AUTO_DEVICE_MAX_WORKERS = 6
# a batch's alignments on the device use at most this share of its global memory per launch; the mapping
# core's buffers and the resident reference hold the rest
DEVICE_ALIGN_FRACTION = 8


def resolve_align_on(align_on, device, workers=None):
    """Where the final alignment runs. "auto" is the device on a GPU or accelerator when the postprocessing
    pool has at most AUTO_DEVICE_MAX_WORKERS workers (or ``workers`` is not known), and the pool's threads
    otherwise, and always on a CPU device, whose cores the pool already uses.  On a GPU with few host
    threads the device's one launch per batch takes most of the pool's work away; with many threads the
    pool keeps up on its own and the launch only adds a step in one thread (docs/gpu.md)."""
    if align_on != "auto":
        return align_on
    if device is None or device.host_memory:
        return "cpu"
    return "device" if workers is None or workers <= AUTO_DEVICE_MAX_WORKERS else "cpu"


class AlignmentProblems(NamedTuple):
    """The final alignments a chunk asks for: per problem the read's strand codes
    (``read_codes[read_off[k]:read_off[k + 1]]``), its reference window (``ref_codes``, ``ref_off``, global
    start ``win_lo``), the band of diagonals [band_lo, band_hi] and the window's contig."""

    read_codes: np.ndarray
    read_off: np.ndarray
    ref_codes: np.ndarray
    ref_off: np.ndarray
    win_lo: np.ndarray
    band_lo: np.ndarray
    band_hi: np.ndarray
    contig: np.ndarray

    @property
    def n(self):
        """The number of problems."""
        return len(self.win_lo)


def _concatenated_offsets(parts):
    out, base = [np.zeros(1, dtype=np.int64)], 0
    for off in parts:
        out.append(np.asarray(off[1:], dtype=np.int64) + base)
        base += int(off[-1])
    return np.concatenate(out)


def concatenate_problems(problems):
    """One AlignmentProblems of several chunks', in their order."""
    if len(problems) == 1:
        return problems[0]
    return AlignmentProblems(
        np.concatenate([p.read_codes for p in problems]), _concatenated_offsets([p.read_off for p in problems]),
        np.concatenate([p.ref_codes for p in problems]), _concatenated_offsets([p.ref_off for p in problems]),
        *(np.concatenate([getattr(p, f) for p in problems]) for f in ("win_lo", "band_lo", "band_hi", "contig")))


def slice_alignments(aln, a, b):
    """Alignments ``a:b`` of a BatchAlignments, with their own CIGAR offsets."""
    c0, c1 = int(aln.cigar_offsets[a]), int(aln.cigar_offsets[b])
    return type(aln)(aln.pos[a:b], aln.ref_end[a:b], aln.read_begin[a:b], aln.read_end[a:b], aln.score[a:b],
                     aln.nm[a:b], aln.cigar[c0:c1], aln.cigar_offsets[a:b + 1] - c0)


def next_stratum_sizes(order, ptr, dist, n_best):
    """Per read (``order``/``ptr`` from rank_hits): its hits one edit distance worse than its best (those at
    most one worse, less the ``n_best`` of its best stratum)."""
    return _single_end.next_stratum_sizes(_int64(order), _int64(ptr), np.ascontiguousarray(dist, dtype=np.int32),
                                          _int64(n_best))


def _int64(values):
    return np.ascontiguousarray(values, dtype=np.int64)


class Postprocessor:
    """Turns one chunk of a batch's validated hits into SAM text; stateless apart from read-only inputs."""

    # chunks per batch and thread: batches queue up behind each other, so one chunk per worker keeps the pool
    # busy, and larger chunks mean fewer GIL-holding NumPy steps per read
    CHUNKS_PER_THREAD = 1

    def __init__(self, reference, genome, opts, device=None):
        """``genome``: the reference's bases (genome.HostGenome), whose windows the final alignment unpacks;
        ``device``: where the final alignment runs with ``opts.align_on`` "device" or "auto" on a GPU (the
        same results as align.pyx, bit for bit; see docs/alignment.md)."""
        if opts.align_on not in ALIGN_ON:
            raise ValueError(f"align_on must be one of {ALIGN_ON}, not {opts.align_on!r}")
        self.align_on = resolve_align_on(opts.align_on, device)
        if self.align_on == "device":
            if device is None:
                raise ValueError("align_on='device' needs the device")
            from .align_device import align_batch_device, default_budget

            budget = min(default_budget(device), max(1, device.global_mem // DEVICE_ALIGN_FRACTION))
            self._aligner = partial(align_batch_device, device, memory_budget=budget)
        else:
            self._aligner = align_batch
        self.names = list(reference.names)
        self.offsets = np.asarray(reference.offsets, dtype=np.int64)
        self.ends = self.offsets + np.asarray(reference.lengths, dtype=np.int64)
        self.q = reference.q
        self.step = reference.step
        # the q-grams the index masked as over-frequent: reads over them may have rivals filtration misses (MAPQ)
        self.masked = MaskedQgrams(reference.masked_kmers() if hasattr(reference, "masked_kmers") else None, self.q)
        self.genome = genome
        self.opts = opts

    # --- chunks and the three steps -------------------------------------------------------------------------

    def chunk_bounds(self, batch, result, n_chunks, paired=False):
        """Split a batch into at most ``n_chunks`` read ranges ``(r0, r1, h0, h1)`` (reads r0..r1, hits
        h0..h1); with ``paired``, ranges never split a pair."""
        if paired:
            n_pairs = batch.n // 2
            bounds = 2 * np.linspace(0, n_pairs, max(1, min(n_chunks, n_pairs)) + 1).astype(np.int64)
        else:
            bounds = np.linspace(0, batch.n, max(1, min(n_chunks, batch.n)) + 1).astype(np.int64)
        cuts = np.searchsorted(result.rs >> 1, bounds)
        return [(int(bounds[k]), int(bounds[k + 1]), int(cuts[k]), int(cuts[k + 1])) for k in range(len(bounds) - 1)]

    def chunk_steps(self, batch, result, n_chunks):
        """Split a batch into ``n_chunks`` read ranges; each step returns (text, n_reads, stats)."""
        return [partial(self.process, batch, result, *b) for b in self.chunk_bounds(batch, result, n_chunks)]

    def pair_chunk_steps(self, batch, result, n_chunks, insert_size):
        """As chunk_steps for a batch of pairs (reads alternate mate 1, mate 2): chunks never split a pair."""
        return [partial(self.process_pairs, batch, result, *b, insert_size)
                for b in self.chunk_bounds(batch, result, n_chunks, paired=True)]

    def process(self, batch, result, r0, r1, h0, h1):
        """SAM text of reads r0..r1 (hits h0..h1): plan, solve and finish in this thread."""
        problems, finish = self.plan(batch, result, r0, r1, h0, h1)
        return finish(self.solve(problems))

    def process_pairs(self, batch, result, r0, r1, h0, h1, insert_size):
        """As process for the pairs of reads r0..r1 (r0 even)."""
        problems, finish = self.plan_pairs(batch, result, r0, r1, h0, h1, insert_size)
        return finish(self.solve(problems))

    def two_phase_steps(self, batch, result, n_chunks, insert_size=None, paired=False):
        """A batch's postprocessing with one call of the aligner (pipeline.TwoPhaseSteps): the chunks' plans,
        then a join that solves all their alignment problems at once and returns the chunks' finishing
        steps (callables giving (text, n_reads, stats)); the same results as chunk_steps / pair_chunk_steps."""
        if paired:
            plans = [partial(self.plan_pairs, batch, result, *b, insert_size)
                     for b in self.chunk_bounds(batch, result, n_chunks, paired=True)]
        else:
            plans = [partial(self.plan, batch, result, *b) for b in self.chunk_bounds(batch, result, n_chunks)]
        return TwoPhaseSteps(plans, self.solve_planned)

    def solve_planned(self, planned):
        """The chunks' ``(problems, finish)`` plans solved in one call of the aligner: their finishing steps."""
        solved = self.solve(concatenate_problems([problems for problems, _ in planned]))
        steps, a = [], 0
        for problems, finish in planned:
            b = a + problems.n
            steps.append(partial(finish, slice_alignments(solved, a, b)))
            a = b
        return steps

    # --- the final alignment --------------------------------------------------------------------------------

    def alignment_problems(self, batch, read, strand, hit_start, hit_end):
        """The final alignments of hits (batch read index, strand, validated global [start, end) per hit):
        each read strand against its hit's window, within a band around the validated diagonals."""
        read_codes, read_off = gather_read_strands(batch.codes, batch.offsets, _int64(read),
                                                   np.ascontiguousarray(strand, dtype=np.bool_).view(np.uint8))
        contig, win_lo, win_len, band_lo, band_hi = _hit_windows.hit_windows(
            _int64(hit_start), _int64(hit_end), read_off, self.offsets, self.ends, WINDOW_PAD, BAND_PAD)
        ref_codes, ref_off = self.genome.windows(win_lo, win_len)
        return AlignmentProblems(read_codes, read_off, ref_codes, ref_off, win_lo, band_lo, band_hi, contig)

    def solve(self, problems):
        """The aligner (align.align_batch, or align_device's kernel) on ``problems``: BatchAlignments."""
        sc = self.opts.scoring
        p = problems
        return self._aligner(p.read_codes, p.read_off, p.ref_codes, p.ref_off, p.win_lo, p.band_lo, p.band_hi,
                             self.opts.local, sc.match, sc.mismatch, sc.gap_open, sc.gap_extend, clip=sc.clip)

    def complete(self, problems, aln):
        """The aligner's results finished: terminal gaps clipped (local mode) and MD strings, in one pass
        without the GIL (align.alignments_with_md: the problems and the aligner's results are this process's
        own, in the dtypes it makes, so they are taken as they are); returns (BatchAlignments, md_flat's MD
        (text, offsets), contig index per problem)."""
        sc = self.opts.scoring
        p = problems
        aln, md = alignments_with_md(p.read_codes, p.read_off, p.ref_codes, p.ref_off, p.win_lo, aln,
                                     self.opts.local, sc.match, sc.mismatch, sc.gap_open, sc.gap_extend,
                                     clip=sc.clip)
        return aln, md, p.contig

    def align_hits(self, batch, read, strand, hit_start, hit_end):
        """Final alignment of hits: alignment_problems, solve and complete in one call."""
        problems = self.alignment_problems(batch, read, strand, hit_start, hit_end)
        return self.complete(problems, self.solve(problems))

    def unseen_rivals(self, batch, r0, r1):
        """Per read r0..r1: the best score of a rival the filtration may have missed (mapq.unseen_rival_score),
        with the guarantee lowered by the read's bases under masked q-grams, and those bases (for mapq_model)."""
        covered = self.masked.coverage(batch.codes, batch.offsets[r0:r1 + 1])
        return unseen_rival_score(batch.lengths[r0:r1], self.q, self.step, self.opts.scoring, covered=covered), covered

    # --- single-end -----------------------------------------------------------------------------------------

    def _ranked(self, result, r0, r1, h0, h1, end_dtype=np.int64):
        """Hits ``h0:h1`` (reads ``r0:r1``) deduplicated and in strata: the arrays, order, read_ptr,
        reported hits per read and size of the best stratum. The hits' ends in ``end_dtype``: int64 for the
        pairs' arithmetic on them, uint32 (as the device stores them, no copy) for single-end chunks."""
        rs = np.ascontiguousarray(result.rs[h0:h1], dtype=np.uint32)
        start = np.ascontiguousarray(result.ref_start[h0:h1], dtype=np.uint32)
        end = np.ascontiguousarray(result.ref_end[h0:h1], dtype=end_dtype)
        dist = np.ascontiguousarray(result.dist[h0:h1], dtype=np.int32)
        order, ptr, _ = rank_hits(rs, start, dist, r1 - r0, first_read=r0)
        report, n_best = strata_counts(order, ptr, dist, self.opts.n_strata, self.opts.max_hits)
        return rs, start, end, dist, order, ptr, report, n_best

    def plan(self, batch, result, r0, r1, h0, h1):
        """Reads r0..r1 ranked: the alignment problems of their reported hits plus the best unreported one
        (for XS), and ``finish(solved)`` giving (text, n_reads, stats) from the aligner's results."""
        rs, start, end, dist, order, ptr, report, n_best = self._ranked(result, r0, r1, h0, h1, np.uint32)
        n_align, read, strand, hit_start, hit_end = _single_end.reported_hits(order, ptr, report, rs, start, end, r0)
        problems = self.alignment_problems(batch, read, strand, hit_start, hit_end)

        def finish(solved):
            aln, md, contig = self.complete(problems, solved)
            # per read: primary = first aligned hit (best stratum, leftmost); XS = best score among the others;
            # competing hits: the best stratum's others, else those one edit worse (a mismatch or a short gap
            # away from the best score, BWA-MEM's sub_n), at least the runner-up when it scores that close
            first, score, sub, n_sub, aligned_len, ties = _single_end.read_summary(
                n_align, report, n_best, order, ptr, dist, _int64(aln.pos),
                *(np.ascontiguousarray(x, dtype=np.int32) for x in (aln.score, aln.read_begin, aln.read_end)),
                close_rival_gap(self.opts.scoring))
            unseen, covered = self.unseen_rivals(batch, r0, r1)
            mapq = mapq_model(score, sub, n_sub, aligned_len, self.q, self.opts.scoring, unseen=unseen,
                              covered=covered, read_len=batch.lengths[r0:r1], ties=ties)
            return self.format_chunk(batch, r0, r1 - r0, report, first, strand, contig, aln, md, sub, mapq)

        return problems, finish

    def format_chunk(self, batch, r0, n_reads, report, first, strand, contig, aln, md, sub, mapq):
        """SAM text of a chunk of single-end reads: (text, n_reads, counts)."""
        text, mapped, multi = format_single_end(
            batch, self.names, self.offsets, r0, n_reads, report=report, first=first, mapq=mapq, sub=sub,
            strand=strand, contig=contig, aln=aln, md=md, secondary=self.opts.secondary,
            read_group_id=self.opts.read_group_id)
        return text, n_reads, {"mapped": mapped, "multi": multi}

    # --- paired-end -----------------------------------------------------------------------------------------

    def plan_pairs(self, batch, result, r0, r1, h0, h1, insert_size):
        """The pairs of reads r0..r1 (r0 even) ranked, as BWA-MEM places pairs (docs/paired.md): the alignment
        problems and ``finish(solved)`` giving (text, n_reads, stats), as plan.

        Each read's best MAX_PAIR_HITS hits (by edit distance) are candidates; their concordant FR
        combinations (pairs.concordant_combinations) and each read's primary, reported and XS hits (as for
        single-end reads) are aligned (this bookkeeping, and that of the choice below, without the GIL in
        pair_items.py); pairs are scored with the alignment scores (pair_choice.pair_score) and the
        best concordant pair is chosen over the mates' own primaries when it beats them by PEN_UNPAIRED
        (pair_choice.choose_pairs, in place_pairs). MAPQ: the single-end model on the chosen hit, raised by the
        pair's MAPQ (mapq.pair_mapq). The records: sam_records.format_pairs (format_pair_chunk).
        """
        n_reads = r1 - r0
        n_pairs = n_reads // 2
        rs, start, end, dist, order, ptr, report, _ = self._ranked(result, r0, r1, h0, h1)
        # candidates, their concordant combinations and the items to align: ranks 0..n_align-1 of every read
        # (primary, reported hits, XS) and every hit of a combination
        items = pair_items(rs, start, end, order, ptr, report, self.offsets, insert_size, first_read=r0)
        problems = self.alignment_problems(batch, items.item_read, items.item_strand, items.item_start,
                                           items.item_end)

        def finish(solved):
            if items.n == 0:  # no read of the chunk has a hit
                none = np.full(n_reads, -1, dtype=np.int64)
                return self.format_pair_chunk(batch, r0, n_reads, none, np.zeros(n_reads + 1, dtype=np.int64),
                                              none[:0], None, None, None, None, np.zeros(n_reads, dtype=bool), none,
                                              none, np.zeros(n_pairs, dtype=bool))
            aln, md, contig = self.complete(problems, solved)
            # placement per pair (pair_choice.choose_pairs on the pair score of each combination)
            own, *combinations = combination_scores(items, aln.pos, aln.score)
            chosen, paired, q_pe = self.place_pairs(*combinations, own, insert_size)
            # per read: the chosen hit, then the others of ranks 0..n_align-1 (as for single-end reads)
            unseen, covered = self.unseen_rivals(batch, r0, r1)
            c = chosen_items(items, chosen, paired, q_pe, aln, contig, dist, order, ptr, unseen, insert_size)
            mapq = mapq_model(c.score, c.sub, c.n_sub, c.aligned_len, self.q, self.opts.scoring, unseen=unseen,
                              covered=covered, read_len=batch.lengths[r0:r1])
            mapq = without_ties(mapq, c.tied)
            # pairs: MAPQ raised by the pair's where placed by a concordant combination
            close = close_rival(c.score, c.sub, c.n_sub, self.opts.scoring)
            mapq = raised_where(c.boost, pair_mapq(mapq, c.q_pe, c.unseen_ties, close), mapq)
            return self.format_pair_chunk(batch, r0, n_reads, c.prim, c.rep_ptr, c.rep_item, items.item_strand,
                                          contig, aln, md, c.mapped, c.sub, mapq, c.proper)

        return problems, finish

    def place_pairs(self, pair, rank_a, rank_b, score_a, score_b, insert, own, insert_size):
        """Placement of a chunk's pairs from their concordant combinations: pair_choice.choose_pairs with
        this run's scoring, returning (chosen rank per read, paired, q_pe per pair)."""
        return choose_pairs(pair, rank_a, rank_b, score_a, score_b, insert, own, insert_size, self.opts.scoring)

    def format_pair_chunk(self, batch, r0, n_reads, prim, rep_ptr, rep_item, strand, contig, aln, md, mapped, sub,
                          mapq, proper):
        """SAM text of a chunk of pairs: (text, n_reads, counts); ``aln`` None when the chunk has no item."""
        text, mapped_n, multi, proper_n, mate_unmapped = format_pairs(
            batch, self.names, self.offsets, r0, n_reads, prim=prim, mapped=mapped, mapq=mapq, sub=sub,
            rep_ptr=rep_ptr, rep_item=rep_item, proper=proper, strand=strand, contig=contig, aln=aln, md=md,
            secondary=self.opts.secondary, read_group_id=self.opts.read_group_id)
        return text, n_reads, {"mapped": mapped_n, "multi": multi, "proper": proper_n, "mate_unmapped": mate_unmapped}
