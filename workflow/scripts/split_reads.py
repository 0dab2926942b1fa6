"""Split one sample's reads into chunks of CHUNK_SIZE reads (single-end) or pairs, each a gzip FASTQ (FASTA for
FASTA input): chunk_00000.fastq.gz, ... for single-end and interleaved reads, chunk_00000.1.fastq.gz and
chunk_00000.2.fastq.gz for pairs in two files.

The reads are read with peanut-py's own reader, so a file that `peanut map` would refuse is refused here, with
the same one-line message naming the original file and record, before any chunk is mapped. Chunks are
consecutive runs of the input (pairs never cut, order kept), so mapping them one by one and merging the
sorted results gives what one `peanut map` of the whole input gives. What the chunks hold is what the mapper
reads: names up to the first whitespace (without /1 and /2 for pairs), bases uppercased.

Run by the workflow (Snakemake's `script:`), or by hand:
    python split_reads.py OUT_DIR CHUNK_SIZE READS [MATES] [--interleaved]
"""
import argparse
import os
import sys

from xopen import xopen

from peanut_py.errors import PeanutError
from peanut_py.reads import read_batches, read_interleaved_batches, read_pair_batches

# reads taken from the reader at a time (the chunk size does not bound memory)
READ_STEP = 1 << 16
# chunk files are written once and read once: the fastest gzip level
GZIP_LEVEL = 1


def reader(reads, mates=None, interleaved=False, max_reads=READ_STEP):
    """peanut-py's batches of the input: single-end, two files of pairs, or interleaved pairs."""
    if mates is not None:
        return read_pair_batches(reads, mates, max_reads=max_reads)
    if interleaved:
        return read_interleaved_batches(reads, max_reads=max_reads)
    return read_batches(reads, max_reads=max_reads)


def records_text(names, seqs, quals):
    """FASTQ text of the records (FASTA where ``quals`` is None)."""
    if quals is None:
        return b"".join(b">%s\n%s\n" % (n.encode("latin-1"), s) for n, s in zip(names, seqs))
    return b"".join(b"@%s\n%s\n+\n%s\n" % (n.encode("latin-1"), s, q) for n, s, q in zip(names, seqs, quals))


class ChunkFiles:
    """The chunk files of one sample, written one chunk after the other."""

    def __init__(self, out_dir, two_files, fasta):
        self.out_dir, self.two_files = out_dir, two_files
        self.suffix = ".fasta.gz" if fasta else ".fastq.gz"
        self.count = 0
        self.files = []
        self.written = []

    def paths(self, i):
        stem = os.path.join(self.out_dir, f"chunk_{i:05d}")
        if self.two_files:
            return [f"{stem}.1{self.suffix}", f"{stem}.2{self.suffix}"]
        return [stem + self.suffix]

    def start(self):
        self.close()
        for path in self.paths(self.count):
            self.written.append(path)
            self.files.append(xopen(path, "wb", compresslevel=GZIP_LEVEL))
        self.count += 1

    def write(self, names, seqs, quals):
        """Reads of one chunk; for two files, alternating mate 1, mate 2."""
        if self.two_files:
            for mate, f in enumerate(self.files):
                f.write(records_text(names[mate::2], seqs[mate::2], None if quals is None else quals[mate::2]))
        else:
            self.files[0].write(records_text(names, seqs, quals))

    def close(self):
        for f in self.files:
            f.close()
        self.files = []

    def remove(self):
        """Close and delete every chunk written: a failed split leaves no chunk that looks complete."""
        self.close()
        for path in self.written:
            if os.path.exists(path):
                os.remove(path)


def split_reads(out_dir, chunk_size, reads, mates=None, interleaved=False, read_step=READ_STEP):
    """Write the chunks into ``out_dir`` (created); ``chunk_size`` reads, or pairs for paired input, per
    chunk. Returns the number of chunks. An empty input is an error, as in `peanut map`."""
    if chunk_size < 1:
        raise PeanutError(f"chunk size must be at least 1, got {chunk_size}")
    paired = mates is not None or interleaved
    per_unit = 2 if paired else 1
    chunk_reads = per_unit * chunk_size
    os.makedirs(out_dir, exist_ok=True)
    chunks, room = None, 0
    try:
        for batch in reader(reads, mates, interleaved, max_reads=per_unit * max(1, read_step // per_unit)):
            if chunks is None:
                chunks = ChunkFiles(out_dir, mates is not None, batch.quals is None)
            names, seqs, quals = batch.names, batch.seqs, batch.quals
            i = 0
            while i < batch.n:
                if room == 0:
                    chunks.start()
                    room = chunk_reads
                take = min(room, batch.n - i)
                chunks.write(names[i:i + take], seqs[i:i + take], None if quals is None else quals[i:i + take])
                i += take
                room -= take
    except BaseException:
        if chunks is not None:
            chunks.remove()
        raise
    if chunks is None:
        raise PeanutError(f"{reads}: empty file (no reads)")
    chunks.close()
    return chunks.count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("chunk_size", type=int)
    parser.add_argument("reads")
    parser.add_argument("mates", nargs="?")
    parser.add_argument("--interleaved", action="store_true")
    args = parser.parse_args(argv)
    return run(args.out_dir, args.chunk_size, args.reads, args.mates, args.interleaved)


def run(out_dir, chunk_size, reads, mates, interleaved):
    try:
        n = split_reads(out_dir, chunk_size, reads, mates, interleaved)
    except PeanutError as e:
        print(f"peanut: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # writing the chunks: a full disk, a folder that cannot be written
        print(f"peanut: error: {e.filename or out_dir}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"[peanut] {reads}: {n} chunk{'s' if n > 1 else ''} in {out_dir}", file=sys.stderr)
    return 0


def logged(log_path, job, *args):
    """``job(*args)`` with its messages in ``log_path`` (the Snakemake job's log); returns its exit status."""
    with open(log_path, "w") as log:
        sys.stderr = log
        try:
            return job(*args)
        finally:
            sys.stderr = sys.__stderr__


if __name__ == "__main__":
    if "snakemake" in globals():
        sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
        sys.exit(logged(sm.log[0], run, sm.output[0], sm.params.chunk_size, sm.input.reads, sm.input.get("mates"),
                        sm.params.interleaved))
    sys.exit(main())
