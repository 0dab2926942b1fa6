"""benchmarks/run.py without running a mapper: --tools expansion, where the prebuilt peers are looked up,
the command lines of every peer, strobealign's own timings, which missing programs end a run, and the
throughput ratio against the fastest peer in the report."""
import os
import stat
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # benchmarks/ is a package of the repository, not of the installed peanut_py

from benchmarks import report, run, simulate  # noqa: E402

FAST = ["peanut-best", "minibwa", "strobealign", "minimap2-2.30", "bwa-mem2", "bwa"]

# strobealign 0.17.0's stderr for a single-end run on the bundled 200 kb slice, as it printed it.
STROBEALIGN_STDERR = """\
This is strobealign 0.17.0
Estimated read length: 150 nt
Time reading reference: 0.00 s
Reference size: 0.20 Mbp (1 contig; largest: 0.20 Mbp)
Multi-context seed strategy: always
Indexing ...
  Time counting seeds: 0.00 s
  Time generating seeds: 0.00 s
  Time sorting seeds: 0.00 s
  Time generating hash table index: 0.00 s
Total time indexing: 0.01 s
Processing single-end reads using 2 threads
Done!
Total time mapping: 0.02 s.
Total time reading read-file(s): 0.00 s.
Total time creating strobemers: 0.00 s.
Total time finding hits (non-rescue mode): 0.00 s.
Total time finding hits (rescue mode): 0.00 s.
Total time chaining (non-rescue mode): 0.00 s.
Total time sorting NAMs/chains by score: 0.00 s.
Total time extending and pairing seeds: 0.00 s.
"""


def _fake_programs(folder, names):
    os.makedirs(folder, exist_ok=True)
    for name in names:
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def peers(tmp_path):
    """A folder with (empty) executables named like the prebuilt peers; tools built against it."""
    d = str(tmp_path / "peers" / "bin")
    _fake_programs(d, run.PEER_BINARIES)
    args = run.parse_args(["--tools", "fast", "--work", str(tmp_path / "work"), "--peers-dir", d])
    args.peers_bin = run.resolve_peers_dir(args, needed=True)
    return d, run.make_tools(args)


def _str(cmd):
    return [str(c) for c in cmd]


# ------------------------------------------------------------------------------------------- --tools

def test_fast_expands_to_the_six_tools():
    assert run.parse_args(["--tools", "fast"]).tool_names == FAST


def test_tool_shortcuts_mix_and_do_not_repeat():
    assert run.parse_args(["--tools", "peanut,bwa,fast"]).tool_names == \
        ["peanut-best", "peanut-all", "bwa", "minibwa", "strobealign", "minimap2-2.30", "bwa-mem2"]
    assert run.parse_args(["--tools", "strobealign,bwa-mem2"]).tool_names == ["strobealign", "bwa-mem2"]


def test_default_tools_are_unchanged():
    assert run.parse_args([]).tool_names == ["peanut-best", "peanut-all", "bwa", "minimap2", "bowtie2"]


def test_unknown_tool_is_refused():
    with pytest.raises(SystemExit):
        run.parse_args(["--tools", "fast,bwa-mem3"])


# ------------------------------------------------------------------------------------------- peers' folder

def test_peers_dir_or_its_bin_subfolder(tmp_path):
    d = tmp_path / "device"
    _fake_programs(str(d / "bin"), run.PEER_BINARIES)
    args = run.parse_args(["--tools", "fast", "--peers-dir", str(d), "--work", str(tmp_path / "w")])
    assert run.resolve_peers_dir(args, needed=True) == str(d / "bin")
    args = run.parse_args(["--tools", "fast", "--peers-dir", str(d / "bin"), "--work", str(tmp_path / "w")])
    assert run.resolve_peers_dir(args, needed=True) == str(d / "bin")


def test_peers_dir_that_does_not_exist_ends_the_run(tmp_path):
    args = run.parse_args(["--tools", "fast", "--peers-dir", str(tmp_path / "nowhere")])
    with pytest.raises(SystemExit, match="nowhere"):
        run.resolve_peers_dir(args, needed=True)


