"""`peanut map` for pairs end to end: SAM v1.6 pair fields on every record, placement on a synthetic genome
with known answers (segmental duplication, masked repeats, mates to rescue, unmapped and discordant mates),
real pairs (bundled NA12878 slice, chr20, SARS-CoV-2, phiX), determinism, Picard, and input errors."""
import gzip
import random
import re
import shutil
import subprocess
from types import SimpleNamespace

import pysam
import pytest

from helpers import EXAMPLE, fastq_records, needs_tool, run_cli, sam_body, write_fastq

R1 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"
R2 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"
COMP = str.maketrans("ACGTN", "TGCAN")
PICARD = shutil.which("PicardCommandLine")


def revcomp(s):
    return s.translate(COMP)[::-1]


def primary_pairs(path):
    """Primary records in file order, checked to come as adjacent mates (mate 1, then mate 2)."""
    with pysam.AlignmentFile(str(path), check_sq=False) as f:
        recs = [r for r in f if not r.is_secondary and not r.is_supplementary]
    assert len(recs) % 2 == 0
    pairs = list(zip(recs[0::2], recs[1::2]))
    for a, b in pairs:
        assert a.query_name == b.query_name and a.is_read1 and b.is_read2, (a.query_name, b.query_name)
    return pairs


def check_pair_fields(a, b):
    """SAM v1.6 consistency of one pair's primary records (flags, mate fields, TLEN, MC)."""
    for me, mate in ((a, b), (b, a)):
        assert me.is_paired
        assert me.mate_is_unmapped == mate.is_unmapped
        if not mate.is_unmapped:
            assert me.mate_is_reverse == mate.is_reverse
            assert me.get_tag("MC") == mate.cigarstring
        else:
            assert not me.has_tag("MC") and not me.mate_is_reverse
        if me.is_unmapped:
            assert me.mapping_quality == 0 and me.cigarstring is None and not me.is_reverse
            assert not me.is_proper_pair and me.template_length == 0
            if not mate.is_unmapped:  # placed at the mate's position
                assert (me.reference_id, me.reference_start) == (mate.reference_id, mate.reference_start)
            else:
                assert me.reference_id == -1 and me.next_reference_id == -1
        # RNEXT/PNEXT equal the mate's RNAME/POS (an unmapped mate sits at this read's position)
        assert (me.next_reference_id, me.next_reference_start) == (mate.reference_id, mate.reference_start)
    assert a.is_proper_pair == b.is_proper_pair
    if a.is_proper_pair:
        assert not a.is_unmapped and not b.is_unmapped and a.reference_id == b.reference_id
        assert a.is_reverse != b.is_reverse
    if not a.is_unmapped and not b.is_unmapped and a.reference_id == b.reference_id:
        span = max(a.reference_end, b.reference_end) - min(a.reference_start, b.reference_start)
        assert abs(a.template_length) == span and a.template_length == -b.template_length
        left = a if a.reference_start <= b.reference_start else b
        assert left.template_length > 0 or span == 0
    else:
        assert a.template_length == 0 and b.template_length == 0


def flagstat(path):
    out = subprocess.run(["samtools", "flagstat", str(path)], capture_output=True, text=True, check=True).stdout
    get = lambda label: int(re.search(rf"^(\d+) \+ \d+ {label}", out, re.M).group(1))  # noqa: E731
    return {k: get(k) for k in ("primary", "primary mapped", "properly paired", "with itself and mate mapped",
                                "singletons", "read1", "read2")}


def picard_errors(path):
    out = subprocess.run(
        # read groups are not asked of a mapper; an empty read (phiX has one) has no qualities to store
        [PICARD, "ValidateSamFile", f"I={path}", "MODE=SUMMARY", "IGNORE=MISSING_READ_GROUP",
         "IGNORE=RECORD_MISSING_READ_GROUP", "IGNORE=QUALITY_NOT_STORED"],
        capture_output=True, text=True,
    )
    text = out.stdout + out.stderr
    return "No errors found" in text, re.findall(r"^(?:ERROR|WARNING):\S+\s+\d+", text, re.M)


@pytest.fixture(scope="module")
def example_run(example_index, tmp_path_factory):
    out = tmp_path_factory.mktemp("example_run") / "pairs.sam"
    rc, _, err = run_cli("map", str(example_index), str(R1), str(R2), "-o", str(out), "-t", "1")
    assert rc == 0, err
    return out, err


# --- the bundled real pairs -----------------------------------------------------------------------------------


