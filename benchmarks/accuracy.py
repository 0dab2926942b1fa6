#!/usr/bin/env python3
"""MAPQ accuracy against the peers on simulated reads of several genomes, with a known truth.

Per genome (human chr20, yeast, E. coli from ../shared/data, and a repeat-rich one made from chr20's segments
by made_genome) it simulates the sets of ACCURACY_SETS with
mason (error-only and with mason_variator's SNPs and small indels; 100 and 150 bp; single and paired; a 3x
error rate), maps them with peanut-py and the peers on the same reads and threads, and scores the primary
records against mason's truth: correct and wrong reads at every MAPQ cut-off (the dominance table against
bwa and minibwa), the calibration check per MAPQ value, a calibration plot and a ROC-style plot per set.

    benchmarks/accuracy.py -t 2                      # every genome, set and tool
    benchmarks/accuracy.py --genomes ecoli --tools peanut-best,bwa --sets var100se

Simulated reads, indexes and the peers' scores are cached under benchmarks/work (a peer's score is keyed by
its version and the reads), so a second run maps only peanut-py again; --keep-sam keeps peanut-py's SAM
per set (work/accuracy/sam) for comparing two versions record by record. The MAPQ model is tuned on the
FIT_GENOMES and checked on the others: the report keeps them in separate tables.
"""
import argparse
import datetime
import json
import os
import shlex
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from benchmarks import run, scoring, simulate  # noqa: E402

GENOMES = {  # key -> (label, path under --data, or None for a genome made here: made_genome)
    "chr20": ("human GRCh37 chr20", os.path.join("human", "GRCh37_chr20.fa.gz")),
    "yeast": ("yeast S288C", os.path.join("yeast", "S288C_R64-1-1.genome.fa.gz")),
    "ecoli": ("E. coli K-12 MG1655", os.path.join("ecoli", "Ecoli_K12_MG1655.fa.gz")),
    "repeats": ("repeat-rich, made from a chr20 window (30 Mbp)", None),
}
# The made genome: 10 Mbp of real chr20 (MADE_WINDOW, 0-based, as contig "chr20w") and two 10 Mbp chromosomes
# of which half is diverged copies (1-20 % divergence, either strand) of segments of that window and the rest
# random, with N telomeres and centromeres (human_scale.write_repeat_rich_contigs), from a fixed seed: reads
# from the window meet near-copies of themselves elsewhere, as a real genome's segmental duplications.
MADE_WINDOW = (40_000_020, 50_000_020)
MADE_CONTIGS = (("rr1", 10_000_020), ("rr2", 10_000_020))
MADE_SEED = 20
FIT_GENOMES = ("chr20", "yeast")  # the MAPQ model's tuning sets; the others only check it
ACCURACY_SETS = {  # name -> (read length, paired, mismatch scale, with variants)
    "err100se": (100, False, 1.0, False),
    "err150pe": (150, True, 1.0, False),
    "var100se": (100, False, 1.0, True),
    "var100pe": (100, True, 1.0, True),
    "var150se": (150, False, 1.0, True),
    "var150pe": (150, True, 1.0, True),
    "hierr100se": (100, False, 3.0, True),
}
TOOLS = ("peanut-best", "bwa", "minimap2", "minibwa", "strobealign", "minimap2-2.30")
REFERENCE_TOOLS = ("bwa", "minibwa")  # peanut-py's curve is checked against these
THRESHOLDS = (1, 10, 20, 30, 60)
TOLERANCE = 20  # bp: the anchor distance the issue's own numbers use (indels near read ends move anchors)
VARIANT_SEED = 42


def set_seed(genome, name):
    """A seed per (genome, set), fixed, so that every set has its own reads."""
    return 3000 + 100 * list(GENOMES).index(genome) + list(ACCURACY_SETS).index(name)