def test_find_peer_prefers_the_peers_folder_then_path(tmp_path, monkeypatch):
    ours, on_path = str(tmp_path / "ours"), str(tmp_path / "path")
    _fake_programs(ours, ["minibwa"])
    _fake_programs(on_path, ["minibwa", "strobealign"])
    monkeypatch.setenv("PATH", on_path)
    assert run.find_peer("minibwa", ours) == os.path.join(ours, "minibwa")
    assert run.find_peer("strobealign", ours) == os.path.join(on_path, "strobealign")
    assert run.find_peer("bwa-mem2", ours) is None


# ------------------------------------------------------------------------------------------- command lines

def test_minibwa_index_links_the_fasta_into_its_folder(peers, tmp_path):
    d, tools = peers
    ref = tmp_path / "ref" / "ref.fa"
    ref.parent.mkdir()
    ref.write_text(">c\nACGT\n")
    idx_dir = tmp_path / "idx"
    idx_dir.mkdir()
    cmd, idx = tools["minibwa"].index_cmd(str(ref), str(idx_dir), 3)
    assert _str(cmd) == [os.path.join(d, "minibwa"), "index", "-t", "3", str(idx_dir / "ref.fa")]
    assert idx == str(idx_dir / "ref.fa")
    assert os.readlink(idx) == str(ref)  # so ref.fa.l2b and ref.fa.mbw land in the index folder
    cmd, _ = tools["minibwa"].index_cmd(str(ref), str(idx_dir), 3)  # a rebuild replaces the link
    assert os.readlink(idx) == str(ref)


def test_minibwa_map(peers):
    d, tools = peers
    cmd, stdout = tools["minibwa"].map_cmd("/i/ref.fa", "/r/1.fq", None, "/o/x.sam", 4)
    assert _str(cmd) == [os.path.join(d, "minibwa"), "map", "-t", "4", "/i/ref.fa", "/r/1.fq"]
    assert stdout == "/o/x.sam"
    cmd, stdout = tools["minibwa"].map_cmd("/i/ref.fa", "/r/1.fq", "/r/2.fq", "/o/x.sam", 4)
    assert _str(cmd) == [os.path.join(d, "minibwa"), "map", "-t", "4", "/i/ref.fa", "/r/1.fq", "/r/2.fq"]
    assert stdout == "/o/x.sam"


def test_strobealign_has_no_index_and_maps_against_the_fasta(peers, tmp_path):
    d, tools = peers
    t = tools["strobealign"]
    assert t.index_cmd is None

    class G:
        fa, sha, name = str(tmp_path / "ref.fa"), "0" * 40, "g"

    args = run.parse_args(["--work", str(tmp_path / "work")])
    m = run.build_index(args, t, G, "strobealign 0.17.0")
    assert m["ok"] and m["none"] and m["index"] == G.fa
    assert not (tmp_path / "work").exists()  # nothing built, nothing cached
    cmd, stdout = t.map_cmd(G.fa, "/r/1.fq", None, "/o/s.sam", 16)
    assert _str(cmd) == [os.path.join(d, "strobealign"), "-t", "16", G.fa, "/r/1.fq"]
    assert stdout == "/o/s.sam"
    cmd, _ = t.map_cmd(G.fa, "/r/1.fq", "/r/2.fq", "/o/s.sam", 16)
    assert _str(cmd) == [os.path.join(d, "strobealign"), "-t", "16", G.fa, "/r/1.fq", "/r/2.fq"]


def test_minimap2_230(peers):
    d, tools = peers
    t = tools["minimap2-2.30"]
    mm = os.path.join(d, "minimap2-2.30")
    cmd, idx = t.index_cmd("/g/ref.fa", "/i", 2)
    assert _str(cmd) == [mm, "-x", "sr", "-t", "2", "-d", "/i/ref.mmi", "/g/ref.fa"] and idx == "/i/ref.mmi"
    cmd, stdout = t.map_cmd(idx, "/r/1.fq", None, "/o/m.sam", 2)
    assert _str(cmd) == [mm, "-ax", "sr", "-t", "2", "/i/ref.mmi", "/r/1.fq", "-o", "/o/m.sam"] and stdout is None
    cmd, _ = t.map_cmd(idx, "/r/1.fq", "/r/2.fq", "/o/m.sam", 2)
    assert _str(cmd) == [mm, "-ax", "sr", "-t", "2", "/i/ref.mmi", "/r/1.fq", "/r/2.fq", "-o", "/o/m.sam"]
    assert t.family != tools["minimap2"].family  # Debian's minimap2 keeps its own index


