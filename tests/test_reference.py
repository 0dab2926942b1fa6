"""The reference index against plain NumPy/Python re-derivations from the FASTA text.

Every array of the index is recomputed here independently (line-based FASTA parsing, q-gram values by shifting,
P by lexsort) and must be equal exactly: on random genomes with planted repeats, N runs and IUPAC letters for
several q / step / mask settings, and on the real sarscov2, yeast and chr20 references.
"""
import gzip
import hashlib
import os
import re
import shutil

import h5py
import numpy as np
import pytest

from peanut_py import reference
from peanut_py.errors import PeanutError
from peanut_py.reference import CONTIG_GAP, ReferenceIndex, build_index

# ---------------------------------------------------------------- independent re-derivations


def parse_fasta(path):
    """[(name, uppercase sequence)] by the simplest line-based parser."""
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    records = []
    with opener(path, "rt") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if line.startswith(">"):
                records.append([line[1:].split()[0], []])
            else:
                records[-1][1].append(line.upper())
    return [(name, "".join(parts)) for name, parts in records]


def expected_offsets(lengths):
    offsets, end = [], 0
    for n in lengths:
        start = (end + 15) // 16 * 16 + CONTIG_GAP
        offsets.append(start)
        end = start + n
    return np.array(offsets, dtype=np.int64)


def seq_codes(seq):
    lut = np.full(256, 4, dtype=np.uint8)
    for i, c in enumerate(b"ACGT"):
        lut[c] = i
    return lut[np.frombuffer(seq.encode(), dtype=np.uint8)]


def exception_runs(records, offsets):
    s, e, l = [], [], []
    for (_, seq), off in zip(records, offsets):
        for m in re.finditer(r"([^ACGT])\1*", seq):
            s.append(off + m.start())
            e.append(off + m.end())
            l.append(ord(m.group(1)))
    return np.array(s, dtype=np.int64), np.array(e, dtype=np.int64), np.array(l, dtype=np.uint8)


def brute_force_p(records, offsets, q, step, mask):
    """(kmers, starts, positions, positions_masked, kmers_masked, masked values) of the format's definition
    of P."""
    vals, poss = [], []
    for (_, seq), off in zip(records, offsets):
        c = seq_codes(seq)
        m = len(c) - q + 1
        if m <= 0:
            continue
        v = np.zeros(m, dtype=np.uint64)
        bad = np.zeros(m, dtype=bool)
        for k in range(q):
            v = (v << np.uint64(2)) | (c[k:k + m] & 3).astype(np.uint64)
            bad |= c[k:k + m] == 4
        p = np.arange(m)
        sel = ~bad & (p % step == 0)
        vals.append(v[sel])
        poss.append(p[sel] + off)
    vals = np.concatenate(vals) if vals else np.empty(0, np.uint64)
    poss = np.concatenate(poss) if poss else np.empty(0, np.int64)
    order = np.lexsort((poss, vals))
    vals, poss = vals[order], poss[order]
    kmers, counts = np.unique(vals, return_counts=True)
    keep = counts <= mask if mask else np.ones(counts.size, dtype=bool)
    pos_keep = np.repeat(keep, counts)
    starts = np.concatenate(([0], np.cumsum(counts[keep])))
    return kmers[keep], starts, poss[pos_keep], int(counts[~keep].sum()), int((~keep).sum()), kmers[~keep]


def expected_buckets(kmers, starts, q, bits):
    """The bucket table of the format's definition: entry b = positions whose q-gram value is below b << (2q - bits)."""
    edges = np.arange((1 << bits) + 1, dtype=np.uint64) << np.uint64(2 * q - bits)
    return np.asarray(starts, np.int64)[np.searchsorted(np.asarray(kmers, np.uint64), edges)]


def decode(ix):
    """Whole padded sequence as uppercase bytes from packed + exceptions (gaps decode as 'A')."""
    w = ix.packed()
    codes = ((w[:, None] >> (2 * np.arange(16, dtype=np.uint32))) & 3).astype(np.uint8).ravel()
    text = np.frombuffer(b"ACGT", dtype=np.uint8)[codes]
    for s, e, l in zip(*ix.exceptions()):
        text[s:e] = l
    return text


