"""Reads with exactly E planted edits, and how many of them a SAM file finds at their origin.

The check of mode all's sensitivity guarantee (docs/core.md, "What mode all guarantees"): reads of a fixed
length taken from random places of a genome (uniform over the ACGT windows of all contigs, both strands),
each with exactly E edits (substitutions, insertions and deletions at distinct random positions, kinds drawn
uniformly), seeded so that a set is reproducible.

    python benchmarks/planted.py simulate GENOME.fa[.gz] OUT_PREFIX [-n 5000] [--length 100] [--edits 4] [--seed 1]
                                         [--near-ends D]
        -> OUT_PREFIX.fq and OUT_PREFIX.truth.tsv (read, contig, start, end, strand, edits; 0-based, end exclusive)
    python benchmarks/planted.py score OUT_PREFIX.truth.tsv MAPPED.sam [--misses misses.tsv]
                                      [--index IDX.h5 --genome GENOME.fa[.gz]]
        -> found / total, on stdout as one JSON line; with the index and its genome also how many missed
           reads lie inside the guarantee (an edit-free, unmasked q-gram of the read hits the origin)

A read is found when some record of it (primary, secondary, supplementary or an XA alternative) lies on the
origin's contig and strand and its reference interval overlaps the origin's: an indel near a read end moves
the aligned start, so an exact POS is not the test.  Map with ``--mode all --secondary --max-hits 10000`` so
that no cap on the reported hits hides the origin.
"""
import argparse
import gzip
import json
import os
import random
import re
import sys

COMPLEMENT = str.maketrans("ACGT", "TGCA")
_ACGT = set("ACGT")


def read_genome(path):
    """[(name, sequence)] of a FASTA file (plain or gzip), upper case."""
    opener = gzip.open if str(path).endswith(".gz") else open
    contigs, name, parts = [], None, []
    with opener(path, "rt") as f:
        for line in f:
            if line.startswith(">"):
                if name is not None:
                    contigs.append((name, "".join(parts).upper()))
                name, parts = line[1:].split()[0], []
            else:
                parts.append(line.strip())
    if name is not None:
        contigs.append((name, "".join(parts).upper()))
    return contigs


def plant_edits(ref, kinds, rng):
    """``ref`` with one edit per entry of ``kinds`` ("s", "i", "d") at distinct positions of ``ref``: a
    substitution or deletion of that base, or a random base inserted before it."""
    s = list(ref)
    positions = rng.sample(range(len(ref)), len(kinds))
    for p, kind in sorted(zip(positions, kinds), reverse=True):
        if kind == "s":
            s[p] = rng.choice([b for b in "ACGT" if b != s[p]])
        elif kind == "i":
            s.insert(p, rng.choice("ACGT"))
        else:
            del s[p]
    return "".join(s)


def simulate(contigs, n_reads, length=100, edits=4, seed=1, near_ends=None):
    """``n_reads`` planted reads: a list of (name, sequence, contig, start, end, strand).

    The reference window of a read is ``length - insertions + deletions`` bases, so every read has exactly
    ``length`` bases; windows holding a base other than ACGT are drawn again.  ``near_ends``: windows only
    within that many bases of a contig's start or end (contigs drawn uniformly)."""
    rng = random.Random(seed)
    sizes = [len(seq) for _, seq in contigs]
    total = sum(sizes)
    reads = []
    while len(reads) < n_reads:
        kinds = [rng.choice("sid") for _ in range(edits)]
        span = length - kinds.count("i") + kinds.count("d")
        if near_ends is None:
            g = rng.randrange(total)
            c = 0
            while g >= sizes[c]:
                g -= sizes[c]
                c += 1
        else:
            c = rng.randrange(len(contigs))
            d = rng.randrange(near_ends + 1)
            g = d if rng.random() < 0.5 else sizes[c] - span - d
        name, seq = contigs[c]
        if g < 0 or g + span > len(seq):
            continue
        ref = seq[g:g + span]
        if not set(ref) <= _ACGT:
            continue
        read = plant_edits(ref, kinds, rng)
        strand = "-" if rng.random() < 0.5 else "+"
        if strand == "-":
            read = read.translate(COMPLEMENT)[::-1]
        reads.append((f"p{len(reads)}", read, name, g, g + span, strand))
    return reads


def write_set(reads, prefix, edits):
    with open(f"{prefix}.fq", "w") as fq:
        for name, read, *_ in reads:
            fq.write(f"@{name}\n{read}\n+\n{'I' * len(read)}\n")
    with open(f"{prefix}.truth.tsv", "w") as tsv:
        tsv.write("read\tcontig\tstart\tend\tstrand\tedits\n")
        for name, _, contig, start, end, strand in reads:
            tsv.write(f"{name}\t{contig}\t{start}\t{end}\t{strand}\t{edits}\n")


def read_truth(path, with_edits=False):
    """{read: (contig, start, end, strand)}, with ``with_edits`` (contig, start, end, strand, edits)."""
    truth = {}
    with open(path) as f:
        next(f)
        for line in f:
            name, contig, start, end, strand, edits = line.rstrip("\n").split("\t")
            truth[name] = (contig, int(start), int(end), strand) + ((int(edits),) if with_edits else ())
    return truth


_CIGAR = re.compile(r"(\d+)([MIDNSHP=X])")


def ref_span(cigar):
    return sum(int(n) for n, op in _CIGAR.findall(cigar) if op in "MDN=X")


