"""The insert size of one sample's pairs, estimated once for all its chunks: writes the `peanut map` option
``-I MEAN,STD,MAX,MIN`` that every chunk's run is given.

`peanut map` estimates the insert size from the first insert_size.ESTIMATE_PAIRS pairs of its input; a chunk
on its own would estimate it from its own first pairs and pair its reads differently from one run of the
whole input. This script maps the sample's first ESTIMATE_PAIRS pairs with the workflow's map options (through
`peanut map`'s own option handling, output discarded) and writes the estimate exactly (the floats as Python
writes them back, so `-I` gives the chunks the very same numbers).

When there is no estimate (fewer than insert_size.MIN_PAIRS uniquely mapped pairs), one run of the whole
input pairs nothing; that can be reproduced only when the whole sample is one chunk (the file is then empty
and the chunk estimates, and fails to estimate, exactly as the whole run). With more chunks it is an error
that asks for the insert size in the config.

Run by the workflow (Snakemake's `script:`), or by hand:
    python insert_size.py OUT.txt CHUNK_SIZE INDEX READS [MATES] [--interleaved] [--map-options '...']
"""
import argparse
import os
import shlex
import sys
import tempfile

from split_reads import ChunkFiles, logged, reader

from peanut_py import cli, mapping
from peanut_py.errors import PeanutError
from peanut_py.insert_size import ESTIMATE_PAIRS, MIN_PAIRS


def head_pairs(tmp_dir, reads, mates, interleaved, pairs):
    """The first ``pairs`` pairs into ``tmp_dir`` as the chunk layout writes them; returns (paths, pairs
    written, whether the input has more)."""
    batches = reader(reads, mates, interleaved, max_reads=2 * pairs)
    head = next(batches, None)
    if head is None:
        raise PeanutError(f"{reads}: empty file (no reads)")
    more = next(batches, None) is not None
    batches.close()
    files = ChunkFiles(tmp_dir, mates is not None, fasta=head.quals is None)
    files.start()
    files.write(head.names, head.seqs, head.quals)
    files.close()
    return files.paths(0), head.n // 2, more


def pairs_beyond(reads, mates, interleaved, limit):
    """Whether the input holds more than ``limit`` pairs."""
    seen = 0
    for batch in reader(reads, mates, interleaved):
        seen += batch.n // 2
        if seen > limit:
            return True
    return False


def estimate(index, head, interleaved, map_options, device=None, threads=1):
    """The insert size (insert_size.InsertSize or None) that `peanut map` estimates for the pairs in ``head``
    with ``map_options`` (a string of `peanut map` options)."""
    argv = ["map", index, *head, *shlex.split(map_options), "-t", str(threads), "-q", "-o", os.devnull,
            "--output-format", "sam"]
    if interleaved:
        argv.append("-p")
    if device:
        argv += ["--device", str(device)]
    args = cli.build_parser().parse_args(argv)
    args.command_line = "peanut " + shlex.join(argv)
    summaries = []
    run_map = mapping.map_reads

    def keep_summary(*a, **k):
        summaries.append(run_map(*a, **k))
        return summaries[-1]

    # cli.cmd_map turns the options into the run's settings exactly as `peanut map` does; only its summary,
    # which `peanut map` does not print in full, is kept.
    mapping.map_reads = keep_summary
    try:
        cli.cmd_map(args)
    finally:
        mapping.map_reads = run_map
    return summaries[0]["insert_size"]


def insert_size_option(out, chunk_size, index, reads, mates=None, interleaved=False, map_options="", device=None,
                       threads=1):
    """Write ``-I MEAN,STD,MAX,MIN`` (or nothing, see the module's doc) to ``out``; returns the text."""
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".insert_size.") as tmp:
        head, taken, more = head_pairs(tmp, reads, mates, interleaved, ESTIMATE_PAIRS)
        size = estimate(index, head, interleaved, map_options, device, threads)
    if size is not None:
        text = f"-I {size.mean!r},{size.std!r},{size.high},{size.low}"
    elif (more and pairs_beyond(reads, mates, interleaved, chunk_size)) or (not more and taken > chunk_size):
        raise PeanutError(f"{reads}: fewer than {MIN_PAIRS} uniquely mapped FR pairs among the first {taken:,} "
                          "pairs, so the insert size cannot be estimated, and each chunk would estimate its own; "
                          "give this sample's insert_size (MEAN,STD) in the config, or a chunk_size that holds "
                          "the whole sample")
    else:
        text = ""
    with open(out, "w") as f:
        f.write(text + "\n")
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("chunk_size", type=int)
    parser.add_argument("index")
    parser.add_argument("reads")
    parser.add_argument("mates", nargs="?")
    parser.add_argument("--interleaved", action="store_true")
    parser.add_argument("--map-options", default="")
    parser.add_argument("--device")
    parser.add_argument("-t", "--threads", type=int, default=1)
    a = parser.parse_args(argv)
    return run(a.out, a.chunk_size, a.index, a.reads, a.mates, a.interleaved, a.map_options, a.device, a.threads)


def run(out, chunk_size, index, reads, mates, interleaved, map_options, device, threads):
    try:
        text = insert_size_option(out, chunk_size, index, reads, mates, interleaved, map_options, device, threads)
    except PeanutError as e:
        print(f"peanut: error: {e}", file=sys.stderr)
        return 1
    print(f"[peanut] {reads}: {text or 'no insert size estimate (one chunk: it estimates as the whole run)'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    if "snakemake" in globals():
        sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
        sys.exit(logged(sm.log[0], run, sm.output[0], sm.params.chunk_size, sm.input.index, sm.input.reads,
                        sm.input.get("mates"), sm.params.interleaved, sm.params.map_options, sm.params.device,
                        sm.threads))
    sys.exit(main())