def test_example_pairs(example_run):
    out, err = example_run
    assert re.search(r"insert size \(FR\): mean [\d.]+, std [\d.]+, concordant \d+\.\.\d+ \(estimated from", err)
    assert "properly paired" in err
    pairs = primary_pairs(out)
    names = [n.rsplit("/", 1)[0] for n, _, _ in fastq_records(R1)]
    assert [a.query_name for a, _ in pairs] == names  # every pair once, in input order
    for a, b in pairs:
        check_pair_fields(a, b)
    proper = sum(a.is_proper_pair for a, _ in pairs)
    assert proper >= 0.99 * len(pairs)  # bwa mem: 99.70 % of these reads
    # placement agrees with the original BAM (both mates; bwa 0.6.1 there)
    truth = {}
    with gzip.open(EXAMPLE / "original_positions.tsv.gz", "rt") as f:
        for line in f:
            name, mate, contig, pos, strand = line.rstrip("\n").split("\t")
            truth[name, mate] = (int(pos), strand)
    close = sum(
        1 for a, b in pairs for r, m in ((a, "1"), (b, "2"))
        if not r.is_unmapped and abs(r.reference_start + 1 - truth[r.query_name, m][0]) <= 5
        and ("-" if r.is_reverse else "+") == truth[r.query_name, m][1]
    )
    assert close >= 0.99 * 2 * len(pairs)
    m = re.search(r"([\d,]+) properly paired", err)
    assert int(m.group(1).replace(",", "")) == 2 * proper
    assert int(re.search(r"([\d,]+) hits rescued", err).group(1)) >= 5  # bwa rescues mates in ~14 of these pairs


@needs_tool("samtools")
def test_example_pairs_flagstat(example_run):
    """samtools flagstat counts the same pairs and proper pairs."""
    out, _ = example_run
    proper = sum(a.is_proper_pair for a, _ in primary_pairs(out))
    fs = flagstat(out)
    assert fs["primary"] == 4000 and fs["read1"] == fs["read2"] == 2000
    assert fs["properly paired"] == 2 * proper
    assert fs["primary mapped"] == fs["with itself and mate mapped"] + fs["singletons"]


@needs_tool("PicardCommandLine", "picard-tools")
def test_example_pairs_validate(example_run):
    clean, problems = picard_errors(example_run[0])
    assert clean, problems


def test_identical_for_threads_batch_sizes_and_interleaved_input(example_index, example_run, tmp_path):
    inter = tmp_path / "inter.fq"
    records = [r for pair in zip(fastq_records(R1), fastq_records(R2)) for r in pair]
    write_fastq(inter, [(f"{n}/{1 + i % 2}", s, q) for i, (n, s, q) in enumerate(records)])
    want = sam_body(example_run[0])
    errs = [example_run[1]]
    for extra in ([str(R1), str(R2), "-t", "2", "--batch-size", "1000"], ["-p", str(inter), "--batch-size", "1502"]):
        out = tmp_path / "out.sam"
        rc, _, err = run_cli("map", str(example_index), *extra, "-o", str(out))
        assert rc == 0, err
        assert sam_body(out) == want, extra
        errs.append(err)
    # the insert size is estimated from the same pairs whatever the batches
    sizes = [re.search(r"insert size.*", e).group(0) for e in errs]
    assert sizes[0] == sizes[1] == sizes[2]


def test_insert_size_option(example_index, tmp_path):
    # an insert no pair has: nothing is proper, every read still maps
    out = tmp_path / "o.sam"
    rc, _, err = run_cli("map", str(example_index), str(R1), str(R2), "-o", str(out), "-I", "5000,10")
    assert rc == 0, err
    assert "concordant 4960..5040 (given with -I)" in err
    pairs = primary_pairs(out)
    assert not any(a.is_proper_pair for a, _ in pairs)
    assert sum(not r.is_unmapped for p in pairs for r in p) >= 0.99 * 4000
    for a, b in pairs:
        check_pair_fields(a, b)


# --- a synthetic genome with known answers ----------------------------------------------------------------------


def random_seq(rng, n):
    return "".join(rng.choice("ACGT") for _ in range(n))


