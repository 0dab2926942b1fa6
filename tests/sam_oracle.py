"""Plain Python SAM records: the reference that the Cython record writer (peanut_py._sam_records) is tested
against, and a simple writer of unmapped records for tests."""
import numpy as np

from peanut_py.sam_records import (FLAG_MATE_UNMAPPED, FLAG_PAIRED, FLAG_READ1, FLAG_READ2, FLAG_REVERSE,
                                   FLAG_SECONDARY, FLAG_UNMAPPED)

# IUPAC complement; reads hold uppercase letters only (reads.py), N and other letters map to themselves.
COMPLEMENT_TABLE = bytes.maketrans(b"ACGTRYKMBVDHSWN", b"TGCAYRMKVBHDSWN")


def reverse_complement(seq: bytes) -> bytes:
    return seq.translate(COMPLEMENT_TABLE)[::-1]


def _column(values, n, default):
    if values is None:
        return [default] * n
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def format_records(
    batch,
    ref_names,
    read,
    flag,
    ref_id,
    pos,
    mapq=None,
    cigar=None,
    next_ref_id=None,
    next_pos=None,
    tlen=None,
    tags=None,
    read_group_id=None,
) -> str:
    """SAM lines (each ending in a newline) for records of `batch`; one entry per record in each column.

    read: index of the record's read in the batch. ref_id / next_ref_id: index into `ref_names`, -1 for '*'
    (RNEXT is '=' when it equals RNAME). pos / next_pos: 0-based leftmost position, -1 for none (POS 0).
    mapq default 255 ('unavailable'; 0 for unmapped records), cigar default '*', tlen default 0,
    tags: preformatted 'NM:i:1\\tMD:Z:..' strings or None. read_group_id adds RG:Z to every record.
    SEQ/QUAL: as read for forward records, reverse-complemented / reversed with FLAG 0x10; '*' for
    secondary records (0x100), for empty reads and (QUAL) for FASTA input.
    """
    n = len(read)
    read = _column(read, n, 0)
    flag = _column(flag, n, 0)
    ref_id = _column(ref_id, n, -1)
    pos = _column(pos, n, -1)
    mapq = [0 if f & FLAG_UNMAPPED else 255 for f in flag] if mapq is None else _column(mapq, n, 0)
    cigar = _column(cigar, n, "*")
    next_ref_id = _column(next_ref_id, n, -1)
    next_pos = _column(next_pos, n, -1)
    tlen = _column(tlen, n, 0)
    tags = _column(tags, n, None)
    rg = f"\tRG:Z:{read_group_id}" if read_group_id else ""
    names, seqs, quals = batch.names, batch.seqs, batch.quals
    lines = []
    for i in range(n):
        r, f, ref, nref = read[i], flag[i], ref_id[i], next_ref_id[i]
        seq = seqs[r]
        if not seq or f & FLAG_SECONDARY:
            s = q = "*"
        elif f & FLAG_REVERSE:
            s = seq.translate(COMPLEMENT_TABLE)[::-1].decode()
            q = quals[r][::-1].decode() if quals is not None else "*"
        else:
            s = seq.decode()
            q = quals[r].decode() if quals is not None else "*"
        rnext = "*" if nref < 0 else ("=" if nref == ref else ref_names[nref])
        tag = tags[i]
        lines.append(
            f"{names[r] or '*'}\t{f}\t{ref_names[ref] if ref >= 0 else '*'}\t{pos[i] + 1}\t{mapq[i]}\t{cigar[i]}\t"
            f"{rnext}\t{next_pos[i] + 1}\t{tlen[i]}\t{s}\t{q}{chr(9) + tag if tag else ''}{rg}\n"
        )
    return "".join(lines)


def format_unmapped(batch, read_group_id=None) -> str:
    """Every read of `batch` as an unmapped record (FLAG 4, or 77/141 for pairs), in batch order."""
    if batch.paired:
        both = FLAG_PAIRED | FLAG_UNMAPPED | FLAG_MATE_UNMAPPED
        flag = [both | (FLAG_READ1 if i % 2 == 0 else FLAG_READ2) for i in range(batch.n)]
    else:
        flag = [FLAG_UNMAPPED] * batch.n
    return format_records(batch, [], range(batch.n), flag, None, None, read_group_id=read_group_id)