def made_genome(args, key):
    """The FASTA of the genome ``key`` made here (GENOMES' path None), written once under work/made."""
    from benchmarks.human_scale import chr20_codes, write_repeat_rich_contigs

    path = os.path.join(args.work, "made", f"{key}-seed{MADE_SEED}.fa")
    if not os.path.exists(path):
        run.log(f"making the {key} genome from chr20 (seed {MADE_SEED})")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        window = chr20_codes(os.path.join(args.data, GENOMES["chr20"][1]))[slice(*MADE_WINDOW)]
        with open(path + ".tmp", "wb") as f:
            write_fasta_record(f, "chr20w", window)
            write_repeat_rich_contigs(f, MADE_CONTIGS, window, seed=MADE_SEED)
        os.replace(path + ".tmp", path)
    return path


def write_fasta_record(f, name, codes):
    """One contig of base codes (A0 C1 G2 T3, N4) into the open binary FASTA file ``f``, 60 bases per line."""
    import numpy as np

    text = np.frombuffer(b"ACGTN", dtype=np.uint8)[codes]
    f.write(f">{name}\n".encode())
    for i in range(0, text.size, 60):
        f.write(text[i:i + 60].tobytes() + b"\n")


def prepare_genome(args, key):
    """run.Genome of ``key`` and its mason_variator VCF (cached next to the decompressed FASTA)."""
    source = os.path.join(args.data, GENOMES[key][1]) if GENOMES[key][1] else made_genome(args, key)
    genome = run.Genome(key, source, args.work)
    vcf = os.path.join(genome.dir, f"variants-{VARIANT_SEED}.vcf")
    if not os.path.exists(vcf):
        run.log(f"mason_variator on {key}: SNPs (0.1 %) and small indels (0.01 %, 1-6 bp)")
        simulate.make_variants(genome.fa, vcf + ".tmp.vcf", VARIANT_SEED, log_path=vcf + ".log")
        os.replace(vcf + ".tmp.vcf", vcf)
    return genome, vcf


def prepare_set(args, genome, vcf, name):
    """Reads and truth of one set, simulated once and cached under work/reads by their parameters."""
    length, paired, scale, variants = ACCURACY_SETS[name]
    n_frag = args.reads // 2 if paired else args.reads
    seed = set_seed(genome.name, name)
    params = {"genome": genome.sha, "vcf": variants and run.sha1_file(vcf), "n": n_frag, "len": length,
              "paired": paired, "scale": scale, "seed": seed}
    d = os.path.join(args.work, "reads", f"{genome.name}-{name}-{run.param_hash(params)}")
    if not os.path.exists(os.path.join(d, "done")):
        run.log(f"mason_simulator: {genome.name} {name}")
        shutil.rmtree(d, ignore_errors=True)
        simulate.simulate_reads(genome.fa, d, n_frag, length, paired, seed, vcf=vcf if variants else None,
                                mismatch_scale=scale, threads=1)
        with open(os.path.join(d, "done"), "w") as f:
            json.dump(params, f)
    return {"genome": genome.name, "name": name, "paired": paired, "reads": n_frag * (2 if paired else 1),
            "r1": os.path.join(d, "r1.fq"), "r2": os.path.join(d, "r2.fq") if paired else None,
            "truth": os.path.join(d, "truth.sam"), "key": run.param_hash(params),
            "source": f"mason_simulator, Illumina {length} bp{' pairs' if paired else ''}, mismatch x{scale:g}, "
                      f"{'variants' if variants else 'no variants'}, seed {seed}"}


def score_cache_path(args, s, tool, version):
    return os.path.join(args.work, "accuracy", "scores", f"{s['genome']}-{s['name']}-{s['key']}",
                        f"{tool}-{run.param_hash([version, TOLERANCE, args.threads])[:12]}.json")


def stored_score(score):
    """A score_sam result as kept in the results: its curve left out (scoring.curve_of gives it again) and
    each calibration bin as MAPQ, reads and wrong reads, which is all the checks and plots need."""
    out = {k: v for k, v in score.items() if k != "curve"}
    out["calibration"] = [{"mapq": b["mapq"], "n": b["n"], "wrong": b["wrong"]} for b in score["calibration"]]
    return out


