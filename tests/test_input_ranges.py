"""The writing process's cut of FASTQ files into batches by byte range (input_ranges.py, _fastq.count_records):
checked against a line-by-line reference on random and odd text, and the cut's ranges against the files."""
import random

import pytest

from helpers import EXAMPLE, fastq_records, write_fastq

from peanut_py import _fastq
from peanut_py.input_ranges import can_cut, cut

import numpy as np

FULL, INCOMPLETE, ODD = _fastq.FULL, _fastq.INCOMPLETE, _fastq.ODD


def reference_count(text, start, end, max_records):
    """count_records by lines: (records, position after them, status)."""
    body = text[:end]
    n, q = 0, start
    while n < max_records:
        lines, p = [], q
        # up to four lines from q: (first byte or None, line without its end or None if it does not end)
        for _ in range(4):
            nl = body.find(b"\n", p)
            lines.append((body[p:p + 1] or None, body[p:nl] if nl >= 0 else None))
            p = nl + 1 if nl >= 0 else len(body)
        (h0, header), (_, seq), (p0, plus), (_, qual) = lines
        if h0 is None:
            return n, q, INCOMPLETE
        if h0 != b"@":
            return n, q, ODD
        if header is None or seq is None:
            return n, q, INCOMPLETE
        if p0 is None:
            return n, q, INCOMPLETE
        if p0 != b"+":
            return n, q, ODD
        if plus is None:
            return n, q, INCOMPLETE
        u = q + len(header) + len(seq) + len(plus) + 3  # where the qualities start
        if u + len(seq) >= end:
            return n, q, INCOMPLETE
        if body[u + len(seq)] != 10:
            return n, q, ODD
        q = u + len(seq) + 1
        n += 1
    return n, q, FULL


def _random_fastq(rng, n):
    out = []
    for i in range(n):
        L = rng.randrange(0, 12)
        seq = "".join(rng.choice("ACGTN") for _ in range(L))
        rec = [f"@r{i} c", seq, rng.choice(["+", f"+r{i} c"]), "I" * L]
        odd = rng.random()
        if odd < 0.04:
            rec[3] = "I" * (L + rng.choice([-1, 1])) if L else "II"
        elif odd < 0.07:
            rec[2] = "-"
        elif odd < 0.09:
            rec[0] = "r" + rec[0][1:]
        elif odd < 0.11:
            rec.append("")  # a blank line
        elif odd < 0.13:
            rec[1] += "\r"
            rec[3] += "\r"
        out.append("\n".join(rec) + "\n")
    return "".join(out).encode()


def test_count_records_matches_the_reference_on_random_and_odd_text():
    rng = random.Random(5)
    for trial in range(400):
        text = _random_fastq(rng, rng.randrange(0, 30))
        if trial % 3 == 0 and text:
            text = text[: rng.randrange(len(text))]  # cut anywhere
        buf = np.frombuffer(text, np.uint8) if text else np.zeros(0, np.uint8)
        start = 0
        for _ in range(6):
            k = rng.randrange(0, 8)
            end = len(text) if rng.random() < 0.7 else rng.randrange(start, len(text) + 1)
            got = _fastq.count_records(buf, start, end, k)
            assert got == reference_count(text, start, end, k), (text, start, end, k)
            if got[2] != FULL:
                break
            start = got[1]


