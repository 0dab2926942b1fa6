"""benchmarks/accuracy.py's checks without running a mapper: correct and wrong reads per MAPQ cut-off from a
hand-made SAM, the dominance of one curve over another, the calibration rule with its counting-noise
allowance, and the report's marks and counts."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # benchmarks/ is a package of the repository, not of the installed peanut_py

from benchmarks import accuracy, report, scoring  # noqa: E402

SEQ, QUAL = "A" * 20, "I" * 20


def write_sam(path, records):
    """records: (qname, flag, rname, pos, mapq, cigar)"""
    with open(path, "w") as f:
        f.write("@HD\tVN:1.6\n@SQ\tSN:1\tLN:100000\n")
        for qname, flag, rname, pos, mapq, cigar in records:
            f.write("\t".join(map(str, [qname, flag, rname, pos, mapq, cigar, "*", 0, 0, SEQ, QUAL])) + "\n")
    return str(path)


def truth_of(places):
    truth = scoring.Truth()
    for name, pos in places.items():
        truth.add((name, 0), scoring.placement("1", pos, "20M", False))
    return truth


TRUTH = truth_of({"a": 100, "b": 200, "c": 300, "d": 400, "e": 500})


def score_of(tmp_path, name, records):
    return scoring.score_sam(write_sam(tmp_path / name, records), TRUTH, tolerance=5,
                             thresholds=(0,) + accuracy.THRESHOLDS)


def test_correct_and_wrong_per_cutoff(tmp_path):
    s = score_of(tmp_path, "x.sam", [
        ("a", 0, "1", 100, 60, "20M"),  # correct, 60
        ("b", 0, "1", 203, 25, "20M"),  # correct (3 bp off), 25
        ("c", 0, "1", 900, 30, "20M"),  # wrong, 30
        ("d", 16, "1", 400, 60, "20M"),  # wrong strand, 60
        ("e", 4, "*", 0, 0, "*"),  # unmapped
    ])
    got = scoring.correct_wrong_at(s, accuracy.THRESHOLDS)
    assert got == {1: (2, 2), 10: (2, 2), 20: (2, 2), 30: (1, 2), 60: (1, 1)}


def test_dominance_and_marks(tmp_path):
    ours = score_of(tmp_path, "ours.sam", [("a", 0, "1", 100, 60, "20M"), ("b", 0, "1", 200, 40, "20M"),
                                           ("c", 0, "1", 900, 15, "20M")])
    bwa = score_of(tmp_path, "bwa.sam", [("a", 0, "1", 100, 60, "20M"), ("b", 0, "1", 200, 10, "20M"),
                                         ("c", 0, "1", 900, 3, "20M")])
    minibwa = score_of(tmp_path, "minibwa.sam", [("a", 0, "1", 100, 60, "20M"), ("b", 0, "1", 200, 60, "20M"),
                                                 ("c", 0, "1", 900, 0, "20M")])
    assert scoring.dominates((10, 1), (10, 1)) == (True, True)
    assert scoring.dominates((9, 0), (10, 1)) == (False, True)
    check = accuracy.checks({"peanut-best": {"score": ours}, "bwa": {"score": bwa}, "minibwa": {"score": minibwa}})
    # ours keeps b at >= 20 and 30 (bwa does not) but also the wrong c at >= 1 and 10 (bwa at >= 1, minibwa never)
    assert report.dominance_mark(check, 1) == "w>minibwa"
    assert report.dominance_mark(check, 10) == "w>bwa w>minibwa"
    assert report.dominance_mark(check, 20) == "✓"
    assert report.dominance_mark(check, 60) == "c<minibwa"
    results = {"sets": {"g/x": {"genome": "g"}}, "checks": {"g/x": check}}
    # five cut-offs: wrong > bwa at 10 only; minibwa: wrong more at 1 and 10, correct fewer at 60
    assert report.dominance_counts(results, ["g"]) == {"bwa": (5, 4, 5), "minibwa": (4, 3, 5)}
    assert report.dominance_counts(results, ["other"]) == {}
    assert set(check["calibration"]) == {"peanut-best", "bwa", "minibwa"}


@pytest.mark.parametrize("n, wrong, mapq, ok", [
    (50000, 0, 60, True),  # 0.05 wrong expected: none seen is no evidence against the claim
    (50000, 3, 60, False),  # 3 wrong where at most 0.15 are allowed
    (10000, 100, 20, True),  # exactly as claimed
    (10000, 290, 20, True),  # just under 3x
    (10000, 400, 20, False),  # 4x: far beyond noise at this count
    (10000, 20, 20, False),  # 5x fewer errors than claimed: MAPQ too low
    (10000, 30, 20, True),  # 3.3x fewer, within the noise of 33 expected at the bound
    (2000, 600, 0, False),  # MAPQ 0 claims certain error: 30 % wrong is more than 3x below it ...
    (2000, 700, 0, True),  # ... 35 % is not
])
def test_calibration_rule(n, wrong, mapq, ok):
    assert scoring.calibration_bin_ok(n, wrong, mapq) is ok


def test_calibration_check_keeps_bins_of_enough_reads():
    cal = [{"mapq": 0, "n": 3000, "wrong": 1500, "frac_wrong": 0.5, "expected": 1.0},
           {"mapq": 7, "n": 999, "wrong": 900, "frac_wrong": 0.9, "expected": 0.2},
           {"mapq": 60, "n": 45000, "wrong": 4, "frac_wrong": 4 / 45000, "expected": 1e-6}]
    got = scoring.calibration_check(cal)
    assert [(b["mapq"], b["ok"]) for b in got] == [(0, True), (60, False)]
    assert got[1]["ratio"] == pytest.approx(4 / 45000 / 1e-6)


def test_stored_score_keeps_what_the_checks_and_plots_need(tmp_path):
    full = score_of(tmp_path, "x.sam", [("a", 0, "1", 100, 60, "20M"), ("b", 0, "1", 200, 25, "20M"),
                                        ("c", 0, "1", 900, 25, "20M"), ("d", 16, "1", 400, 3, "20M")])
    stored = accuracy.stored_score(full)
    assert "curve" not in stored and accuracy.stored_score(stored) == stored
    assert scoring.curve_of(stored["calibration"]) == [{k: p[k] for k in ("mapq", "mapped", "wrong")}
                                                       for p in full["curve"]]
    assert scoring.correct_wrong_at(stored, accuracy.THRESHOLDS) == scoring.correct_wrong_at(full, accuracy.THRESHOLDS)
    runs_full, runs_stored = {"peanut-best": {"score": full}}, {"peanut-best": {"score": stored}}
    assert accuracy.checks(runs_full) == accuracy.checks(runs_stored)


def test_made_genome_holds_the_window_and_copies_of_it(tmp_path, monkeypatch):
    """The made genome from a small stand-in chr20: its first contig is the window verbatim, the others hold
    diverged copies of its segments, and a second build gives the same bytes."""
    import gzip

    import numpy as np

    from benchmarks import human_scale, simulate

    rng = np.random.default_rng(5)
    chr20 = "".join("ACGT"[i] for i in rng.integers(0, 4, 60_000))
    os.makedirs(tmp_path / "data" / "human")
    with gzip.open(tmp_path / "data" / "human" / "GRCh37_chr20.fa.gz", "wt") as f:
        f.write(">20\n" + "\n".join(chr20[i:i + 60] for i in range(0, len(chr20), 60)) + "\n")
    monkeypatch.setattr(accuracy, "MADE_WINDOW", (6_000, 36_000))
    monkeypatch.setattr(accuracy, "MADE_CONTIGS", (("rr1", 120_000),))
    monkeypatch.setattr(human_scale, "COPY_LENGTHS", (300, 1_000))
    args = accuracy.parse_args(["--data", str(tmp_path / "data"), "--work", str(tmp_path / "w1")])
    path = accuracy.made_genome(args, "repeats")
    assert simulate.fasta_contigs(path) == [("chr20w", 30_000), ("rr1", 120_000)]
    text = open(path).read().split(">")
    window = "".join(text[1].split("\n")[1:])
    assert window == chr20[6_000:36_000]
    rr1 = "".join(text[2].split("\n")[1:])
    # copies (1-20 % diverged) share exact 24-mers with the window, either strand; random sequence would not
    comp = str.maketrans("ACGT", "TGCA")
    kmers = {window[i:i + 24] for i in range(len(window) - 23)}
    kmers |= {k.translate(comp)[::-1] for k in kmers}
    shared = sum(rr1[i:i + 24] in kmers for i in range(0, len(rr1) - 23, 24))
    assert shared > 100
    args2 = accuracy.parse_args(["--data", str(tmp_path / "data"), "--work", str(tmp_path / "w2")])
    assert open(accuracy.made_genome(args2, "repeats")).read() == open(path).read()


def test_quality_ties_prefers_the_copy_whose_mismatches_have_low_qualities(tmp_path):
    """benchmarks/quality_ties.py on a made-up genome: copies A and B differ at bases 10 and 30; a read from A
    whose error at base 10 (quality 5) gives it B's base there ties with B (NM 1 each: B's mismatch is base 30,
    quality 38); the quality choice picks A although B was reported, and a read on two identical copies stays
    a coin flip."""
    import random

    import pysam

    from benchmarks import quality_ties

    rng = random.Random(3)
    unit = "".join(rng.choice("ACGT") for _ in range(40))
    other = {b: ("A" if b != "A" else "C") for b in "ACGT"}
    copy_b = unit[:10] + other[unit[10]] + unit[11:30] + other[unit[30]] + unit[31:]
    spacer = lambda: "".join(rng.choice("ACGT") for _ in range(60))  # noqa: E731
    genome = spacer() + unit + spacer() + copy_b + spacer() + unit + spacer()
    a, b, c = 60, 160, 260
    assert genome[a:a + 40] == unit and genome[b:b + 40] == copy_b and genome[c:c + 40] == unit
    (tmp_path / "g.fa").write_text(">g\n" + genome + "\n")
    pysam.faidx(str(tmp_path / "g.fa"))
    # read 1: copy A with B's base at base 10 (an error of quality 5); read 2: copy A exactly (also copy C)
    read1 = unit[:10] + copy_b[10] + unit[11:]
    quals = [38] * 40
    q1 = quals[:10] + [5] + quals[11:]
    assert sum(x != y for x, y in zip(read1, unit)) == sum(x != y for x, y in zip(read1, copy_b)) == 1
    header = {"HD": {"VN": "1.6"}, "SQ": [{"SN": "g", "LN": len(genome)}]}

    def record(f, name, seq, qual, pos, tags):
        r = pysam.AlignedSegment(f.header)
        r.query_name, r.query_sequence, r.flag, r.reference_id, r.reference_start = name, seq, 0, 0, pos
        r.mapping_quality, r.cigarstring, r.query_qualities = 0, "40M", pysam.qualitystring_to_array(
            "".join(chr(q + 33) for q in qual))
        for k, v in tags:
            r.set_tag(k, v)
        f.write(r)

    with pysam.AlignmentFile(str(tmp_path / "m.sam"), "w", header=header) as f:
        record(f, "r1", read1, q1, b, [("NM", 1), ("XA", f"g,+{a + 1},40M,1;")])  # B reported, A the alternative
        record(f, "r2", unit, quals, a, [("NM", 0), ("XA", f"g,+{c + 1},40M,0;")])
    with pysam.AlignmentFile(str(tmp_path / "t.sam"), "w", header=header) as f:
        record(f, "r1", read1, q1, a, [])
        record(f, "r2", unit, quals, c, [])
    out = quality_ties.score(str(tmp_path / "g.fa"), str(tmp_path / "m.sam"), str(tmp_path / "t.sam"))
    assert out["tied"] == 2 and out["any_right"] == 2
    assert out["reported_right"] == 0  # r1 reported at B, r2 at A while it came from C
    assert out["quality_right"] == 1   # r1: A's mismatch has quality 5, B's 38
    assert out["tied_with_mismatches"] == 1 and out["mismatches_quality_right"] == 1
    # r1: posterior 1 / (1 + 10^-3.3) -> MAPQ 33; r2: a coin flip -> MAPQ 3
    assert out["cutoffs"]["30"] == {"kept": 1, "wrong": 0}
    assert out["cutoffs"]["3"] == {"kept": 2, "wrong": 1}
    assert quality_ties.quality_choice([38, 5]) == (1, pytest.approx(1 / (1 + 10 ** -3.3)))
    assert quality_ties.placed_read("ACGG", [1, 2, 3, 4], True) == ("CCGT", [4, 3, 2, 1])


def test_curve_shortfall_compares_operating_points_not_cutoffs(tmp_path):
    """As ROC curves: a peer whose MAPQ puts a wrong read lower than ours keeps more correct reads at the
    same number of wrong ones, whatever the MAPQ values themselves are."""
    def bins(*triples):
        return [{"mapq": q, "n": n, "wrong": w} for q, n, w in triples]

    # ours: 100 correct at 60, then 10 reads at MAPQ 9 of which 1 wrong, 5 at 0 of which 3 wrong
    ours = scoring.curve_of(bins((60, 100, 0), (9, 10, 1), (0, 5, 3)))
    # theirs: the same reads, the wrong one of the 10 at MAPQ 2 instead of 9, its 9 right ones at 4
    theirs = scoring.curve_of(bins((60, 100, 0), (4, 9, 0), (2, 1, 1), (0, 5, 3)))
    short, point = scoring.curve_shortfall(ours, theirs)
    assert short == 9 and point["mapq"] == 4 and point["mapped"] == 109 and point["wrong"] == 0
    assert scoring.curve_shortfall(theirs, ours) == (0, None)
    assert scoring.curve_shortfall(ours, ours) == (0, None)
    # their MAPQ-0 point is left out by default (all mapped reads: placement, not MAPQ)
    more = scoring.curve_of(bins((60, 100, 0), (0, 20, 1)))
    assert scoring.curve_shortfall(ours, more) == (0, None)
    assert scoring.curve_shortfall(ours, more, min_mapq=0)[0] == 119 - 109  # ours at <= 1 wrong: MAPQ >= 9
    # a curve that keeps nothing at few wrong reads: the empty cut-off (0 correct, 0 wrong) is ours too
    assert scoring.curve_shortfall(scoring.curve_of(bins((10, 5, 2))), scoring.curve_of(bins((30, 4, 0))))[0] == 4


def test_roc_compare_reads_an_accuracy_result(tmp_path, capsys):
    import json

    from benchmarks import roc_compare

    def tool(*triples):
        return {"ok": True, "score": {"calibration": [{"mapq": q, "n": n, "wrong": w} for q, n, w in triples]}}

    results = {"runs": {"g/a": {"peanut-best": tool((60, 100, 0), (9, 10, 1)),
                                "bwa": tool((60, 100, 0), (4, 9, 0), (2, 1, 1)),
                                "minibwa": tool((60, 90, 0), (9, 20, 1))},
                        "g/b": {"peanut-best": tool((60, 50, 0)), "bwa": {"ok": False}}}}
    rows = roc_compare.compare(results)
    assert [(k, p, s) for k, p, s, _ in rows] == [("g/a", "bwa", 9), ("g/a", "minibwa", 0)]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(results))
    assert roc_compare.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "9 correct reads fewer than its 109 at <= 0 wrong (its MAPQ >= 4)" in out
    assert "against bwa: on or above its curve on 0 of 1 sets" in out
    assert "against minibwa: on or above its curve on 1 of 1 sets" in out
