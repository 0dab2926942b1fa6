"""benchmarks/scoring.py on hand-made SAM files with hand-derived results, and the mason truth reader on a
tiny real mason run."""
import gzip
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # benchmarks/ is a package of the repository, not of the installed peanut_py

from benchmarks import scoring, simulate  # noqa: E402
SLICE = os.path.join(ROOT, "index", "example", "chr20_slice.fa.gz")
SEQ = "A" * 20
QUAL = "I" * 20


def sam(path, records, header=("@HD\tVN:1.6", "@SQ\tSN:1\tLN:100000", "@SQ\tSN:2\tLN:100000")):
    """records: (qname, flag, rname, pos, mapq, cigar, *tags)"""
    with open(path, "w") as f:
        for h in header:
            f.write(h + "\n")
        for qname, flag, rname, pos, mapq, cigar, *tags in records:
            seq = "*" if flag & 0x4 and rname == "*" else SEQ
            qual = "*" if seq == "*" else QUAL
            f.write("\t".join(map(str, [qname, flag, rname, pos, mapq, cigar, "*", 0, 0, seq, qual, *tags])) + "\n")
    return str(path)


# Truth: mason-style primary records (qname without /1 /2, mates told apart by the flags).
TRUTH = [
    ("r1", 0, "1", 100, 255, "20M"),
    ("r2", 16, "1", 200, 255, "20M"),
    ("r3", 0, "1", 300, 255, "20M"),
    ("r4", 0, "1", 400, 255, "20M"),
    ("r5", 0, "1", 500, 255, "20M"),
    ("r6", 0, "1", 600, 255, "20M"),
    ("r7", 0, "1", 700, 255, "20M"),
    ("r8", 16, "1", 800, 255, "3M8D17M"),  # reverse, deletion near its 3' end: reference end 827
    ("r9", 0, "1", 900, 255, "17M8D3M"),  # forward, deletion near its 3' end
    ("r10", 0, "1", 1000, 255, "20M"),
    ("r11", 0, "1", 1100, 255, "20M"),
    ("r12", 0, "1", 1200, 255, "20M"),
    ("r13", 0, "1", 1300, 255, "20M"),
    ("p1", 99, "1", 1500, 255, "20M"),
    ("p1", 147, "1", 1700, 255, "20M"),
    ("r14", 4, "*", 0, 0, "*"),  # unplaced in the truth (mason: read inside an insertion)
    ("r15", 0, "3", 50, 255, "20M"),  # on a contig the reference lacks
    ("r16", 0, "1", 1600, 255, "20M"),
    ("r12", 256, "1", 9999, 255, "20M"),  # a secondary truth record never replaces the primary
]

# Mapper output; comment = expected verdict (MAPQ, correct?).
TEST = [
    ("r1", 0, "1", 100, 60, "20M"),  # 60 right
    ("r1", 0, "2", 7000, 60, "20M"),  # second primary of r1: counted as duplicate, ignored
    ("r2", 16, "chr1", 200, 30, "20M"),  # 30 right ('chr' prefix ignored)
    ("r3", 0, "2", 300, 60, "20M"),  # 60 wrong contig
    ("r4", 16, "1", 400, 20, "20M"),  # 20 wrong strand
    ("r5", 0, "1", 503, 10, "20M"),  # 10 right (3 bp off)
    ("r6", 0, "1", 620, 1, "20M"),  # 1 wrong (20 bp off)
    ("r7", 0, "1", 710, 0, "10S10M"),  # 0 right: unclipped start 700
    ("r8", 16, "1", 811, 60, "3S17M"),  # 60 right: reverse compared by end (827); its start is 8 bp off
    ("r9", 0, "1", 900, 60, "17M3S"),  # 60 right: forward compared by start; its end is 8 bp off
    ("r10", 4, "*", 0, 0, "*"),  # unmapped
    # r11 absent: missing
    ("r12", 256, "1", 1200, 60, "20M"),  # secondary at the right place: ignored
    ("r12", 0, "1", 5000, 3, "20M"),  # 3 wrong
    ("r13", 2048, "2", 50, 60, "5H15M"),  # supplementary first: ignored
    ("r13", 0, "1", 1300, 42, "20M"),  # 42 right
    ("p1", 99, "1", 1500, 60, "20M"),  # 60 right (mate 1)
    ("p1/2", 147, "1", 1750, 60, "20M"),  # 60 wrong (mate 2; '/2' suffix stripped)
    ("r14", 0, "1", 42, 60, "20M"),  # unplaced in truth: not counted
    ("r15", 0, "1", 50, 60, "20M"),  # off-reference in truth: not counted
    ("r16", 0, "1", 1630, 255, "20M"),  # MAPQ 255 counts as 0; wrong
    ("zz", 0, "1", 1, 60, "20M"),  # not in the truth: extra
]


