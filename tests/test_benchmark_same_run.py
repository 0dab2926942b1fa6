"""benchmarks/same_run_table.py: the same-run table of benchmarks/gpu_issue20.sh, from a real run's log (the
results file) and from benchmarks/measure.py's own line for a real process."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # benchmarks/ is a package of the repository, not of the installed peanut_py

from benchmarks import same_run_table  # noqa: E402

SIX_TOOLS = os.path.join(ROOT, "benchmarks", "results", "2026-11-28-h200-six-tools.txt")


def _log_lines():
    with open(SIX_TOOLS) as f:
        return [line for line in f if not line.startswith("#")]


def test_rates_and_ratios_follow_the_log():
    lines = _log_lines()
    runs, mapping = same_run_table.parse(lines)
    assert set(runs) == {"se", "pe"}
    assert {t for t, *_ in runs["pe"]} == {"peanut", "minibwa", "strobealign", "minimap2-2.30", "bwa-mem2", "bwa",
                                           "peanut_b"}
    text = same_run_table.table(runs, mapping)
    for s in ("se", "pe"):
        # recomputed here from the raw lines: wall and reads per run, strobealign's own mapping time
        walls = {m.group(1): (float(m.group(2)), int(m.group(3))) for m in
                 (re.match(rf"^{s}_(\S+)\s+rc=0 wall=([\d.]+) s.* reads=(\d+)", x) for x in lines) if m}
        strobe = [float(x.split()[-2]) for x in lines if x.startswith(f"{s}_strobealign Total time mapping")]
        rate = {t: r / (strobe[0] if t == "strobealign" else w) for t, (w, r) in walls.items()}
        ours = [rate["peanut"], rate["peanut_b"]]
        peers = {t: v for t, v in rate.items() if not t.startswith("peanut")}
        best = max(peers, key=peers.get)
        assert best == "strobealign"  # its mapping time, not its wall, beats minibwa's wall on both sets
        assert f"Fastest peer: {best}; peanut-py's runs at " + ", ".join(f"{r / peers[best]:.2f}x" for r in ours) \
            in text
        for tool, v in peers.items():
            shown = "-".join(f"{x:.2f}x" for x in sorted({round(r / v, 2) for r in ours}))  # lowest first
            assert re.search(rf"\| {re.escape(tool)} \| [\d,]+ \| [^|]+ \| {round(v):,} \| {shown} \|", text), tool


def test_a_failed_run_is_listed_and_not_ranked():
    lines = _log_lines()
    failed = [re.sub(r"^se_bwa-mem2(\s+)rc=0", r"se_bwa-mem2\1rc=1", x) for x in lines]
    runs, mapping = same_run_table.parse(failed)
    text = same_run_table.table(runs, mapping)
    assert re.search(r"\| bwa-mem2 \| 2,000,000 \| exit status 1 after [\d.]+ s \|", text)
    assert text.count("| bwa-mem2 |") == 2  # the pairs' run is still there
    faster = [(re.sub(r"^se_strobealign Total time mapping: [\d.]+", "se_strobealign Total time mapping: 99.0", x))
              for x in lines]
    text = same_run_table.table(*same_run_table.parse(faster))
    assert "Fastest peer: minibwa" in text.split("**5 M pairs")[0]


def test_measure_line_of_a_real_process(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "measure.py"), "se_sleeper",
                          sys.executable, "-c", "import time; time.sleep(0.3)"], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "MEASURE_GPU": "0"}, check=True).stdout.strip()
    runs, _ = same_run_table.parse([out + " reads=1000"])
    (tool, wall, reads, rc), = runs["se"]
    assert (tool, reads, rc) == ("sleeper", 1000, 0) and 0.3 <= wall < 5


def test_plotted_rates_are_the_tables():
    runs, mapping = same_run_table.parse(_log_lines())
    text = same_run_table.table(runs, mapping)
    per_set = same_run_table.rates(runs, mapping)
    assert [t for t, _ in per_set["se"]] == ["peanut", "minibwa", "strobealign", "minimap2-2.30", "bwa-mem2", "bwa",
                                             "peanut_b"]
    for s, bars in per_set.items():
        section = text.split("**")[2 if s == "se" else 4]
        for tool, rate in bars:
            assert f"| {tool} | " in section and f" | {round(rate):,} | " in section


def test_accuracy_columns_from_measure_scores(tmp_path):
    """measure.py --score's real line for a tool's SAM (named as gpu_issue20.sh names it) gives that tool's
    accuracy cells; a tool without a score gets empty cells, and a log without scores keeps the plain table."""
    from tests.test_scoring import TRUTH, sam

    truth = sam(tmp_path / "ptruth_se.sam", TRUTH[:4])
    mapped = sam(tmp_path / "se_peanut.out", [("r1", 0, "1", 100, 60, "20M"), ("r2", 16, "1", 200, 60, "20M"),
                                              ("r3", 0, "2", 300, 60, "20M"), ("r4", 4, "*", 0, 0, "*")])
    line = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "measure.py"), "--score", truth, mapped],
                          cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    scores = same_run_table.parse_scores(line.splitlines())
    correct, n, wrong20, correct20 = scores["se"]["peanut"]
    assert (correct, n, wrong20) == (2, 4, 1) and 0 <= correct20 <= correct
    runs, mapping = same_run_table.parse(_log_lines())
    text = same_run_table.table(runs, mapping, scores)
    se = text.split("**")[2]
    assert "| correct (4 reads) | correct, MAPQ >= 20 | wrong at MAPQ >= 20 per 10,000 |" in se
    assert re.search(rf"\| peanut \| 10,000,000 \|[^\n]*\| 50.000 % \| {100 * correct20 / 4:.3f} % \| 2500.00 \|", se)
    assert re.search(r"\| minibwa \|[^\n]*\| \| \|$", se, re.M)  # no score: empty cells
    assert "correct (" not in text.split("**")[4]  # pairs: no scores, no accuracy columns
    assert same_run_table.table(runs, mapping) == same_run_table.table(runs, mapping, {})


def test_ratio_ranges_are_in_numeric_order():
    """A tool's range of peanut-py's ratios is lowest first by value, also across a power of ten (9.25x-10.35x,
    not "10.35x-9.25x" as sorted strings would give)."""
    lines = [line for line in _log_lines() if not line.startswith("se_")]
    lines = [re.sub(r"^pe_peanut_b(\s+)rc=0 wall=[\d.]+ s", r"pe_peanut_b\1rc=0 wall=5.63 s", x) for x in lines]
    lines = [re.sub(r"^pe_peanut(\s+)rc=0 wall=[\d.]+ s", r"pe_peanut\1rc=0 wall=6.30 s", x) for x in lines]
    lines = [re.sub(r"^pe_bwa-mem2(\s+)rc=0 wall=[\d.]+ s", r"pe_bwa-mem2\1rc=0 wall=11.65 s", x) for x in lines]
    text = same_run_table.table(*same_run_table.parse(lines))
    assert "| 9.25x-10.35x |" in text
