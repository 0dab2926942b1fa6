#!/usr/bin/env python3
"""Benchmark peanut-py against bwa mem, minimap2 -ax sr, bowtie2 and the fast CPU peers (minibwa, strobealign,
minimap2 2.30, bwa-mem2): speed, memory and accuracy.

    benchmarks/run.py [--quick] [--gpu] [--tools fast|bwa,minimap2,...] [--sets sim100se,...] [-t THREADS]
                      [--peers-dir DIR]

Writes benchmarks/results/<date>-<machine>[-quick].{json,md} and PNG plots; see benchmarks/README.md for
what is measured and docs/benchmarks.md for the latest results. Every mapper run is recorded, a failed one
with its exit status and the end of its log, and the others go on.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from benchmarks import scoring, simulate  # noqa: E402

SLICE = os.path.join(ROOT, "index", "example", "chr20_slice.fa.gz")
EXAMPLE = os.path.join(ROOT, "index", "example")
DEFAULT_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")
DEBIAN = {  # program -> Debian package
    "bwa": "bwa", "minimap2": "minimap2", "bowtie2": "bowtie2", "bowtie2-build": "bowtie2",
    "samtools": "samtools", "mason_variator": "seqan-apps", "mason_simulator": "seqan-apps",
    "razers3": "seqan-apps", "PicardCommandLine": "picard-tools",
}
DEFAULT_TOOLS = ("peanut-best", "peanut-all", "bwa", "minimap2", "bowtie2")  # without --tools
PEER_TOOLS = ("minibwa", "strobealign", "minimap2-2.30", "bwa-mem2")  # prebuilt, from ../shared/peers
ALL_TOOLS = DEFAULT_TOOLS + PEER_TOOLS
TOOL_SETS = {  # --tools shortcuts
    "peanut": ("peanut-best", "peanut-all"),
    "fast": ("peanut-best", "minibwa", "strobealign", "minimap2-2.30", "bwa-mem2", "bwa"),
}
# The prebuilt peers' binaries (bwa-mem2 is a dispatcher that runs bwa-mem2.avx2 etc. from its own folder).
PEER_BINARIES = ("minibwa", "strobealign", "minimap2-2.30", "bwa-mem2")
SHARED_PEERS = os.path.join(os.path.dirname(ROOT), "shared", "peers", "peers-bin.tar.xz")
SIM_SETS = {  # name -> (read length, paired, mismatch scale)
    "sim100se": (100, False, 1.0),
    "sim100pe": (100, True, 1.0),
    "sim150se": (150, False, 1.0),
    "sim150pe": (150, True, 1.0),
    "hierr100se": (100, False, 3.0),
}
REAL_SETS = ("na12878", "yeast1", "yeast2")
QUICK_SETS = ("sim100se", "sim100pe", "sim150se", "sim150pe", "hierr100se", "na12878")
YEAST_LIBS = {
    "yeast1": "SRR5204809_Spt5-ChIP_Input1_SacCer_ChIP-Seq_ss100k",
    "yeast2": "SRR5204810_Spt5-ChIP_Input2_SacCer_ChIP-Seq_ss100k",
}
VARIANT_SEED = 42
SIM_SEEDS = {name: 1000 + i for i, name in enumerate(SIM_SETS)}
RAZERS_MAX_HITS = 100


# ---------------------------------------------------------------------------------------------- helpers

def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sha1_file(path):
    h = hashlib.sha1()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def param_hash(params):
    return hashlib.sha1(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:12]


NEUTRAL_CWD = tempfile.gettempdir()


def capture(cmd):
    """stdout+stderr of a short command, '' when it cannot run. Runs outside the checkout (see measure)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=NEUTRAL_CWD)
        return (p.stdout + p.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def first_match(pattern, text, default="?"):
    m = re.search(pattern, text, re.M)
    return m.group(1).strip() if m else default


def tail(path, n=1500, offset=0):
    """The end of a log from byte ``offset`` on, without the '$ command' lines that measure() writes."""
    try:
        with open(path, errors="replace") as f:
            f.seek(offset)
            lines = [ln for ln in f.read().splitlines() if ln.strip() and not ln.startswith("$ ")]
    except OSError:
        return ""
    return "\n".join(lines)[-n:].strip()


# ---------------------------------------------------------------------------------------------- timing

GNU_TIME = "/usr/bin/time"
_RUSAGE_WRAPPER = (
    "import json,resource,subprocess,sys\n"
    "rc=subprocess.call(sys.argv[2:])\n"
    "u=resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "json.dump({'rc':rc,'user':u.ru_utime,'sys':u.ru_stime,'maxrss_kb':u.ru_maxrss},open(sys.argv[1],'w'))\n"
    "sys.exit(rc)\n"
)


def gnu_time_available():
    return os.access(GNU_TIME, os.X_OK) and "GNU" in capture([GNU_TIME, "--version"])


def measure(cmd, log_path, stdout_path=None, timeout=None):
    """Run ``cmd``; wall seconds, user+sys CPU seconds and peak RSS of the process tree (the largest process,
    as getrusage reports it) through ``/usr/bin/time -v``, or a getrusage(RUSAGE_CHILDREN) wrapper when
    GNU time is missing. Never raises for a failing command.

    Runs in the log's folder, never in the checkout: there ``python -m peanut_py`` would import the source
    folder instead of the installed package (on the GPU machine the sources carry no compiled extensions).
    All paths handed to tools are absolute."""
    cmd = [str(c) for c in cmd]
    fd, stats = tempfile.mkstemp(suffix=".time")
    os.close(fd)
    if gnu_time_available():
        full, how = [GNU_TIME, "-v", "-o", stats] + cmd, "gnu-time"
    else:
        full, how = [sys.executable, "-c", _RUSAGE_WRAPPER, stats] + cmd, "getrusage"
    result = {"command": shlex.join(cmd), "measured_with": how, "ok": False}
    with open(log_path, "ab") as logf:
        logf.write(("$ " + shlex.join(cmd) + "\n").encode())
        logf.flush()
        offset = logf.tell()
        out = open(stdout_path, "wb") if stdout_path else logf
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(full, stdout=out, stderr=logf, start_new_session=True,
                                    cwd=os.path.dirname(os.path.abspath(log_path)))
        except OSError as e:
            result.update(rc=None, error=f"cannot start: {e}")
            os.unlink(stats)
            return result
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
        finally:
            wall = time.perf_counter() - t0
            if stdout_path:
                out.close()
    result["wall_s"] = round(wall, 3)
    result["rc"] = rc
    try:
        text = open(stats).read()
    except OSError:
        text = ""
    os.unlink(stats)
    if how == "gnu-time":
        user = float(first_match(r"User time \(seconds\):\s*([\d.]+)", text, "nan"))
        sys_ = float(first_match(r"System time \(seconds\):\s*([\d.]+)", text, "nan"))
        rss_kb = float(first_match(r"Maximum resident set size \(kbytes\):\s*(\d+)", text, "nan"))
    else:
        try:
            d = json.loads(text)
            user, sys_, rss_kb = d["user"], d["sys"], d["maxrss_kb"]
        except (ValueError, KeyError):
            user = sys_ = rss_kb = float("nan")
    def known(x):  # a killed run leaves no statistics; JSON has no NaN
        return None if x != x else x

    result.update(user_s=known(round(user, 3)), sys_s=known(round(sys_, 3)), cpu_s=known(round(user + sys_, 3)),
                  max_rss_mb=known(round(rss_kb / 1024, 1)))
    if rc == 0:
        result["ok"] = True
    else:
        why = "timed out" if rc == "timeout" else f"exit status {rc}"
        result["error"] = f"{why}; end of log: {tail(log_path, 400, offset) or '(empty)'}"
    return result


# ---------------------------------------------------------------------------------------------- tools

class Tool:
    """How one mapper builds its index and maps; ``family`` names the index it shares. ``index`` is None for
    a mapper that builds its index in every mapping run (strobealign). ``own_times(log text)`` reads the
    tool's own timings from its log (a dict, e.g. {"mapping_s": ..., "indexing_s": ...}); when it gives
    ``mapping_s``, that time, not the wall clock, is the run's throughput."""

    def __init__(self, name, family, programs, index, map_, version, own_times=None):
        self.name, self.family, self.programs = name, family, programs
        self.index_cmd, self.map_cmd, self.version = index, map_, version
        self.own_times = own_times


STROBEALIGN_TIMES = {  # strobealign's stderr, e.g. "Total time mapping: 0.02 s." and "Total time indexing: 0.01 s"
    "mapping_s": re.compile(r"^Total time mapping:\s*([0-9.]+)\s*s\b", re.M),
    "indexing_s": re.compile(r"^Total time indexing:\s*([0-9.]+)\s*s\b", re.M),
}


def strobealign_times(text):
    """strobealign's own "Total time mapping" and "Total time indexing" (seconds) from its stderr; the last
    occurrence of each, as a log may hold several runs. Absent lines are left out of the dict."""
    times = {}
    for key, pattern in STROBEALIGN_TIMES.items():
        found = pattern.findall(text)
        if found:
            times[key] = float(found[-1])
    return times


def find_peer(name, peers_dir):
    """Absolute path of a prebuilt peer's binary: in ``peers_dir`` first, else on PATH; None when absent."""
    if peers_dir:
        path = os.path.join(peers_dir, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
    return shutil.which(name)


def resolve_peers_dir(args, needed):
    """The folder of the prebuilt peers: --peers-dir (or its bin/), else ``<work>/peers/bin``, unpacked
    once from ../shared/peers/peers-bin.tar.xz when that exists and a peer is ``needed``; None: PATH only."""
    if args.peers_dir:
        d = os.path.abspath(args.peers_dir)
        if not os.path.isdir(d):
            sys.exit(f"benchmark: --peers-dir {d}: no such folder")
        if not any(os.path.exists(os.path.join(d, b)) for b in PEER_BINARIES) and os.path.isdir(os.path.join(d, "bin")):
            d = os.path.join(d, "bin")
        return d
    base = os.path.join(args.work, "peers")
    d = os.path.join(base, "bin")
    if all(os.path.exists(os.path.join(d, b)) for b in PEER_BINARIES):
        return d
    if needed and os.path.exists(SHARED_PEERS):
        import tarfile
        log(f"unpacking {SHARED_PEERS} into {base}")
        tmp = tempfile.mkdtemp(prefix=".peers-", dir=os.path.dirname(base) if os.path.isdir(os.path.dirname(base))
                               else None)
        with tarfile.open(SHARED_PEERS, "r:xz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:
                tar.extractall(tmp)
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(os.path.dirname(base), exist_ok=True)
        shutil.move(tmp, base)
        return d
    return d if os.path.isdir(d) else None


def make_tools(args):
    py = [sys.executable, "-m", "peanut_py"]
    bt2 = shutil.which("bowtie2") or shutil.which("bowtie2-align-s") or "bowtie2"
    bt2_build = shutil.which("bowtie2-build") or shutil.which("bowtie2-build-s") or "bowtie2-build"
    extra = shlex.split(args.peanut_args or "")
    peers_dir = getattr(args, "peers_bin", None)
    peer = {b: find_peer(b, peers_dir) or b for b in PEER_BINARIES}  # a bare name: missing (check_programs)

    def peanut_map(mode):
        def cmd(idx, r1, r2, out, t):
            c = py + ["map", idx, r1] + ([r2] if r2 else []) + ["-o", out, "-t", t, "--mode", mode]
            if mode == "all":
                c += ["--max-hits", args.max_hits]
            return c + extra, None
        return cmd

    def peanut_index(ref, d, t):
        idx = os.path.join(d, "ref.peanut.h5")
        return py + ["index", ref, "-o", idx], idx

    def peanut_version():
        v = capture(py + ["--version"]).splitlines()
        # the index format may change between commits of one version: the sources are part of the key
        src = hashlib.sha1()
        for name in ("_version.py", "reference.py", "_indexbuild.pyx", "fasta.py"):
            p = os.path.join(ROOT, "peanut_py", name)
            if os.path.exists(p):
                src.update(open(p, "rb").read())
        return (v[-1] if v else "peanut-py ?") + f" (src {src.hexdigest()[:8]})"

    def minibwa_index(ref, d, t):
        # minibwa writes ref.fa.l2b and ref.fa.mbw next to the FASTA it is given: a link in the index folder
        fa = os.path.join(d, "ref.fa")
        if os.path.lexists(fa):
            os.unlink(fa)
        os.symlink(os.path.abspath(ref), fa)
        return [peer["minibwa"], "index", "-t", t, fa], fa

    def last_line(text):
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return lines[-1].strip() if lines else "?"

    tools = {
        "peanut-best": Tool("peanut-best", "peanut", [], peanut_index, peanut_map("best"), peanut_version),
        "peanut-all": Tool("peanut-all", "peanut", [], peanut_index, peanut_map("all"), peanut_version),
        "bwa": Tool(
            "bwa", "bwa", ["bwa"],
            lambda ref, d, t: (["bwa", "index", "-p", os.path.join(d, "ref"), ref], os.path.join(d, "ref")),
            lambda idx, r1, r2, out, t: (["bwa", "mem", "-t", t, idx, r1] + ([r2] if r2 else []), out),
            lambda: "bwa " + first_match(r"Version:\s*(\S+)", capture(["bwa"])),
        ),
        "minimap2": Tool(
            "minimap2", "minimap2", ["minimap2"],
            lambda ref, d, t: (["minimap2", "-x", "sr", "-t", t, "-d", os.path.join(d, "ref.mmi"), ref],
                               os.path.join(d, "ref.mmi")),
            lambda idx, r1, r2, out, t: (["minimap2", "-ax", "sr", "-t", t, idx, r1] + ([r2] if r2 else [])
                                         + ["-o", out], None),
            lambda: "minimap2 " + capture(["minimap2", "--version"]),
        ),
        "bowtie2": Tool(
            "bowtie2", "bowtie2", ["bowtie2", "bowtie2-build"],
            lambda ref, d, t: ([bt2_build, "--threads", t, "-q", ref, os.path.join(d, "ref")], os.path.join(d, "ref")),
            lambda idx, r1, r2, out, t: ([bt2, "-p", t, "-x", idx] + (["-1", r1, "-2", r2] if r2 else ["-U", r1])
                                         + ["-S", out], None),
            lambda: "bowtie2 " + first_match(r"version\s+(\S+)", capture([bt2, "--version"])),
        ),
        "minibwa": Tool(
            "minibwa", "minibwa", [peer["minibwa"]], minibwa_index,
            lambda idx, r1, r2, out, t: ([peer["minibwa"], "map", "-t", t, idx, r1] + ([r2] if r2 else []), out),
            lambda: "minibwa " + last_line(capture([peer["minibwa"], "version"])),
        ),
        "strobealign": Tool(
            "strobealign", "strobealign", [peer["strobealign"]], None,
            lambda idx, r1, r2, out, t: ([peer["strobealign"], "-t", t, idx, r1] + ([r2] if r2 else []), out),
            lambda: "strobealign " + last_line(capture([peer["strobealign"], "--version"])),
            own_times=strobealign_times,
        ),
        "minimap2-2.30": Tool(
            "minimap2-2.30", "minimap2-2.30", [peer["minimap2-2.30"]],
            lambda ref, d, t: ([peer["minimap2-2.30"], "-x", "sr", "-t", t, "-d", os.path.join(d, "ref.mmi"), ref],
                               os.path.join(d, "ref.mmi")),
            lambda idx, r1, r2, out, t: ([peer["minimap2-2.30"], "-ax", "sr", "-t", t, idx, r1] + ([r2] if r2 else [])
                                         + ["-o", out], None),
            lambda: "minimap2 " + last_line(capture([peer["minimap2-2.30"], "--version"])),
        ),
        "bwa-mem2": Tool(
            "bwa-mem2", "bwa-mem2", [peer["bwa-mem2"]],
            lambda ref, d, t: ([peer["bwa-mem2"], "index", "-p", os.path.join(d, "ref"), ref], os.path.join(d, "ref")),
            lambda idx, r1, r2, out, t: ([peer["bwa-mem2"], "mem", "-t", t, idx, r1] + ([r2] if r2 else []), out),
            # the dispatcher's own lines ("Looking to launch ...") come with it; v2.3 prints "2.2.1"
            lambda: "bwa-mem2 " + first_match(r"^(\d+\.\d+\S*)\s*$", capture([peer["bwa-mem2"], "version"])),
        ),
    }
    return tools


# ---------------------------------------------------------------------------------------------- checks

def have(program):
    """Whether a program is there; bowtie2's Perl/Python wrappers may be replaced by their -s binaries."""
    alternatives = {"bowtie2": ("bowtie2", "bowtie2-align-s"), "bowtie2-build": ("bowtie2-build", "bowtie2-build-s")}
    return any(simulate.find_tool(p) for p in alternatives.get(program, (program,)))


OPTIONAL = {"PicardCommandLine": "SAM validation"}  # missing: that step is skipped with a note, never an exit


def check_programs(args, tools, sets, installed=False):
    """Missing programs. A tool named in --tools whose program is missing ends the run with one line (as
    root with --install, a Debian one is installed first). Otherwise, as before: exit with the apt-get
    command, install them (--install, root), or in --gpu mode only return them (the parts that need them
    are skipped). Programs in OPTIONAL (Picard) are only returned, in every mode."""
    explicit = args.tools is not None
    needed = set(OPTIONAL)
    for t in tools:
        needed.update(t.programs)
    if any(s in SIM_SETS for s in sets):
        needed.update(["mason_variator", "mason_simulator"])
    if "sim100se" in sets and args.razers_reads > 0:
        needed.add("razers3")
    missing = sorted(p for p in needed if not have(p))
    if not missing:
        return []
    root_install = args.install and os.geteuid() == 0 and not args.gpu and not installed
    if explicit:
        lacking = [(t, [p for p in t.programs if p in missing]) for t in tools]
        lacking = [(t, ps) for t, ps in lacking if ps]
        if lacking and not (root_install and all(p in DEBIAN for _, ps in lacking for p in ps)):
            by_hint = {}  # one hint for all the prebuilt peers, one per Debian package
            for t, ps in lacking:
                if all(p in DEBIAN for p in ps):
                    hint = "apt-get install -y " + " ".join(sorted({DEBIAN[p] for p in ps}))
                else:
                    peers_bin = getattr(args, "peers_bin", None)
                    hint = (f"not in {peers_bin} nor on PATH" if peers_bin else "not on PATH") + \
                        "; --peers-dir DIR names the folder of the prebuilt peers"
                by_hint.setdefault(hint, []).extend(os.path.basename(p) for p in ps)
            parts = [f"{', '.join(names)} ({hint})" for hint, names in by_hint.items()]
            sys.exit("benchmark: programs of tools named in --tools are missing: " + "; ".join(parts))
    hard = [p for p in missing if p not in OPTIONAL]
    time_pkg = {"time"} if not gnu_time_available() else set()
    if root_install and all(p in DEBIAN for p in missing):  # Picard too: --install installs what it can
        command = "apt-get install -y " + " ".join(sorted({DEBIAN[p] for p in missing} | time_pkg))
        log(f"installing: {command}")
        if subprocess.call(command.split()) != 0:
            subprocess.call(["apt-get", "update"])
            if subprocess.call(command.split()) != 0:
                sys.exit("benchmark: apt-get install failed")
        return check_programs(args, tools, sets, installed=True)
    if not hard or args.gpu:
        return missing
    command = "apt-get install -y " + " ".join(sorted({DEBIAN.get(p, p) for p in hard} | time_pkg))
    sudo = "" if os.geteuid() == 0 else "sudo "
    sys.exit(f"benchmark: missing programs: {', '.join(hard)}\ninstall them with:\n  {sudo}{command}\n"
             f"(or run benchmarks/run.py --install as root)")


def ensure_matplotlib(args, notes):
    """matplotlib for the plots, a benchmark-only dependency: pip-installed into benchmarks/work/pydeps
    (never into the project's environment) when missing and the network is there."""
    pydeps = os.path.join(args.work, "pydeps")
    if os.path.isdir(pydeps) and pydeps not in sys.path:
        sys.path.append(pydeps)  # appended: the environment's own numpy keeps precedence
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        pass
    if args.gpu or args.no_install_plots:
        notes.append("plots skipped: matplotlib is not installed (and no network install in this mode)")
        return False
    log("matplotlib missing: pip install --target benchmarks/work/pydeps matplotlib")
    rc = subprocess.call([sys.executable, "-m", "pip", "install", "-q", "--target", pydeps, "matplotlib"])
    if pydeps not in sys.path:
        sys.path.append(pydeps)
    try:
        import importlib
        importlib.invalidate_caches()
        import matplotlib  # noqa: F401,F811
        return True
    except ImportError:
        notes.append(f"plots skipped: pip install of matplotlib failed (exit {rc})")
        return False


# ---------------------------------------------------------------------------------------------- data

class Genome:
    def __init__(self, name, source, work):
        self.name, self.source = name, source
        self.sha = sha1_file(source)
        self.dir = os.path.join(work, "ref", f"{name}-{self.sha[:12]}")
        os.makedirs(self.dir, exist_ok=True)
        self.fa = os.path.join(self.dir, "ref.fa")
        if not os.path.exists(self.fa):
            log(f"decompressing {source}")
            simulate.decompress_fasta(source, self.fa)
        self.contigs = simulate.fasta_contigs(self.fa)
        self.length = sum(n for _, n in self.contigs)

    def describe(self):
        return {"source": os.path.relpath(self.source, ROOT), "sha1": self.sha, "contigs": len(self.contigs),
                "length": self.length}


def choose_human(args, notes):
    chr20 = os.path.join(args.data, "human", "GRCh37_chr20.fa.gz")
    want = args.genome if args.genome != "auto" else ("slice" if args.quick else "chr20")
    if want == "chr20" and not os.path.exists(chr20):
        notes.append(f"{chr20} not found: simulated reads come from the bundled 200 kb chr20 slice instead")
        want = "slice"
    return ("chr20", chr20) if want == "chr20" else ("chr20_slice", SLICE)


def prepare_sets(args, names, genomes, notes):
    """Read files and truths, cached under work/reads by a hash of their parameters."""
    sets = {}
    human = None
    if any(n in SIM_SETS or n == "na12878" for n in names):
        human = genomes.setdefault("human", Genome(*choose_human(args, notes), args.work))
    vcf = None
    if any(n in SIM_SETS for n in names) and not args.no_variants:
        # An existing VCF is used as is, also without mason_variator (it may have been carried here).
        vcf = os.path.join(human.dir, f"variants-{VARIANT_SEED}.vcf")
        if os.path.exists(vcf):
            pass
        elif simulate.find_tool("mason_variator"):
            log("mason_variator: SNPs (0.1 %) and small indels (0.01 %, 1-6 bp)")
            simulate.make_variants(human.fa, vcf + ".tmp.vcf", VARIANT_SEED, log_path=vcf + ".log")
            os.replace(vcf + ".tmp.vcf", vcf)
        else:
            vcf = None
            notes.append(f"mason_variator missing and no {os.path.relpath(human.dir, ROOT)}/variants-{VARIANT_SEED}.vcf: "
                         "reads simulated from the reference with sequencing errors only")
    for name in names:
        if name in SIM_SETS:
            length, paired, scale = SIM_SETS[name]
            seed = SIM_SEEDS[name] + 100 * args.seed_offset
            n_frag = args.reads // 2 if paired else args.reads
            threads = simulate.effective_sim_threads(n_frag, args.sim_threads)
            params = {"genome": human.sha, "vcf": vcf and sha1_file(vcf), "n": n_frag, "len": length,
                      "paired": paired, "scale": scale, "seed": seed,
                      "mason": capture([simulate.find_tool("mason_simulator") or "mason_simulator", "--version"])}
            if threads > 1:  # one thread: the key of the reads simulated before threads were used
                params["threads"] = threads
            d = os.path.join(args.work, "reads", f"{name}-{param_hash(params)}")
            done = os.path.join(d, "done")
            if not os.path.exists(done):
                log(f"mason_simulator: {name} ({n_frag} {'pairs' if paired else 'reads'} of {length} bp, "
                    f"{args.sim_threads} threads)")
                shutil.rmtree(d, ignore_errors=True)
                simulate.simulate_reads(human.fa, d, n_frag, length, paired, seed, vcf=vcf,
                                        mismatch_scale=scale, threads=args.sim_threads)
                open(done, "w").write(json.dumps(params))
            r1, r2 = os.path.join(d, "r1.fq"), os.path.join(d, "r2.fq") if paired else None
            sets[name] = {
                "genome": "human", "paired": paired, "r1": r1, "r2": r2, "reads": n_frag * (2 if paired else 1),
                "truth": os.path.join(d, "truth.sam"), "truth_kind": "mason",
                "source": f"mason_simulator, Illumina {length} bp, mismatch x{scale:g}, "
                          f"{'variants' if vcf else 'no variants'}, seed {seed}"
                          + (f", {threads} simulation threads" if threads > 1 else ""),
            }
            if name == "sim100se" and args.razers_reads > 0:
                sets[name]["gold"] = prepare_gold(args, d, human, r1, notes)
        elif name == "na12878":
            info = prepare_na12878(args, human, notes)
            if info:
                sets[name] = info
        elif name in YEAST_LIBS:
            ref = os.path.join(args.data, "yeast", "S288C_R64-1-1.genome.fa.gz")
            lib = os.path.join(args.data, "yeast", YEAST_LIBS[name])
            if not os.path.exists(ref) or not os.path.exists(lib + "_R1.fastq.gz"):
                notes.append(f"set {name} skipped: {args.data}/yeast not found")
                continue
            genomes.setdefault("yeast", Genome("yeast_S288C", ref, args.work))
            r1, r2, n = subset_pairs(args, name, lib + "_R1.fastq.gz", lib + "_R2.fastq.gz", args.reads // 2)
            sets[name] = {"genome": "yeast", "paired": True, "r1": r1, "r2": r2, "reads": 2 * n, "truth": None,
                          "truth_kind": None, "source": f"real 2x50 ChIP-seq input library {YEAST_LIBS[name]}"}
    return sets


def subset_pairs(args, name, src1, src2, n_pairs):
    total = simulate.count_fastq(src1)
    if n_pairs >= total:
        return src1, src2, total
    d = os.path.join(args.work, "reads", f"{name}-{param_hash([sha1_file(src1), n_pairs])}")
    os.makedirs(d, exist_ok=True)
    r1, r2 = os.path.join(d, "r1.fq"), os.path.join(d, "r2.fq")
    if not (os.path.exists(r1) and os.path.exists(r2)):
        simulate.head_fastq(src1, r1, n_pairs)
        simulate.head_fastq(src2, r2, n_pairs)
    return r1, r2, n_pairs


def prepare_na12878(args, human, notes):
    if human.name == "chr20":
        base = os.path.join(args.data, "human", "NA12878_S1.chr20_10.0-10.1Mb")
        bam = os.path.join(args.data, "human", "NA12878_S1.chr20.10_10p1mb.bam")
        if not (os.path.exists(base + "_R1.fastq.gz") and os.path.exists(bam)):
            notes.append(f"set na12878 skipped: its reads or BAM are not in {args.data}/human")
            return None
        r1, r2, n = subset_pairs(args, "na12878", base + "_R1.fastq.gz", base + "_R2.fastq.gz", args.reads // 2)
        return {"genome": "human", "paired": True, "r1": r1, "r2": r2, "reads": 2 * n,
                "truth": bam, "truth_kind": "bwa 0.6.1 BAM",
                "source": "real NA12878 HiSeq 2x101, chr20:10.0-10.1 Mb; truth = original BAM (bwa 0.6.1)"}
    r1 = os.path.join(EXAMPLE, "NA12878_chr20_slice_2000pairs_R1.fastq.gz")
    r2 = os.path.join(EXAMPLE, "NA12878_chr20_slice_2000pairs_R2.fastq.gz")
    return {"genome": "human", "paired": True, "r1": r1, "r2": r2, "reads": 4000,
            "truth": os.path.join(EXAMPLE, "original_positions.tsv.gz"), "truth_kind": "bwa 0.6.1 POS (start only)",
            "source": "real NA12878 HiSeq 2x101, 2,000 pairs inside the bundled slice; truth = original BAM's POS"}


def prepare_gold(args, set_dir, human, r1, notes):
    """razers3's hits for the first reads of ``r1``, cached under work/gold by the reads' and reference's
    hashes, so that a gold file made here can be carried to a machine without razers3."""
    fq = os.path.join(set_dir, f"razers-{args.razers_reads}.fq")
    n = simulate.head_fastq(r1, fq, args.razers_reads)
    key = param_hash([sha1_file(fq), human.sha, RAZERS_MAX_HITS, "-rr 100 -i 95"])
    gold = os.path.join(args.work, "gold", f"razers3-{key}.sam")
    if not os.path.exists(gold):
        if not simulate.find_tool("razers3"):
            notes.append(f"all-hit recall skipped: razers3 missing and no {os.path.relpath(gold, ROOT)}")
            return None
        os.makedirs(os.path.dirname(gold), exist_ok=True)
        log(f"razers3 -rr 100 -i 95 on {n} reads (gold standard of all hits)")
        t0 = time.perf_counter()
        simulate.razers3_gold(human.fa, fq, gold + ".tmp.sam", args.threads, max_hits=RAZERS_MAX_HITS)
        os.replace(gold + ".tmp.sam", gold)
        log(f"razers3 took {time.perf_counter() - t0:.1f} s")
    return {"sam": gold, "reads": n, "command": f"razers3 -rr 100 -i 95 -m {RAZERS_MAX_HITS}"}


def warm_up_kernels(args, tools, sets, index_of, run_dir, notes):
    """One untimed peanut map of 1,000 reads per peanut tool: OpenCL drivers compile kernels on their first
    use and cache the binaries (NVIDIA: ~8 s for all of peanut's kernels), which only a first run ever pays;
    the timed runs then measure the steady state, like the peers' (whose code is compiled ahead of time)."""
    for t in tools:
        if t.family != "peanut":
            continue
        for name, s in sets.items():
            idx = index_of.get((t.family, s["genome"]))
            if not idx or not idx.get("ok"):
                continue
            d = os.path.join(run_dir, "warm-up")
            os.makedirs(d, exist_ok=True)
            fq = os.path.join(d, f"{name}.fq")
            simulate.head_fastq(s["r1"], fq, 1000)
            cmd, stdout = t.map_cmd(idx["index"], fq, None, os.path.join(d, f"{t.name}.sam"), args.threads)
            m = measure(cmd, os.path.join(d, f"{t.name}.log"), stdout_path=stdout, timeout=args.timeout)
            notes.append(f"warm-up (untimed, compiles and caches the OpenCL kernels): {t.name} on 1,000 reads of "
                         f"{name}, {m.get('wall_s', 0):.1f} s")
            break


# ---------------------------------------------------------------------------------------------- indexes

def build_index(args, tool, genome, version):
    """Index of ``tool`` for ``genome``, built once and cached with its measured build cost. A tool without a
    separate index (strobealign) maps against the FASTA itself: {"ok": True, "none": True}."""
    if tool.index_cmd is None:
        return {"ok": True, "none": True, "index": genome.fa, "version": version, "cached": False,
                "note": "no separate index: it is built in every mapping run"}
    d = os.path.join(args.work, "index", f"{tool.family}-{genome.sha[:12]}-{param_hash(version)[:8]}")
    meta_path = os.path.join(d, "build.json")
    if os.path.exists(meta_path):
        meta = json.load(open(meta_path))
        if meta.get("ok"):
            meta["cached"] = True
            return meta
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cmd, idx = tool.index_cmd(genome.fa, d, args.threads)
    log(f"index {tool.family} for {genome.name}")
    m = measure(cmd, os.path.join(d, "build.log"), timeout=args.index_timeout)
    m.update(index=idx, version=version, date=datetime.date.today().isoformat(), cached=False)
    if m["ok"]:
        json.dump(m, open(meta_path, "w"), indent=1)
    else:
        log(f"index {tool.family} failed: {m['error'][:300]}")
    return m


# ---------------------------------------------------------------------------------------------- scoring

def validate_sam(sam):
    """Picard ValidateSamFile (SUMMARY); read groups are not asked of a mapper and are ignored."""
    out = capture(["PicardCommandLine", "ValidateSamFile", f"I={sam}", "MODE=SUMMARY",
                   "IGNORE=MISSING_READ_GROUP", "IGNORE=RECORD_MISSING_READ_GROUP", "MAX_OUTPUT=100"])
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^((?:ERROR|WARNING):\S+)\s+(\d+)", out, re.M)}
    clean = "No errors found" in out
    if not counts and not clean:
        return {"ok": False, "problem": "picard gave no summary", "output_tail": out[-500:]}
    return {"ok": clean, "counts": counts}


def evaluate(args, run, info, truth, gold, sam, tool_name, picard):
    run["mapping"] = scoring.mapping_stats(sam)
    if truth is not None:
        run["score"] = scoring.score_sam(sam, truth, tolerance=args.tolerance)
    if gold is not None:
        run["recall"] = scoring.gold_recall(sam, gold, tolerance=args.tolerance, max_hits=RAZERS_MAX_HITS)
    if picard and (tool_name.startswith("peanut") or not args.quick):
        run["validate"] = validate_sam(sam)


def summarize(run, reads):
    good = [r for r in run["reps"] if r.get("ok")]
    if not good:
        run["ok"] = False
        run["error"] = run["reps"][-1].get("error", "?") if run["reps"] else "not run"
        return
    run["ok"] = True
    for k in ("wall_s", "cpu_s", "max_rss_mb"):
        run[k] = statistics.median(r[k] for r in good)
    run["reads_per_s"] = reads / run["wall_s"] if run["wall_s"] > 0 else None
    for k in ("mapping_s", "indexing_s"):  # a tool's own timings (strobealign), when every good rep has them
        if all(k in r for r in good):
            run[k] = statistics.median(r[k] for r in good)
    if run.get("mapping_s"):
        # strobealign builds its index in every run: its throughput is counted over its own mapping time
        run["reads_per_s_wall"] = run["reads_per_s"]
        run["reads_per_s"] = reads / run["mapping_s"]
        run["speed_from"] = "own mapping time"


# ---------------------------------------------------------------------------------------------- machine

def describe_machine(args):
    info = {"hostname": platform.node(), "os": platform.platform(), "python": platform.python_version(),
            "cores": os.cpu_count(), "cores_available": len(os.sched_getaffinity(0))}
    try:
        cpuinfo = open("/proc/cpuinfo").read()
        info["cpu"] = first_match(r"^model name\s*:\s*(.+)$", cpuinfo)
        mem = open("/proc/meminfo").read()
        info["memory_gib"] = round(int(first_match(r"^MemTotal:\s*(\d+)", mem, "0")) / 2**20, 1)
    except OSError:
        pass
    gpus = capture(["nvidia-smi", "-L"]) if shutil.which("nvidia-smi") else ""
    if gpus:
        info["gpus"] = gpus.splitlines()
    devices = capture([sys.executable, "-m", "peanut_py", "devices"])
    info["opencl_devices"] = devices.splitlines()[-4:] if devices else ["(peanut devices failed)"]
    return info


def default_machine_label(args):
    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", platform.node().split(".")[0]) or "machine"
    return f"{label}-gpu" if args.gpu else label


# ---------------------------------------------------------------------------------------------- main

def expand_tools(spec):
    """Tool names of a --tools value (None: the default set), shortcuts expanded, first mention kept."""
    names = []
    for item in (spec.split(",") if spec is not None else DEFAULT_TOOLS):
        item = item.strip()
        for name in TOOL_SETS.get(item, (item,) if item else ()):
            if name not in names:
                names.append(name)
    return names


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small read sets on the bundled slice, 1 repetition")
    p.add_argument("--gpu", action="store_true",
                   help="for the lent GPU machine: no network; missing programs of the default tool set, mason "
                        "and razers3 are skipped with a note (a tool named in --tools must be there)")
    p.add_argument("--tools", help=f"comma-separated subset of {','.join(ALL_TOOLS)}; 'peanut' = both modes, "
                                   f"'fast' = {','.join(TOOL_SETS['fast'])} (default: {','.join(DEFAULT_TOOLS)})")
    p.add_argument("--peers-dir", metavar="DIR",
                   help="folder of the prebuilt peers' binaries (minibwa, strobealign, minimap2-2.30, bwa-mem2 and "
                        "bwa-mem2.*; DIR/bin is tried too); default: WORK/peers/bin, unpacked once from "
                        "../shared/peers/peers-bin.tar.xz, else PATH")
    p.add_argument("--sets", help=f"comma-separated subset of {','.join(list(SIM_SETS) + list(REAL_SETS))}")
    p.add_argument("-t", "--threads", type=int, default=len(os.sched_getaffinity(0)), help="threads for every tool")
    p.add_argument("--sim-threads", type=int,
                   help="mason_simulator --num-threads (default: -t); sets of more than 65,536 reads/pairs depend on "
                        "it up to their number of 65,536-fragment chunks (the read cache is keyed by it)")
    p.add_argument("--reads", type=int, help="reads per set (pairs: half as many pairs); quick 20000, full 200000")
    p.add_argument("--reps", type=int, help="repetitions of every run; quick 1, full 3")
    p.add_argument("--genome", choices=("auto", "slice", "chr20"), default="auto",
                   help="reference of the simulated and NA12878 sets (auto: slice in --quick, else chr20)")
    p.add_argument("--tolerance", type=int, default=scoring.DEFAULT_TOLERANCE, help="bp (default %(default)s)")
    p.add_argument("--razers-reads", type=int, help="reads of sim100se in razers3's gold standard (0 = none); "
                                                     "quick 500, full 2000")
    p.add_argument("--max-hits", type=int, default=RAZERS_MAX_HITS, help="peanut --mode all --max-hits")
    p.add_argument("--peanut-args", help="extra arguments for every 'peanut map', e.g. '--device 0'")
    p.add_argument("--timeout", type=int, help="seconds per mapper run (quick 300, full 7200)")
    p.add_argument("--index-timeout", type=int, default=7200, help="seconds per index build")
    p.add_argument("--data", default=DEFAULT_DATA, help="shared data folder (default ../shared/data)")
    p.add_argument("--work", default=os.path.join(HERE, "work"), help="cache of references, reads, indexes")
    p.add_argument("--results", default=os.path.join(HERE, "results"), help="where the JSON/MD/PNG go")
    p.add_argument("--machine", help="label of this machine in the result file names")
    p.add_argument("--no-variants", action="store_true", help="simulate from the reference without mason_variator")
    p.add_argument("--seed-offset", type=int, default=0,
                   help="simulate the read sets with seed + 100 * N: other replicates of the same sets (default 0)")
    p.add_argument("--keep-sam", action="store_true", help="keep the mappers' SAM files under work/runs")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-install-plots", action="store_true", help="never pip-install matplotlib")
    p.add_argument("--update-docs", dest="update_docs", action="store_true", default=None,
                   help="put the table and plots into docs/benchmarks.md (default: full mode only)")
    p.add_argument("--no-update-docs", dest="update_docs", action="store_false")
    p.add_argument("--install", action="store_true", help="apt-get install missing peers (as root)")
    p.add_argument("--replot", metavar="RESULT.json", help="only redo plots/Markdown/docs from a result JSON")
    args = p.parse_args(argv)
    args.reads = args.reads or (20000 if args.quick else 200000)
    args.reps = args.reps or (1 if args.quick else 3)
    args.timeout = args.timeout or (300 if args.quick else 7200)
    if args.razers_reads is None:
        args.razers_reads = 500 if args.quick else 2000
    if args.update_docs is None:
        args.update_docs = not (args.quick or args.gpu or args.replot)
    args.work, args.results, args.data = map(os.path.abspath, (args.work, args.results, args.data))
    args.tool_names = expand_tools(args.tools)
    bad = [t for t in args.tool_names if t not in ALL_TOOLS]
    if bad:
        p.error(f"unknown tools {bad}; known: {', '.join(ALL_TOOLS)}, and {' '.join(map(repr, TOOL_SETS))}")
    args.sim_threads = args.sim_threads or args.threads
    known_sets = list(SIM_SETS) + list(REAL_SETS)
    args.set_names = args.sets.split(",") if args.sets else list(QUICK_SETS if args.quick else known_sets)
    bad = [s for s in args.set_names if s not in known_sets]
    if bad:
        p.error(f"unknown sets {bad}; known: {', '.join(known_sets)}")
    args.machine = args.machine or default_machine_label(args)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.replot:
        return replot(args)
    started = time.perf_counter()
    notes = []
    args.peers_bin = resolve_peers_dir(args, needed=any(n in PEER_TOOLS for n in args.tool_names))
    all_tools = make_tools(args)
    tools = [all_tools[n] for n in args.tool_names]
    missing = check_programs(args, tools, args.set_names)
    picard = "PicardCommandLine" not in missing
    if missing:
        notes.append(f"missing on this machine (parts skipped): {', '.join(missing)}")
        if not picard:
            notes.append("SAM validation skipped: PicardCommandLine missing")
        if "mason_simulator" in missing:
            args.set_names = [s for s in args.set_names if s not in SIM_SETS]
            notes.append("simulated sets skipped: mason_simulator missing")
        for t in list(tools):
            lacking = [p for p in t.programs if not have(p)]
            if lacking:
                tools.remove(t)
                notes.append(f"{t.name} skipped: {', '.join(lacking)} missing")
    if not gnu_time_available():
        notes.append("/usr/bin/time (Debian package time) missing: CPU and peak RSS from getrusage of a wrapper")
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.results, exist_ok=True)

    genomes = {}
    sets = prepare_sets(args, args.set_names, genomes, notes)
    versions = {t.name: t.version() for t in tools}
    results = {
        "meta": {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "mode": "quick" if args.quick else "full", "gpu_mode": args.gpu, "machine_label": args.machine,
            "machine": describe_machine(args), "threads": args.threads, "reps": args.reps,
            "tolerance": args.tolerance, "thresholds": list(scoring.THRESHOLDS), "versions": versions,
            "command": shlex.join([os.path.relpath(sys.argv[0], ROOT)] + (argv if argv is not None else sys.argv[1:])),
        },
        "genomes": {k: dict(g.describe(), name=g.name) for k, g in genomes.items()},
        "indexes": {},
        "sets": {k: {kk: (os.path.relpath(v, ROOT) if kk in ("r1", "r2", "truth") and v else v)
                     for kk, v in s.items() if kk != "gold"} | ({"gold": s["gold"]["command"] + f" on {s['gold']['reads']} reads"}
                                                                if s.get("gold") else {})
                 for k, s in sets.items()},
        "runs": {k: {} for k in sets},
        "notes": notes,
    }

    # Indexes, once per (tool family, genome) needed.
    index_of = {}
    for gkey in sorted({s["genome"] for s in sets.values()}):
        g = genomes[gkey]
        for t in tools:
            if (t.family, gkey) in index_of:
                continue
            m = build_index(args, t, g, versions[t.name])
            index_of[(t.family, gkey)] = m
            results["indexes"].setdefault(g.name, {})[t.family] = m

    truths, golds = {}, {}
    for name, s in sets.items():
        if s["truth"]:
            refs = [c for c, _ in genomes[s["genome"]].contigs]
            truths[name] = scoring.load_truth(s["truth"], ref_contigs=refs)
            if s["truth_kind"] != "mason":  # a real set may be the first pairs of a larger truth file
                truths[name].restrict(simulate.fastq_names(s["r1"]))
            results["sets"][name]["truth_reads"] = len(truths[name])
        if s.get("gold"):
            golds[name] = scoring.load_gold(s["gold"]["sam"])
    for s in sets.values():  # warm the page cache so the first tool does not pay for the disk
        for f in (s["r1"], s["r2"]):
            if f:
                with open(f, "rb") as fh:
                    while fh.read(1 << 24):
                        pass

    run_dir = os.path.join(args.work, "runs", time.strftime("%Y%m%d-%H%M%S"))
    warm_up_kernels(args, tools, sets, index_of, run_dir, notes)
    for rep in range(args.reps):
        for name, s in sets.items():
            order = tools[rep % len(tools):] + tools[: rep % len(tools)] if tools else []
            for t in order:
                run = results["runs"][name].setdefault(t.name, {"reps": []})
                idx = index_of[(t.family, s["genome"])]
                if not idx.get("ok"):
                    run["reps"].append({"ok": False, "error": f"no index: {idx.get('error', '?')[:300]}"})
                    continue
                d = os.path.join(run_dir, name)
                os.makedirs(d, exist_ok=True)
                sam = os.path.join(d, f"{t.name}.sam")
                cmd, stdout = t.map_cmd(idx["index"], s["r1"], s["r2"], sam, args.threads)
                log(f"rep {rep + 1}/{args.reps} {name} {t.name}")
                if os.path.exists(sam):
                    os.unlink(sam)
                log_path = os.path.join(d, f"{t.name}.log")
                offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
                m = measure(cmd, log_path, stdout_path=stdout, timeout=args.timeout)
                if m["ok"] and not os.path.exists(sam):
                    m.update(ok=False, error="exit status 0 but no SAM written")
                if m["ok"] and t.own_times:
                    with open(log_path, "rb") as f:  # this run's part of the log
                        f.seek(offset)
                        m.update(t.own_times(f.read().decode(errors="replace")))
                    if "mapping_s" not in m:
                        notes.append(f"{t.name} on {name}: no own mapping time in its log; wall clock used")
                run["reps"].append(m)
                if not m["ok"]:
                    log(f"{t.name} on {name} failed: {m['error'][:300]}")
                    continue
                own = f" ({m['mapping_s']:.2f} s its own mapping time)" if "mapping_s" in m else ""
                log(f"  {m['wall_s']:.1f} s wall{own}, {m['cpu_s']:.1f} s CPU, {m['max_rss_mb']:.0f} MB")
                if "mapping" not in run:
                    try:
                        evaluate(args, run, s, truths.get(name), golds.get(name), sam, t.name, picard)
                    except Exception as e:  # a malformed SAM must not end the benchmark
                        run["reps"][-1].update(ok=False, error=f"scoring failed: {type(e).__name__}: {e}")
                        log(f"scoring {t.name} on {name} failed: {e}")
                        run.pop("mapping", None)
                if not args.keep_sam:
                    os.unlink(sam)
    for name, s in sets.items():
        for run in results["runs"][name].values():
            summarize(run, s["reads"])
    results["meta"]["elapsed_s"] = round(time.perf_counter() - started, 1)
    stem = os.path.join(args.results, f"{datetime.date.today().isoformat()}-{args.machine}"
                        + ("-quick" if args.quick else ""))
    write_outputs(args, results, stem)
    return 0


def write_outputs(args, results, stem):
    """JSON, Markdown and plots of ``results`` at ``stem``.*; docs/benchmarks.md too with --update-docs."""
    from benchmarks import report

    plots = []
    if not args.no_plots and ensure_matplotlib(args, results["notes"]):
        from benchmarks import plots as plotting
        plots = plotting.make_plots(results, stem)
    results["plots"] = [os.path.basename(p) for p in plots]
    with open(stem + ".json", "w") as f:
        json.dump(results, f, indent=1)
    md = report.markdown(results)
    with open(stem + ".md", "w") as f:
        f.write(md)
    log(f"wrote {os.path.relpath(stem, ROOT)}.json, .md and {len(plots)} plots")
    if args.update_docs:
        report.update_docs(results, plots, os.path.join(ROOT, "docs"))
        log("updated docs/benchmarks.md")
    print(md)
    failed = [(n, t) for n, runs in results["runs"].items() for t, r in runs.items() if not r["ok"]]
    if failed:
        log("failed runs: " + ", ".join(f"{t} on {n}" for n, t in failed))


def replot(args):
    """Plots, Markdown (and docs) again from a result JSON, e.g. one brought back from the GPU machine."""
    results = json.load(open(args.replot))
    os.makedirs(args.results, exist_ok=True)
    stem = os.path.join(args.results, os.path.basename(args.replot)[: -len(".json")])
    write_outputs(args, results, stem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