def mutate(rng, s, n_sub):
    s = list(s)
    for p in rng.sample(range(len(s)), n_sub):
        s[p] = rng.choice([c for c in "ACGT" if c != s[p]])
    return "".join(s)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """chrA (40 kb; [5000, 5600) duplicated exactly at [20000, 20600)) and chrB (10 kb); pairs of 100 bp.

    Pair kinds (name prefix): 'norm' concordant FR pairs (inserts 270..330, for the estimate); 'pin' mate 1
    inside copy A of the duplication, mate 2 in unique sequence; 'resc' mate 2 half N (only rescue can place
    it); 'junk' mate 2 random; 'none' both random; 'chr' mates on chrA and chrB; 'far' insert 5000; 'rf' RF.
    """
    rng = random.Random(11)
    chr_a = list(random_seq(rng, 40000))
    dup = "".join(chr_a[5000:5600])
    chr_a[20000:20600] = dup
    chr_a = "".join(chr_a)
    chr_b = random_seq(rng, 10000)
    d = tmp_path_factory.mktemp("synthetic")
    fasta = d / "ref.fa"
    fasta.write_text(f">chrA\n{chr_a}\n>chrB\n{chr_b}\n")
    truth = {}  # name -> ((contig, start, reverse), (contig, start, reverse)) per mate, or None
    r1, r2 = [], []

    def add(name, m1, m2, t1, t2):
        r1.append((name, m1, "I" * len(m1)))
        r2.append((name, m2, "I" * len(m2)))
        truth[name] = (t1, t2)

    for i in range(150):
        p, ins = rng.randrange(6000, 19000) if i % 2 else rng.randrange(21000, 39000), rng.randint(270, 330)
        add(f"norm{i}", mutate(rng, chr_a[p:p + 100], i % 3), revcomp(chr_a[p + ins - 100:p + ins]),
            ("chrA", p, False), ("chrA", p + ins - 100, True))
    for i in range(12):
        p = 5400 + 8 * i  # mate 1 inside copy A, mate 2 (ending 300 after mate 1's start) right of the copy
        add(f"pin{i}", chr_a[p:p + 100], revcomp(chr_a[p + 200:p + 300]), ("chrA", p, False), ("chrA", p + 200, True))
    for i in range(10):
        p = rng.randrange(25000, 38000)
        m2 = revcomp(chr_a[p + 200:p + 300])
        m2 = m2[:30] + "N" * 45 + m2[75:]  # 55 bases left in two pieces: no q-gram span passes 80 % identity
        add(f"resc{i}", chr_a[p:p + 100], m2, ("chrA", p, False), ("chrA", p + 200, True))
    for i in range(5):
        p = rng.randrange(25000, 38000)
        add(f"junk{i}", chr_a[p:p + 100], random_seq(rng, 100), ("chrA", p, False), None)
    add("none0", random_seq(rng, 100), random_seq(rng, 100), None, None)
    for i in range(3):
        p, q = rng.randrange(26000, 38000), rng.randrange(1000, 9000)
        add(f"chr{i}", chr_a[p:p + 100], revcomp(chr_b[q:q + 100]), ("chrA", p, False), ("chrB", q, True))
        add(f"far{i}", chr_a[p:p + 100], revcomp(chr_a[p - 20000:p - 19900]), ("chrA", p, False),
            ("chrA", p - 20000, True))
        add(f"rf{i}", revcomp(chr_a[p:p + 100]), chr_a[p + 200:p + 300], ("chrA", p, True), ("chrA", p + 200, False))
    write_fastq(d / "r1.fq", r1)
    write_fastq(d / "r2.fq", r2)
    index = d / "ref.h5"
    rc, _, err = run_cli("index", str(fasta), "-o", str(index))
    assert rc == 0, err
    masked = d / "masked.h5"  # every q-gram occurring twice is masked: the duplication has no q-grams
    rc, _, err = run_cli("index", str(fasta), "-o", str(masked), "-m", "1")
    assert rc == 0, err
    return SimpleNamespace(dir=d, index=index, masked=masked, truth=truth)


def at(rec, where):
    contig, start, reverse = where
    return (not rec.is_unmapped and rec.reference_name == contig and rec.reference_start == start
            and rec.is_reverse == reverse)


@pytest.fixture(scope="module")
def synthetic_run(synthetic):
    out = synthetic.dir / "pe.sam"
    rc, _, err = run_cli("map", str(synthetic.index), str(synthetic.dir / "r1.fq"), str(synthetic.dir / "r2.fq"),
                         "-o", str(out))
    assert rc == 0, err
    return {a.query_name: (a, b) for a, b in primary_pairs(out)}, out


