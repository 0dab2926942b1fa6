"""Read sets for the benchmark: mason simulations with a known truth, and subsets of real reads.

Truth coordinates: ``mason_simulator -iv VARIANTS.vcf`` samples reads from the haplotype that carries the
variants but writes its ``-oa`` SAM/BAM **in the coordinates of the original reference** (it projects each
read back through the variants; the haplotype position is only in the ``oP`` tag, and a read that cannot be
projected, e.g. one lying inside a simulated insertion, is written unmapped with a ``uR`` tag). So the
``-oa`` file is the truth as is; tests/test_scoring.py checks this on a tiny run by comparing each truth
record's aligned bases with the reference.
"""
import gzip
import os
import shutil
import subprocess

SEQAN_BIN = "/usr/lib/seqan/bin"


def find_tool(name):
    """Path of a program on PATH or in Debian's seqan-apps folder, else None."""
    path = shutil.which(name)
    if path:
        return path
    candidate = os.path.join(SEQAN_BIN, name)
    return candidate if os.access(candidate, os.X_OK) else None


def _run(cmd, log_path):
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(map(str, cmd)) + "\n").encode())
        log.flush()
        rc = subprocess.call([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        with open(log_path, errors="replace") as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"{os.path.basename(str(cmd[0]))} failed (exit {rc}); log {log_path}:\n{tail}")


def decompress_fasta(src, dst):
    """Plain FASTA copy of ``src`` (mason_variator reads only plain .fa); upper/lower case kept."""
    tmp = str(dst) + ".tmp"
    opener = gzip.open if str(src).endswith(".gz") else open
    with opener(src, "rb") as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    os.replace(tmp, dst)


def fasta_contigs(path):
    """[(name, length)] of a FASTA file (plain or gzip)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    contigs = []
    name, length = None, 0
    with opener(path, "rb") as f:
        for line in f:
            if line.startswith(b">"):
                if name is not None:
                    contigs.append((name, length))
                name, length = line[1:].split()[0].decode(), 0
            else:
                length += len(line.strip())
    if name is not None:
        contigs.append((name, length))
    return contigs


def make_variants(ref_fa, vcf, seed, snp_rate=0.001, indel_rate=0.0001, log_path=None):
    """SNPs and small indels (1-6 bp), no structural variants, with mason_variator."""
    cmd = [
        find_tool("mason_variator"), "-ir", ref_fa, "-ov", vcf, "-s", seed,
        "--snp-rate", snp_rate, "--small-indel-rate", indel_rate,
        "--min-small-indel-size", 1, "--max-small-indel-size", 6,
        "--sv-indel-rate", 0, "--sv-inversion-rate", 0, "--sv-translocation-rate", 0,
        "--sv-duplication-rate", 0, "-q",
    ]
    _run(cmd, log_path or str(vcf) + ".log")


MASON_CHUNK = 65536  # mason_simulator's default --chunk-size: fragments simulated in one batch


def effective_sim_threads(n_fragments, threads):
    """The thread count that mason_simulator's output depends on: it simulates batches of MASON_CHUNK
    fragments, one per thread, each thread with its own random generator, so the reads of ``threads`` and
    of min(threads, number of batches) are the same (checked with mason_simulator 2.0.9 on one contig,
    with and without -iv); below one batch, every thread count gives the same reads."""
    chunks = max(1, -(-int(n_fragments) // MASON_CHUNK))
    return max(1, min(int(threads), chunks))


def simulate_reads(ref_fa, out_dir, n_fragments, length, paired, seed, vcf=None, mismatch_scale=1.0,
                   log_path=None, threads=1):
    """Illumina reads with mason_simulator; returns (r1, r2 or None, truth.sam).

    ``threads``: mason's --num-threads. Mason seeds each thread separately, so beyond one batch of
    MASON_CHUNK fragments the reads depend on the thread count (see effective_sim_threads); the first batch
    is the same for every thread count."""
    os.makedirs(out_dir, exist_ok=True)
    r1 = os.path.join(out_dir, "r1.fq")
    r2 = os.path.join(out_dir, "r2.fq") if paired else None
    truth = os.path.join(out_dir, "truth.sam")
    cmd = [
        find_tool("mason_simulator"), "-ir", ref_fa, "-n", n_fragments, "--seed", seed,
        "--num-threads", max(1, int(threads)),
        "--illumina-read-length", length, "--illumina-prob-mismatch-scale", mismatch_scale,
        "-o", r1, "-oa", truth, "-q",
    ]
    if vcf:
        cmd += ["-iv", vcf]
    if paired:
        cmd += ["-or", r2]
    _run(cmd, log_path or os.path.join(out_dir, "mason.log"))
    return r1, r2, truth


def head_fastq(src, dst, n_records):
    """The first ``n_records`` FASTQ records of ``src`` (plain or gzip) into plain ``dst``; returns count."""
    opener = gzip.open if str(src).endswith(".gz") else open
    count = 0
    tmp = str(dst) + ".tmp"
    with opener(src, "rt") as fin, open(tmp, "w") as fout:
        while n_records is None or count < n_records:
            rec = [fin.readline() for _ in range(4)]
            if not rec[0]:
                break
            fout.writelines(rec)
            count += 1
    os.replace(tmp, dst)
    return count


def fastq_names(path):
    """Read names of a FASTQ file (first word, a trailing /1 or /2 removed)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    names = set()
    with opener(path, "rt") as f:
        for i, line in enumerate(f):
            if i % 4 == 0:
                name = line[1:].split(maxsplit=1)[0] if len(line) > 1 else ""
                names.add(name[:-2] if name.endswith(("/1", "/2")) else name)
    return names


def count_fastq(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        return sum(1 for _ in f) // 4


def razers3_gold(ref_fa, reads_fq, out_sam, threads, identity=95, max_hits=100, log_path=None):
    """Gold standard of all hits: razers3, fully sensitive (-rr 100), at most 5 % edit distance (-i 95)."""
    cmd = [find_tool("razers3"), "-rr", 100, "-i", identity, "-m", max_hits, "-tc", threads,
           "-o", out_sam, ref_fa, reads_fq]
    _run(cmd, log_path or str(out_sam) + ".log")
    return out_sam
