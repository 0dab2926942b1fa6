#!/usr/bin/env python3
"""The choice of the default q and step, measured: chr20 indexes of several (q, step), the same reads mapped.

    python benchmarks/qstep.py                                  # 16:1,16:2,16:4,14:1,12:1, 20,000 reads per set
    python benchmarks/qstep.py --configs 16:1,15:1 --reads 50000 --timeout 600 --json out.json

For every configuration: ``peanut index REF -q Q -s S`` (cached in ``--work``), then ``python -m peanut_py
map IDX reads.fq -o out.sam -t T`` on two mason sets of 100 bp reads with truth (``-oa``): the Illumina
profile and one with ``--illumina-prob-mismatch-scale 3``. Each SAM is scored with benchmarks/scoring.py
(correct = contig, strand and anchor within 5 bp of mason's; wrong per 10k among MAPQ >= 20), and the reads
are binned by their edit count in mason's alignment (NM) to show sensitivity for reads with more errors.
``peanut map`` does not print candidates, so ``core_kernels.py --fastq`` runs the device core once more on
the first set to count raw hits and candidates per read. A command that runs past ``--timeout`` is killed
and the configuration recorded as too slow.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from benchmarks import core_kernels, scoring  # noqa: E402

DEFAULT_CONFIGS = "16:1,16:2,16:4,14:1,12:1"
DEFAULT_WORK = os.path.join(HERE, "work", "qstep")
EDIT_BINS = ((0, 3), (4, 5), (6, 100))  # NM of mason's alignment, inclusive


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def timed_run(cmd, timeout, log):
    """(returncode or None when killed at the timeout, wall s, stderr text)."""
    log("$ " + " ".join(map(str, cmd)))
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(c) for c in cmd], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return None, time.perf_counter() - t0, err
    return proc.returncode, time.perf_counter() - t0, err + out


def parse_map_log(text):
    """Index load and device stage seconds from peanut map's summary on stderr (None when absent)."""
    info = {}
    m = re.search(r"; ([\d.]+) s to load and upload", text)
    info["load_s"] = float(m.group(1)) if m else None
    m = re.search(r"stage seconds \(summed over threads\): (.*)", text)
    if m:
        for name, sec in re.findall(r"([\w -]+?) ([\d.]+) s", m.group(1)):
            info[f"stage_{name.strip()}_s"] = float(sec)
    return info


def truth_edits(truth_sam):
    """{read key: NM} of mason's alignments."""
    edits = {}
    for qname, flag, _rname, _pos, _mapq, _cigar, tags in scoring.iter_sam(truth_sam):
        if flag & 0x900:
            continue
        nm = next((int(t[5:]) for t in tags if t.startswith("NM:i:")), None)
        if nm is not None:
            edits[scoring.read_key(qname, flag)] = nm
    return edits


def correct_by_edits(sam, truth, edits):
    """Per edit bin: truth reads and correctly placed primary records."""
    correct = set()
    for qname, flag, rname, pos, _mapq, cigar, _tags in scoring.iter_sam(sam):
        if flag & 0x904:
            continue
        key = scoring.read_key(qname, flag)
        want = truth.placements.get(key)
        if want is not None and scoring.same_place(scoring.placement(rname, pos, cigar, bool(flag & 0x10)), want):
            correct.add(key)
    bins = {}
    for lo, hi in EDIT_BINS:
        keys = [k for k in truth.placements if lo <= edits.get(k, -1) <= hi]
        bins[f"{lo}-{hi}"] = {"reads": len(keys), "correct": sum(k in correct for k in keys)}
    return bins


def simulate_sets(args, log):
    mason = core_kernels.find_mason()
    if mason is None:
        sys.exit("mason_simulator not found (PATH, /usr/lib/seqan/bin): the truth needs it")
    sets = {}
    for name, scale in (("illumina", 1.0), (f"mismatch x{args.hierr_scale:g}", args.hierr_scale)):
        fq, sam = core_kernels.mason_reads(mason, args.ref, args.work, args.reads, 100, args.seed,
                                           args.mason_threads, mismatch_scale=scale, truth=True, log=log)
        truth = scoring.load_truth(sam)
        sets[name] = {"fastq": fq, "truth_sam": sam, "truth": truth, "edits": truth_edits(sam)}
    return sets


def index_for(args, q, step, log):
    """(path, build seconds or None when it was cached, or 'timeout')."""
    path = os.path.join(args.work, f"chr20-q{q}-s{step}.peanut.h5")
    meta = path + ".json"
    if os.path.exists(path) and os.path.exists(meta):
        with open(meta) as f:
            return path, json.load(f)["build_s"]
    cmd = [sys.executable, "-m", "peanut_py", "index", args.ref, "-q", q, "-s", step, "-o", path]
    rc, wall, err = timed_run(cmd, args.timeout, log)
    if rc is None:
        return None, "timeout"
    if rc != 0:
        sys.exit(f"peanut index failed ({rc}):\n{err[-2000:]}")
    with open(meta, "w") as f:
        json.dump({"build_s": wall}, f)
    return path, wall


