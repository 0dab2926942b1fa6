"""Postprocessing (PEANUT section 3.4): from a chunk's validated hits to SAM text.

Per read: duplicate removal and strata (ranking.py), the final banded affine-gap alignment of every reported
hit (align.py, or align_device.py on the device), MAPQ (mapq.py) and the SAM records (sam_records.py); pairs
are placed by pair_choice.py under the pair model of pairs.py.  One call handles one chunk of a batch, so a
thread pool can work on several chunks at once; the output does not depend on how reads are chunked.
"""
import numpy as np

from . import pairs
from .align import align_batch, clip_terminal_gaps, md_flat
from .mapq import mapq_model, pair_mapq
from .pair_choice import choose_pairs
from .ranking import expand, gather_read_strands, gather_segments, rank_hits, strata_counts
from .sam_records import format_pairs, format_single_end

# the alignment window extends this far beyond the validated interval, and the band this far beyond the
# diagonals of the validated alignment's two ends (edit-distance and affine optima can differ slightly)
WINDOW_PAD = 16
BAND_PAD = 8


_KEY = 1 << 32  # (read, rank) -> read * _KEY + rank


def _sorted_unique(keys):
    """np.unique of int64 keys, by a sort that releases the GIL (np.unique's hash table holds it)."""
    keys = np.sort(keys)
    if len(keys) > 1:
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    return keys


def _gather(source, starts, lengths):
    """Concatenate ``source[starts[i]:starts[i]+lengths[i]]`` for all i, with offsets."""
    return gather_segments(source, np.ascontiguousarray(starts, dtype=np.int64),
                           np.ascontiguousarray(lengths, dtype=np.int64))