def test_bwa_mem2(peers):
    d, tools = peers
    t = tools["bwa-mem2"]
    b = os.path.join(d, "bwa-mem2")
    cmd, idx = t.index_cmd("/g/ref.fa", "/i", 2)
    assert _str(cmd) == [b, "index", "-p", "/i/ref", "/g/ref.fa"] and idx == "/i/ref"
    cmd, stdout = t.map_cmd(idx, "/r/1.fq", None, "/o/b.sam", 8)
    assert _str(cmd) == [b, "mem", "-t", "8", "/i/ref", "/r/1.fq"] and stdout == "/o/b.sam"
    cmd, stdout = t.map_cmd(idx, "/r/1.fq", "/r/2.fq", "/o/b.sam", 8)
    assert _str(cmd) == [b, "mem", "-t", "8", "/i/ref", "/r/1.fq", "/r/2.fq"] and stdout == "/o/b.sam"


def test_peer_programs_are_the_resolved_binaries(peers):
    d, tools = peers
    for name in ("minibwa", "strobealign", "minimap2-2.30", "bwa-mem2"):
        assert tools[name].programs == [os.path.join(d, name)]
    assert tools["bwa"].programs == ["bwa"]  # Debian's, from PATH


# ------------------------------------------------------------------------------------------- strobealign's times

def test_strobealign_times_from_its_stderr():
    assert run.strobealign_times(STROBEALIGN_STDERR) == {"mapping_s": 0.02, "indexing_s": 0.01}


def test_strobealign_times_take_the_last_run_and_ignore_other_lines():
    two = STROBEALIGN_STDERR + STROBEALIGN_STDERR.replace("mapping: 0.02 s.", "mapping: 12.75 s.")
    assert run.strobealign_times(two)["mapping_s"] == 12.75
    assert run.strobealign_times("Total time reading read-file(s): 0.00 s.\n") == {}
    assert run.strobealign_times("") == {}


def test_strobealign_mapping_time_sets_the_throughput():
    r = {"reps": [{"ok": True, "wall_s": 10.0, "cpu_s": 30.0, "max_rss_mb": 100.0, "mapping_s": 4.0,
                   "indexing_s": 5.0}]}
    run.summarize(r, 20000)
    assert r["reads_per_s"] == 5000 and r["reads_per_s_wall"] == 2000 and r["speed_from"] == "own mapping time"
    plain = {"reps": [{"ok": True, "wall_s": 10.0, "cpu_s": 30.0, "max_rss_mb": 100.0}]}
    run.summarize(plain, 20000)
    assert plain["reads_per_s"] == 2000 and "speed_from" not in plain


# ------------------------------------------------------------------------------------------- missing programs

def _check(monkeypatch, argv, absent, tmp_path):
    args = run.parse_args(argv + ["--work", str(tmp_path / "w"), "--peers-dir", str(tmp_path)])
    args.peers_bin = str(tmp_path)
    tools = run.make_tools(args)
    monkeypatch.setattr(run, "have", lambda p: os.path.basename(p) not in absent)
    return run.check_programs(args, [tools[n] for n in args.tool_names], args.set_names)


def test_named_tool_without_its_binary_ends_with_one_line(monkeypatch, tmp_path):
    with pytest.raises(SystemExit) as e:
        _check(monkeypatch, ["--tools", "fast", "--sets", "na12878"], {"bwa-mem2"}, tmp_path)
    assert "bwa-mem2" in str(e.value) and "\n" not in str(e.value) and "--peers-dir" in str(e.value)
    with pytest.raises(SystemExit):  # also on the GPU machine: a tool asked for must be there
        _check(monkeypatch, ["--gpu", "--tools", "fast", "--sets", "na12878"], {"minibwa"}, tmp_path)