def check_index(path, records, q, step, mask, full_p=True):
    """Compare every part of the index at path with the re-derivations from records."""
    with ReferenceIndex(path) as ix:
        lengths = np.array([len(s) for _, s in records], dtype=np.int64)
        offsets = expected_offsets(lengths)
        assert ix.names == [n for n, _ in records]
        assert np.array_equal(ix.lengths, lengths) and np.array_equal(ix.offsets, offsets)
        assert ix.lengths.dtype == np.int64 and ix.offsets.dtype == np.int64
        assert ix.md5s == [hashlib.md5(s.encode()).hexdigest() for _, s in records]
        assert (ix.q, ix.step, ix.mask_threshold) == (q, step, mask)
        assert ix.total_padded == (offsets[-1] + lengths[-1] + 15) // 16 * 16
        assert ix.packed().dtype == np.uint32 and ix.packed().size * 16 == ix.total_padded
        # round trip and exact exception runs
        s, e, l = ix.exceptions()
        es, ee, el = exception_runs(records, offsets)
        assert np.array_equal(s, es) and np.array_equal(e, ee) and np.array_equal(l, el)
        assert s.dtype == np.int64 and e.dtype == np.int64 and l.dtype == np.uint8
        text = decode(ix)
        for (name, seq), off in zip(records, offsets):
            assert text[off:off + len(seq)].tobytes() == seq.encode(), name
        # gaps are packed as 0
        inside = np.zeros(ix.total_padded, dtype=bool)
        for off, n in zip(offsets, lengths):
            inside[off:off + n] = True
        w = ix.packed()
        codes = ((w[:, None] >> (2 * np.arange(16, dtype=np.uint32))) & 3).ravel()
        assert not codes[~inside].any()
        # ambiguity bitmap: one bit per non-ACGT base
        amb = np.zeros((ix.total_padded + 31) // 32 * 32, dtype=bool)
        for a, b in zip(es, ee):
            amb[a:b] = True
        assert np.array_equal(ix.ambiguity_bitmap(), np.packbits(amb, bitorder="little").view("<u4"))
        # P
        if full_p:
            kmers, starts, positions, pmasked, kmasked, masked = brute_force_p(records, offsets, q, step, mask)
            assert ix.buckets().dtype == np.int64 and ix.positions().dtype == np.uint32
            assert ix.bucket_bits == reference.bucket_bits_for(positions.size + pmasked, q)
            assert np.array_equal(ix.buckets(), expected_buckets(kmers, starts, q, ix.bucket_bits))
            assert np.array_equal(ix.positions(), positions)
            # the q-gram value of every position, read from the packed sequence
            assert np.array_equal(ix.qgram_values(ix.positions()), np.repeat(kmers, np.diff(starts)))
            assert ix.attrs["kmers_kept"] == kmers.size
            assert ix.attrs["positions_kept"] == positions.size
            assert ix.attrs["positions_masked"] == pmasked and ix.attrs["kmers_masked"] == kmasked
            assert ix.masked_kmers().dtype == np.uint32 and np.array_equal(ix.masked_kmers(), masked)
        assert ix.attrs["n_contigs"] == len(records) and ix.attrs["total_bases"] == lengths.sum()
        assert ix.checksum == reference.reference_checksum(ix.names, ix.md5s)
        return ix.attrs


# ---------------------------------------------------------------- random genomes


IUPAC = "NNNNRYKMSWBDHV"


def random_genome(rng, n_contigs=4):
    """Contigs with planted high-copy repeats, N runs at ends and inside, IUPAC letters, lowercase stretches."""
    records = []
    repeat = "".join(rng.choice(list("ACGT"), 23))
    for i in range(n_contigs):
        n = int(rng.integers(1, 3000)) if i else int(rng.integers(2000, 6000))
        seq = list(rng.choice(list("ACGT"), n))
        for _ in range(int(rng.integers(0, 40))):  # planted copies of one repeat: counts over the thresholds
            p = int(rng.integers(0, max(1, n - len(repeat))))
            seq[p:p + len(repeat)] = list(repeat)[: n - p]
        for _ in range(int(rng.integers(0, 6))):  # N runs, some at the contig ends
            p = int(rng.choice([0, n - 1, int(rng.integers(0, n))]))
            end = min(n, p + int(rng.integers(1, 40)))
            seq[p:end] = ["N"] * (end - p)
        for _ in range(int(rng.integers(0, 10))):  # scattered IUPAC letters, some adjacent to each other
            p = int(rng.integers(0, n))
            seq[p] = IUPAC[int(rng.integers(0, len(IUPAC)))]
        assert len(seq) == n
        seq = "".join(seq)
        records.append((f"ctg{i} description {i}", seq))
    records.append(("poly", "A" * 700 + "C" * 5))  # a single q-gram occurring hundreds of times
    return records


def write_fasta(path, records, rng):
    """Mixed line widths, lowercase stretches, some CRLF line ends."""
    out = []
    for name, seq in records:
        crlf = rng.random() < 0.3
        nl = "\r\n" if crlf else "\n"
        out.append(">" + name + nl)
        width = int(rng.choice([1, 7, 60, 61, 80, 10_000]))
        for i in range(0, len(seq), width):
            line = seq[i:i + width]
            if rng.random() < 0.3:
                line = line.lower()
            out.append(line + nl)
        if rng.random() < 0.2:
            out.append(nl)  # blank line
    data = "".join(out).encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return [(name.split()[0], seq.upper()) for name, seq in records]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("q,step,mask", [(16, 1, 0), (16, 1, 20), (11, 3, 5), (5, 1, 30), (4, 2, 0), (4, 7, 9)])
def test_random_genomes_match_brute_force(tmp_path, seed, q, step, mask):
    rng = np.random.default_rng(seed * 1000 + q * 10 + step)
    fa = tmp_path / ("g.fa.gz" if seed % 2 else "g.fa")
    records = write_fasta(fa, random_genome(rng), rng)
    out = tmp_path / "g.h5"
    summary = build_index(fa, out, q=q, step=step, mask_threshold=mask, compress=seed % 3 == 2)
    attrs = check_index(out, records, q, step, mask)
    assert summary["positions_kept"] == attrs["positions_kept"]
    if mask:  # the poly-A contig alone exceeds every threshold used here
        assert attrs["kmers_masked"] > 0 and attrs["positions_masked"] > mask
    assert summary["n_contigs"] == len(records)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fa.name, "g.h5"])


