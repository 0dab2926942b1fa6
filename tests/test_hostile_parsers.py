"""Property tests (hypothesis) of the parsers that meet user input: reads (FASTQ/FASTA, the _fastq fast path and
the dnaio fallback), the reference FASTA reader, and the option parsers.

Valid generated input parses to exactly what was generated; mutated input (truncation, binary and control
bytes, NULs, CR/LF mixes, lines lost or repeated, gzip damage) parses right or raises an InputError that names
the file and, for reads, the record; never another exception. A small independent oracle in this module says
which records a mutation breaks. Hypothesis runs derandomized with no example database, so CI sees the same
examples every time.
"""
import argparse
import contextlib
import dataclasses
import gzip
import io
import math
import re
import signal

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from peanut_py import cli, fasta, options
from peanut_py.errors import InputError, PeanutError
from peanut_py.reads import read_batches, read_interleaved_batches, read_pair_batches

SETTINGS = dict(derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])
EXAMPLES = 300  # per property: the module stays under about a minute on two cores

NAME_CHARS = "".join(chr(c) for c in range(0x21, 0x7F) if c != ord("@"))
SEQ_CHARS = "ACGTNacgtnRYKMSWBDHVryk.-"
QUAL_CHARS = "".join(chr(c) for c in range(33, 127))
CODE = {**{c: 4 for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}, "A": 0, "C": 1, "G": 2, "T": 3}


# --- generated reads ------------------------------------------------------------------------------------------


@st.composite
def reads(draw, max_len=160):
    """(name, comment or '', sequence, qualities) of one read; names SAM can carry, up to its 254 characters."""
    name = draw(st.one_of(st.text(NAME_CHARS, min_size=1, max_size=24),
                          st.text(NAME_CHARS, min_size=240, max_size=254)))
    comment = draw(st.one_of(st.just(""), st.text("".join(chr(c) for c in range(0x20, 0x7F)), max_size=20)))
    seq = draw(st.text(SEQ_CHARS, max_size=max_len))
    qual = draw(st.text(QUAL_CHARS, min_size=len(seq), max_size=len(seq)))
    return name, comment, seq, qual


def fastq_bytes(records, crlf=False, repeat_header=False, final_newline=True):
    end = "\r\n" if crlf else "\n"
    out = []
    for name, comment, seq, qual in records:
        header = name + (f" {comment}" if comment else "")
        out.append(f"@{header}{end}{seq}{end}+{header if repeat_header else ''}{end}{qual}{end}")
    text = "".join(out)
    if not final_newline and records and records[-1][2]:  # "+\n" then EOF reads as cut short, not as an empty read
        text = text[: -len(end)]
    return text.encode("ascii")


def fasta_bytes(records, width, crlf=False):
    end = "\r\n" if crlf else "\n"
    out = []
    for name, comment, seq, _ in records:
        out.append(f">{name}" + (f" {comment}" if comment else "") + end)
        out.extend(seq[i : i + width] + end for i in range(0, len(seq), width))
    return "".join(out).encode("ascii")


def expected_seq(seq):
    return seq.upper().replace(".", "N").replace("-", "N").encode()


def parse_all(reader, *paths, **kwargs):
    """(names, seqs, quals, codes) of everything the reader yields, checking the batch columns agree."""
    names, seqs, quals, codes = [], [], [], []
    for batch in reader(*paths, **kwargs):
        assert batch.offsets[0] == 0 and batch.offsets[-1] == batch.codes.size == len(batch.seq_text)
        names += batch.names
        seqs += batch.seqs
        quals += batch.quals or []
        codes.append(batch.codes)
    return names, seqs, quals, (np.concatenate(codes).tolist() if codes else [])


def outcome(reader, *paths, **kwargs):
    """('ok', parse) or ('error', InputError); any other exception fails the test."""
    try:
        return "ok", parse_all(reader, *paths, **kwargs)
    except InputError as e:
        message = str(e)
        assert "\n" not in message and "Traceback" not in message
        where = f"{e.path}, record {e.record}: " if e.record is not None else f"{e.path}: "
        assert message.startswith(where), message
        assert e.path in [str(p) for p in paths], (e.path, paths)
        return "error", e


def write(tmp_path, name, data, compress=False):
    path = tmp_path / name
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return str(path)