def test_synthetic_pairs_flags_and_placement(synthetic, synthetic_run):
    pairs, out = synthetic_run
    assert list(pairs) == list(synthetic.truth)
    for name, (a, b) in pairs.items():
        check_pair_fields(a, b)
        kind = re.match(r"[a-z]+", name).group(0)
        t1, t2 = synthetic.truth[name]
        if kind in ("norm", "pin", "resc"):
            assert at(a, t1) and b.reference_name == t2[0] and b.is_reverse == t2[2], name
            assert a.flag & 0xFF in (99,) and b.flag & 0xFF in (147,), (name, a.flag, b.flag)
            left, right = a.reference_start, max(a.reference_end, b.reference_end)
            assert a.template_length == right - left == -b.template_length
        if kind in ("norm", "pin"):
            assert at(b, t2) and b.cigarstring == "100M"
        if kind == "junk":  # unmapped mate 2 at mate 1's place: flags 73 / 133
            assert (a.flag, b.flag) == (73, 133)
            assert (b.reference_name, b.reference_start) == (a.reference_name, a.reference_start)
            assert b.get_tag("MC") == a.cigarstring and a.next_reference_start == a.reference_start
        if kind == "none":
            assert (a.flag, b.flag) == (77, 141)
        if kind == "chr":
            assert at(a, t1) and at(b, t2) and (a.flag, b.flag) == (97, 145)
            assert a.next_reference_name == "chrB" and b.next_reference_name == "chrA"
        if kind == "far":
            assert at(a, t1) and at(b, t2) and (a.flag, b.flag) == (97, 145)
            assert b.template_length == a.reference_end - b.reference_start == 20100 == -a.template_length
        if kind == "rf":
            assert at(a, t1) and at(b, t2) and not a.is_proper_pair
            assert (a.flag, b.flag) == (81, 161)


def test_mate_rescue_places_n_rich_mates(synthetic_run):
    pairs, _ = synthetic_run
    rescued = [b for name, (a, b) in pairs.items() if name.startswith("resc")]
    assert all(b.is_proper_pair and "S" in b.cigarstring for b in rescued)  # local alignment, N part clipped


def test_pair_pins_an_ambiguous_mate(synthetic, synthetic_run, tmp_path):
    pairs, _ = synthetic_run
    # single-end, the mates in the duplication are ambiguous
    out = tmp_path / "se.sam"
    rc, _, err = run_cli("map", str(synthetic.index), str(synthetic.dir / "r1.fq"), "-o", str(out))
    assert rc == 0, err
    with pysam.AlignmentFile(str(out), check_sq=False) as f:
        se = {r.query_name: r for r in f if r.query_name.startswith("pin")}
    assert len(se) == 12 and all(r.mapping_quality == 0 for r in se.values())
    for name, r in se.items():
        a, _ = pairs[name]
        assert a.mapping_quality >= 30 and a.reference_start == synthetic.truth[name][0][1]


def test_rescue_finds_mates_whose_qgrams_are_masked(synthetic, tmp_path):
    out = tmp_path / "masked.sam"
    rc, _, err = run_cli("map", str(synthetic.masked), str(synthetic.dir / "r1.fq"), str(synthetic.dir / "r2.fq"),
                         "-o", str(out), "-I", "300,20")
    assert rc == 0, err
    pairs = {a.query_name: (a, b) for a, b in primary_pairs(out)}
    for i in range(12):
        a, b = pairs[f"pin{i}"]
        check_pair_fields(a, b)
        assert at(a, synthetic.truth[f"pin{i}"][0]) and a.is_proper_pair and a.mapping_quality >= 30


# --- real pairs on real genomes ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_chr20_pairs(chr20_index, shared_data, tmp_path):
    n = 1000
    reads = []
    for mate in (1, 2):
        recs = fastq_records(shared_data / "human" / f"NA12878_S1.chr20_10.0-10.1Mb_R{mate}.fastq.gz")[:n]
        reads.append(tmp_path / f"r{mate}.fq")
        write_fastq(reads[-1], recs)
    out = tmp_path / "chr20.sam"
    rc, _, err = run_cli("map", str(chr20_index), *map(str, reads), "-o", str(out), "-t", "2")
    assert rc == 0, err
    pairs = primary_pairs(out)
    assert len(pairs) == n
    for a, b in pairs:
        check_pair_fields(a, b)
    assert sum(a.is_proper_pair for a, _ in pairs) >= 0.99 * n  # bwa mem: 99.2 % on all 25,839 pairs
    if PICARD:
        clean, problems = picard_errors(out)
        assert clean, problems


