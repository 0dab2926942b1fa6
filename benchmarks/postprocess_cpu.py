"""Host CPU of postprocessing per read: one `peanut map` run keeps every batch and its device result, then
postprocesses them again in this thread, timed by the thread's CPU clock (best of --reps).

    python -m benchmarks.postprocess_cpu INDEX READS [MATES] [-t 2] [--batch-size N] [--semiglobal]
                                         [--reps 3] [--profile N] [--calls N]

The device stage, reading and writing are left out, so the figure is what the postprocessing pool spends on
a read (single-end) or on each read of a pair (pairs: rescue is part of the device result here), whatever
else the machine runs. The replayed chunks' SAM text must equal the run's records, which the script checks.

--calls counts what one chunk's postprocessing does while it holds the interpreter lock: the Python-level calls
and the calls of built-in (C) functions and methods that sys.setprofile sees while the first batch's first chunk
is postprocessed, and the lines of peanut_py's Python code that run (sys.settrace). Each NumPy call there takes
the lock on its own, between the nogil Cython steps, and waits for it when many threads postprocess at once.
Operators and ufunc calls on arrays (``a + b``, ``np.maximum``) do not show as calls, nor the built-in calls
that Cython functions make inside; the counts are a floor.
"""
import argparse
import cProfile
import collections
import hashlib
import io
import os
import pstats
import sys
import tempfile
import time
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from peanut_py import map_paired, map_single  # noqa: E402
from peanut_py.genome import HostGenome  # noqa: E402
from peanut_py.mapping import map_reads, open_index  # noqa: E402
from peanut_py.options import MapOptions, RunOptions  # noqa: E402
from peanut_py.pipeline import postprocess_threads  # noqa: E402
from peanut_py.postprocess import Postprocessor  # noqa: E402


@contextmanager
def kept_batches():
    """While active, every (batch, device result, insert size) that a run hands to postprocessing is appended
    to the yielded list."""
    kept, originals = [], {}
    for cls in (map_single.SingleEndRun, map_paired.PairedRun):
        originals[cls] = cls.post_steps

        def post_steps(self, batch, result, _original=originals[cls]):
            kept.append((batch, result, getattr(self, "insert_size", None)))
            return _original(self, batch, result)

        cls.post_steps = post_steps
    try:
        yield kept
    finally:
        for cls, original in originals.items():
            cls.post_steps = original


def records_md5(sam_path):
    """md5 of a SAM file's records (header lines left out)."""
    digest = hashlib.md5()
    with open(sam_path, "rb") as f:
        for line in f:
            if not line.startswith(b"@"):
                digest.update(line)
    return digest.hexdigest()


def replay(post, kept, n_chunks):
    """Every kept batch postprocessed again in this thread, ``n_chunks`` chunks each: (texts, reads)."""
    texts, n_reads = [], 0
    for batch, result, insert_size in kept:
        if insert_size is None:
            steps = post.chunk_steps(batch, result, n_chunks)
        else:
            steps = post.pair_chunk_steps(batch, result, n_chunks, insert_size)
        for step in steps:
            text, n, _ = step()
            texts.append(text)
            n_reads += n
    return texts, n_reads


def count_calls(post, kept, n_chunks):
    """The calls made while the first kept batch's first chunk is postprocessed in this thread, as
    sys.setprofile reports them: (reads of the chunk, Counter of "python"/"c" events and of the "lines" of
    peanut_py's Python code run (sys.settrace), Counter of the calls by "module.function")."""
    batch, result, insert_size = kept[0]
    if insert_size is None:
        step = post.chunk_steps(batch, result, n_chunks)[0]
    else:
        step = post.pair_chunk_steps(batch, result, n_chunks, insert_size)[0]
    kinds, names = collections.Counter(), collections.Counter()

    def profiler(frame, event, arg):
        if event == "call":
            kinds["python"] += 1
            code = frame.f_code
            names[f"{frame.f_globals.get('__name__', '?')}.{getattr(code, 'co_qualname', code.co_name)}"] += 1
        elif event == "c_call":
            kinds["c"] += 1
            names[f"{getattr(arg, '__module__', None) or type(getattr(arg, '__self__', None)).__name__}."
                  f"{getattr(arg, '__qualname__', getattr(arg, '__name__', '?'))}"] += 1

    def tracer(frame, event, arg):
        # the lines of peanut_py's Python code that run: each holds the lock while it runs
        if event == "line":
            kinds["lines"] += 1
        return tracer if frame.f_globals.get("__name__", "").startswith("peanut_py") else None

    sys.setprofile(profiler)
    sys.settrace(tracer)
    try:
        _, n_reads, _ = step()
    finally:
        sys.settrace(None)
        sys.setprofile(None)
    return n_reads, kinds, names


