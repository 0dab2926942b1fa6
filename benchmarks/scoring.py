"""Scoring of SAM output against a known truth (simulated origins or a reference alignment).

Definitions (docs/benchmarks.md repeats them for readers of the results):

* A read is keyed by ``(name, mate)``: the name without a trailing ``/1`` or ``/2`` and mate 1/2 from the
  flags 0x40/0x80 (0 for single-end reads). Contig names are compared without a leading ``chr``, so hg19's
  ``chr20`` equals GRCh37's ``20``.
* Only the **primary** record of a read (neither 0x100 nor 0x800) counts for placement. A read without a
  primary record in the output counts as unmapped (``missing``).
* **Anchor** of an alignment, in 1-based reference coordinates, on the unclipped alignment: for a forward
  read ``POS - leading clip`` (the reference base where the read's first base would lie); for a reverse read
  ``POS + reference length - 1 + trailing clip`` (where the read's first base, sequenced from the right,
  would lie). Soft and hard clips both count as clip. A truth record's anchor is computed the same way;
  a truth given only as a start position (``original_positions.tsv``) is compared by start on both strands.
* A mapped read is **correct** when contig and strand equal the truth's and the anchors differ by at most
  ``tolerance`` bases (default 5).
* Truth reads that are unplaced in the truth (e.g. mason's reads inside a simulated insertion) or placed on
  a contig that is not in the reference are left out of every count (reported as ``truth_unplaced`` and
  ``truth_off_reference``).
* ``wrong_per_10k[t]`` = 10,000 x (mapped reads with MAPQ >= t that are not correct) / (all truth reads).
* MAPQ 255 ("not available" in SAM) counts as MAPQ 0.
* The calibration has one bin per MAPQ value q: reads, wrong, fraction wrong, and the expected error
  10^(-q/10). The curve (minimap2 mapeval style) has one point per MAPQ threshold t (descending): reads
  mapped with MAPQ >= t and the wrong ones among them.
* Gold recall (all-mappers): each gold hit (contig, strand, anchor) counts as found when one of the read's
  primary or secondary (0x100) records, or one entry of its XA tag, has the same contig and strand and an
  anchor within ``tolerance``.
"""
import gzip
import math
import re
from collections import defaultdict
from dataclasses import dataclass

THRESHOLDS = (0, 1, 10, 20, 30, 60)
DEFAULT_TOLERANCE = 5

_CIGAR = re.compile(r"(\d+)([MIDNSHP=X])")
_REF_OPS = frozenset("MDN=X")
_CLIP_OPS = frozenset("SH")


@dataclass(frozen=True)
class Placement:
    contig: str
    reverse: bool
    start: int  # 1-based reference position of the unclipped alignment's leftmost base
    end: int | None  # 1-based rightmost base of the unclipped alignment; None when unknown

    @property
    def anchor(self):
        return self.end if self.reverse and self.end is not None else self.start


def norm_contig(name):
    return name[3:] if name.startswith("chr") else name


def read_key(qname, flag):
    if len(qname) > 2 and qname[-2] == "/" and qname[-1] in "12":
        qname = qname[:-2]
    mate = 1 if flag & 0x40 else 2 if flag & 0x80 else 0
    return qname, mate


def placement(contig, pos, cigar, reverse):
    """Placement of an alignment given by SAM's RNAME, POS (1-based), CIGAR and strand."""
    contig = norm_contig(contig)
    if cigar == "*" or not cigar:
        return Placement(contig, reverse, pos, None)
    ops = [(int(n), op) for n, op in _CIGAR.findall(cigar)]
    lead = 0
    for n, op in ops:
        if op not in _CLIP_OPS:
            break
        lead += n
    trail = 0
    for n, op in reversed(ops):
        if op not in _CLIP_OPS:
            break
        trail += n
    ref_len = sum(n for n, op in ops if op in _REF_OPS)
    return Placement(contig, reverse, pos - lead, pos + ref_len - 1 + trail)


