"""From validated hits to SAM text for a chunk of reads (PEANUT section 3.4, improved).

Per read: duplicate removal and strata (postprocess.pyx), the final banded affine-gap alignment of every
reported hit (align.pyx, nogil), MAPQ, and the SAM records (sam.py). One call handles one chunk of a batch,
so a thread pool can work on several chunks at once; the output does not depend on how reads are chunked.
"""
from dataclasses import dataclass

import numpy as np

from . import sam
from .align import align_batch, cigar_string, md_batch
from .postprocess import rank_hits, strata_counts

# read-strand codes: complement of A C G T N
_COMPLEMENT = np.array([3, 2, 1, 0, 4], dtype=np.uint8)

# the alignment window extends this far beyond the validated interval, and the band this far beyond the
# diagonals of the validated alignment's two ends (edit-distance and affine optima can differ slightly)
WINDOW_PAD = 16
BAND_PAD = 8
MAPQ_MAX = 60


@dataclass
class MapOptions:
    mode: str = "best"  # best | all | strata:N
    max_hits: int = 5
    min_identity: float = 0.8
    local: bool = True
    secondary: bool = False  # True: other hits as 0x100 records; False: BWA's XA tag on the primary
    match: int = 1
    mismatch: int = 4
    gap_open: int = 6
    gap_extend: int = 1
    clip: int = 5
    read_group_id: str = None

    @property
    def n_strata(self):
        if self.mode == "best":
            return 1
        if self.mode == "all":
            return 0
        return int(self.mode.split(":", 1)[1])


