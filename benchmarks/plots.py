"""PNG plots of a benchmark result (the dict that run.py writes as JSON); matplotlib with the Agg backend."""
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from benchmarks import scoring  # noqa: E402

COLORS = {"peanut-best": "#d62728", "peanut-all": "#ff9896", "bwa": "#1f77b4", "minimap2": "#2ca02c",
          "bowtie2": "#9467bd", "minibwa": "#17becf", "strobealign": "#ff7f0e", "minimap2-2.30": "#98df8a",
          "bwa-mem2": "#aec7e8"}
LINES = {"peanut-all": "--", "minimap2-2.30": "--", "bwa-mem2": "--"}  # keep near-equal curves visible
MARKERS = {"peanut-all": "s", "minimap2-2.30": "s", "bwa-mem2": "s"}
# MAPQ bins of the calibration plot: single MAPQ values are too thin to estimate an error rate.
CAL_BINS = ((0, 0), (1, 4), (5, 9), (10, 19), (20, 29), (30, 39), (40, 49), (50, 59), (60, 255))


def _tools(results):
    seen = []
    for runs in results["runs"].values():
        for t in runs:
            if t not in seen:
                seen.append(t)
    return seen


def _subtitle(results):
    m = results["meta"]
    cpu = m["machine"].get("cpu", "?")
    gpu = m["machine"].get("gpus")
    where = gpu[0].split(" (UUID")[0] if gpu else cpu
    return f"{m['date'][:10]}, {m['machine_label']}: {where}, {m['threads']} threads, {m['mode']} mode"


def throughput(results, path):
    sets = list(results["runs"])
    tools = _tools(results)
    values = [r["reads_per_s"] for runs in results["runs"].values() for r in runs.values() if r.get("ok")]
    # log axis from the decade below the slowest run, so that bar heights compare on the same footing
    bottom = 10 ** math.floor(math.log10(min(values))) if values else 1.0
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(sets) + 2), 4.4))
    width = 0.8 / max(1, len(tools))
    for i, t in enumerate(tools):
        for j, s in enumerate(sets):
            run = results["runs"][s].get(t)
            x = j + (i - (len(tools) - 1) / 2) * width
            if run and run.get("ok"):
                v = run["reads_per_s"]
                label = t + (" (own mapping time)" if run.get("speed_from") else "")
                ax.bar(x, v - bottom, width, bottom=bottom, color=COLORS.get(t, "grey"),
                       label=label if j == 0 else None)
                ax.text(x, v * 1.08, f"{v:,.0f}", ha="center", va="bottom", rotation=90, fontsize=6)
            elif run:  # failed: a mark on the axis so it is not mistaken for a tool that was not run
                ax.plot(x, bottom * 1.15, "x", color=COLORS.get(t, "grey"), ms=7, mew=2,
                        label=t + " (failed)" if j == 0 else None)
    ax.set_yscale("log")
    top = max(values) if values else 10.0
    ax.set_ylim(bottom, top * 6)
    ax.set_xticks(range(len(sets)), sets, rotation=20)
    ax.set_ylabel("reads per second (wall clock, log)")
    ax.set_title("Throughput (x = failed run)\n" + _subtitle(results), fontsize=10)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=min(3, len(tools)), loc="upper left")
    _save(fig, path, 110)


def mapq_curves(results, path):
    """minimap2 mapeval style: for every MAPQ threshold, the fraction of all reads mapped at or above it
    (x) against the fraction wrong among them (y, log)."""
    sets = [s for s, runs in results["runs"].items() if any("score" in r for r in runs.values())]
    if not sets:
        return False
    cols = min(3, len(sets))
    rows = math.ceil(len(sets) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    for ax, s in zip(axes.flat, sets):
        n = results["sets"][s].get("truth_reads") or 1
        floor = 0.3 / n
        for t, run in results["runs"][s].items():
            curve = run.get("score", {}).get("curve")
            if not curve:
                continue
            x = [p["frac_mapped"] for p in curve]
            y = [max(p["frac_wrong"], floor) for p in curve]
            ax.plot(x, y, ls=LINES.get(t, "-"), marker=MARKERS.get(t, "o"), ms=2.5, color=COLORS.get(t, "grey"), label=t)
        ax.axhline(floor, color="k", lw=0.6, ls=":")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.set_title(s, fontsize=10)
        ax.set_xlabel("fraction of reads mapped with MAPQ >= t")
        ax.set_ylabel("fraction wrong among them")
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(sets):]:
        ax.axis("off")
    fig.suptitle("Accuracy by MAPQ threshold (dotted line = no wrong read)\n" + _subtitle(results), fontsize=10)
    _save(fig, path, 110)
    return True