def measure(index_path, reads, mates=None, threads=2, batch_size=None, local=True, reps=3, profile=0, log=None,
            calls=0):
    """Map once keeping the batches, then replay them ``reps`` times. Returns a dict: reads, cpu_seconds (best
    replay), us_per_read, md5 (of the replayed text), matches (whether it equals the run's records), with
    ``profile`` > 0 the cProfile lines of the ``profile`` functions with the most own time, and with ``calls``
    > 0 the calls of one chunk (count_calls): chunk_reads, python_calls, c_calls, lines and the ``calls`` most
    frequent as (count, name) pairs in top_calls."""
    opts = MapOptions(local=local, align_on="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        sam_path = os.path.join(tmp, "run.sam")
        with kept_batches() as kept:
            map_reads(index_path, reads, opts, output=sam_path, run=RunOptions(threads=threads, batch_size=batch_size),
                      mates=mates, log=log)
        run_md5 = records_md5(sam_path)
    index = open_index(index_path)
    try:
        post = Postprocessor(index, HostGenome.from_index(index), opts)
        # the run's chunks: one per postprocessing thread
        n_chunks = postprocess_threads(threads) * post.CHUNKS_PER_THREAD
        replay(post, kept, n_chunks)  # warm: caches, first-use allocations
        best = None
        for _ in range(max(1, reps)):
            t0 = time.thread_time()
            texts, n_reads = replay(post, kept, n_chunks)
            seconds = time.thread_time() - t0
            best = seconds if best is None else min(best, seconds)
        digest = hashlib.md5()
        for text in texts:
            digest.update(text)
        out = {"reads": n_reads, "cpu_seconds": best, "us_per_read": 1e6 * best / max(n_reads, 1),
               "md5": digest.hexdigest(), "matches": digest.hexdigest() == run_md5}
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            replay(post, kept, n_chunks)
            prof.disable()
            stream = io.StringIO()
            pstats.Stats(prof, stream=stream).sort_stats("tottime").print_stats(profile)
            out["profile"] = stream.getvalue()
        if calls:
            chunk_reads, kinds, names = count_calls(post, kept, n_chunks)
            out.update(chunk_reads=chunk_reads, python_calls=kinds["python"], c_calls=kinds["c"], lines=kinds["lines"],
                       top_calls=[(n, name) for name, n in names.most_common(calls)])
        return out
    finally:
        index.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("index")
    ap.add_argument("reads")
    ap.add_argument("mates", nargs="?")
    ap.add_argument("-t", "--threads", type=int, default=2,
                    help="threads of the run (its postprocessing threads give the chunks per batch)")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--semiglobal", action="store_true", help="align end to end (default: local)")
    ap.add_argument("--reps", type=int, default=3, help="replays; the best one counts (default 3)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also print the N functions with the most own time in one more replay")
    ap.add_argument("--calls", type=int, default=0, metavar="N",
                    help="also count the calls made while one chunk is postprocessed, and print the N most frequent")
    a = ap.parse_args(argv)
    out = measure(a.index, a.reads, a.mates, threads=a.threads, batch_size=a.batch_size, local=not a.semiglobal,
                  reps=a.reps, profile=a.profile, calls=a.calls)
    print(f"{out['reads']:,} reads: postprocessing {out['cpu_seconds']:.3f} s of CPU, {out['us_per_read']:.3f} us "
          f"per read; text md5 {out['md5']} ({'equals' if out['matches'] else 'DIFFERS from'} the run's records)")
    if "profile" in out:
        print(out["profile"])
    if "top_calls" in out:
        print(f"one chunk of {out['chunk_reads']:,} reads: {out['python_calls']:,} Python-level calls, "
              f"{out['c_calls']:,} calls of built-in functions, {out['lines']:,} lines of peanut_py run")
        for n, name in out["top_calls"]:
            print(f"{n:8,}  {name}")
    return 0 if out["matches"] else 1


if __name__ == "__main__":
    sys.exit(main())