@pytest.fixture
def scored(tmp_path):
    truth = scoring.load_truth(sam(tmp_path / "truth.sam", TRUTH), ref_contigs=["chr1", "2"])
    return truth, scoring.score_sam(sam(tmp_path / "test.sam", TEST), truth)


def test_truth_reader_handles_unplaced_offref_and_secondary(scored):
    truth, _ = scored
    assert len(truth) == 16
    assert truth.unplaced == {("r14", 0)}
    assert truth.off_reference == {("r15", 0)}
    assert truth.placements[("r12", 0)].start == 1200
    assert truth.placements[("p1", 2)] == scoring.Placement("1", True, 1700, 1719)
    assert truth.placements[("r8", 0)].end == 827


def test_counts(scored):
    _, s = scored
    assert (s["n_truth"], s["mapped"], s["correct"], s["wrong"]) == (16, 14, 8, 6)
    assert (s["missing"], s["extra"], s["duplicate_primary"]) == (1, 1, 1)
    assert (s["truth_unplaced"], s["truth_off_reference"]) == (1, 1)
    assert s["frac_mapped"] == 14 / 16
    assert s["frac_correct"] == 8 / 16


def test_wrong_per_10k_by_threshold(scored):
    _, s = scored
    assert s["mapped_at"] == {"0": 14, "1": 12, "10": 10, "20": 9, "30": 8, "60": 6}
    assert s["wrong_at"] == {"0": 6, "1": 5, "10": 3, "20": 3, "30": 2, "60": 2}
    assert s["wrong_per_10k"] == {"0": 3750.0, "1": 3125.0, "10": 1875.0, "20": 1875.0, "30": 1250.0, "60": 1250.0}


def test_calibration_bins(scored):
    _, s = scored
    got = [(b["mapq"], b["n"], b["wrong"]) for b in s["calibration"]]
    assert got == [(0, 2, 1), (1, 1, 1), (3, 1, 1), (10, 1, 0), (20, 1, 1), (30, 1, 0), (42, 1, 0), (60, 6, 2)]
    by_q = {b["mapq"]: b for b in s["calibration"]}
    assert by_q[60]["frac_wrong"] == 2 / 6
    assert by_q[20]["expected"] == pytest.approx(0.01)
    assert by_q[0]["expected"] == 1.0


def test_mapq_curve(scored):
    _, s = scored
    got = [(p["mapq"], p["mapped"], p["wrong"]) for p in s["curve"]]
    assert got == [(60, 6, 2), (42, 7, 2), (30, 8, 2), (20, 9, 3), (10, 10, 3), (3, 11, 4), (1, 12, 5), (0, 14, 6)]
    assert s["curve"][0]["frac_mapped"] == 6 / 16
    assert s["curve"][-1]["frac_wrong"] == 6 / 14


def test_truth_restricted_to_a_read_subset(scored, tmp_path):
    truth, _ = scored
    truth.restrict({"r1", "p1", "r14"})
    assert set(truth.placements) == {("r1", 0), ("p1", 1), ("p1", 2)}
    assert truth.unplaced == {("r14", 0)} and truth.off_reference == set()
    s = scoring.score_sam(sam(tmp_path / "test.sam", TEST), truth)
    # extra: r2-r10, r12, r13 (11), r15 (no longer off-reference once dropped), r16, zz
    assert (s["n_truth"], s["mapped"], s["correct"], s["extra"]) == (3, 3, 2, 14)


def test_tolerance_is_inclusive(tmp_path):
    truth = scoring.load_truth(sam(tmp_path / "t.sam", [("a", 0, "1", 100, 255, "20M"), ("b", 16, "1", 100, 255, "20M")]))
    out = sam(tmp_path / "o.sam", [("a", 0, "1", 105, 60, "20M"), ("b", 16, "1", 94, 60, "20M")])
    assert scoring.score_sam(out, truth)["correct"] == 1  # a: 5 off (in), b: 6 off (out)
    assert scoring.score_sam(out, truth, tolerance=6)["correct"] == 2
    assert scoring.score_sam(out, truth, tolerance=0)["correct"] == 0


