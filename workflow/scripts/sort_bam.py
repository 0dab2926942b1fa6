"""Coordinate-sort one chunk's BAM with samtools sort (inside pysam, so no samtools program is needed).

Run by the workflow (Snakemake's `script:`): input the chunk's BAM, output the sorted BAM; params.memory is
samtools sort's -m (per thread).
"""
import sys

import pysam


def sort_bam(source, target, threads=1, memory="768M"):
    pysam.sort("-@", str(max(threads - 1, 0)), "-m", memory, "-o", target, source)


if __name__ == "__main__":
    sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
    try:
        sort_bam(sm.input[0], sm.output[0], sm.threads, sm.params.memory)
    except pysam.SamtoolsError as e:
        print(f"peanut: error: {sm.input[0]}: samtools sort failed: {e}", file=sys.stderr)
        sys.exit(1)