def sam_intervals(path):
    """Yield (read, contig, start, end, strand) of every aligned record of a SAM file and of its XA
    alternatives (0-based, end exclusive)."""
    with open(path) as f:
        for line in f:
            if line.startswith("@"):
                continue
            fields = line.rstrip("\n").split("\t")
            flag = int(fields[1])
            if flag & 4:
                continue
            start = int(fields[3]) - 1
            yield fields[0], fields[2], start, start + ref_span(fields[5]), "-" if flag & 16 else "+"
            for tag in fields[11:]:
                if tag.startswith("XA:Z:"):
                    for alt in tag[5:].rstrip(";").split(";"):
                        contig, pos, cigar, _ = alt.split(",")
                        s = abs(int(pos)) - 1
                        yield fields[0], contig, s, s + ref_span(cigar), "-" if pos.startswith("-") else "+"


def score(truth, sam_path):
    """(found read names, {read: number of aligned records and alternatives})."""
    found, hits = set(), {}
    for name, contig, start, end, strand in sam_intervals(sam_path):
        hits[name] = hits.get(name, 0) + 1
        t = truth.get(name)
        if t and t[0] == contig and t[3] == strand and start < t[2] and t[1] < end:
            found.add(name)
    return found, hits


def qgram_values(seq, q):
    """{offset: value} of every all-ACGT q-gram of the string ``seq`` (first base in the high bits)."""
    code = {"A": 0, "C": 1, "G": 2, "T": 3}
    out = {}
    for p in range(len(seq) - q + 1):
        word = seq[p:p + q]
        if set(word) <= _ACGT:
            v = 0
            for b in word:
                v = 4 * v + code[b]
            out[p] = v
    return out


def origin_hits(read, contig_seq, edits, masked, q, step=1):
    """(raw hits of a planted read on its origin, masked q-grams of the read), by brute force: a read q-gram
    at offset o (of the strand that matches the origin) hits when its value is not in ``masked`` and the
    contig holds it at a position p divisible by ``step`` with p - o within ``edits`` of the origin's start
    (the diagonals an occurrence with that many edits reaches); each read q-gram counts once.
    ``read``: (name, sequence, contig, start, end, strand) as :func:`simulate` gives."""
    start = read[3]
    seq = read[1] if read[5] == "+" else read[1].translate(COMPLEMENT)[::-1]
    hits = n_masked = 0
    for o, v in qgram_values(seq, q).items():
        if v in masked:
            n_masked += 1
            continue
        for p in range(max(0, start + o - edits), start + o + edits + 1):
            if p % step == 0 and contig_seq[p:p + q] == seq[o:o + q]:
                hits += 1
                break
    return hits, n_masked


def explain_misses(truth_path, fastq, index_path, genome, missed):
    """{read: (raw hits on its origin, masked q-grams of the read)} of the missed reads (:func:`origin_hits`
    with the index's q, step and masked q-grams)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from peanut_py.reference import ReferenceIndex

    with ReferenceIndex(index_path) as index:
        q, step = index.q, index.step
        masked = index.masked_kmers()
    masked = set() if masked is None else set(masked.tolist())
    want, seqs, name = set(missed), {}, None
    with open(fastq) as f:
        for i, line in enumerate(f):
            if i % 4 == 0:
                name = line[1:].split()[0]
            elif i % 4 == 1 and name in want:
                seqs[name] = line.strip()
    contigs = dict(read_genome(genome))
    truth = read_truth(truth_path, with_edits=True)
    out = {}
    for name in missed:
        contig, start, end, strand, edits = truth[name]
        out[name] = origin_hits((name, seqs[name], contig, start, end, strand), contigs[contig], edits, masked, q,
                                step)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sim = sub.add_parser("simulate")
    sim.add_argument("genome")
    sim.add_argument("prefix")
    sim.add_argument("-n", type=int, default=5000)
    sim.add_argument("--length", type=int, default=100)
    sim.add_argument("--edits", type=int, default=4)
    sim.add_argument("--seed", type=int, default=1)
    sim.add_argument("--near-ends", type=int, metavar="D", help="only windows within D bases of a contig end")
    sc = sub.add_parser("score")
    sc.add_argument("truth")
    sc.add_argument("sam")
    sc.add_argument("--misses", help="write the missed reads' truth rows here, with their number of records and "
                    "(with --index) their raw hits on the origin and masked q-grams")
    sc.add_argument("--index", help="the index the reads were mapped with (its q, step and masked q-grams)")
    sc.add_argument("--genome", help="the FASTA the index was built from (with --index)")
    sc.add_argument("--fastq", help="the reads (with --index; default: TRUTH with .truth.tsv replaced by .fq)")
    args = ap.parse_args(argv)
    if args.cmd == "simulate":
        reads = simulate(read_genome(args.genome), args.n, args.length, args.edits, args.seed, args.near_ends)
        write_set(reads, args.prefix, args.edits)
        return 0
    truth = read_truth(args.truth)
    found, hits = score(truth, args.sam)
    missed = [name for name in truth if name not in found]
    result = {"reads": len(truth), "found": len(found), "found_pct": round(100 * len(found) / len(truth), 3),
              "missed": len(missed), "missed_without_records": sum(1 for m in missed if m not in hits)}
    why = {}
    if args.index:
        if not args.genome:
            ap.error("--index needs --genome")
        fastq = args.fastq or re.sub(r"\.truth\.tsv$", ".fq", args.truth)
        why = explain_misses(args.truth, fastq, args.index, args.genome, missed)
        result["missed_inside_guarantee"] = sum(1 for h, _ in why.values() if h)
    if args.misses:
        with open(args.misses, "w") as f:
            for name in missed:
                extra = [str(x) for x in why[name]] if name in why else []
                f.write("\t".join([name, *map(str, truth[name]), str(hits.get(name, 0)), *extra]) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