def calibration_points(results, tool, sets):
    """Pooled over ``sets``: (bin label, reads, wrong, expected Phred, observed Phred or None)."""
    pooled = {b: [0, 0, 0.0] for b in CAL_BINS}  # reads, wrong, sum of expected error
    for s in sets:
        run = results["runs"][s].get(tool, {})
        for b in run.get("score", {}).get("calibration", []):
            for lo, hi in CAL_BINS:
                if lo <= b["mapq"] <= hi:
                    pooled[(lo, hi)][0] += b["n"]
                    pooled[(lo, hi)][1] += b["wrong"]
                    pooled[(lo, hi)][2] += b["n"] * 10 ** (-b["mapq"] / 10)
    points = []
    for (lo, hi), (n, w, e) in pooled.items():
        if n:
            observed = -10 * math.log10(w / n) if w else None
            points.append((f"{lo}-{hi}" if hi > lo else str(lo), n, w, -10 * math.log10(e / n), observed))
    return points


def calibration(results, path):
    """Reported against observed MAPQ, pooled over the simulated sets; a bin without a wrong read is drawn
    as an open triangle at the bound -10 log10(1/reads) (its observed MAPQ is at least that)."""
    sets = [s for s in results["runs"] if results["sets"][s].get("truth_kind") == "mason"]
    tools = [t for t in _tools(results) if any("score" in results["runs"][s].get(t, {}) for s in sets)]
    if not tools:
        return False
    fig, ax = plt.subplots(figsize=(6, 5.2))
    ax.plot([0, 65], [0, 65], color="k", lw=0.8, ls="--", label="perfect calibration")
    for t in tools:
        pts = calibration_points(results, t, sets)
        c = COLORS.get(t, "grey")
        xs = [p[3] for p in pts if p[4] is not None]
        ys = [p[4] for p in pts if p[4] is not None]
        ax.plot(xs, ys, MARKERS.get(t, "o"), color=c, label=t, ms=5)
        bx = [p[3] for p in pts if p[4] is None]
        by = [10 * math.log10(p[1]) for p in pts if p[4] is None]
        ax.plot(bx, by, "^", color=c, mfc="none", ms=6)
    ax.set_xlim(-2, 66)
    ax.set_ylim(-2, 66)
    ax.set_xlabel("reported MAPQ (bin: -10 log10 of the mean 10^(-MAPQ/10))")
    ax.set_ylabel("observed: -10 log10(fraction wrong)")
    ax.set_title("MAPQ calibration, simulated sets pooled (open triangle: no wrong read, lower bound)\n"
                 + _subtitle(results), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    _save(fig, path, 110)
    return True


def make_plots(results, stem):
    """Writes ``stem``-throughput.png, -mapq.png, -calibration.png; returns the paths written."""
    written = []
    throughput(results, stem + "-throughput.png")
    written.append(stem + "-throughput.png")
    if mapq_curves(results, stem + "-mapq.png"):
        written.append(stem + "-mapq.png")
    if calibration(results, stem + "-calibration.png"):
        written.append(stem + "-calibration.png")
    return written


# ---------------------------------------------------------------------------------------------- accuracy.py

def _save(fig, path, dpi):
    """Lay out, write and close a figure."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def _set_grid(n):
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, axes


def _accuracy_title(results, genome, what):
    m = results["meta"]
    info = results["genomes"][genome]
    role = "tuning genome" if genome in m["fit_genomes"] else "kept aside for checking"
    return f"{what}: {info['label']} ({role}), {m['reads_per_set']:,} reads per set\n{m['date']}, {m['machine']}"


def roc_by_set(results, genome, path):
    """Per set of ``genome``: correct reads (y) against wrong reads (x, symlog) at MAPQ >= t as the cut-off t
    falls from 60 to 0, one line per tool; up and to the left is better."""
    keys = [k for k, s in results["sets"].items() if s["genome"] == genome]
    fig, axes = _set_grid(len(keys))
    for ax, k in zip(axes.flat, keys):
        for tool, run in results["runs"][k].items():
            if not run.get("score"):
                continue
            curve = scoring.curve_of(run["score"]["calibration"])
            x = [p["wrong"] for p in curve]
            y = [p["mapped"] - p["wrong"] for p in curve]
            ax.plot(x, y, ls=LINES.get(tool, "-"), marker=MARKERS.get(tool, "o"), ms=2.5,
                    color=COLORS.get(tool, "grey"), label=tool)
        # the top of the curves, where peanut-py, bwa and minibwa differ: from their MAPQ-60 points down
        tops = [scoring.curve_of(r["score"]["calibration"])[0] for t, r in results["runs"][k].items()
                if t in ("peanut-best", "bwa", "minibwa") and r.get("score")]
        if tops:
            low = min(p["mapped"] - p["wrong"] for p in tops)
            ax.set_ylim(bottom=low - 0.002 * results["sets"][k]["reads"])
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=0)
        ax.set_title(results["sets"][k]["set"], fontsize=10)
        ax.set_xlabel("wrong reads with MAPQ >= t")
        ax.set_ylabel("correct reads with MAPQ >= t")
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(_accuracy_title(results, genome, "ROC as the MAPQ cut-off falls (y from the lowest MAPQ-60 point "
                                 "of peanut-py, bwa, minibwa)"), fontsize=10)
    _save(fig, path, 100)


def calibration_by_set(results, genome, path):
    """Per set of ``genome``: observed against reported MAPQ in the CAL_BINS, one series per tool; a bin
    without a wrong read is an open triangle at its lower bound; the band is the factor-3 rule."""
    keys = [k for k, s in results["sets"].items() if s["genome"] == genome]
    fig, axes = _set_grid(len(keys))
    band = [0, 65]
    for ax, k in zip(axes.flat, keys):
        ax.plot(band, band, color="k", lw=0.8, ls="--")
        ax.fill_between(band, [b - 10 * math.log10(3) for b in band], [b + 10 * math.log10(3) for b in band],
                        color="k", alpha=0.08, lw=0)
        for tool in results["runs"][k]:
            pts = calibration_points(results, tool, [k])
            c, mk = COLORS.get(tool, "grey"), MARKERS.get(tool, "o")
            ax.plot([p[3] for p in pts if p[4] is not None], [p[4] for p in pts if p[4] is not None], mk,
                    color=c, ms=4, label=tool)
            ax.plot([p[3] for p in pts if p[4] is None], [10 * math.log10(p[1]) for p in pts if p[4] is None],
                    "^", color=c, mfc="none", ms=5)
        ax.set_xlim(-2, 66)
        ax.set_ylim(-2, 66)
        ax.set_title(results["sets"][k]["set"], fontsize=10)
        ax.set_xlabel("reported MAPQ (bin)")
        ax.set_ylabel("observed -10 log10(wrong)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(_accuracy_title(results, genome, "MAPQ calibration (grey: within 3x; open triangle: no wrong "
                                 "read, lower bound)"), fontsize=10)
    _save(fig, path, 100)


def accuracy_plots(results, prefix):
    """A ROC and a calibration PNG per genome (a panel per set): ``prefix``-GENOME-roc.png and
    -calibration.png; returns the paths written."""
    written = []
    for genome in results["genomes"]:
        for kind, draw in (("roc", roc_by_set), ("calibration", calibration_by_set)):
            path = f"{prefix}-{genome}-{kind}.png"
            draw(results, genome, path)
            written.append(path)
    return written