def test_placement_clips():
    p = scoring.placement("chr7", 110, "5H5S10M2I3M4D6M7S", True)
    assert p == scoring.Placement("7", True, 100, 110 + 23 - 1 + 7)
    assert p.anchor == 139
    assert scoring.placement("7", 110, "5H5S10M", False).anchor == 100


def test_tsv_truth_compares_starts_on_both_strands(tmp_path):
    tsv = tmp_path / "pos.tsv.gz"
    with gzip.open(tsv, "wt") as f:
        f.write("q\t1\t20_slice\t1000\t-\nq\t2\t20_slice\t1300\t+\n")
    truth = scoring.load_truth(tsv)
    assert truth.placements[("q", 1)] == scoring.Placement("20_slice", True, 1000, None)
    out = sam(tmp_path / "o.sam", [("q", 83, "20_slice", 1000, 60, "10M10S"), ("q", 163, "20_slice", 1310, 60, "20M")],
              header=())
    s = scoring.score_sam(out, truth)
    assert (s["mapped"], s["correct"]) == (2, 1)


GOLD = [
    ("g1", 0, "1", 100, 255, "20M"),
    ("g1", 272, "1", 5000, 255, "20M"),
    ("g2", 0, "2", 300, 255, "20M"),
    ("g3", 0, "1", 700, 255, "20M"),
    ("g3", 256, "1", 900, 255, "20M"),
    ("g3", 272, "2", 40, 255, "20M"),
]
ALL_MODE = [
    ("g1", 0, "1", 100, 3, "20M"),
    ("g1", 272, "1", 5002, 0, "20M"),  # secondary, 2 bp off: found
    ("g2", 0, "2", 330, 60, "20M"),  # 30 bp off: not found
    ("g2", 2048, "2", 300, 60, "20M"),  # supplementary: not a hit
    ("g3", 0, "1", 700, 0, "20M", "XA:Z:2,-40,20M,0;1,+950,20M,1;"),  # XA: 2:-40 found, 1:+950 not
    ("other", 0, "1", 900, 60, "20M"),  # not in the gold set
]


def test_gold_recall(tmp_path):
    gold = scoring.load_gold(sam(tmp_path / "gold.sam", GOLD))
    assert sorted(len(v) for v in gold.values()) == [1, 2, 3]
    r = scoring.gold_recall(sam(tmp_path / "all.sam", ALL_MODE), gold, max_hits=3)
    assert (r["reads"], r["gold_hits"], r["found"], r["reads_complete"], r["reads_truncated"]) == (3, 6, 4, 1, 1)
    assert r["recall"] == 4 / 6
    assert r["recall_uncapped"] == 2 / 3  # g3 (3 hits = the cap) left out
    hits = scoring.reported_hits(str(tmp_path / "all.sam"))
    assert scoring.Placement("2", True, 40, 59) in hits[("g3", 0)]
    assert len(hits[("g2", 0)]) == 1


PAIRS = [
    ("a", 99, "1", 100, 60, "20M"),
    ("a", 147, "1", 300, 60, "20M"),  # concordant, proper
    ("a", 355, "1", 900, 0, "20M"),  # secondary: ignored
    ("b", 97, "1", 100, 60, "20M"),
    ("b", 145, "1", 5000, 20, "20M"),  # too far apart, not proper
    ("c", 73, "1", 100, 5, "20M"),
    ("c", 133, "*", 0, 0, "*"),  # one mate unmapped
    ("d", 67, "1", 100, 60, "20M"),
    ("d", 131, "1", 200, 60, "20M"),  # same strand: proper by flag, not concordant
    ("e", 83, "1", 500, 60, "20M"),
    ("e", 163, "1", 800, 60, "20M"),  # outward facing: not concordant
]


def test_mapping_stats(tmp_path):
    m = scoring.mapping_stats(sam(tmp_path / "pe.sam", PAIRS))
    assert (m["reads"], m["mapped"], m["pairs"], m["both_mapped"], m["proper_flag"], m["concordant"]) == (10, 9, 5, 4, 3, 1)
    assert m["mapped_at"] == {"0": 9, "1": 9, "10": 8, "20": 8, "30": 7, "60": 7}


def _revcomp(s):
    return s.translate(str.maketrans("ACGTN", "TGCAN"))[::-1]