def measure(args, q, step, sets, log):
    row = {"q": q, "step": step, "sets": {}}
    path, build = index_for(args, q, step, log)
    if path is None:
        row["status"] = f"index build > {args.timeout} s"
        return row
    row["index_build_s"] = build
    row["index_mb"] = os.path.getsize(path) / 1e6
    for name, s in sets.items():
        sam = os.path.join(args.work, f"q{q}-s{step}-{name.replace(' ', '_')}.sam")
        cmd = [sys.executable, "-m", "peanut_py", "map", path, s["fastq"], "-o", sam, "-t", args.threads]
        if args.device is not None:
            cmd += ["--device", args.device]
        rc, wall, err = timed_run(cmd, args.timeout, log)
        if rc is None:
            row["status"] = f"map > {args.timeout} s"
            return row
        if rc != 0:
            row["status"] = f"map failed ({rc}): {err.strip().splitlines()[-1] if err.strip() else ''}"
            return row
        score = scoring.score_sam(sam, s["truth"])
        res = {
            "wall_s": wall, "reads_per_s": args.reads / wall, **parse_map_log(err),
            "mapped": score["frac_mapped"], "correct": score["frac_correct"],
            "wrong_per_10k_q20": score["wrong_per_10k"]["20"], "n_truth": score["n_truth"],
            "by_edits": correct_by_edits(sam, s["truth"], s["edits"]),
        }
        row["sets"][name] = res
        log(f"  {name}: {wall:.1f} s, mapped {100 * res['mapped']:.2f} %, correct {100 * res['correct']:.2f} %")
        if not args.keep_sam:
            os.remove(sam)
    if not args.no_core:
        out = os.path.join(args.work, f"core-q{q}-s{step}.json")
        first = next(iter(sets.values()))
        cmd = [sys.executable, os.path.join(HERE, "core_kernels.py"), "--index", path, "--fastq", first["fastq"],
               "--runs", "1", "--json", out]
        if args.device is not None:
            cmd += ["--device", args.device]
        rc, wall, err = timed_run(cmd, args.timeout, log)
        if rc == 0:
            with open(out) as f:
                core = json.load(f)["runs"][-1]
            row["core"] = {**core["counts"], "seconds": core["seconds"]}
        else:
            row["core"] = {"status": "timeout" if rc is None else f"failed ({rc})"}
    row["status"] = "ok"
    return row


def pct(x):
    return "-" if x is None else f"{100 * x:.2f}"


def markdown(rows, sets, reads):
    from peanut_py.filtration import guaranteed_errors, votes_threshold

    names = list(sets)
    hi = names[-1]
    head = ["q", "step", "e_g", "t(100)", "index build s", "index MB", "wall s", "reads/s", "load s", "device s",
            "raw hits/read", "candidates/read", "mapped %", "correct %", "wrong/10k MAPQ>=20",
            f"{hi}: mapped %", f"{hi}: correct %", "correct %, NM 4-5 (reads)", "correct %, NM >= 6 (reads)",
            "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    for r in rows:
        q, s = r["q"], r["step"]
        cells = [q, s, guaranteed_errors(100, q, s), votes_threshold(100, q, s)]
        build = r.get("index_build_s")
        cells += [f(build, ".1f"), f(r.get("index_mb"), ".0f")]
        a = r["sets"].get(names[0], {})
        b = r["sets"].get(hi, {})
        core = r.get("core", {})
        merged = {}  # edit bins of both sets together
        for res in (a, b):
            for key, c in res.get("by_edits", {}).items():
                m = merged.setdefault(key, {"reads": 0, "correct": 0})
                m["reads"] += c["reads"]
                m["correct"] += c["correct"]

        def bin_pct(key):
            c = merged.get(key)
            return f"{100 * c['correct'] / c['reads']:.1f} ({c['reads']})" if c and c["reads"] else "-"

        cells += [
            f(a.get("wall_s"), ".1f"), f(a.get("reads_per_s"), ",.0f"), f(a.get("load_s"), ".1f"),
            f(a.get("stage_device_s"), ".1f"),
            f(core.get("raw_hits_per_read"), ".0f"), f(core.get("candidates_per_read"), ".1f"),
            pct(a.get("mapped")), pct(a.get("correct")), f(a.get("wrong_per_10k_q20"), ".1f"),
            pct(b.get("mapped")), pct(b.get("correct")), bin_pct("4-5"), bin_pct("6-100"),
            "" if r.get("status") == "ok" else r.get("status", ""),
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"q:step,... (default {DEFAULT_CONFIGS})")
    ap.add_argument("--reads", type=int, default=20_000, help="reads per set (default 20,000)")
    ap.add_argument("--ref", default=core_kernels.default_fasta(), help="reference FASTA (default GRCh37 chr20)")
    ap.add_argument("-t", "--threads", type=int, default=2, help="peanut map -t (default 2)")
    ap.add_argument("--device", help="peanut map --device")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mason-threads", type=int, default=2)
    ap.add_argument("--hierr-scale", type=float, default=3.0, help="mismatch scale of the second set (default 3)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per command before a configuration "
                    "counts as too slow (default 300)")
    ap.add_argument("--no-core", action="store_true", help="skip the candidate count (core_kernels.py)")
    ap.add_argument("--keep-sam", action="store_true")
    ap.add_argument("--work", default=DEFAULT_WORK, help=f"indexes, reads, SAM (default {DEFAULT_WORK})")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if not os.path.exists(args.ref):
        sys.exit(f"{args.ref}: reference FASTA not found (give --ref)")
    configs = [tuple(int(x) for x in c.split(":")) for c in args.configs.split(",") if c]
    os.makedirs(args.work, exist_ok=True)
    sets = simulate_sets(args, log)
    rows = []
    t0 = time.perf_counter()
    for q, step in configs:
        log(f"== q={q} step={step}")
        rows.append(measure(args, q, step, sets, log))
        log(f"   ({time.perf_counter() - t0:.0f} s so far)")
    print(f"\nq and step: {args.reads:,} mason reads of 100 bp per set against {os.path.basename(args.ref)}, "
          f"peanut map -t {args.threads}\n")
    print(markdown(rows, sets, args.reads))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"reads": args.reads, "ref": args.ref, "threads": args.threads, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