def test_count_records_on_real_reads():
    records = fastq_records(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz")
    text = "".join(f"@{name}\n{seq}\n+\n{qual}\n" for name, seq, qual in records).encode()
    buf = np.frombuffer(text, np.uint8)
    assert _fastq.count_records(buf, 0, len(text), 10 ** 6) == (len(records), len(text), INCOMPLETE)
    n, pos, status = _fastq.count_records(buf, 0, len(text), 700)
    assert (n, status) == (700, FULL) and text[:pos].count(b"\n") == 4 * 700
    with pytest.raises(ValueError):
        _fastq.count_records(buf, 10, 5, 1)


def _write(path, records):
    write_fastq(path, records)
    return path.read_bytes()


def test_the_cut_covers_the_files_in_batches_of_whole_records(tmp_path):
    r1 = fastq_records(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz")[:1000]
    r2 = fastq_records(EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz")[:1000]
    t1, t2 = _write(tmp_path / "1.fq", r1), _write(tmp_path / "2.fq", r2)
    cuts = list(cut([tmp_path / "1.fq", tmp_path / "2.fq"], 1, 300))
    assert [a.first for a in cuts] == [1, 301, 601, 901] and not any(a.tail for a in cuts)
    for i, text in enumerate((t1, t2)):
        spans = [a.spans[i] for a in cuts]
        assert b"".join(text[o:o + n] for o, n in spans) == text
        assert [text[o:o + n].count(b"\n") for o, n in spans] == [1200, 1200, 1200, 400]
    # interleaved: two records a unit
    inter = [r for pair in zip(r1, r2) for r in pair]
    text = _write(tmp_path / "i.fq", inter)
    cuts = list(cut([tmp_path / "i.fq"], 2, 400))
    assert [a.first for a in cuts] == [1, 401, 801] and sum(a.spans[0][1] for a in cuts) == len(text)


def test_what_is_not_four_line_records_becomes_the_tail(tmp_path):
    records = fastq_records(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz")[:100]
    text = _write(tmp_path / "a.fq", records)
    (tmp_path / "blank.fq").write_bytes(text + b"\n\n")
    cuts = list(cut([tmp_path / "blank.fq"], 1, 30))
    assert [(a.first, a.tail) for a in cuts] == [(1, False), (31, False), (61, False), (91, True)]
    assert cuts[-1].spans[0][1] is None
    # two files of pairs of different lengths: the tail holds the batch where they part
    _write(tmp_path / "b.fq", records[:95])
    cuts = list(cut([tmp_path / "a.fq", tmp_path / "b.fq"], 1, 30))
    assert [(a.first, a.tail) for a in cuts][-1] == (91, True)
    # an odd count of interleaved records
    cuts = list(cut([tmp_path / "a.fq"], 2, 30))
    assert not any(a.tail for a in cuts)
    _write(tmp_path / "odd.fq", records[:99])
    assert list(cut([tmp_path / "odd.fq"], 2, 30))[-1].tail


def test_only_regular_uncompressed_fastq_files_are_cut(tmp_path):
    (tmp_path / "a.fq").write_text("@r\nACGT\n+\nIIII\n")
    (tmp_path / "b.fa").write_text(">r\nACGT\n")
    assert can_cut([tmp_path / "a.fq"]) and can_cut([tmp_path / "a.fq", tmp_path / "a.fq"])
    assert not can_cut([tmp_path / "b.fa"]) and not can_cut([tmp_path / "a.fq", tmp_path / "b.fa"])
    assert not can_cut([EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"]) and not can_cut(["-"])
    assert not can_cut([tmp_path / "missing.fq"]) and not can_cut([tmp_path])


def test_the_ranges_read_back_as_the_whole_files_batches(tmp_path):
    """Reading the cut's ranges (``assignments``) gives the batches of the whole files: the same reads, names,
    qualities and record numbers; a tail is read in batches as the whole file would be."""
    from peanut_py import reads

    r1 = fastq_records(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz")[:700]
    r2 = fastq_records(EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz")[:700]
    write_fastq(tmp_path / "1.fq", r1)
    write_fastq(tmp_path / "2.fq", r2)
    (tmp_path / "1b.fq").write_bytes((tmp_path / "1.fq").read_bytes() + b"\n")  # a tail at the end

    def columns(batches):
        return [(b.first_record, b.names, b.seqs, b.quals) for b in batches]

    for paths, read in [([tmp_path / "1.fq"], reads.read_batches), ([tmp_path / "1b.fq"], reads.read_batches),
                        ([tmp_path / "1.fq", tmp_path / "2.fq"], reads.read_pair_batches)]:
        size = 200 if len(paths) == 1 else 400  # reads per batch
        whole = columns(read(*paths, max_reads=size))
        per_unit = 1
        units = size // len(paths)
        cuts = list(cut(paths, per_unit, units))
        got = columns(read(*paths, max_reads=size, assignments=iter(cuts)))
        assert got == whole and len(whole) == 4
    # a bad record: its record number in the file
    text = (tmp_path / "1.fq").read_text().splitlines()
    text[4 * 650 + 1] = text[4 * 650 + 1].replace("A", "!", 1)
    (tmp_path / "bad.fq").write_text("\n".join(text) + "\n")
    cuts = list(cut([tmp_path / "bad.fq"], 1, 200))
    with pytest.raises(reads.InputError, match="record 651"):
        list(reads.read_batches(tmp_path / "bad.fq", max_reads=200, assignments=iter(cuts)))


def test_the_cut_is_the_same_whatever_the_read_block(tmp_path, monkeypatch):
    """Records across block boundaries, and records longer than half a block (the block grows)."""
    import peanut_py.input_ranges as input_ranges

    records = fastq_records(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz")[:300]
    records[100] = ("long", "ACGT" * 300, "I" * 1200)
    _write(tmp_path / "a.fq", records)
    (tmp_path / "t.fq").write_bytes((tmp_path / "a.fq").read_bytes()[:-30])  # cut short inside a record
    for name in ("a.fq", "t.fq"):
        whole = list(cut([tmp_path / name], 1, 70))
        for block in (64, 301, 4096):
            monkeypatch.setattr(input_ranges._Text, "BLOCK", block)
            assert list(cut([tmp_path / name], 1, 70)) == whole
        monkeypatch.undo()
    assert [a.tail for a in whole] == [False] * 4 + [True]