def same_place(test, truth, tolerance=DEFAULT_TOLERANCE):
    if test.contig != truth.contig or test.reverse != truth.reverse:
        return False
    if test.reverse and test.end is not None and truth.end is not None:
        return abs(test.end - truth.end) <= tolerance
    return abs(test.start - truth.start) <= tolerance


def _open_text(path):
    return gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)


def iter_sam(path):
    """Alignment lines of a SAM file (plain or gzip) split into their 11 mandatory fields plus tags.

    Yields (qname, flag, rname, pos, mapq, cigar, tags) with tags the list of optional fields."""
    with _open_text(path) as f:
        for line in f:
            if line.startswith("@"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 11:
                continue
            yield (fields[0], int(fields[1]), fields[2], int(fields[3]), int(fields[4]), fields[5], fields[11:])


class Truth:
    """Known origin of each read: ``placements[(name, mate)] -> Placement``."""

    def __init__(self):
        self.placements = {}
        self.unplaced = set()
        self.off_reference = set()

    def __len__(self):
        return len(self.placements)

    def restrict(self, names):
        """Keep only the reads whose name is in ``names`` (a subset of a larger truth file)."""
        self.placements = {k: v for k, v in self.placements.items() if k[0] in names}
        self.unplaced = {k for k in self.unplaced if k[0] in names}
        self.off_reference = {k for k in self.off_reference if k[0] in names}
        return self

    def add(self, key, place, ref_contigs=None):
        if place is None:
            self.unplaced.add(key)
        elif ref_contigs is not None and place.contig not in ref_contigs:
            self.off_reference.add(key)
        else:
            self.placements[key] = place


def _ref_set(ref_contigs):
    return None if ref_contigs is None else {norm_contig(c) for c in ref_contigs}


def load_truth(path, ref_contigs=None):
    """Truth from a SAM/BAM of true alignments (mason's ``-oa``, an original BAM) or a TSV.

    SAM/BAM: the primary record of every read; an unmapped one is 'unplaced'. The TSV (as in
    index/example/original_positions.tsv.gz) has columns name, mate, contig, 1-based start, strand (+/-)
    and gives a start only. ``ref_contigs``: names of the reference's contigs; reads placed elsewhere are
    left out (``off_reference``)."""
    path = str(path)
    refs = _ref_set(ref_contigs)
    truth = Truth()
    if path.endswith((".tsv", ".tsv.gz", ".txt", ".txt.gz")):
        with _open_text(path) as f:
            for line in f:
                if not line.strip() or line.startswith("#"):
                    continue
                name, mate, contig, pos, strand = line.rstrip("\n").split("\t")[:5]
                truth.add((name, int(mate)), Placement(norm_contig(contig), strand == "-", int(pos), None), refs)
        return truth
    for qname, flag, rname, pos, _mapq, cigar, _tags in _iter_alignments(path):
        if flag & 0x900:
            continue
        key = read_key(qname, flag)
        if flag & 0x4 or rname == "*":
            truth.add(key, None)
        else:
            truth.add(key, placement(rname, pos, cigar, bool(flag & 0x10)), refs)
    return truth


def _iter_alignments(path):
    if str(path).endswith(".bam"):
        import pysam  # only BAM truth needs it; SAM stays dependency-free

        with pysam.AlignmentFile(str(path), "rb", check_sq=False) as bam:
            for r in bam:
                yield (r.query_name, r.flag, r.reference_name or "*", r.reference_start + 1,
                       r.mapping_quality, r.cigarstring or "*", [])
    else:
        yield from iter_sam(path)


def _mapq(q):
    return 0 if q == 255 else q


def score_sam(sam_path, truth, tolerance=DEFAULT_TOLERANCE, thresholds=THRESHOLDS, first_part=False):
    """Placement accuracy of the primary records in ``sam_path`` against ``truth`` (see module docstring).

    ``first_part``: the truth holds the first reads of the mapped input and the SAM keeps the input's order, so
    reading stops at the first read outside the truth once every truth read was seen (the rest is not read and
    not counted as ``extra``)."""
    seen = {}
    duplicate_primary = extra = 0
    n_known = len(truth.placements) + len(truth.unplaced) + len(truth.off_reference)
    n_seen_known = 0
    for qname, flag, rname, pos, mapq, cigar, _tags in iter_sam(sam_path):
        if flag & 0x900:
            continue
        key = read_key(qname, flag)
        if key in seen:
            duplicate_primary += 1
            continue
        want = truth.placements.get(key)
        if want is None:
            if key not in truth.unplaced and key not in truth.off_reference:
                if first_part and n_seen_known == n_known:
                    break
                extra += 1
            else:
                n_seen_known += 1
            seen[key] = None
            continue
        n_seen_known += 1
        if flag & 0x4 or rname == "*":
            seen[key] = None
        else:
            ok = same_place(placement(rname, pos, cigar, bool(flag & 0x10)), want, tolerance)
            seen[key] = (_mapq(mapq), ok)

    n = len(truth.placements)
    per_q = defaultdict(lambda: [0, 0])  # mapq -> [reads, wrong]
    missing = 0
    for key in truth.placements:
        if key not in seen:
            missing += 1
            continue
        hit = seen[key]
        if hit is None:
            continue
        q, ok = hit
        per_q[q][0] += 1
        per_q[q][1] += 0 if ok else 1

    mapped = sum(v[0] for v in per_q.values())
    wrong = sum(v[1] for v in per_q.values())
    calibration = [
        {"mapq": q, "n": c, "wrong": w, "frac_wrong": w / c, "expected": 10 ** (-q / 10)}
        for q, (c, w) in sorted(per_q.items())
    ]
    curve = []
    cum_n = cum_w = 0
    for q in sorted(per_q, reverse=True):
        cum_n += per_q[q][0]
        cum_w += per_q[q][1]
        curve.append({"mapq": q, "mapped": cum_n, "wrong": cum_w,
                      "frac_mapped": cum_n / n if n else 0.0, "frac_wrong": cum_w / cum_n})
    mapped_at = {str(t): sum(c for q, (c, w) in per_q.items() if q >= t) for t in thresholds}
    wrong_at = {str(t): sum(w for q, (c, w) in per_q.items() if q >= t) for t in thresholds}
    return {
        "n_truth": n,
        "truth_unplaced": len(truth.unplaced),
        "truth_off_reference": len(truth.off_reference),
        "tolerance": tolerance,
        "mapped": mapped,
        "correct": mapped - wrong,
        "wrong": wrong,
        "missing": missing,
        "extra": extra,
        "duplicate_primary": duplicate_primary,
        "frac_mapped": mapped / n if n else 0.0,
        "frac_correct": (mapped - wrong) / n if n else 0.0,
        "mapped_at": mapped_at,
        "wrong_at": wrong_at,
        "wrong_per_10k": {t: 1e4 * w / n if n else 0.0 for t, w in wrong_at.items()},
        "calibration": calibration,
        "curve": curve,
    }


def _xa_placements(tags):
    for tag in tags:
        if tag.startswith("XA:Z:"):
            for item in tag[5:].split(";"):
                if not item:
                    continue
                contig, spos, cigar = item.split(",")[:3]
                yield placement(contig, abs(int(spos)), cigar, spos.startswith("-"))


def reported_hits(sam_path, keys=None):
    """Every placement a SAM reports per read: primary and secondary (0x100) records and XA entries.
    Supplementary records (0x800) are not hits of their own. ``keys``: only these reads."""
    hits = defaultdict(list)
    for qname, flag, rname, pos, _mapq, cigar, tags in iter_sam(sam_path):
        if flag & 0x800:
            continue
        key = read_key(qname, flag)
        if keys is not None and key not in keys:
            continue
        if not (flag & 0x4) and rname != "*":
            hits[key].append(placement(rname, pos, cigar, bool(flag & 0x10)))
        hits[key].extend(_xa_placements(tags))
    return hits


def load_gold(path):
    """All hits of a gold-standard all-mapper (razers3 SAM): ``{(name, mate): [Placement, ...]}``."""
    gold = defaultdict(list)
    for qname, flag, rname, pos, _mapq, cigar, _tags in iter_sam(path):
        if flag & 0x4 or rname == "*":
            continue
        gold[read_key(qname, flag)].append(placement(rname, pos, cigar, bool(flag & 0x10)))
    return dict(gold)


def gold_recall(sam_path, gold, tolerance=DEFAULT_TOLERANCE, max_hits=None):
    """Share of the gold hits that ``sam_path`` reports (see module docstring).

    ``max_hits``: the gold mapper's cap on hits per read; reads that reach it are counted as
    ``reads_truncated`` because their gold list may be incomplete, and ``recall_uncapped`` leaves them out
    (they would otherwise dominate the hit count)."""
    hits = reported_hits(sam_path, keys=set(gold))
    total = found = complete = truncated = total_uncapped = found_uncapped = 0
    for key, want in gold.items():
        have = hits.get(key, [])
        n_found = sum(1 for g in want if any(same_place(h, g, tolerance) for h in have))
        total += len(want)
        found += n_found
        complete += n_found == len(want)
        if max_hits is not None and len(want) >= max_hits:
            truncated += 1
        else:
            total_uncapped += len(want)
            found_uncapped += n_found
    return {
        "reads": len(gold),
        "gold_hits": total,
        "found": found,
        "recall": found / total if total else 0.0,
        "reads_complete": complete,
        "frac_reads_complete": complete / len(gold) if gold else 0.0,
        "reads_truncated": truncated,
        "recall_uncapped": found_uncapped / total_uncapped if total_uncapped else 0.0,
        "tolerance": tolerance,
    }


def mapping_stats(sam_path, thresholds=THRESHOLDS, max_insert=1000):
    """Mapping rate and pairing of the primary records, for read sets without a truth.

    A pair is 'concordant' when both mates map to the same contig on opposite strands, facing each other
    (the forward mate's start is not right of the reverse mate's end) within ``max_insert`` bases; this is
    computed the same way for every tool, unlike the tools' own proper-pair flag (0x2), also reported."""
    reads = mapped = 0
    mapped_at = {str(t): 0 for t in thresholds}
    mates = {}
    pairs = both = proper = concordant = 0
    for qname, flag, rname, pos, mapq, cigar, _tags in iter_sam(sam_path):
        if flag & 0x900:
            continue
        reads += 1
        is_mapped = not (flag & 0x4) and rname != "*"
        if is_mapped:
            mapped += 1
            for t in thresholds:
                if _mapq(mapq) >= t:
                    mapped_at[str(t)] += 1
        if not flag & 0x1:
            continue
        name, _ = read_key(qname, flag)
        rec = (is_mapped, flag, rname, pos, cigar)
        other = mates.pop(name, None)
        if other is None:
            mates[name] = rec
            continue
        pairs += 1
        if not (rec[0] and other[0]):
            continue
        both += 1
        proper += bool(rec[1] & 0x2 and other[1] & 0x2)
        a = placement(rec[2], rec[3], rec[4], bool(rec[1] & 0x10))
        b = placement(other[2], other[3], other[4], bool(other[1] & 0x10))
        if a.contig == b.contig and a.reverse != b.reverse:
            fwd, rev = (a, b) if not a.reverse else (b, a)
            if rev.end is not None and fwd.start <= rev.end and rev.end - fwd.start + 1 <= max_insert:
                concordant += 1
    return {
        "reads": reads,
        "mapped": mapped,
        "frac_mapped": mapped / reads if reads else 0.0,
        "mapped_at": mapped_at,
        "pairs": pairs,
        "both_mapped": both,
        "proper_flag": proper,
        "concordant": concordant,
        "frac_proper_flag": proper / pairs if pairs else 0.0,
        "frac_concordant": concordant / pairs if pairs else 0.0,
    }


# ---------------------------------------------------------------------------------------------- MAPQ checks

def correct_wrong_at(score, thresholds=THRESHOLDS):
    """{threshold: (correct, wrong)} of mapped reads with MAPQ >= threshold, from a score_sam result."""
    return {int(t): (score["mapped_at"][str(t)] - score["wrong_at"][str(t)], score["wrong_at"][str(t)])
            for t in thresholds}


def dominates(ours, theirs):
    """At one cut-off, (correct, wrong) of ours against theirs: (correct not fewer, wrong not more)."""
    return ours[0] >= theirs[0], ours[1] <= theirs[1]


def _poisson_cdf(k, lam):
    """P(X <= k) for X ~ Poisson(lam), summed in log space (k up to the reads of a bin)."""
    if k < 0:
        return 0.0
    if lam <= 0:
        return 1.0
    total, log_term = 0.0, -lam
    for i in range(int(k) + 1):
        if i:
            log_term += math.log(lam) - math.log(i)
        total += math.exp(log_term)
    return min(total, 1.0)


def calibration_bin_ok(n, wrong, mapq, factor=3.0, alpha=0.025):
    """Whether a MAPQ bin of ``n`` reads with ``wrong`` misplaced ones is within ``factor`` of the error rate
    10^(-mapq/10) that its MAPQ claims, allowing for counting noise: the rule fails only when the count is
    improbable (one-sided p < alpha) under every rate between expected / factor and expected * factor.
    Without that allowance a bin of 50,000 reads at MAPQ 60 (0.05 wrong reads expected) could never pass,
    as no count is within a factor 3 of 0.05."""
    expected = 10 ** (-mapq / 10)
    hi, lo = min(1.0, expected * factor), expected / factor
    too_many = 1.0 - _poisson_cdf(wrong - 1, n * hi) < alpha  # P(X >= wrong) at the highest allowed rate
    too_few = _poisson_cdf(wrong, n * lo) < alpha  # P(X <= wrong) at the lowest allowed rate
    return not (too_many or too_few)


def calibration_check(calibration, min_reads=1000, factor=3.0):
    """The bins of a score_sam calibration with at least ``min_reads`` reads, each with its verdict
    (calibration_bin_ok) and the ratio observed / expected error rate."""
    out = []
    for b in calibration:
        if b["n"] < min_reads:
            continue
        expected = 10 ** (-b["mapq"] / 10)
        out.append({"mapq": b["mapq"], "n": b["n"], "wrong": b["wrong"], "expected": expected,
                    "ratio": b["wrong"] / b["n"] / expected,
                    "ok": calibration_bin_ok(b["n"], b["wrong"], b["mapq"], factor)})
    return out


def curve_shortfall(ours, theirs, min_mapq=1):
    """How far the curve ``ours`` (curve_of) falls short of ``theirs`` as a ROC: for each of their cut-offs
    of MAPQ ``min_mapq`` or more, the correct reads they keep against the most that ours keeps at any cut-off
    with no more wrong reads (none kept counts as a cut-off: 0 and 0).  Returns (shortfall, their point): the
    largest such difference (0 where ours is on or above theirs throughout) and their curve point
    (mapq, mapped, wrong) where it occurs, or None."""
    points = sorted([(0, 0)] + [(p["wrong"], p["mapped"] - p["wrong"]) for p in ours])
    best, worst = [], (0, None)
    top = 0
    for wrong, correct in points:  # the most correct reads at this many wrong ones or fewer
        top = max(top, correct)
        best.append((wrong, top))
    for p in theirs:
        if p["mapq"] < min_mapq:
            continue
        kept = 0
        for wrong, top in best:
            if wrong > p["wrong"]:
                break
            kept = top
        short = (p["mapped"] - p["wrong"]) - kept
        if short > worst[0]:
            worst = (short, p)
    return worst


def curve_of(calibration):
    """score_sam's curve from its calibration bins (which need only mapq, n and wrong): per MAPQ threshold,
    descending, the reads mapped at or above it and the wrong ones among them."""
    curve, n, w = [], 0, 0
    for b in sorted(calibration, key=lambda b: -b["mapq"]):
        n, w = n + b["n"], w + b["wrong"]
        curve.append({"mapq": b["mapq"], "mapped": n, "wrong": w})
    return curve
