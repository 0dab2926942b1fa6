"""SAM records of a chunk of single-end reads or pairs, written without the GIL by the private ``_sam_records``.

Per read an unmapped record, or its primary hit with NM/MD/AS/XS and the other reported hits either in BWA's
XA tag or as 0x100 records; pairs add the mate fields (docs/paired.md).  The SAM flags are defined here
(from ``_sam_records``, whose nogil code uses them).
"""
import numpy as np

from . import _sam_records

FLAG_PAIRED = _sam_records.FLAGS["PAIRED"]
FLAG_PROPER_PAIR = _sam_records.FLAGS["PROPER_PAIR"]
FLAG_UNMAPPED = _sam_records.FLAGS["UNMAPPED"]
FLAG_MATE_UNMAPPED = _sam_records.FLAGS["MATE_UNMAPPED"]
FLAG_REVERSE = _sam_records.FLAGS["REVERSE"]
FLAG_MATE_REVERSE = _sam_records.FLAGS["MATE_REVERSE"]
FLAG_READ1 = _sam_records.FLAGS["READ1"]
FLAG_READ2 = _sam_records.FLAGS["READ2"]
FLAG_SECONDARY = _sam_records.FLAGS["SECONDARY"]
FLAG_SUPPLEMENTARY = _sam_records.FLAGS["SUPPLEMENTARY"]

_i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
_u8 = lambda a: np.ascontiguousarray(a, dtype=np.uint8)  # noqa: E731


def format_single_end(batch, names, contig_offsets, r0, n_reads, *, report, first, mapq, sub, strand, contig, aln,
                      md, secondary, read_group_id):
    """SAM text (bytes) of reads ``r0 .. r0 + n_reads - 1`` of ``batch`` and the counts ``(mapped, multi)``.

    Per read (local index i): ``report[i]`` hits are reported, the first at aligned item ``first[i]`` (the
    primary), the others after it (items without an alignment are skipped); ``mapq[i]``, ``sub[i]`` (XS, -1
    for none).  Per aligned item: ``strand``, ``contig``, and ``aln`` (align.BatchAlignments) with ``md``
    (align.md_flat's (text, offsets))."""
    return _sam_records.format_single_end(
        batch, names, contig_offsets, r0, n_reads, np.ascontiguousarray(report, dtype=np.int32), _i64(first),
        _i64(mapq), _i64(sub), _u8(strand), _i64(contig), aln.pos, aln.nm, aln.score, aln.cigar,
        aln.cigar_offsets, md[0], md[1], secondary, read_group_id)


def format_pairs(batch, names, contig_offsets, r0, n_reads, *, prim, mapped, mapq, sub, rep_ptr, rep_item, proper,
                 strand, contig, aln, md, secondary, read_group_id):
    """SAM text (bytes) of the pairs of reads ``r0 .. r0 + n_reads - 1`` (r0 and n_reads even; reads alternate
    mate 1, mate 2) and the counts ``(mapped, multi, proper, mate_unmapped)``.

    Per read (local index i): ``mapped[i]``, its primary item ``prim[i]``, ``mapq[i]``, ``sub[i]`` and its other
    reported items ``rep_item[rep_ptr[i]:rep_ptr[i + 1]]``; per pair ``proper[p]``.  Per item as for
    :func:`format_single_end`; ``aln`` None when the chunk has no aligned item."""
    if aln is None:
        items = (np.zeros(0, dtype=np.int64),) * 10
    else:
        items = (strand, contig, aln.pos, aln.ref_end, aln.nm, aln.score, aln.cigar, aln.cigar_offsets, *md)
    return _sam_records.format_pairs(
        batch, names, contig_offsets, r0, n_reads, _i64(prim), _u8(mapped), _i64(mapq), _i64(sub), _i64(rep_ptr),
        _i64(rep_item), _u8(proper), *items, secondary, read_group_id)


pair_flags = _sam_records.pair_flags
template_length_a = _sam_records.template_length_a

__all__ = ["format_single_end", "format_pairs", "pair_flags", "template_length_a"] + [
    name for name in globals() if name.startswith("FLAG_")]