def map_and_score(args, tool, index, s, truth, version):
    """One mapping run of ``tool`` on set ``s`` scored against ``truth``; a peer's result comes from the
    cache when its version has scored these reads before."""
    cached = score_cache_path(args, s, tool.name, version)
    if tool.family != "peanut" and os.path.exists(cached):
        with open(cached) as f:
            out = dict(json.load(f), cached=True)
        if out.get("score"):
            out["score"] = stored_score(out["score"])
        return out
    d = os.path.join(args.work, "accuracy", "sam", f"{s['genome']}-{s['name']}")
    os.makedirs(d, exist_ok=True)
    sam = os.path.join(d, f"{tool.name}.sam")
    if os.path.exists(sam):
        os.unlink(sam)
    cmd, stdout = tool.map_cmd(index["index"], s["r1"], s["r2"], sam, args.threads)
    run.log(f"{s['genome']} {s['name']} {tool.name}")
    m = run.measure(cmd, os.path.join(d, f"{tool.name}.log"), stdout_path=stdout, timeout=args.timeout)
    if m["ok"] and not os.path.exists(sam):
        m.update(ok=False, error="exit status 0 but no SAM written")
    out = {"ok": m["ok"], "wall_s": m.get("wall_s"), "version": version}
    if not m["ok"]:
        out["error"] = m.get("error", "?")[:300]
        run.log(f"  failed: {out['error']}")
        return out
    out["score"] = stored_score(scoring.score_sam(sam, truth, tolerance=TOLERANCE, thresholds=(0,) + THRESHOLDS))
    run.log(f"  {m['wall_s']:.1f} s, correct {out['score']['correct']}, wrong {out['score']['wrong']}")
    if tool.family != "peanut":
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        with open(cached, "w") as f:
            json.dump(out, f)
    if not (args.keep_sam and tool.family == "peanut"):
        os.unlink(sam)
    return out


def checks(runs):
    """Per cut-off, peanut-py's (correct, wrong) against each reference tool's; and every tool's
    calibration check."""
    out = {"dominance": {}, "calibration": {}}
    ours = runs.get("peanut-best", {}).get("score")
    for tool, r in runs.items():
        if r.get("score"):
            out["calibration"][tool] = scoring.calibration_check(r["score"]["calibration"])
    if not ours:
        return out
    mine = scoring.correct_wrong_at(ours, THRESHOLDS)
    for ref in REFERENCE_TOOLS:
        theirs = runs.get(ref, {}).get("score")
        if not theirs:
            continue
        other = scoring.correct_wrong_at(theirs, THRESHOLDS)
        out["dominance"][ref] = {str(t): dict(zip(("correct_ok", "wrong_ok"), scoring.dominates(mine[t], other[t])))
                                 for t in THRESHOLDS}
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--genomes", default=",".join(GENOMES), help="comma-separated subset of %(default)s")
    p.add_argument("--sets", default=",".join(ACCURACY_SETS), help="comma-separated subset of %(default)s")
    p.add_argument("--tools", default=",".join(TOOLS), help="comma-separated subset of %(default)s")
    p.add_argument("-t", "--threads", type=int, default=2, help="threads for every tool (default %(default)s)")
    p.add_argument("--reads", type=int, default=50000, help="reads per set, pairs: half as many pairs")
    p.add_argument("--peanut-args", help="extra arguments for 'peanut map'")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per mapper run")
    p.add_argument("--data", default=run.DEFAULT_DATA, help="shared data folder (default ../shared/data)")
    p.add_argument("--work", default=os.path.join(HERE, "work"), help="cache of references, reads, indexes")
    p.add_argument("--stem", default=os.path.join(HERE, "results", f"{datetime.date.today().isoformat()}-cpu-accuracy"),
                   help="results go to STEM.json and STEM.md (default results/<today>-cpu-accuracy)")
    p.add_argument("--plots", default=os.path.join(ROOT, "docs", "img", "benchmarks"), help="folder of the plots")
    p.add_argument("--machine", default="2-core CPU, PoCL", help="the machine in words, for the report")
    p.add_argument("--keep-sam", action="store_true", help="keep peanut-py's SAM per set under work/accuracy/sam")
    p.add_argument("--replot", metavar="RESULT.json", help="only the tables and plots again from a result JSON")
    args = p.parse_args(argv)
    for option, known in (("genomes", GENOMES), ("sets", ACCURACY_SETS), ("tools", TOOLS)):
        names = getattr(args, option).split(",")
        bad = [n for n in names if n not in known]
        if bad:
            p.error(f"--{option}: unknown {bad}; known: {', '.join(known)}")
        setattr(args, option, names)
    args.work, args.data = os.path.abspath(args.work), os.path.abspath(args.data)
    # what run.make_tools, run.build_index and run.ensure_matplotlib read
    args.max_hits, args.index_timeout, args.gpu, args.no_install_plots = 100, 7200, False, False
    args.peers_dir = None
    return args