def _fastq_seqs(path):
    with open(path) as f:
        lines = f.read().split("\n")
    return {lines[i][1:].split()[0]: lines[i + 1] for i in range(0, len(lines) - 3, 4)}


@pytest.mark.skipif(not (simulate.find_tool("mason_simulator") and simulate.find_tool("mason_variator")),
                    reason="mason_simulator/mason_variator missing (Debian package seqan-apps)")
def test_mason_truth_is_in_reference_coordinates(tmp_path):
    ref = tmp_path / "ref.fa"
    simulate.decompress_fasta(SLICE, ref)
    vcf = tmp_path / "var.vcf"
    # Dense variants: if mason's positions were haplotype coordinates, indels would shift them visibly.
    simulate.make_variants(ref, vcf, seed=11, snp_rate=0.01, indel_rate=0.002)
    r1, r2, truth_sam = simulate.simulate_reads(ref, tmp_path / "reads", 200, 100, True, seed=5, vcf=vcf)
    truth = scoring.load_truth(truth_sam, ref_contigs=[c for c, _ in simulate.fasta_contigs(SLICE)])
    assert len(truth) + len(truth.unplaced) == 400
    assert len(truth) >= 390

    reads = {}
    for path, mate in ((r1, 1), (r2, 2)):
        for name, seq in _fastq_seqs(path).items():
            reads[scoring.read_key(name, 0x40 if mate == 1 else 0x80)] = seq
    assert set(truth.placements) <= set(reads)
    genome = "".join(line.strip() for line in open(ref) if not line.startswith(">")).upper()

    nm = {scoring.read_key(q, fl): int(next(t for t in tags if t.startswith("NM:i:"))[5:])
          for q, fl, _r, _p, _m, _c, tags in scoring.iter_sam(truth_sam) if not fl & 0x4}
    cigars = {scoring.read_key(q, fl): c for q, fl, _r, _p, _m, c, _t in scoring.iter_sam(truth_sam) if not fl & 0x4}
    total_mm = total_nm = 0
    for key, p in truth.placements.items():
        seq = _revcomp(reads[key]) if p.reverse else reads[key]
        ops = [(int(n), op) for n, op in scoring._CIGAR.findall(cigars[key])]
        assert p.end - p.start + 1 == sum(n for n, op in ops if op in "MDN=X")
        r, g, mm = 0, p.start - 1, 0
        for n, op in ops:
            if op in "M=X":
                mm += sum(a != b for a, b in zip(seq[r:r + n], genome[g:g + n]))
                r, g = r + n, g + n
            elif op in "IS":
                r += n
            elif op in "DN":
                g += n
        assert mm <= nm[key], key
        total_mm += mm
        total_nm += nm[key]
    assert total_nm < 0.05 * 100 * len(truth)  # Illumina errors + 1 % SNPs, not a random placement


def test_measure_script_reports_the_process_and_the_gpu_memory(tmp_path, monkeypatch):
    """benchmarks/measure.py: exit status, output files and the GPU memory in use (a stand-in nvidia-smi on
    PATH that reports two GPUs); without nvidia-smi no GPU figure; --score on hand-made SAMs."""
    import subprocess

    script = os.path.join(ROOT, "benchmarks", "measure.py")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 1200\necho 34\n")
    (fake / "nvidia-smi").chmod(0o755)
    cmd = [sys.executable, script, "job", sys.executable, "-c",
           "import sys, time; time.sleep(0.3); print('out'); print('err', file=sys.stderr); sys.exit(3)"]
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    line = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    assert line.startswith("job") and "rc=3" in line and "GPU peak 1,234 MiB" in line
    assert (tmp_path / "job.out").read_text() == "out\n" and (tmp_path / "job.err").read_text() == "err\n"
    bare = dict(os.environ, PATH=os.path.dirname(sys.executable))
    line = subprocess.run(cmd, cwd=tmp_path, env=bare, capture_output=True, text=True, check=True).stdout
    assert "rc=3" in line and "GPU" not in line
    truth = sam(tmp_path / "truth.sam", TRUTH[:4])
    mapped = sam(tmp_path / "m.sam", [("r1", 0, "1", 100, 60, "20M"), ("r2", 16, "1", 200, 60, "20M"),
                                      ("r3", 0, "2", 300, 60, "20M"), ("r4", 4, "*", 0, 0, "*")])
    line = subprocess.run([sys.executable, script, "--score", truth, mapped], capture_output=True, text=True,
                          check=True).stdout
    assert "2 of 4 correct (50.000 %)" in line and "wrong at MAPQ >= 20: 1" in line


