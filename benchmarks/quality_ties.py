"""Whether base qualities tell apart the hits of a read that tie on edit distance.

A read whose best hits tie (MAPQ 0, an XA alternative with the primary's NM) could still be placed by its base
qualities: a sequencing error usually has a lower quality than a correct base, so the copy at which the read's
mismatches have the lowest qualities (the most likely under a per-base error model, p = 10^(-Q/10)) would be
the true one more often than chance. This script checks that on simulated reads with a known truth:

    python benchmarks/quality_ties.py GENOME.fa[.gz] MAPPED.sam TRUTH.sam [--tolerance 20]

MAPPED.sam: peanut-py's (or bwa's) output with XA tags; TRUTH.sam: mason_simulator's ``-oa`` alignments. Only
reads whose primary and alternatives are all ungapped (CIGAR ``<n>M``) are counted. Prints one JSON line: the
tied reads, how many of them the reported hit, the quality choice and any of the tied hits place within
``--tolerance`` bp of the truth on its strand, the same for ties with mismatches (best NM > 0), and per cut-off
of a quality-based MAPQ (-10 log10 of the posterior's complement) the reads kept and the wrong ones.
"""
import argparse
import json
import math
import sys

import pysam

COMPLEMENT = str.maketrans("ACGTN", "TGCAN")
CUTOFFS = (1, 3, 10, 20, 30)


def mismatch_qualities(read, quals, window):
    """The qualities of the read's bases that differ from ``window`` (read and window of equal length)."""
    return [q for b, q, w in zip(read, quals, window) if b != w]


def placed_read(forward, forward_quals, reverse):
    """The read as it lies on the reference: reverse-complemented, qualities reversed, on the reverse strand."""
    if reverse:
        return forward.translate(COMPLEMENT)[::-1], forward_quals[::-1]
    return forward, forward_quals


def quality_choice(sums):
    """Index of the hit whose mismatch qualities sum lowest (the first on ties) and its posterior probability
    under independent per-base errors (p = 10^(-Q/10) at a mismatch, the matches' terms taken as equal)."""
    best = min(range(len(sums)), key=lambda k: (sums[k], k))
    weights = [10 ** ((sums[best] - s) / 10) for s in sums]
    return best, weights[best] / sum(weights)


def posterior_mapq(p):
    return 60 if p >= 1 - 1e-6 else int(-10 * math.log10(1 - p))


def ungapped_hits(record):
    """[(0-based start, reverse, NM)] of the primary and its XA alternatives, or None if any is gapped."""
    length = record.query_length
    if record.cigarstring != f"{length}M":
        return None
    hits = [(record.reference_start, record.is_reverse, record.get_tag("NM"))]
    if record.has_tag("XA"):
        for alt in record.get_tag("XA").strip(";").split(";"):
            contig, pos, cigar, nm = alt.split(",")
            if cigar != f"{length}M" or contig != record.reference_name:
                return None
            hits.append((abs(int(pos)) - 1, pos.startswith("-"), int(nm)))
    return hits


def score(genome, mapped, truth, tolerance=20):
    """The counts printed by main (see the module's docstring)."""
    origins = {}
    with pysam.AlignmentFile(truth, check_sq=False) as f:
        for r in f:
            if not r.is_unmapped:
                origins[r.query_name] = (r.reference_name, r.reference_start, r.is_reverse)
    out = {"tied": 0, "reported_right": 0, "quality_right": 0, "any_right": 0,
           "tied_with_mismatches": 0, "mismatches_reported_right": 0, "mismatches_quality_right": 0,
           "cutoffs": {str(c): {"kept": 0, "wrong": 0} for c in CUTOFFS}}
    sequences = {}
    with pysam.FastaFile(genome) as fasta, pysam.AlignmentFile(mapped, check_sq=False) as f:
        for r in f:
            if r.is_unmapped or r.is_secondary or r.is_supplementary or r.mapping_quality != 0:
                continue
            hits = ungapped_hits(r)
            if hits is None:
                continue
            best_nm = min(h[2] for h in hits)
            tied = [h for h in hits if h[2] == best_nm]
            if len(tied) < 2:
                continue
            if r.reference_name not in sequences:
                sequences[r.reference_name] = fasta.fetch(r.reference_name).upper()
            contig = sequences[r.reference_name]
            forward, quals = r.get_forward_sequence(), list(r.get_forward_qualities())
            sums = []
            for start, reverse, _ in tied:
                read, q = placed_read(forward, quals, reverse)
                sums.append(sum(mismatch_qualities(read, q, contig[start:start + len(read)])))
            k, posterior = quality_choice(sums)
            origin = origins.get(r.query_name)

            def right(hit):
                return origin is not None and origin[0] == r.reference_name and origin[2] == hit[1] \
                    and abs(origin[1] - hit[0]) <= tolerance

            out["tied"] += 1
            out["reported_right"] += right(tied[0])
            out["quality_right"] += right(tied[k])
            out["any_right"] += any(right(h) for h in tied)
            if best_nm > 0:
                out["tied_with_mismatches"] += 1
                out["mismatches_reported_right"] += right(tied[0])
                out["mismatches_quality_right"] += right(tied[k])
            mapq = posterior_mapq(posterior)
            for c in CUTOFFS:
                if mapq >= c:
                    out["cutoffs"][str(c)]["kept"] += 1
                    out["cutoffs"][str(c)]["wrong"] += not right(tied[k])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("genome", help="the reference FASTA (indexed by samtools faidx, or gzip with .fai/.gzi)")
    ap.add_argument("mapped", help="SAM with XA tags")
    ap.add_argument("truth", help="mason_simulator's -oa SAM")
    ap.add_argument("--tolerance", type=int, default=20, help="bp from the true start (default 20)")
    a = ap.parse_args(argv)
    print(json.dumps(score(a.genome, a.mapped, a.truth, a.tolerance)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