def write_outputs(args, results):
    from benchmarks import report

    notes = results.setdefault("notes", [])
    if run.ensure_matplotlib(args, notes):
        from benchmarks import plots

        os.makedirs(args.plots, exist_ok=True)
        prefix = os.path.join(args.plots, os.path.basename(args.stem))
        results["plots"] = [os.path.relpath(p, ROOT) for p in plots.accuracy_plots(results, prefix)]
    with open(args.stem + ".json", "w") as f:
        json.dump(results, f, separators=(",", ":"))  # compact: a bin per MAPQ value, tool and set
    md = report.accuracy_markdown(results)
    with open(args.stem + ".md", "w") as f:
        f.write(md)
    run.log(f"wrote {os.path.relpath(args.stem, ROOT)}.json and .md")
    print(md)


def use_this_checkout():
    """Let the peanut-py runs (``python -m peanut_py``) import this tree's package rather than whichever one the
    environment installed (an editable install of another worktree): the MAPQ model measured is this one."""
    paths = [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != ROOT]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)


def main(argv=None):
    args = parse_args(argv)
    use_this_checkout()
    if args.replot:
        with open(args.replot) as f:
            results = json.load(f)
        write_outputs(args, results)
        return 0
    started = time.perf_counter()
    args.peers_bin = run.resolve_peers_dir(args, needed=any(t in run.PEER_TOOLS for t in args.tools))
    tools = [run.make_tools(args)[t] for t in args.tools]
    for t in tools:
        lacking = [p for p in t.programs if not run.have(p)]
        if lacking:
            sys.exit(f"accuracy: {t.name} needs {', '.join(lacking)}, which is missing")
    for prog in ("mason_simulator", "mason_variator"):
        if not simulate.find_tool(prog):
            sys.exit(f"accuracy: {prog} is missing (Debian package seqan-apps)")
    versions = {t.name: t.version() for t in tools}
    command = shlex.join(["benchmarks/accuracy.py"] + (argv if argv is not None else sys.argv[1:]))
    results = {"meta": {"date": datetime.date.today().isoformat(), "machine": args.machine, "threads": args.threads,
                        "reads_per_set": args.reads, "tolerance": TOLERANCE, "thresholds": list(THRESHOLDS),
                        "fit_genomes": [g for g in FIT_GENOMES if g in args.genomes],
                        "check_genomes": [g for g in args.genomes if g not in FIT_GENOMES],
                        "versions": versions, "peanut_args": args.peanut_args or "",
                        "command": command},
               "genomes": {}, "sets": {}, "runs": {}, "checks": {}, "notes": []}
    for gkey in args.genomes:
        genome, vcf = prepare_genome(args, gkey)
        results["genomes"][gkey] = dict(genome.describe(), label=GENOMES[gkey][0])
        index = {t.name: run.build_index(args, t, genome, versions[t.name]) for t in tools}
        refs = [c for c, _ in genome.contigs]
        for name in args.sets:
            s = prepare_set(args, genome, vcf, name)
            truth = scoring.load_truth(s["truth"], ref_contigs=refs)
            key = f"{gkey}/{name}"
            results["sets"][key] = {"genome": gkey, "set": name, "reads": s["reads"], "truth_reads": len(truth),
                                    "source": s["source"]}
            runs = results["runs"][key] = {}
            for t in tools:
                if not index[t.name].get("ok"):
                    runs[t.name] = {"ok": False, "error": "no index"}
                    continue
                runs[t.name] = map_and_score(args, t, index[t.name], s, truth, versions[t.name])
            results["checks"][key] = checks(runs)
    results["meta"]["elapsed_s"] = round(time.perf_counter() - started, 1)
    write_outputs(args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
