#!/usr/bin/env python3
"""peanut-py's MAPQ curves against the peers' as ROC curves, from a benchmarks/accuracy.py result file.

    python benchmarks/roc_compare.py benchmarks/results/2026-11-26-cpu-accuracy-2.json
    python benchmarks/roc_compare.py RESULTS.json --peers minibwa --ours peanut-best

accuracy.py's dominance table compares two tools at the same MAPQ cut-offs (1, 10, 20, 30, 60). MAPQ scales
differ between tools, so a cut-off of 1 in one tool is not the same trade as in another: minibwa gives MAPQ
1 to 5 to reads with an equally good rival, which bwa and peanut-py give 0. Here each tool's cut-offs are its
operating points (correct and wrong reads kept at MAPQ >= q, for every q it uses): for each point of the
peer's curve with q >= 1, the most correct reads peanut-py keeps at any of its cut-offs with no more wrong
reads. A set passes when that is never fewer (peanut-py's curve lies on or above the peer's); otherwise the
largest shortfall is given with the peer's point where it occurs.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks import scoring  # noqa: E402


def compare(results, ours="peanut-best", peers=("bwa", "minibwa")):
    """Rows (genome/set, peer, shortfall, their point) for every set where ``ours`` and the peer were scored."""
    rows = []
    for key, tools in results["runs"].items():
        mine = tools.get(ours)
        if not mine or not mine.get("ok"):
            continue
        our_curve = scoring.curve_of(mine["score"]["calibration"])
        for peer in peers:
            theirs = tools.get(peer)
            if not theirs or not theirs.get("ok"):
                continue
            short, point = scoring.curve_shortfall(our_curve, scoring.curve_of(theirs["score"]["calibration"]))
            rows.append((key, peer, short, point))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="a result file of benchmarks/accuracy.py (.json)")
    ap.add_argument("--ours", default="peanut-best", help="the tool whose curve is compared (default peanut-best)")
    ap.add_argument("--peers", default="bwa,minibwa", help="comma-separated peers (default bwa,minibwa)")
    a = ap.parse_args(argv)
    with open(a.results) as f:
        results = json.load(f)
    peers = [p for p in a.peers.split(",") if p]
    rows = compare(results, a.ours, peers)
    print(f"{'set':28s} {'peer':12s} result")
    for key, peer, short, point in rows:
        if short == 0:
            verdict = "on or above"
        else:
            verdict = (f"{short} correct reads fewer than its {point['mapped'] - point['wrong']} at "
                       f"<= {point['wrong']} wrong (its MAPQ >= {point['mapq']})")
        print(f"{key:28s} {peer:12s} {verdict}")
    for peer in peers:
        mine = [r for r in rows if r[1] == peer]
        above = sum(1 for r in mine if r[2] == 0)
        largest = max((r[2] for r in mine), default=0)
        print(f"against {peer}: on or above its curve on {above} of {len(mine)} sets; largest shortfall {largest} "
              "reads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
