"""Summary of the demo mapping (single-end or pairs): mapped reads, MAPQ, proper pairs, and agreement with the
original BAM's positions."""
import gzip
import sys

import pysam


def main(sam_path, truth_path, tolerance=5):
    truth = {}
    with gzip.open(truth_path, "rt") as f:
        for line in f:
            name, mate, contig, pos, strand = line.split("\t")
            truth[name, mate] = (contig, int(pos), strand.strip())
    n = mapped = close = q20 = proper = 0
    with pysam.AlignmentFile(sam_path) as sam:
        for rec in sam:
            if rec.is_secondary or rec.is_supplementary:
                continue
            n += 1
            proper += rec.is_proper_pair
            if rec.is_unmapped:
                continue
            mapped += 1
            q20 += rec.mapping_quality >= 20
            t = truth.get((rec.query_name, "2" if rec.is_read2 else "1"))
            if t and rec.reference_name == t[0] and abs(rec.reference_start + 1 - t[1]) <= tolerance:
                close += 1
    pairs = f", {proper} properly paired ({100 * proper / max(n, 1):.2f} %)" if proper else ""
    print(f"demo: {n} reads, {mapped} mapped ({100 * mapped / max(n, 1):.2f} %){pairs}, {q20} with MAPQ >= 20, "
          f"{close} ({100 * close / max(n, 1):.2f} %) within {tolerance} bp of the original BAM position")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