def mapq_model(score, sub, n_sub, aligned_len, q, opts):
    """MAPQ of primary hits (vectorised): BWA-MEM's shape, fed with peanut's hits.

    ``sub`` is the best score of any other hit of the read (or -1 when there is none); a missing rival is
    treated as a chance match of one q-gram (q * match), the least our filtration can find. Equal best hits
    give 0; the gap between the best and the runner-up, scaled by the log of the aligned length, gives the
    rest; low identity and many runner-ups lower it, as in BWA. See docs/mapping.md for the calibration.
    """
    score = np.asarray(score, dtype=np.float64)
    sub = np.maximum(np.asarray(sub, dtype=np.float64), q * opts.match)
    length = np.maximum(np.asarray(aligned_len, dtype=np.float64), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mapq = 30.0 * (1.0 - sub / np.maximum(score, 1.0)) * np.log(length)
        identity = 1.0 - (length * opts.match - score) / (opts.match + opts.mismatch) / length
    mapq = np.where(identity < 0.95, mapq * identity * identity, mapq)
    mapq = np.floor(mapq + 0.499) - np.floor(4.343 * np.log(np.asarray(n_sub, dtype=np.float64) + 1) + 0.499)
    mapq = np.where(sub >= score, 0, mapq)
    return np.clip(mapq, 0, MAPQ_MAX).astype(np.int32)


def _gather(source, starts, lengths):
    """Concatenate ``source[starts[i]:starts[i]+lengths[i]]`` for all i (vectorised), with offsets."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, dtype=source.dtype), offsets
    idx = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1] - starts, lengths)
    return source[idx], offsets


class Postprocessor:
    """Turns one chunk of a batch's validated hits into SAM text; stateless apart from read-only inputs."""

    def __init__(self, reference, genome_codes, opts):
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

    def process(self, batch, result, r0, r1, h0, h1):
        opts = self.opts
        n_reads = r1 - r0
        rs = np.ascontiguousarray(result.rs[h0:h1], dtype=np.uint32)
        start = np.ascontiguousarray(result.ref_start[h0:h1], dtype=np.uint32)
        end = np.ascontiguousarray(result.ref_end[h0:h1], dtype=np.int64)
        dist = np.ascontiguousarray(result.dist[h0:h1], dtype=np.int32)
        order, ptr, _ = rank_hits(rs, start, dist, n_reads, first_read=r0)
        report, n_best = strata_counts(order, ptr, dist, opts.n_strata, opts.max_hits)
        kept = np.diff(ptr)

        # align the reported hits plus the best unreported one (for XS)
        n_align = np.minimum(report + 1, kept)
        local_read = np.repeat(np.arange(n_reads, dtype=np.int64), n_align)
        rank_in_read = np.arange(int(n_align.sum()), dtype=np.int64) - np.repeat(np.cumsum(n_align) - n_align, n_align)
        hit = order[ptr[local_read] + rank_in_read]
        strand = (rs[hit] & 1).astype(bool)
        read = local_read + r0

        lengths = np.diff(batch.offsets)[read]
        # forward codes followed by the reverse complement of the whole batch: read i's reverse complement
        # starts at total + total - offsets[i + 1]
        total = len(batch.codes)
        both = np.concatenate([batch.codes, _COMPLEMENT[batch.codes[::-1]]])
        src = np.where(strand, 2 * total - batch.offsets[read + 1], batch.offsets[read])
        read_codes, read_off = _gather(both, src, lengths)

        contig = np.searchsorted(self.offsets, start[hit].astype(np.int64), side="right") - 1
        win_lo = np.maximum(start[hit].astype(np.int64) - WINDOW_PAD, self.offsets[contig])
        win_hi = np.minimum(end[hit] + WINDOW_PAD, self.ends[contig])
        ref_codes, ref_off = _gather(self.genome, win_lo, win_hi - win_lo)
        d0 = start[hit].astype(np.int64) - win_lo
        d1 = end[hit] - lengths - win_lo
        band_lo = (np.minimum(d0, d1) - BAND_PAD).astype(np.int32)
        band_hi = (np.maximum(d0, d1) + BAND_PAD).astype(np.int32)
        aln = align_batch(
            read_codes, read_off, ref_codes, ref_off, win_lo, band_lo, band_hi, opts.local,
            opts.match, opts.mismatch, opts.gap_open, opts.gap_extend, clip=opts.clip,
        )
        md = md_batch(read_codes, read_off, ref_codes, ref_off, win_lo, aln)

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
        mapq = mapq_model(score, sub, n_sub, aligned_len, self.q, opts)
        mapq = np.where(n_best > 1, 0, mapq)

        return self._records(batch, r0, n_reads, report, n_align, first, strand, contig, aln, md, dist[hit], score, sub, mapq)

    def _records(self, batch, r0, n_reads, report, n_align, first, strand, contig, aln, md, hit_dist, score, sub, mapq):
        opts = self.opts
        rec_read, rec_flag, rec_ref, rec_pos, rec_mapq, rec_cigar, rec_tags = [], [], [], [], [], [], []
        mapped = multi = 0
        names = self.names
        for r in range(n_reads):
            k0 = int(first[r])
            if report[r] == 0 or aln.pos[k0] < 0:
                rec_read.append(r0 + r)
                rec_flag.append(sam.FLAG_UNMAPPED)
                rec_ref.append(-1)
                rec_pos.append(-1)
                rec_mapq.append(0)
                rec_cigar.append("*")
                rec_tags.append(None)
                continue
            mapped += 1
            others = [k for k in range(k0 + 1, k0 + int(report[r])) if aln.pos[k] >= 0]
            if others:
                multi += 1
            tags = f"NM:i:{aln.nm[k0]}\tMD:Z:{md[k0]}\tAS:i:{aln.score[k0]}"
            if sub[r] >= 0:
                tags += f"\tXS:i:{sub[r]}"
            if others and not opts.secondary:
                xa = "".join(
                    f"{names[contig[k]]},{'-' if strand[k] else '+'}{aln.pos[k] - self.offsets[contig[k]] + 1},"
                    f"{cigar_string(aln.cigar[aln.cigar_offsets[k]:aln.cigar_offsets[k + 1]])},{aln.nm[k]};"
                    for k in others
                )
                tags += f"\tXA:Z:{xa}"
            for k in [k0] + (others if opts.secondary else []):
                rec_read.append(r0 + r)
                rec_flag.append((sam.FLAG_REVERSE if strand[k] else 0) | (sam.FLAG_SECONDARY if k != k0 else 0))
                rec_ref.append(int(contig[k]))
                rec_pos.append(int(aln.pos[k] - self.offsets[contig[k]]))
                rec_mapq.append(int(mapq[r]) if k == k0 else 0)
                rec_cigar.append(cigar_string(aln.cigar[aln.cigar_offsets[k]:aln.cigar_offsets[k + 1]]))
                rec_tags.append(tags if k == k0 else f"NM:i:{aln.nm[k]}\tMD:Z:{md[k]}\tAS:i:{aln.score[k]}")
        text = sam.format_records(
            batch, names, rec_read, rec_flag, rec_ref, rec_pos, mapq=rec_mapq, cigar=rec_cigar, tags=rec_tags,
            read_group_id=opts.read_group_id,
        )
        return text, n_reads, {"mapped": mapped, "multi": multi}