@pytest.mark.parametrize("genome, min_proper", [("sarscov2", 1.0), ("phix", 0.85)])
def test_small_genomes(genome, min_proper, shared_data, tmp_path):
    """bwa mem on the same files: SARS-CoV-2 100 % of the reads properly paired, phiX 86.7 % (78 of 90)."""
    d = shared_data / genome
    if genome == "sarscov2":
        fasta = d / "MT192765.1.fasta"
        r1, r2 = d / "ERR5069949_100pairs_R1.fastq.gz", d / "ERR5069949_100pairs_R2.fastq.gz"
    else:
        fasta, r1, r2 = d / "phix.fasta", d / "phix.1.fastq", d / "phix.2.fastq"
    index = tmp_path / "ref.h5"
    rc, _, err = run_cli("index", str(fasta), "-o", str(index))
    assert rc == 0, err
    out = tmp_path / "out.sam"
    rc, _, err = run_cli("map", str(index), str(r1), str(r2), "-o", str(out))
    assert rc == 0, err
    pairs = primary_pairs(out)
    assert [a.query_name for a, _ in pairs] == [n.rsplit("/", 1)[0] for n, _, _ in fastq_records(r1)]
    for a, b in pairs:
        check_pair_fields(a, b)
    proper = sum(a.is_proper_pair for a, _ in pairs)
    assert proper >= min_proper * len(pairs), (proper, len(pairs))
    if PICARD:
        clean, problems = picard_errors(out)
        assert clean, problems


# --- errors ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_pairs(tmp_path_factory):
    d = tmp_path_factory.mktemp("small_pairs")
    a, b = fastq_records(R1)[:50], fastq_records(R2)[:50]
    write_fastq(d / "r1.fq", a)
    write_fastq(d / "r2.fq", b)
    write_fastq(d / "r2_renamed.fq", b[:20] + [("other", b[20][1], b[20][2])] + b[21:])
    write_fastq(d / "r2_short.fq", b[:30])
    write_fastq(d / "odd.fq", [r for pair in zip(a, b) for r in pair][:7])
    return d


@pytest.mark.parametrize("args, pattern", [
    (["r1.fq", "r2_renamed.fq"], r"r1\.fq, record 21: mate names differ: '\S+' here but 'other' in \S*r2_renamed\.fq"),
    (["r1.fq", "r2_short.fq"], r"r2_short\.fq, record 31: ends after 30 records but \S*r1\.fq has more"),
    (["-p", "odd.fq"], r"odd\.fq, record 7: the last record has no mate"),
    (["-p", "r1.fq", "r2.fq"], r"-p/--interleaved takes one reads file"),
])
def test_pair_input_errors(example_index, small_pairs, tmp_path, args, pattern):
    out = tmp_path / "out.sam"
    args = [str(small_pairs / a) if a.endswith(".fq") else a for a in args]
    rc, stdout, err = run_cli("map", str(example_index), *args, "-o", str(out))
    assert rc == 1
    lines = err.strip().splitlines()
    assert lines[-1].startswith("peanut: error: ") and re.search(pattern, lines[-1]), err
    assert "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".out.sam*"))


def test_insert_size_option_errors(example_index, small_pairs):
    rc, _, err = run_cli("map", str(example_index), str(small_pairs / "r1.fq"), "-I", "300")
    assert rc == 1 and "-I applies to paired-end reads only" in err
    rc, _, err = run_cli("map", str(example_index), str(small_pairs / "r1.fq"), str(small_pairs / "r2.fq"), "-I", "x")
    assert rc == 2 and "MEAN[,STD[,MAX[,MIN]]]" in err


def test_a_mate_longer_than_supported_is_unmapped_and_its_pair_kept(example_index, tmp_path):
    """Pairs with a mate over 1,024 bases: that mate is an unmapped record (never rescued), its mate is still
    placed, and every pair keeps its two primary records in order."""
    r1, r2 = fastq_records(R1)[:200], fastq_records(R2)[:200]
    for k in (3, 50):
        name, seq, qual = r2[k]
        r2[k] = (name, (seq * 12)[:1100], (qual * 12)[:1100])
    a, b = tmp_path / "a_1.fq", tmp_path / "a_2.fq"
    write_fastq(a, r1)
    write_fastq(b, r2)
    out = tmp_path / "out.sam"
    rc, _, err = run_cli("map", str(example_index), str(a), str(b), "-o", str(out))
    assert rc == 0, err
    assert "2 reads longer than 1,024 bases" in err
    records = [line.split("\t") for line in sam_body(out) if not line.startswith("@")]
    primary = [f for f in records if not int(f[1]) & 0x900]
    assert len(primary) == 400
    for k in (3, 50):
        mate1, mate2 = primary[2 * k], primary[2 * k + 1]
        assert int(mate2[1]) & 0x4 and len(mate2[9]) == 1100
        assert not int(mate1[1]) & 0x4 and int(mate1[1]) & 0x8
