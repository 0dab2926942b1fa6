"""Merge a sample's sorted chunk BAMs into one coordinate-sorted BAM and index it (.bai), with samtools merge
and index inside pysam.

The chunks are merged in chunk order, so records at the same position keep the order that one sort of the
whole input gives them. Their headers are the same but for the command line in @PG: -c and -p keep one @RG
and one @PG line per ID instead of renaming the repeats.

Run by the workflow (Snakemake's `script:`): inputs the chunk BAMs in chunk order, outputs BAM and BAI.
"""
import sys

import pysam


def merge_bams(sources, target, threads=1):
    pysam.merge("-c", "-p", "-f", "-@", str(max(threads - 1, 0)), "-o", target, *sources)
    pysam.index("-@", str(max(threads - 1, 0)), target)


if __name__ == "__main__":
    sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
    try:
        merge_bams(list(sm.input), sm.output.bam, sm.threads)
    except pysam.SamtoolsError as e:
        print(f"peanut: error: {sm.output.bam}: samtools merge failed: {e}", file=sys.stderr)
        sys.exit(1)