class Postprocessor:
    """Turns one chunk of a batch's validated hits into SAM text; stateless apart from read-only inputs."""

    # chunks per batch and thread: batches queue up behind each other, so one chunk per worker keeps the pool
    # busy, and larger chunks mean fewer GIL-holding NumPy steps per read
    CHUNKS_PER_THREAD = 1

    def __init__(self, reference, genome_codes, opts, device=None):
        """``device``: where the final alignment runs with ``opts.align_on == "device"`` (the same results as
        align.pyx, bit for bit; see docs/alignment.md)."""
        if opts.align_on == "device":
            if device is None:
                raise ValueError("align_on='device' needs the device")
            from functools import partial

            from .align_device import align_batch_device

            self._aligner = partial(align_batch_device, device)
        elif opts.align_on == "cpu":
            self._aligner = align_batch
        else:
            raise ValueError(f"align_on must be 'cpu' or 'device', not {opts.align_on!r}")
        self.names = list(reference.names)
        self.offsets = np.asarray(reference.offsets, dtype=np.int64)
        self.ends = self.offsets + np.asarray(reference.lengths, dtype=np.int64)
        self.q = reference.q
        self.genome = genome_codes
        self.opts = opts

    def chunk_steps(self, batch, result, n_chunks):
        """Split a batch into ``n_chunks`` read ranges; each step returns (text, n_reads, stats)."""
        bounds = np.linspace(0, batch.n, max(1, min(n_chunks, batch.n)) + 1).astype(np.int64)
        read_of_hit = result.rs >> 1
        cuts = np.searchsorted(read_of_hit, bounds)

        def step(k):
            return lambda: self.process(batch, result, int(bounds[k]), int(bounds[k + 1]), int(cuts[k]), int(cuts[k + 1]))

        return [step(k) for k in range(len(bounds) - 1)]

    def _ranked(self, result, r0, r1, h0, h1):
        """Hits ``h0:h1`` (reads ``r0:r1``) deduplicated and in strata: the arrays, order, read_ptr,
        reported hits per read and size of the best stratum."""
        rs = np.ascontiguousarray(result.rs[h0:h1], dtype=np.uint32)
        start = np.ascontiguousarray(result.ref_start[h0:h1], dtype=np.uint32)
        end = np.ascontiguousarray(result.ref_end[h0:h1], dtype=np.int64)
        dist = np.ascontiguousarray(result.dist[h0:h1], dtype=np.int32)
        order, ptr, _ = rank_hits(rs, start, dist, r1 - r0, first_read=r0)
        report, n_best = strata_counts(order, ptr, dist, self.opts.n_strata, self.opts.max_hits)
        return rs, start, end, dist, order, ptr, report, n_best

    def process(self, batch, result, r0, r1, h0, h1):
        opts = self.opts
        n_reads = r1 - r0
        rs, start, end, dist, order, ptr, report, n_best = self._ranked(result, r0, r1, h0, h1)
        kept = np.diff(ptr)

        # align the reported hits plus the best unreported one (for XS)
        n_align = np.minimum(report + 1, kept)
        local_read, rank_in_read = expand(n_align)
        hit = order[ptr[local_read] + rank_in_read]
        strand = (rs[hit] & 1).astype(bool)
        read = local_read + r0

        aln, md, contig = self.align_hits(batch, read, strand, start[hit], end[hit])

        # per read: primary = first aligned hit (best stratum, leftmost); XS = best score among the others
        first = np.cumsum(n_align) - n_align
        has = (n_align > 0) & (report > 0)
        prim = first[has]
        prim_ok = aln.pos[prim] >= 0
        score = np.full(n_reads, -1, dtype=np.int64)
        sub = np.full(n_reads, -1, dtype=np.int64)
        score[np.flatnonzero(has)[prim_ok]] = aln.score[prim[prim_ok]]
        other = rank_in_read > 0
        np.maximum.at(sub, local_read[other & (aln.pos >= 0)], aln.score[other & (aln.pos >= 0)].astype(np.int64))
        second_stratum = kept - n_best  # hits worse than the best stratum
        n_sub = np.where(n_best > 1, n_best - 1, np.minimum(second_stratum, 1))
        aligned_len = np.zeros(n_reads, dtype=np.int64)
        aligned_len[np.flatnonzero(has)[prim_ok]] = (aln.read_end - aln.read_begin)[prim[prim_ok]]
        mapq = mapq_model(score, sub, n_sub, aligned_len, self.q, opts.scoring)
        mapq = np.where(n_best > 1, 0, mapq)

        return self.format_chunk(batch, r0, n_reads, report, first, strand, contig, aln, md, sub, mapq)

    def format_chunk(self, batch, r0, n_reads, report, first, strand, contig, aln, md, sub, mapq):
        """SAM text of a chunk of single-end reads: (text, n_reads, counts)."""
        text, mapped, multi = format_single_end(
            batch, self.names, self.offsets, r0, n_reads, report=report, first=first, mapq=mapq, sub=sub,
            strand=strand, contig=contig, aln=aln, md=md, secondary=self.opts.secondary,
            read_group_id=self.opts.read_group_id)
        return text, n_reads, {"mapped": mapped, "multi": multi}

    def align_hits(self, batch, read, strand, hit_start, hit_end):
        """Final alignment of hits (batch read index, strand, validated global [start, end) per hit):
        returns (BatchAlignments, md_flat's MD (text, offsets), contig index per hit)."""
        opts = self.opts
        read = np.ascontiguousarray(read, dtype=np.int64)
        read_codes, read_off = gather_read_strands(batch.codes, batch.offsets, read,
                                                   np.ascontiguousarray(strand, dtype=np.uint8))
        lengths = np.diff(read_off)

        hit_start = hit_start.astype(np.int64)
        hit_end = hit_end.astype(np.int64)
        contig = np.searchsorted(self.offsets, hit_start, side="right") - 1
        win_lo = np.maximum(hit_start - WINDOW_PAD, self.offsets[contig])
        win_hi = np.minimum(hit_end + WINDOW_PAD, self.ends[contig])
        ref_codes, ref_off = _gather(self.genome, win_lo, win_hi - win_lo)
        d0 = hit_start - win_lo
        d1 = hit_end - lengths - win_lo
        band_lo = (np.minimum(d0, d1) - BAND_PAD).astype(np.int32)
        band_hi = (np.maximum(d0, d1) + BAND_PAD).astype(np.int32)
        sc = opts.scoring
        aln = self._aligner(
            read_codes, read_off, ref_codes, ref_off, win_lo, band_lo, band_hi, opts.local,
            sc.match, sc.mismatch, sc.gap_open, sc.gap_extend, clip=sc.clip,
        )
        if opts.local:
            aln = clip_terminal_gaps(read_codes, read_off, ref_codes, ref_off, win_lo, aln, True, sc.match,
                                     sc.mismatch, sc.gap_open, sc.gap_extend, clip=sc.clip)
        md = md_flat(read_codes, read_off, ref_codes, ref_off, win_lo, aln)
        return aln, md, contig

    # --- paired-end -----------------------------------------------------------------------------------------

    def pair_chunk_steps(self, batch, result, n_chunks, insert_size):
        """As chunk_steps for a batch of pairs (reads alternate mate 1, mate 2): chunks never split a pair."""
        n_pairs = batch.n // 2
        bounds = 2 * np.linspace(0, n_pairs, max(1, min(n_chunks, n_pairs)) + 1).astype(np.int64)
        cuts = np.searchsorted(result.rs >> 1, bounds)

        def step(k):
            return lambda: self.process_pairs(
                batch, result, int(bounds[k]), int(bounds[k + 1]), int(cuts[k]), int(cuts[k + 1]), insert_size
            )

        return [step(k) for k in range(len(bounds) - 1)]

    def process_pairs(self, batch, result, r0, r1, h0, h1, insert_size):
        """SAM text of the pairs of reads r0..r1 (r0 even), as BWA-MEM places pairs (docs/paired.md).

        Each read's best MAX_PAIR_HITS hits (by edit distance) are candidates; their concordant FR
        combinations (pairs.concordant_combinations) and each read's primary, reported and XS hits (as for
        single-end reads) are aligned; pairs are scored with the alignment scores (pair_choice.pair_score) and the
        best concordant pair is chosen over the mates' own primaries when it beats them by PEN_UNPAIRED
        (pair_choice.choose_pairs, in place_pairs). MAPQ: the single-end model on the chosen hit, raised by the
        pair's MAPQ (mapq.pair_mapq). The records: sam_records.format_pairs (format_pair_chunk).
        """
        opts = self.opts
        n_reads = r1 - r0
        n_pairs = n_reads // 2
        rs, start, end, dist, order, ptr, report, _ = self._ranked(result, r0, r1, h0, h1)
        kept = np.diff(ptr)
        reads = np.arange(n_reads, dtype=np.int64)

        # candidates and their concordant combinations
        n_cand = np.minimum(kept, pairs.MAX_PAIR_HITS)
        c_read, c_rank = expand(n_cand)
        c_hit = order[ptr[c_read] + c_rank]
        c_start = start[c_hit].astype(np.int64)
        c_contig = np.searchsorted(self.offsets, c_start, side="right") - 1
        f, v, inserts = pairs.concordant_combinations(c_read, rs[c_hit] & 1, c_start, end[c_hit], c_contig,
                                                        insert_size)

        # align ranks 0..n_align-1 of every read (primary, reported hits, XS) and every hit of a combination
        n_align = np.minimum(report + 1, kept)
        a_read, a_rank = expand(n_align)
        key = _sorted_unique(np.concatenate([a_read * _KEY + a_rank, c_read[f] * _KEY + c_rank[f],
                                             c_read[v] * _KEY + c_rank[v]]))
        if len(key) == 0:  # no read of the chunk has a hit
            none = np.full(n_reads, -1, dtype=np.int64)
            return self.format_pair_chunk(batch, r0, n_reads, none, np.zeros(n_reads + 1, dtype=np.int64), none[:0],
                                          None, None, None, None, np.zeros(n_reads, dtype=bool), none, none,
                                          np.zeros(n_pairs, dtype=bool))
        i_read, i_rank = key // _KEY, key % _KEY
        hit = order[ptr[i_read] + i_rank]
        strand = (rs[hit] & 1).astype(bool)
        aln, md, contig = self.align_hits(batch, i_read + r0, strand, start[hit], end[hit])
        ok = aln.pos >= 0
        score_of = np.where(ok, aln.score, 0).astype(np.int64)

        # placement per pair (pair_choice.choose_pairs on the pair score of each combination)
        rank0 = np.searchsorted(key, reads * _KEY)  # item of each read's rank 0 (valid where kept > 0)
        rank0 = np.minimum(rank0, len(key) - 1)
        own = np.where((kept > 0) & ok[rank0], score_of[rank0], 0)
        fi = np.searchsorted(key, c_read[f] * _KEY + c_rank[f])
        vi = np.searchsorted(key, c_read[v] * _KEY + c_rank[v])
        good = ok[fi] & ok[vi]
        f_read, f_rank, v_rank = c_read[f][good], c_rank[f][good], c_rank[v][good]
        mate1_fwd = f_read % 2 == 0
        chosen, paired, q_pe = self.place_pairs(
            f_read // 2, np.where(mate1_fwd, f_rank, v_rank), np.where(mate1_fwd, v_rank, f_rank),
            score_of[fi][good], score_of[vi][good], inserts[good], own, insert_size)

        # per read: the chosen hit, then the others of ranks 0..n_align-1 (as for single-end reads)
        has = kept > 0
        prim = np.where(has, np.searchsorted(key, reads * _KEY + chosen), -1)
        mapped = np.zeros(n_reads, dtype=bool)
        mapped[has] = ok[prim[has]]
        o_read, j = expand(np.maximum(n_align - 1, 0))
        o_rank = j + (j >= chosen[o_read])
        o_item = np.searchsorted(key, o_read * _KEY + o_rank)
        score = np.full(n_reads, -1, dtype=np.int64)
        sub = np.full(n_reads, -1, dtype=np.int64)
        aligned_len = np.zeros(n_reads, dtype=np.int64)
        score[mapped] = aln.score[prim[mapped]]
        aligned_len[mapped] = (aln.read_end - aln.read_begin)[prim[mapped]]
        o_ok = ok[o_item]
        np.maximum.at(sub, o_read[o_ok], aln.score[o_item[o_ok]].astype(np.int64))
        # hits with the chosen hit's edit distance: ties make a mate ambiguous on its own
        chosen_dist = dist[hit[np.maximum(prim, 0)]]
        kept_read, _ = expand(kept)
        same = np.bincount(kept_read[dist[order] == chosen_dist[kept_read]], minlength=n_reads).astype(np.int64)
        n_sub = np.where(same > 1, same - 1, np.clip(kept - 1, 0, 1))
        mapq = mapq_model(score, sub, n_sub, aligned_len, self.q, opts.scoring)
        mapq = np.where(same > 1, 0, mapq).astype(np.int64)

        # pairs: proper = both mapped on a concordant combination; MAPQ raised by the pair's
        both = mapped[0::2] & mapped[1::2]
        proper = np.zeros(n_pairs, dtype=bool)
        if both.any():
            pa, pb = np.where(mapped, prim, 0)[0::2], np.where(mapped, prim, 0)[1::2]
            ha, hb = hit[pa], hit[pb]
            proper = both & pairs.concordant(insert_size, contig[pa], rs[ha] & 1, start[ha], end[ha],
                                               contig[pb], rs[hb] & 1, start[hb], end[hb])
        boost = np.repeat(paired & both, 2)
        mapq = np.where(boost, pair_mapq(mapq, np.repeat(q_pe, 2)), mapq)
        # the other reported hits of each read, in rank order (o_read is sorted)
        rep = o_ok & (o_rank < report[o_read])
        rep_ptr = np.zeros(n_reads + 1, dtype=np.int64)
        np.cumsum(np.bincount(o_read[rep], minlength=n_reads), out=rep_ptr[1:])
        return self.format_pair_chunk(batch, r0, n_reads, prim, rep_ptr, o_item[rep], strand, contig, aln, md, mapped,
                                      sub, mapq, proper)

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