READ_OPTIONS = st.fixed_dictionaries({
    "max_reads": st.sampled_from([None, 1, 2, 3, 7, 1000]),
    "block_size": st.sampled_from([None, 1, 5, 64, 777]),
    "fast_fastq": st.booleans(),
})


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(records=st.lists(reads(), max_size=12), crlf=st.booleans(), repeat=st.booleans(), final=st.booleans(),
       compress=st.booleans(), opts=READ_OPTIONS)
def test_valid_fastq_round_trips(tmp_path, records, crlf, repeat, final, compress, opts):
    path = write(tmp_path, "r.fq", fastq_bytes(records, crlf, repeat, final), compress)
    names, seqs, quals, codes = parse_all(read_batches, path, **opts)
    assert names == [r[0] for r in records]
    assert seqs == [expected_seq(r[2]) for r in records]
    assert quals == [r[3].encode() for r in records]
    assert codes == [CODE[c] for r in records for c in expected_seq(r[2]).decode()]


@settings(max_examples=EXAMPLES // 2, **SETTINGS)
@given(records=st.lists(reads(max_len=300), max_size=8), width=st.sampled_from([1, 7, 60, 1000]),
       crlf=st.booleans(), compress=st.booleans(), opts=READ_OPTIONS)
def test_valid_fasta_reads_round_trip(tmp_path, records, width, crlf, compress, opts):
    path = write(tmp_path, "r.fa", fasta_bytes(records, width, crlf), compress)
    names, seqs, quals, _ = parse_all(read_batches, path, **opts)
    assert names == [r[0] for r in records] and quals == []
    assert seqs == [expected_seq(r[2]) for r in records]


@settings(max_examples=EXAMPLES // 2, **SETTINGS)
@given(records=st.lists(reads(), min_size=1, max_size=8), interleaved=st.booleans(), compress=st.booleans(),
       opts=READ_OPTIONS)
def test_valid_pairs_round_trip(tmp_path, records, interleaved, compress, opts):
    """Mates named NAME/1 and NAME/2 (or alike): the pair's names lose the suffix, the mates alternate."""
    mates1 = [(f"{n}/1", c, s, q) for n, c, s, q in records]
    mates2 = [(f"{n}/2", c, s[::-1], q[::-1]) for n, c, s, q in records]
    if interleaved:
        both = [m for pair in zip(mates1, mates2) for m in pair]
        got = parse_all(read_interleaved_batches, write(tmp_path, "i.fq", fastq_bytes(both), compress), **opts)
    else:
        got = parse_all(read_pair_batches, write(tmp_path, "1.fq", fastq_bytes(mates1), compress),
                        write(tmp_path, "2.fq", fastq_bytes(mates2), compress), **opts)
    names, seqs, quals, _ = got
    assert names == [n for r in records for n in (r[0], r[0])]
    assert seqs == [s for r in records for s in (expected_seq(r[2]), expected_seq(r[2][::-1]))]
    assert quals == [q for r in records for q in (r[3].encode(), r[3][::-1].encode())]


# --- mutated reads --------------------------------------------------------------------------------------------


def oracle_fastq(data):
    """What a strict reader makes of FASTQ bytes: ('ok', names, seqs, quals), ('bad', records) with the
    numbers of the records at fault, or None where the rules leave room (CR bytes, blank lines at the end).

    A record is at fault for its structure (a missing line, a header without '@', a '+' line naming another
    read, qualities of another length, a non-ASCII byte) or for its content (a name SAM cannot carry, a byte
    that is no base, a quality outside 33..126). Structure errors stop the reading; content errors are found
    per batch, so an error reported may be the structure error or a content error before it."""
    if b"\r" in data:
        return None
    if not data.isascii():
        pos = next(i for i, b in enumerate(data) if b >= 128)
        line = data.count(b"\n", 0, pos)
        return "bad", _content_errors(data[: data.rfind(b"\n", 0, pos) + 1], line // 4) | {line // 4 + 1}
    text = data.decode("ascii")
    if not text:
        return "ok", [], [], []
    if not text.endswith("\n"):
        text += "\n"
    lines = text.split("\n")[:-1]
    names, seqs, quals, bad = [], [], [], set()
    for r in range(0, len(lines), 4):
        number = r // 4 + 1
        rec = lines[r : r + 4]
        if all(not x.strip(" \t") for x in lines[r:]) and r:
            return None  # blank lines after the last record: accepted, as kseq does
        if len(rec) < 4 or not rec[0].startswith("@") or not rec[2].startswith("+") or \
                (len(rec[2]) > 1 and rec[2][1:] != rec[0][1:]) or len(rec[1]) != len(rec[3]):
            return "bad", bad | {number}
        header, seq, _, qual = rec
        name = re.split("[ \t]", header[1:], maxsplit=1)[0]
        if any(ord(c) < 32 or ord(c) == 127 for c in header[len(name) + 1 :]):
            return None  # a control byte in the comment: the name is what matters
        if len(name) > 254 or any(not 0x21 <= ord(c) <= 0x7E or c == "@" for c in name) or \
                any(not (c.isalpha() or c in ".-") for c in seq) or any(not 33 <= ord(c) <= 126 for c in qual):
            bad.add(number)
        names.append(name)
        seqs.append(expected_seq(seq))
        quals.append(qual.encode())
    return ("bad", bad) if bad else ("ok", names, seqs, quals)


def _content_errors(data, records):
    """Content errors among the first ``records`` whole records of ``data`` (structure intact there)."""
    verdict = oracle_fastq(data)
    return set() if verdict is None or verdict[0] == "ok" else {r for r in verdict[1] if r <= records}


BYTES = st.sampled_from([b"\x00", b"\x01", b"\x7f", b"\x80", b"\xff", b"\xc3\xa9", b"\r", b"\n", b"\t", b" ",
                         b"@", b"+", b"*", b"1", b"\r\n", b"\n\n", b"A", b"I"])


@st.composite
def mutations(draw, data):
    """A mutation of ``data`` (bytes): truncation, a byte inserted, replaced or deleted, a line lost, repeated
    or blanked, or line ends changed to CR LF from some point on."""
    kind = draw(st.sampled_from(["truncate", "insert", "replace", "delete", "drop_line", "repeat_line",
                                 "blank_line", "crlf_tail"]))
    n = len(data)
    pos = draw(st.integers(0, max(n - 1, 0)))
    lines = data.split(b"\n")
    line = draw(st.integers(0, max(len(lines) - 1, 0)))
    if kind == "truncate":
        return data[:pos]
    if kind == "insert":
        return data[:pos] + draw(BYTES) + data[pos:]
    if kind == "replace":
        return data[:pos] + draw(BYTES) + data[pos + 1 :]
    if kind == "delete":
        return data[:pos] + data[pos + 1 :]
    if kind == "drop_line":
        return b"\n".join(lines[:line] + lines[line + 1 :])
    if kind == "repeat_line":
        return b"\n".join(lines[: line + 1] + lines[line:])
    if kind == "blank_line":
        return b"\n".join(lines[:line] + [b""] + lines[line + 1 :])
    return data[:pos] + data[pos:].replace(b"\n", b"\r\n")


@settings(max_examples=3 * EXAMPLES, **SETTINGS)
@given(data=st.data(), records=st.lists(reads(max_len=60), min_size=1, max_size=6), compress=st.booleans(),
       max_reads=st.sampled_from([None, 1, 2]), block_size=st.sampled_from([None, 3, 64]))
def test_mutated_fastq_parses_right_or_names_the_record(tmp_path, data, records, compress, max_reads, block_size):
    """Either the right parse or an InputError naming the file and a record the mutation broke; the fast path
    and the dnaio fallback agree on both."""
    mutated = data.draw(mutations(fastq_bytes(records)))
    path = write(tmp_path, "m.fq", mutated, compress)
    kwargs = dict(max_reads=max_reads, block_size=block_size)
    fast = outcome(read_batches, path, fast_fastq=True, **kwargs)
    slow = outcome(read_batches, path, fast_fastq=False, **kwargs)
    if fast[0] == "ok" or slow[0] == "ok":
        assert fast == slow
    else:
        assert str(fast[1]) == str(slow[1])
    verdict = oracle_fastq(mutated)
    first = mutated[:1]
    event(f"oracle {'unsure' if verdict is None else verdict[0]}, peanut {fast[0]}")
    if mutated and first not in (b"@", b">"):
        assert fast[0] == "error" and fast[1].record == 1 and "not FASTQ or FASTA" in str(fast[1])
    elif first == b">" or verdict is None:
        if fast[0] == "error" and fast[1].record is not None:
            assert 1 <= fast[1].record <= mutated.count(b"\n") // 4 + 2 or first == b">"
    elif verdict[0] == "ok":
        assert fast == ("ok", (verdict[1], verdict[2], verdict[3], fast[1][3])), mutated
    else:
        assert fast[0] == "error", (mutated, fast)
        assert fast[1].record in verdict[1], (mutated, str(fast[1]), verdict)


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(data=st.data(), records=st.lists(reads(max_len=60), min_size=1, max_size=6),
       fmt=st.sampled_from(["fastq", "fasta"]), damage=st.sampled_from(["cut", "flip", "garbage"]))
def test_damaged_gzip_reads_never_pass_silently(tmp_path, data, records, fmt, damage):
    """gzip cut short or with a byte changed: the reads it holds intact, or an InputError naming the file and a
    record; never fewer reads without an error."""
    plain = fastq_bytes(records) if fmt == "fastq" else fasta_bytes(records, 60)
    packed = gzip.compress(plain, mtime=0)
    pos = data.draw(st.integers(0, len(packed) - 1))
    if damage == "cut":
        damaged = packed[:pos]
    elif damage == "flip":
        damaged = packed[:pos] + bytes([packed[pos] ^ data.draw(st.integers(1, 255))]) + packed[pos + 1 :]
    else:
        damaged = packed + data.draw(st.binary(min_size=1, max_size=30))
    path = write(tmp_path, f"d.{fmt}.gz", damaged)
    for fast_fastq in (True, False):
        result = outcome(read_batches, path, fast_fastq=fast_fastq)
        if result[0] == "ok":
            names, seqs, _, _ = result[1]
            assert damage != "cut" or pos == 0 or len(damaged) == 0, "a gzip cut short passed as complete"
            if len(damaged) >= 18:  # not read as plain text
                assert names == [r[0] for r in records] and seqs == [expected_seq(r[2]) for r in records]
        elif result[1].record is not None:
            assert 1 <= result[1].record <= len(records) + 1


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(data=st.data(), records=st.lists(reads(max_len=80), min_size=1, max_size=6), width=st.sampled_from([7, 60]))
def test_mutated_fasta_reads_parse_or_name_the_file(tmp_path, data, records, width):
    mutated = data.draw(mutations(fasta_bytes(records, width)))
    path = write(tmp_path, "m.fa", mutated)
    result = outcome(read_batches, path, max_reads=2)
    if result[0] == "error" and result[1].record is not None:
        assert 1 <= result[1].record <= mutated.count(b">") + 1


@settings(max_examples=EXAMPLES // 2, **SETTINGS)
@given(records=st.lists(reads(max_len=40), min_size=2, max_size=6), data=st.data())
def test_unequal_or_misnamed_mates_name_both_files(tmp_path, records, data):
    mates1 = [(f"{n}/1", c, s, q) for n, c, s, q in records]
    mates2 = [(f"{n}/2", c, s, q) for n, c, s, q in records]
    cut = data.draw(st.integers(0, len(records) - 1))
    rename = data.draw(st.booleans())
    if rename:
        other = data.draw(st.text(NAME_CHARS, min_size=1, max_size=10))
        assume(other != records[cut][0])
        mates2[cut] = (other + "/2",) + mates2[cut][1:]
    else:
        mates2 = mates2[:cut]
    p1, p2 = write(tmp_path, "1.fq", fastq_bytes(mates1)), write(tmp_path, "2.fq", fastq_bytes(mates2))
    result = outcome(read_pair_batches, p1, p2, max_reads=data.draw(st.sampled_from([None, 2, 4])))
    assert result[0] == "error"
    assert result[1].record == cut + 1
    assert p1 in str(result[1]) and p2 in str(result[1])


# --- the reference FASTA ------------------------------------------------------------------------------------


CONTIG_NAME = st.from_regex(fasta.SAM_REFERENCE_NAME, fullmatch=True).filter(lambda s: 0 < len(s) <= 40)


@st.composite
def contigs(draw):
    names = draw(st.lists(CONTIG_NAME, min_size=1, max_size=5, unique=True))
    return [(n, draw(st.text("".join(chr(c) for c in range(33, 127)), max_size=10)),
             draw(st.text("ACGTNacgtnRYKMSWBDHVXZ", min_size=1, max_size=300))) for n in names]


def reference_bytes(records, width, crlf):
    end = "\r\n" if crlf else "\n"
    out = []
    for name, comment, seq in records:
        out.append(f">{name}" + (f" {comment}" if comment else "") + end)
        out.extend(seq[i : i + width] + end for i in range(0, len(seq), width))
    return "".join(out).encode()


def oracle_reference(data):
    """(name, sequence) per contig of FASTA bytes under fasta.py's rules, or None where they refuse it."""
    lines = data.split(b"\n")
    records, names = [], set()
    for number, line in enumerate(lines):
        if line.endswith(b"\r") and (number < len(lines) - 1 or line.startswith(b">")):
            line = line[:-1]  # a CR before LF; a CR at the very end only after a header
        if line.startswith(b">"):
            if records and not records[-1][1]:
                return None
            text = line[1:]
            if not text.strip() or text[:1].isspace():
                return None
            try:
                name = text.split(None, 1)[0].decode("utf-8")
            except UnicodeDecodeError:
                return None
            if not fasta.SAM_REFERENCE_NAME.fullmatch(name) or name in names:
                return None
            names.add(name)
            records.append([name, b""])
        elif not records:
            if line.strip(b"\r\n"):
                return None
        elif not line.isalpha() or not line.isascii():
            if line:
                return None
        else:
            records[-1][1] += line.upper()
    if not records or not records[-1][1]:
        return None
    return [tuple(r) for r in records]


def read_reference(path):
    try:
        return "ok", [(r.name, r.sequence) for r in fasta.read_fasta(path)]
    except InputError as e:
        assert str(e).startswith(f"{path}: ") or str(e).startswith(f"{path}, record "), str(e)
        assert "\n" not in str(e)
        return "error", e


@settings(max_examples=EXAMPLES // 2, **SETTINGS)
@given(records=contigs(), width=st.sampled_from([1, 3, 60, 80, 10_000]), crlf=st.booleans(),
       compress=st.booleans(), block=st.sampled_from([2, 7, 64, 1 << 24]))
def test_valid_reference_round_trips(tmp_path, monkeypatch, records, width, crlf, compress, block):
    monkeypatch.setattr(fasta, "BLOCK", block)
    path = write(tmp_path, "ref.fa", reference_bytes(records, width, crlf), compress)
    assert read_reference(path) == ("ok", [(n, s.upper().encode()) for n, _, s in records])


@settings(max_examples=2 * EXAMPLES, **SETTINGS)
@given(data=st.data(), records=contigs(), crlf=st.booleans(), block=st.sampled_from([3, 64, 1 << 24]))
def test_mutated_reference_parses_right_or_names_the_file(tmp_path, monkeypatch, data, records, crlf, block):
    monkeypatch.setattr(fasta, "BLOCK", block)
    mutated = data.draw(mutations(reference_bytes(records, 50, crlf)))
    path = write(tmp_path, "ref.fa", mutated)
    expected = oracle_reference(mutated)
    got = read_reference(path)
    event(f"oracle {'refuses' if expected is None else 'accepts'}")
    if expected is None:
        assert got[0] == "error", (mutated, got)
    else:
        assert got == ("ok", expected), mutated


@settings(max_examples=EXAMPLES // 2, **SETTINGS)
@given(records=contigs(), data=st.data())
def test_an_illegal_byte_names_the_contig_and_line(tmp_path, records, data):
    text = reference_bytes(records, 50, False)
    lines = text.split(b"\n")
    seq_lines = [i for i, line in enumerate(lines) if line and not line.startswith(b">")]
    i = data.draw(st.sampled_from(seq_lines))
    bad = data.draw(st.sampled_from(b"0-*. \t\x00\x01\x7f\x80\xff"))
    at = data.draw(st.integers(0, len(lines[i])))
    lines[i] = lines[i][:at] + bytes([bad]) + lines[i][at:]
    record = sum(1 for line in lines[: i + 1] if line.startswith(b">"))
    path = write(tmp_path, "ref.fa", b"\n".join(lines))
    got = read_reference(path)
    assert got[0] == "error"
    assert f", record {record} (" in str(got[1]) and f"line {i + 1}: illegal character" in str(got[1]), str(got[1])


# --- options --------------------------------------------------------------------------------------------------


def numeric_fields():
    out = []
    for cls in (options.IndexOptions, options.Scoring, options.MapOptions, options.RunOptions):
        for f in dataclasses.fields(cls):
            if f.metadata.get("lo") is not None or f.metadata.get("hi") is not None:
                out.append((cls, f))
    return out


NUMBERS = st.one_of(st.integers(-(2**70), 2**70), st.integers(-3, 300),
                    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none())


@pytest.mark.parametrize("cls, field", numeric_fields(), ids=lambda x: getattr(x, "name", getattr(x, "__name__", "")))
@settings(max_examples=EXAMPLES // 2, **SETTINGS)
@given(value=NUMBERS)
def test_a_numeric_option_passes_inside_its_range_and_names_itself_outside(cls, field, value):
    lo, hi, lo_open = field.metadata["lo"], field.metadata["hi"], field.metadata["lo_open"]
    integral = isinstance(field.default, int) or field.type in (int, "int")
    inside = value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        and (not integral or float(value).is_integer())
        and (lo is None or (value > lo if lo_open else value >= lo)) and (hi is None or value <= hi))
    if value is None and field.default is not None:
        return  # None means "the default" only where the default is None
    made = cls(**{field.name: value})
    if cls is options.Scoring and field.name in ("gap_open", "gap_extend") and inside:
        inside = made.gap_open + made.gap_extend >= 1
    try:
        options.check(made)
    except PeanutError as e:
        assert not inside, (value, str(e))
        flag = "/".join(field.metadata["flags"])
        assert str(e).startswith(flag) or str(e).startswith("-O "), str(e)
    else:
        assert inside, value


OPTION_TEXT = st.one_of(st.text(max_size=12), st.from_regex(r"-?[0-9]{1,25}(\.[0-9]*)?([eE][+-]?[0-9]{1,3})?",
                                                             fullmatch=True),
                        st.sampled_from(["inf", "-inf", "nan", "1e400", "0", "-0", "1e-400", "0x10", "1_000", " 5 ",
                                         "2G", "1.5T", "0K", "-1M", "1e308", "1.7e308", "1e308,1e308", ",", "1,2,3,4,5",
                                         "100,10,50,80", "\x00", "٣"]))
MAP_FLAGS = ["-t", "--batch-size", "--memory-cap", "--max-hits", "-i", "-A", "-B", "-O", "-E", "-L", "-I", "--mode"]
INDEX_FLAGS = ["-q", "-s", "-m"]


@contextlib.contextmanager
def _signals_kept():
    """cli.main sets SIGINT, SIGTERM and SIGPIPE handlers for its process; put pytest's back afterwards."""
    kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)}
    try:
        yield
    finally:
        for s, handler in kept.items():
            signal.signal(s, handler)


def run_main(argv, monkeypatch_calls):
    """cli.main(argv) in this process with the work itself replaced by recording its arguments: returns
    (exit code, stderr text, whether the work was called)."""
    stderr = io.StringIO()
    code = 0
    with _signals_kept(), contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.main(argv)
        except SystemExit as e:
            code = e.code
    return code, stderr.getvalue(), bool(monkeypatch_calls)


@settings(max_examples=3 * EXAMPLES, **SETTINGS)
@given(flag=st.sampled_from(MAP_FLAGS + INDEX_FLAGS), text=OPTION_TEXT)
def test_any_option_value_is_accepted_or_refused_in_one_line(monkeypatch, flag, text):
    """Any text after a numeric option: the command runs, or it ends with exit 1 and one `peanut: error:` line
    naming the option, or argparse's usage error (exit 2); never a traceback."""
    calls = []
    import peanut_py.mapping as mapping
    import peanut_py.reference as reference

    monkeypatch.setattr(mapping, "map_reads", lambda *a, **k: calls.append((a, k)))
    monkeypatch.setattr(reference, "build_index", lambda *a, **k: calls.append((a, k)))
    if flag in INDEX_FLAGS:
        argv = ["index", "ref.fa", flag, text]
    else:
        argv = ["map", "index.h5", "reads.fq", "mates.fq", flag, text] if flag == "-I" else \
            ["map", "index.h5", "reads.fq", flag, text]
    code, err, called = run_main(argv, calls)
    assert "Traceback" not in err
    if code == 0:
        assert called and err == ""
    elif code == 1:
        lines = err.strip().splitlines()
        assert not called and len(lines) == 1 and lines[0].startswith("peanut: error: "), err
        assert flag in lines[0] or (flag == "-s" and "--step" in lines[0]) or (flag == "-m" and "--mask" in lines[0]) \
            or "a gap must cost" in lines[0], lines[0]
    else:
        assert code == 2 and not called and err.strip().splitlines()[-1].startswith("peanut "), err


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(text=OPTION_TEXT)
def test_size_identity_and_insert_size_parsers_raise_only_their_errors(text):
    for parse in (cli._size, cli._identity, cli._insert_size):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as e:
            assert "\n" not in str(e)
        else:
            assert value is not None