def test_measure_script_reports_the_hosts_busy_cores(tmp_path):
    """MEASURE_HOST_CPU=1: the share of all cores busy while the command ran, from /proc/stat (children that
    are never waited for count too); a process that spins on every core shows most of them busy."""
    import subprocess

    script = os.path.join(ROOT, "benchmarks", "measure.py")
    spin = ("import multiprocessing as m, os, time\n"
            "def f():\n    t = time.time()\n    while time.time() - t < 0.6: pass\n"
            "if __name__ == '__main__':\n"
            "    ps = [m.Process(target=f) for _ in range(os.cpu_count())]\n"
            "    [p.start() for p in ps]; [p.join() for p in ps]\n")
    env = dict(os.environ, MEASURE_HOST_CPU="1", MEASURE_GPU="0")
    busy = subprocess.run([sys.executable, script, "spin", sys.executable, "-c", spin], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=True).stdout
    share = int(busy.split("host cores busy ")[1].split(" %")[0])
    assert 50 <= share <= 100, busy
    line = subprocess.run([sys.executable, script, "idle", sys.executable, "-c", "pass"], cwd=tmp_path,
                          env=dict(env, MEASURE_HOST_CPU="0"), capture_output=True, text=True, check=True).stdout
    assert "host cores" not in line


def test_write_rate_script_fills_and_removes_its_file(tmp_path):
    """benchmarks/write_rate.py: one line per writer count with both ways' rates; the file is gone after."""
    import subprocess

    script = os.path.join(ROOT, "benchmarks", "write_rate.py")
    out = subprocess.run([sys.executable, script, str(tmp_path), "--gb", "0.02", "--writers", "1,3",
                          "--chunk-mb", "1"], capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == 2 and "1 writer(s)" in out[0] and "3 writer(s)" in out[1]
    for line in out:
        assert float(line.split("pwrite ")[1].split()[0]) > 0 and float(line.split("mmap ")[1].split()[0]) > 0
    assert os.listdir(tmp_path) == []


def test_device_open_time_script_reports_each_process(tmp_path):
    """benchmarks/device_open_time.py: one JSON line per process, its device and the seconds to list the
    platforms and to have a queue (listing before the queue), on the default OpenCL device."""
    import json
    import subprocess

    script = os.path.join(ROOT, "benchmarks", "device_open_time.py")
    for how in ([], ["--parent-open", "--visible"]):
        out = subprocess.run([sys.executable, script, "--processes", "2", *how], capture_output=True, text=True,
                             check=True, timeout=300).stdout.splitlines()
        rows = [json.loads(line) for line in out]
        if how:  # first the starting process's own listing
            parent = rows.pop(0)
            assert parent["devices"] >= 1 and parent["parent_listed_s"] > 0
        assert [r["process"] for r in rows] == [0, 1]
        for r in rows:
            assert r["devices"] >= 1 and r["name"]
            assert r["pci"] is None or r["pci"].count(":") == 2  # None for a CPU device
            assert 0 < r["import_s"] <= r["listed_s"] <= r["queue_s"]


def test_first_part_stops_after_the_truths_reads(tmp_path):
    """first_part: the truth is the first reads of the input and the SAM keeps its order, so the records after
    them are not read (a repeated primary record there is not seen) and not counted as extra; the counts of the
    truth's reads are those of a full read."""
    truth = scoring.load_truth(sam(tmp_path / "truth.sam", TRUTH[:4]))
    head = [("r1", 0, "1", 100, 60, "20M"), ("r2", 16, "1", 200, 60, "20M"), ("r3", 0, "2", 300, 60, "20M"),
            ("r4", 4, "*", 0, 0, "*")]
    rest = [("r9", 0, "1", 900, 60, "20M"), ("r10", 0, "1", 1000, 60, "20M"), ("r1", 0, "1", 100, 60, "20M")]
    path = sam(tmp_path / "run.sam", head + rest)
    full = scoring.score_sam(path, truth)
    part = scoring.score_sam(path, truth, first_part=True)
    assert (full["extra"], full["duplicate_primary"]) == (2, 1)
    assert (part["extra"], part["duplicate_primary"]) == (0, 0)
    for key in ("correct", "wrong", "missing", "mapped_at", "wrong_at"):
        assert part[key] == full[key], key