@pytest.mark.parametrize("round_keys,sort_group,block", [(1, 1, 3), (50, 7, 64), (1000, 100, 1 << 20)])
def test_rounds_groups_and_writes_do_not_change_the_result(tmp_path, round_keys, sort_group, block):
    """Tiny scatter rounds (each sorted twice: a counting and a writing sweep), sort groups and write blocks
    (the code paths of a human genome) give the same P, and no temporary file is left."""
    rng = np.random.default_rng(round_keys)
    fa = tmp_path / "g.fa"
    records = write_fasta(fa, random_genome(rng, 6), rng)
    # compressed: several chunks per write
    sizes = dict(round_keys=round_keys, sort_group=sort_group, flush_elements=block, chunk=max(1, block // 2))
    for q, mask, compress in ((16, 10, False), (6, 0, True), (4, 300, False)):
        out = tmp_path / f"g{q}.h5"
        build_index(fa, out, q=q, step=1, mask_threshold=mask, compress=compress, **sizes)
        check_index(out, records, q, 1, mask)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.fa", "g16.h5", "g4.h5", "g6.h5"]


def test_qgrams_straddling_n_and_short_contigs(tmp_path):
    """By hand: only all-ACGT windows are indexed; contigs shorter than q contribute nothing."""
    fa = tmp_path / "s.fa"
    fa.write_text(">a\nACGTNACGT\n>b\nACG\n>c\nacgtrACGTa\n")
    build_index(fa, tmp_path / "s.h5", q=4, step=1, mask_threshold=0)
    with ReferenceIndex(tmp_path / "s.h5") as ix:
        oa, _, oc = ix.offsets
        acgt = 0b00011011  # A C G T
        cgta = 0b01101100
        assert oa == 1024 and ix.offsets[1] == 1024 + 16 + 1024
        assert ix.positions().tolist() == [oa, oa + 5, oc, oc + 5, oc + 6]
        assert ix.qgram_values(ix.positions()).tolist() == [acgt] * 4 + [cgta]
        assert ix.bucket_bits == 1  # 5 positions: two buckets, values below 2^7 and the others
        assert ix.buckets().tolist() == [0, 5, 5]
        assert ix.fetch(2, 0, 10) == "ACGTRACGTA"
        assert ix.exceptions()[2].tolist() == [ord("N"), ord("R")]


def test_reference_without_any_qgram(tmp_path):
    fa = tmp_path / "n.fa"
    fa.write_text(">n\nNNNNNNNNNNNNNNNNNNNNnnnnn\n>short\nACGT\n")
    summary = build_index(fa, tmp_path / "n.h5")
    assert summary["positions_kept"] == 0
    records = parse_fasta(fa)
    check_index(tmp_path / "n.h5", records, 16, 1, reference.DEFAULT_MASK_THRESHOLD)
    with ReferenceIndex(tmp_path / "n.h5") as ix:
        assert ix.positions().size == 0 and ix.bucket_bits == 1 and ix.buckets().tolist() == [0, 0, 0]
        assert ix.fetch(0, 0, 25) == "N" * 25 and "0 kept" in ix.describe()


def test_masking_counts_sampled_positions_only(tmp_path):
    """A q-gram at 6 positions, 3 of them sampled with step 2: masked at threshold 2, kept at 3."""
    fa = tmp_path / "m.fa"
    fa.write_text(">m\n" + "A" * 9 + "\n")  # AAAA at p = 0..5
    for mask, kept in ((2, 0), (3, 3)):
        build_index(fa, tmp_path / "m.h5", q=4, step=2, mask_threshold=mask)
        with ReferenceIndex(tmp_path / "m.h5") as ix:
            assert ix.positions().size == kept
            assert ix.attrs["positions_masked"] == 3 - kept
            assert ix.attrs["kmers_masked"] == (1 if kept == 0 else 0)


def test_codes_fetch_contig_of(tmp_path):
    rng = np.random.default_rng(7)
    fa = tmp_path / "g.fa"
    records = write_fasta(fa, random_genome(rng, 5), rng)
    build_index(fa, tmp_path / "g.h5", q=8)
    with ReferenceIndex(tmp_path / "g.h5") as ix:
        expect = np.full(ix.total_padded + 100, 4, dtype=np.uint8)
        for (_, seq), off in zip(records, ix.offsets):
            expect[off:off + len(seq)] = seq_codes(seq)
        assert np.array_equal(ix.codes(0, expect.size), expect)
        for _ in range(200):
            a = int(rng.integers(0, expect.size))
            b = int(rng.integers(a, min(expect.size, a + 300) + 1))
            assert np.array_equal(ix.codes(a, b), expect[a:b])
        for i, (_, seq) in enumerate(records):
            assert ix.fetch(i, 0, len(seq)) == seq
            for _ in range(20):
                a = int(rng.integers(0, len(seq) + 1))
                b = int(rng.integers(a, len(seq) + 1))
                assert ix.fetch(i, a, b) == seq[a:b]
        g = rng.integers(0, ix.total_padded + 50, 1000)
        want = [max([i for i, o in enumerate(ix.offsets) if o <= x], default=-1) for x in g]
        got = ix.contig_of(g)
        assert got.dtype == np.intp and got.tolist() == want
        assert ix.contig_of(int(ix.offsets[2])) == 2
        with pytest.raises(PeanutError):
            ix.fetch(0, 0, len(records[0][1]) + 1)
        with pytest.raises(PeanutError):
            ix.fetch(len(records), 0, 1)


@pytest.mark.parametrize("kwargs", [dict(q=0), dict(q=3), dict(q=17), dict(step=0), dict(mask_threshold=-1), dict(q=2.5)])
def test_bad_parameters(tmp_path, kwargs):
    fa = tmp_path / "g.fa"
    fa.write_text(">a\nACGT\n")
    with pytest.raises(PeanutError) as e:
        build_index(fa, tmp_path / "g.h5", **kwargs)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == [fa]


# ---------------------------------------------------------------- atomic writing and reader validation


@pytest.mark.parametrize("where", ["counting", "writing", "replace"])
def test_interrupted_build_leaves_nothing(tmp_path, monkeypatch, where):
    """Ctrl-C while the q-grams are sorted (before the table's datasets exist, or while they are written) or
    at the final rename: the temporary file goes, the old index stays."""
    fa = tmp_path / "g.fa"
    fa.write_text(">a\n" + "ACGTTGCA" * 50 + "\n")
    out = tmp_path / "g.h5"
    build_index(fa, out)
    before = out.read_bytes()

    def boom(*a, **k):
        raise KeyboardInterrupt

    def log(message):  # with several scatter rounds, each sweep of the sort reports its rounds
        if message.startswith(f"sorting q-grams ({where})"):
            boom()

    if where == "replace":
        monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        build_index(fa, out, q=5, log=log, round_keys=16, sort_group=16)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.fa", "g.h5"]
    assert out.read_bytes() == before  # the old index is untouched


def test_reader_rejects_foreign_incomplete_and_newer_files(tmp_path, sarscov2_index):
    with pytest.raises(PeanutError, match="no such file"):
        ReferenceIndex(tmp_path / "missing.h5")
    (tmp_path / "text.h5").write_text("hello\n")
    with pytest.raises(PeanutError, match="text.h5.*not a peanut-py index"):
        ReferenceIndex(tmp_path / "text.h5")
    cut = tmp_path / "cut.h5"
    cut.write_bytes(open(sarscov2_index, "rb").read()[:100_000])  # a copy interrupted midway
    with pytest.raises(PeanutError, match="cut.h5.*damaged index"):
        ReferenceIndex(cut)
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = [1, 2]
    with pytest.raises(PeanutError, match="other.h5.*not a peanut-py reference index"):
        ReferenceIndex(tmp_path / "other.h5")
    incomplete = tmp_path / "incomplete.h5"
    shutil.copy(sarscov2_index, incomplete)
    with h5py.File(incomplete, "a") as f:
        del f.attrs["format"]  # what an interrupted write would lack: the format tag is written last
    with pytest.raises(PeanutError, match="incomplete.h5"):
        ReferenceIndex(incomplete)
    newer = tmp_path / "newer.h5"
    shutil.copy(sarscov2_index, newer)
    with h5py.File(newer, "a") as f:
        f.attrs["format_version"] = 3
    with pytest.raises(PeanutError, match="newer.h5.*format version 3"):
        ReferenceIndex(newer)
    damaged = tmp_path / "damaged.h5"
    shutil.copy(sarscov2_index, damaged)
    with h5py.File(damaged, "a") as f:
        del f["qgrams/positions"]
    with pytest.raises(PeanutError, match="damaged.h5.*qgrams/positions"):
        ReferenceIndex(damaged)


def test_file_layout(sarscov2_index, sarscov2_fasta):
    """The root attributes and datasets of index/FORMAT.md, with their types."""
    import peanut_py

    with h5py.File(sarscov2_index, "r") as f:
        a = f.attrs
        assert a["format"] == "peanut-py reference index" and a["format_version"] == 2
        assert a["peanut_version"] == peanut_py.__version__ and a["contig_gap"] == 1024
        # the index keeps the absolute path as given; compare where both lead (../shared may be a link)
        assert os.path.realpath(a["source_fasta"]) == str(sarscov2_fasta.resolve())
        assert a["q"] == reference.DEFAULT_Q and a["mask_threshold"] == reference.DEFAULT_MASK_THRESHOLD
        for key in ("checksum", "command_line", "n_contigs", "total_bases", "positions_kept", "positions_masked",
                    "kmers_kept", "kmers_masked", "step", "bucket_bits"):
            assert key in a
        types = {"contigs/lengths": np.int64, "contigs/offsets": np.int64, "sequence/packed": np.uint32,
                 "sequence/exceptions/start": np.int64, "sequence/exceptions/end": np.int64,
                 "sequence/exceptions/letter": np.uint8, "qgrams/buckets": np.uint32,
                 "qgrams/positions": np.uint32, "qgrams/masked": np.uint32}
        for name, dtype in types.items():
            assert f[name].dtype == dtype, name
        assert h5py.check_string_dtype(f["contigs/names"].dtype).encoding == "utf-8"
        assert f["qgrams/buckets"].shape == ((1 << a["bucket_bits"]) + 1,)
        assert set(f["qgrams"]) == {"buckets", "positions", "masked"}
        for name in ("sequence/packed", "qgrams/buckets", "qgrams/positions"):
            # contiguous and raw, on a page boundary: the mapper maps them (ReferenceIndex._mapped)
            ds = f[name]
            assert ds.chunks is None and ds.compression is None, name
            assert ds.id.get_offset() % 4096 == 0, name


def test_big_arrays_are_mapped_from_the_file(tmp_path, sarscov2_index):
    """Default indexes hand out read-only, page-aligned arrays backed by the file; a --compress index and one
    with chunked datasets (gzip bucket table, int64 starts) give equal arrays, inflated into memory."""
    import mmap

    def mapped(a):
        base = a
        while isinstance(base, np.ndarray):
            base = base.base
        return isinstance(getattr(base, "obj", base), mmap.mmap)

    older = tmp_path / "older.h5"
    shutil.copy(sarscov2_index, older)
    with h5py.File(older, "a") as f:
        for name, dtype, small in (("qgrams/buckets", np.int64, True), ("qgrams/positions", np.uint32, False),
                                   ("sequence/packed", np.uint32, False)):
            data = f[name][...].astype(dtype)
            del f[name]
            f.create_dataset(name, data=data, chunks=(max(1, min(1000, data.size)),), maxshape=(None,),
                             **(reference.SMALL if small else {}))
    compressed = tmp_path / "compressed.h5"
    build_index(ReferenceIndex(sarscov2_index).attrs["source_fasta"], compressed, compress=True)
    with ReferenceIndex(sarscov2_index) as ix, ReferenceIndex(older) as old, ReferenceIndex(compressed) as cz:
        for get in ("packed", "positions"):
            a = getattr(ix, get)()
            assert mapped(a) and not a.flags.writeable and a.ctypes.data % 4096 == 0, get
            assert not mapped(getattr(old, get)()), get
            assert np.array_equal(a, getattr(old, get)()) and np.array_equal(a, getattr(cz, get)()), get
        assert mapped(ix.buckets(np.uint32)) and not mapped(cz.buckets(np.uint32))
        for dtype in (np.uint32, np.int64):
            starts = ix.buckets(dtype)
            assert starts.dtype == dtype and old.buckets(dtype).dtype == dtype
            assert np.array_equal(starts, old.buckets(dtype)) and np.array_equal(starts, cz.buckets(dtype))
    with h5py.File(compressed) as f:
        assert f["qgrams/buckets"].compression == "gzip" and f["qgrams/positions"].compression is None
    with ReferenceIndex(sarscov2_index) as ix, ReferenceIndex(older) as old, ReferenceIndex(compressed) as cz:
        assert "q-gram table       contiguous and raw: mapped" in ix.describe()
        assert "inflated into memory" in old.describe() and "inflated into memory" in cz.describe()


# ---------------------------------------------------------------- real genomes


def test_sarscov2(sarscov2_index, sarscov2_fasta):
    check_index(sarscov2_index, parse_fasta(sarscov2_fasta), 16, 1, reference.DEFAULT_MASK_THRESHOLD)


@pytest.mark.slow
def test_yeast(yeast_index, yeast_fasta):
    records = parse_fasta(yeast_fasta)
    assert len(records) == 17
    check_index(yeast_index, records, 16, 1, reference.DEFAULT_MASK_THRESHOLD)


@pytest.mark.slow
def test_chr20(chr20_index, chr20_fasta):
    """Round trip, N runs, md5 exactly; P checked for its invariants (a full lexsort of 60 M would be slow)."""
    records = parse_fasta(chr20_fasta)
    attrs = check_index(chr20_index, records, 16, 1, reference.DEFAULT_MASK_THRESHOLD, full_p=False)
    seq = records[0][1]
    with ReferenceIndex(chr20_index) as ix:
        assert ix.names == ["20"] and int(ix.lengths[0]) == 63_025_520
        n_runs = len(ix.exceptions()[0])
        assert n_runs > 0 and set(ix.exceptions()[2].tolist()) <= set(b"ACGTNRYKMSWBDHV")
        pos = ix.positions()
        values = ix.qgram_values(pos)
        kmers, first = np.unique(values, return_index=True)
        starts = np.append(first, pos.size)
        assert (values[1:] >= values[:-1]).all()
        assert np.array_equal(ix.buckets(), expected_buckets(kmers, starts, 16, ix.bucket_bits))
        # every all-ACGT 16-gram is either kept or masked
        codes = seq_codes(seq)
        cs = np.concatenate(([0], np.cumsum(codes == 4, dtype=np.int32)))
        valid = int(((cs[16:] - cs[:-16]) == 0).sum())
        assert attrs["positions_kept"] + attrs["positions_masked"] == valid
        assert pos.size == attrs["positions_kept"] == starts[-1]
        cnt = np.diff(starts)
        assert (kmers[1:] > kmers[:-1]).all() and (cnt >= 1).all()
        assert cnt.max() <= ix.mask_threshold
        # positions ascend within each q-gram; q-gram at each position equals its kmer (checked on a sample)
        within = pos[1:] > pos[:-1]
        within[starts[1:-1] - 1] = True
        assert within.all()
        rng = np.random.default_rng(20)
        for k in rng.integers(0, kmers.size, 2000):
            for p in pos[starts[k]:starts[k + 1]][:5]:
                local = int(p) - int(ix.offsets[0])
                v = 0
                for c in codes[local:local + 16]:
                    v = v * 4 + int(c)
                assert v == kmers[k]
        for a in rng.integers(0, len(seq) - 500, 50):
            assert ix.fetch(0, int(a), int(a) + 500) == seq[a:a + 500]
            g = int(ix.offsets[0]) + int(a)
            assert np.array_equal(ix.codes(g, g + 500), codes[a:a + 500])


@pytest.mark.parametrize("dtype, shuffle", [(np.int64, True), (np.uint32, True), (np.uint32, False)])
def test_parallel_read_equals_h5py(tmp_path, dtype, shuffle):
    """read_chunks_parallel (the q-gram table's loader) returns exactly h5py's array for gzip chunks with
    and without byte shuffling and for raw chunks, each with a partial last chunk, converts to another dtype
    on the way, and declines layouts it does not handle."""
    import h5py

    from peanut_py.reference import read_chunks_parallel

    rng = np.random.default_rng(3)
    data = np.cumsum(rng.integers(0, 1000, size=10_007)).astype(dtype)
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("z", data=data, chunks=(1024,), compression="gzip", compression_opts=1, shuffle=shuffle)
        f.create_dataset("plain", data=data, chunks=(1024,), maxshape=(None,))
        f.create_dataset("lzf", data=data, chunks=(1024,), compression="lzf")
        f.create_dataset("contiguous", data=data)
    with h5py.File(path, "r") as f:
        for name in ("z", "plain"):
            got = read_chunks_parallel(f[name], str(path), threads=3)
            assert got is not None and got.dtype == data.dtype and np.array_equal(got, data)
            assert got.ctypes.data % 4096 == 0  # page-aligned: a CPU device uses it in place (resident.py)
            narrow = read_chunks_parallel(f[name], str(path), threads=2, dtype=np.uint32)
            assert narrow.dtype == np.uint32 and np.array_equal(narrow, data.astype(np.uint32))
        assert read_chunks_parallel(f["lzf"], str(path)) is None
        assert read_chunks_parallel(f["contiguous"], str(path)) is None
