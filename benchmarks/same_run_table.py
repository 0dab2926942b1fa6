#!/usr/bin/env python3
"""The same-run table of benchmarks/gpu_issue20.sh from its log:

    python3 benchmarks/same_run_table.py issue20.txt > issue20.md
    python3 benchmarks/same_run_table.py issue20.txt --plot rates.png   # also a bar plot of the reads/s

Per set (single-end ``se``, pairs ``pe``) and tool: the wall clock of the whole process, the reads it mapped
and its rate; for strobealign also its own mapping time, which is what counts for it (it builds its index in
memory on every run). The last column is peanut-py's rate over the tool's; the line under each set names the
fastest peer and peanut-py's ratio to it for each of its runs. Where the log has the tools' scores (the lines of
``measure.py --score`` on the first part of the set), three more columns give each tool's accuracy on the same
reads: placed correctly, correct with MAPQ >= 20, and wrong with MAPQ >= 20 per 10,000 reads.
"""
import argparse
import os
import re
import sys

RUN = re.compile(r"^(se|pe)_(\S+)\s+rc=(\d+) wall=([\d.]+) s.* reads=(\d+)")
MAPPING = re.compile(r"^(se|pe)_strobealign Total time mapping: ([\d.]+) s")
SCORE = re.compile(r"^\s*(?:\S*/)?(se|pe)_(\S+)\.out: ([\d,]+) of ([\d,]+) correct \([\d.]+ %\), wrong at MAPQ >= 20: (\d+), "
                   r"missing (\d+), correct at MAPQ >= 20: ([\d,]+)")
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


def parse_scores(lines):
    """Per set and tool, the score of its SAM: {set: {tool: (correct, reads, wrong at 20, correct at 20)}}."""
    scores = {}
    for line in lines:
        m = SCORE.match(line)
        if m:
            s, tool, correct, n, wrong20, _missing, correct20 = m.groups()
            scores.setdefault(s, {})[tool] = tuple(int(x.replace(",", "")) for x in (correct, n, wrong20, correct20))
    return scores


def accuracy_cells(score):
    """The three accuracy cells of a tool's row (empty ones without a score)."""
    if score is None:
        return " | | |"
    correct, n, wrong20, correct20 = score
    return f" {100 * correct / n:.3f} % | {100 * correct20 / n:.3f} % | {1e4 * wrong20 / n:.2f} |"


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


def table(runs, mapping, scores=None):
    out = []
    for s, rows in runs.items():
        scored = (scores or {}).get(s, {})
        head, rule = "| tool | reads | wall | reads/s | peanut-py's rate over it |", "|---|---|---|---|---|"
        if scored:
            n = next(iter(scored.values()))[1]
            head += (f" correct ({n:,} reads) | correct, MAPQ >= 20 | wrong at MAPQ >= 20 per 10,000 |")
            rule += "---|---|---|"
        out += [f"**{SETS.get(s, s)}**", "", head, rule]
        rate = {}                                   # peanut-py's two runs under one name
        for tool, r in rates(runs, mapping).get(s, []):
            rate.setdefault(tool.removesuffix("_b"), []).append(r)
        ours = rate.get("peanut", [])
        for tool, wall, reads, rc in rows:
            if rc:
                out.append(f"| {tool} | {reads:,} | exit status {rc} after {wall:.2f} s | | |"
                           + (accuracy_cells(None) if scored else ""))
                continue
            seconds = counted_seconds(s, tool, wall, mapping)
            shown = f"{wall:.2f} s" + (f" (mapping {seconds:.2f} s)" if seconds != wall else "")
            ratio = "" if tool.startswith("peanut") or not ours else \
                "-".join(f"{x:.2f}x" for x in sorted({round(r / (reads / seconds), 2) for r in ours}))
            out.append(f"| {tool} | {reads:,} | {shown} | {reads / seconds:,.0f} | {ratio} |"
                       + (accuracy_cells(scored.get(tool)) if scored else ""))
        peers = {t: max(r) for t, r in rate.items() if t != "peanut"}
        if peers and ours:
            best = max(peers, key=peers.get)
            out += ["", f"Fastest peer: {best}; peanut-py's runs at "
                    + ", ".join(f"{r / peers[best]:.2f}x" for r in ours) + " its rate."]
        out.append("")
    return "\n".join(out)


