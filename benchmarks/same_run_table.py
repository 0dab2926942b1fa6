#!/usr/bin/env python3
"""The same-run table of benchmarks/gpu_issue20.sh from its log:

    python3 benchmarks/same_run_table.py issue20.txt > issue20.md
    python3 benchmarks/same_run_table.py issue20.txt --plot rates.png   # also a bar plot of the reads/s

Per set (single-end ``se``, pairs ``pe``) and tool: the wall clock of the whole process, the reads it mapped
and its rate; for strobealign also its own mapping time, which is what counts for it (it builds its index in
memory on every run). The last column is peanut-py's rate over the tool's; the line under each set names the
fastest peer and peanut-py's ratio to it for each of its runs.
"""
import argparse
import os
import re
import sys

RUN = re.compile(r"^(se|pe)_(\S+)\s+rc=(\d+) wall=([\d.]+) s.* reads=(\d+)")
MAPPING = re.compile(r"^(se|pe)_strobealign Total time mapping: ([\d.]+) s")
SETS = {"se": "10 M single-end 100 bp", "pe": "5 M pairs 2x150"}
PEANUT_RUNS = {"peanut": "peanut-py, run 1", "peanut_b": "peanut-py, run 2"}


def parse(lines):
    runs, mapping = {}, {}
    for line in lines:
        m = RUN.match(line)
        if m:
            s, tool, rc, wall, reads = m.groups()
            runs.setdefault(s, []).append((tool, float(wall), int(reads), int(rc)))
        m = MAPPING.match(line)
        if m:
            mapping[m.group(1)] = float(m.group(2))
    return runs, mapping


def counted_seconds(s, tool, wall, mapping):
    """The seconds a run of set ``s`` counts: strobealign's own mapping time where the log has it, else the wall."""
    return mapping[s] if tool == "strobealign" and s in mapping else wall


def rates(runs, mapping):
    """Per set: (tool, reads/s) of every run that exited with 0, in order."""
    out = {}
    for s, rows in runs.items():
        for tool, wall, reads, rc in rows:
            if not rc:
                out.setdefault(s, []).append((tool, reads / counted_seconds(s, tool, wall, mapping)))
    return out


def table(runs, mapping):
    out = []
    for s, rows in runs.items():
        out += [f"**{SETS.get(s, s)}**", "", "| tool | reads | wall | reads/s | peanut-py's rate over it |",
                "|---|---|---|---|---|"]
        rate = {}                                   # peanut-py's two runs under one name
        for tool, r in rates(runs, mapping).get(s, []):
            rate.setdefault(tool.removesuffix("_b"), []).append(r)
        ours = rate.get("peanut", [])
        for tool, wall, reads, rc in rows:
            if rc:
                out.append(f"| {tool} | {reads:,} | exit status {rc} after {wall:.2f} s | | |")
                continue
            seconds = counted_seconds(s, tool, wall, mapping)
            shown = f"{wall:.2f} s" + (f" (mapping {seconds:.2f} s)" if seconds != wall else "")
            ratio = "" if tool.startswith("peanut") or not ours else \
                "-".join(sorted({f"{r / (reads / seconds):.2f}x" for r in ours}))
            out.append(f"| {tool} | {reads:,} | {shown} | {reads / seconds:,.0f} | {ratio} |")
        peers = {t: max(r) for t, r in rate.items() if t != "peanut"}
        if peers and ours:
            best = max(peers, key=peers.get)
            out += ["", f"Fastest peer: {best}; peanut-py's runs at "
                    + ", ".join(f"{r / peers[best]:.2f}x" for r in ours) + " its rate."]
        out.append("")
    return "\n".join(out)


def plot(runs, mapping, path, title):
    """Horizontal bars of reads/s per tool, one panel per set (matplotlib from benchmarks/work/pydeps, where
    benchmarks/run.py installs it, or the environment); each of peanut-py's runs is a bar of its own."""
    pydeps = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work", "pydeps")
    if os.path.isdir(pydeps) and pydeps not in sys.path:
        sys.path.append(pydeps)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_set = rates(runs, mapping)
    fig, axes = plt.subplots(1, len(per_set), figsize=(5.5 * len(per_set), 3.2), squeeze=False)
    for ax, (s, bars) in zip(axes[0], per_set.items()):
        names = [t for t, _ in bars]
        values = [r / 1e6 for _, r in bars]
        colors = ["#d62728" if t.startswith("peanut") else "#7f7f7f" for t in names]
        ax.barh(range(len(bars)), values, color=colors)
        ax.set_yticks(range(len(bars)), [PEANUT_RUNS.get(t, t) for t in names])
        ax.invert_yaxis()
        for i, v in enumerate(values):
            ax.text(v, i, f" {v:.2f}", va="center", fontsize=8)
        ax.set_xlim(0, max(values) * 1.18)
        ax.set_xlabel("million reads/s (strobealign: its mapping time)")
        ax.set_title(SETS.get(s, s), fontsize=10)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", help="the lines gpu_issue20.sh wrote ($OUT/issue20.txt, or a results file)")
    ap.add_argument("--plot", metavar="PNG", help="also a bar plot of reads/s per tool and set")
    ap.add_argument("--title", default="same run, every tool -t 16", help="the plot's title")
    args = ap.parse_args(argv)
    with open(args.log) as f:
        runs, mapping = parse(line for line in f if not line.startswith("#"))
    print(table(runs, mapping))
    if args.plot:
        plot(runs, mapping, args.plot, args.title)


if __name__ == "__main__":
    main()
