"""The final alignment: banded affine-gap (Gotoh) alignment with traceback (CIGAR, NM, MD, AS), the
ungapped shortcut and terminal-gap clipping, free of the GIL in the private ``_align`` (alignments_with_md:
clipping and MD of a postprocessing chunk's trusted arrays in one pass); docs/alignment.md
specifies it, and align_device.py runs the same alignment on the device."""
from ._align import (MAX_LENGTH, MAX_PENALTY, BatchAlignments, align, align_batch, alignments_with_md, batch_arrays,
                     cigar_string, cigar_tuples, clip_terminal_gaps, md_batch, md_flat, ungapped_shortcut)

__all__ = ["MAX_LENGTH", "MAX_PENALTY", "BatchAlignments", "align", "align_batch", "alignments_with_md",
           "batch_arrays", "cigar_string", "cigar_tuples", "clip_terminal_gaps", "md_batch", "md_flat",
           "ungapped_shortcut"]