def plot(runs, mapping, path, title, scores=None):
    """Horizontal bars of reads/s per tool, one panel per set (matplotlib from benchmarks/work/pydeps, where
    benchmarks/run.py installs it, or the environment); each of peanut-py's runs is a bar of its own. With
    ``scores`` (parse_scores), a second row of panels: each tool's correct reads with MAPQ >= 20 and its wrong
    reads with MAPQ >= 20 per 10,000, on the scored part of the set."""
    pydeps = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work", "pydeps")
    if os.path.isdir(pydeps) and pydeps not in sys.path:
        sys.path.append(pydeps)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_set = rates(runs, mapping)
    scores = scores or {}
    rows = 2 if any(scores.get(s) for s in per_set) else 1
    fig, axes = plt.subplots(rows, len(per_set), figsize=(5.5 * len(per_set), 3.2 * rows), squeeze=False)
    for col, (s, bars) in enumerate(per_set.items()):
        ax = axes[0][col]
        names = [t for t, _ in bars]
        values = [r / 1e6 for _, r in bars]
        ax.barh(range(len(bars)), values, color=bar_colors(names))
        ax.set_yticks(range(len(bars)), [PEANUT_RUNS.get(t, t) for t in names])
        ax.invert_yaxis()
        for i, v in enumerate(values):
            ax.text(v, i, f" {v:.2f}", va="center", fontsize=8)
        ax.set_xlim(0, max(values) * 1.18)
        ax.set_xlabel("million reads/s (strobealign: its mapping time)")
        ax.set_title(SETS.get(s, s), fontsize=10)
        if rows == 2:
            accuracy_panel(axes[1][col], scores.get(s, {}), [t for t in names if t != "peanut_b"])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def bar_colors(tools):
    """peanut-py's bars red, the peers' grey."""
    return ["#d62728" if t.startswith("peanut") else "#7f7f7f" for t in tools]


def accuracy_panel(ax, scored, tools):
    """Per tool, correct reads with MAPQ >= 20 (%, bars) and wrong ones per 10,000 (the bars' labels)."""
    tools = [t for t in tools if t in scored]
    if not tools:
        ax.set_axis_off()
        return
    correct = [100 * scored[t][3] / scored[t][1] for t in tools]
    wrong = [1e4 * scored[t][2] / scored[t][1] for t in tools]
    ax.barh(range(len(tools)), correct, color=bar_colors(tools))
    ax.set_yticks(range(len(tools)), [PEANUT_RUNS.get(t, t).removesuffix(", run 1") for t in tools])
    ax.invert_yaxis()
    low = min(correct)
    ax.set_xlim(max(0.0, low - 2 * (100 - low)), 100)
    for i, (c, w) in enumerate(zip(correct, wrong)):
        ax.text(c, i, f" {c:.2f} %, {w:.2f} wrong", va="center", fontsize=7, ha="right", color="white")
    n = scored[tools[0]][1]
    ax.set_xlabel(f"% correct with MAPQ >= 20 (first {n:,} reads)")
    ax.set_title("accuracy; labels: wrong with MAPQ >= 20 per 10,000 reads", fontsize=9)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", help="the lines gpu_issue20.sh wrote ($OUT/issue20.txt, or a results file)")
    ap.add_argument("--plot", metavar="PNG", help="also a bar plot of reads/s per tool and set")
    ap.add_argument("--title", default="same run, every tool -t 16", help="the plot's title")
    args = ap.parse_args(argv)
    with open(args.log) as f:
        lines = [line for line in f if not line.startswith("#")]
    runs, mapping = parse(lines)
    scores = parse_scores(lines)
    print(table(runs, mapping, scores))
    if args.plot:
        plot(runs, mapping, args.plot, args.title, scores)


if __name__ == "__main__":
    main()
