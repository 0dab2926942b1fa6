#!/usr/bin/env python3
"""The same-run table of benchmarks/gpu_issue20.sh from its log:

    python3 benchmarks/same_run_table.py issue20.txt > issue20.md

Per set (single-end ``se``, pairs ``pe``) and tool: the wall clock of the whole process, the reads it mapped
and its rate; for strobealign also its own mapping time, which is what counts for it (it builds its index in
memory on every run). The last column is peanut-py's rate over the tool's; the line under each set names the
fastest peer and peanut-py's ratio to it for each of its runs.
"""
import re
import sys

RUN = re.compile(r"^(se|pe)_(\S+)\s+rc=(\d+) wall=([\d.]+) s.* reads=(\d+)")
MAPPING = re.compile(r"^(se|pe)_strobealign Total time mapping: ([\d.]+) s")
SETS = {"se": "10 M single-end 100 bp", "pe": "5 M pairs 2x150"}


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


def table(runs, mapping):
    out = []
    for s, rows in runs.items():
        out += [f"**{SETS.get(s, s)}**", "", "| tool | reads | wall | reads/s | peanut-py's rate over it |",
                "|---|---|---|---|---|"]
        rate = {}
        for tool, wall, reads, rc in rows:
            if rc:
                continue
            seconds = mapping[s] if tool == "strobealign" and s in mapping else wall
            rate.setdefault(tool.removesuffix("_b"), []).append(reads / seconds)
        ours = rate.get("peanut", [])
        for tool, wall, reads, rc in rows:
            if rc:
                out.append(f"| {tool} | {reads:,} | exit status {rc} after {wall:.2f} s | | |")
                continue
            seconds = mapping[s] if tool == "strobealign" and s in mapping else wall
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


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit(__doc__)
    with open(argv[0]) as f:
        print(table(*parse(f)))


if __name__ == "__main__":
    main()