def test_fast_set_needs_neither_picard_nor_samtools_nor_bowtie2(monkeypatch, tmp_path):
    absent = {"PicardCommandLine", "samtools", "bowtie2", "bowtie2-build"}
    missing = _check(monkeypatch, ["--tools", "fast", "--sets", "na12878"], absent, tmp_path)
    assert missing == ["PicardCommandLine"]


def test_default_set_keeps_its_old_behaviour(monkeypatch, tmp_path):
    with pytest.raises(SystemExit, match="apt-get install -y bowtie2"):
        _check(monkeypatch, ["--sets", "na12878"], {"bowtie2", "bowtie2-build"}, tmp_path)
    missing = _check(monkeypatch, ["--gpu", "--sets", "na12878"], {"bowtie2-build"}, tmp_path)
    assert missing == ["bowtie2-build"]


# ------------------------------------------------------------------------------------------- mason threads

def test_mason_threads_that_change_the_reads():
    assert simulate.effective_sim_threads(4000, 16) == 1  # one batch of 65,536: every count gives the same
    assert simulate.effective_sim_threads(65536, 16) == 1
    assert simulate.effective_sim_threads(65537, 16) == 2
    assert simulate.effective_sim_threads(200000, 16) == 4
    assert simulate.effective_sim_threads(200000, 2) == 2


def test_simulate_reads_passes_num_threads(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(simulate, "_run", lambda cmd, log: seen.append([str(c) for c in cmd]))
    monkeypatch.setattr(simulate, "find_tool", lambda name: "/x/" + name)
    simulate.simulate_reads("/g/ref.fa", tmp_path, 1000, 100, False, 7, threads=6)
    cmd = seen[0]
    assert cmd[0] == "/x/mason_simulator" and cmd[cmd.index("--num-threads") + 1] == "6"


# ------------------------------------------------------------------------------------------- report

def _results():
    def ok(rps, **kw):
        return dict(ok=True, reads_per_s=rps, wall_s=1000 / rps, cpu_s=1.0, max_rss_mb=10.0, **kw)

    runs = {"peanut-best": ok(1000.0), "bwa": ok(2000.0),
            "strobealign": ok(4000.0, speed_from="own mapping time", mapping_s=0.25, indexing_s=1.5,
                              reads_per_s_wall=500.0)}
    return {
        "meta": {"date": "2000-01-01T00:00:00", "mode": "quick", "machine_label": "m", "threads": 2, "reps": 1,
                 "tolerance": 5, "thresholds": [0, 20], "versions": {t: t for t in runs}, "command": "x",
                 "machine": {"cpu": "c", "cores_available": 2, "memory_gib": 1}},
        "genomes": {"human": {"name": "g"}},
        "indexes": {"g": {"peanut": {"ok": True, "wall_s": 1.0, "cpu_s": 1.0, "max_rss_mb": 1.0},
                          "bwa": {"ok": True, "wall_s": 0.5, "cpu_s": 0.5, "max_rss_mb": 1.0},
                          "strobealign": {"ok": True, "none": True}}},
        "sets": {"s": {"genome": "human", "paired": False, "truth_kind": None, "source": "src", "reads": 1000}},
        "runs": {"s": runs},
        "notes": [],
    }


def test_report_ratio_against_the_fastest_peer_uses_strobealigns_mapping_time():
    results = _results()
    name, fastest = report.fastest_peer(results["runs"]["s"])
    assert name == "strobealign"
    md = report.markdown(results)
    rows = {ln.split(" | ")[0].lstrip("| "): ln.split(" | ") for ln in md.splitlines() if ln.startswith("| ")}
    assert rows["peanut-best"][1:3] == ["1,000", "0.25×"]
    assert rows["bwa"][1:3] == ["2,000", "0.50×"]
    assert rows["strobealign"][1:3] == ["4,000*", "1.00×"]
    assert "4.0× slower than strobealign" in md
    assert 'its "Total time indexing": 1.50 s' in md


def test_report_fastest_peer_on_wall_clock_when_strobealign_is_absent():
    results = _results()
    del results["runs"]["s"]["strobealign"]
    assert report.fastest_peer(results["runs"]["s"])[0] == "bwa"
    assert "2.0× slower than bwa" in report.markdown(results)
