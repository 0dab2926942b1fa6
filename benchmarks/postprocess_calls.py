"""Interpreter-level calls while one chunk of pairs is postprocessed: each is a step that holds the GIL (and a NumPy
call that releases it for its loop takes it back afterwards), so their number per chunk is what the postprocessing
threads contend for.

    python -m benchmarks.postprocess_calls INDEX READS MATES [--chunk-reads 18700] [--batch-size N] [--semiglobal]

One `peanut map` run keeps its batches (as benchmarks.postprocess_cpu); the first batch's first chunk of about
``--chunk-reads`` reads is then postprocessed again (plan, solve, finish) under sys.setprofile, counting Python
function calls ("call") and calls of C functions and methods ("c_call"; calls into Cython modules count here). The
calls are also attributed to the step of Postprocessor.plan_pairs or its finish that made them (with everything
they call in turn). Operators on arrays (``a[mask]``, ``a * b``, ``a == b``) are no calls to the profile hook;
the operator instructions run in plan_pairs and its finish themselves are counted apart (by a trace of their
opcodes; they include operators on plain integers).
"""
import argparse
import dis
import os
import sys
import tempfile
from collections import Counter

from peanut_py.genome import HostGenome
from peanut_py.mapping import map_reads, open_index
from peanut_py.options import MapOptions, RunOptions
from peanut_py.postprocess import Postprocessor

from benchmarks.postprocess_cpu import kept_batches  # after peanut_py: the tree on the path is the one measured

STEPS = ("Postprocessor.plan_pairs", "Postprocessor.plan_pairs.<locals>.finish")


def _step_of(frame):
    """The name of the call made by plan_pairs or its finish that ``frame`` runs under, or None."""
    while frame is not None and frame.f_back is not None:
        if frame.f_back.f_code.co_qualname in STEPS:
            return frame.f_code.co_qualname
        frame = frame.f_back
    return None


OPERATORS = {"BINARY_OP", "BINARY_SUBSCR", "STORE_SUBSCR", "COMPARE_OP", "UNARY_INVERT", "UNARY_NEGATIVE"}


def count_calls(step):
    """Run ``step`` under a profile hook and an opcode trace: (Counter of event kinds, Counter of calls per
    plan_pairs/finish step); kinds["operator"] counts the operator instructions run in plan_pairs and finish."""
    kinds, per_step = Counter(), Counter()

    def trace(frame, event, arg):
        if event == "call":
            if frame.f_code.co_qualname not in STEPS:
                return None
            frame.f_trace_opcodes = True
            return trace
        if event == "opcode" and dis.opname[frame.f_code.co_code[frame.f_lasti]] in OPERATORS:
            kinds["operator"] += 1
        return trace

    def hook(frame, event, arg):
        if event not in ("call", "c_call"):
            return
        kinds[event] += 1
        if event == "c_call":
            name = getattr(arg, "__qualname__", getattr(arg, "__name__", repr(arg)))
            owner = frame.f_code.co_qualname
            top = name if owner in STEPS else _step_of(frame)
        else:
            top = _step_of(frame)
        per_step[top or "(outside plan_pairs)"] += 1

    sys.setprofile(hook)
    sys.settrace(trace)
    try:
        step()
    finally:
        sys.settrace(None)
        sys.setprofile(None)
    return kinds, per_step


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index")
    ap.add_argument("reads")
    ap.add_argument("mates")
    ap.add_argument("--chunk-reads", type=int, default=18_700,
                    help="reads per chunk (a batch of 262,144 reads over 14 threads: about 18,700)")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--semiglobal", action="store_true", help="align end to end (default: local)")
    a = ap.parse_args(argv)
    opts = MapOptions(local=not a.semiglobal, align_on="cpu")
    with tempfile.TemporaryDirectory() as tmp, kept_batches() as kept:
        map_reads(a.index, a.reads, opts, output=os.path.join(tmp, "run.sam"),
                  run=RunOptions(threads=2, batch_size=a.batch_size), mates=a.mates)
    batch, result, insert_size = kept[0]
    index = open_index(a.index)
    try:
        post = Postprocessor(index, HostGenome.from_index(index), opts)
        n_chunks = max(1, round(batch.n / a.chunk_reads))
        steps = post.pair_chunk_steps(batch, result, n_chunks, insert_size)
        steps[0]()  # warm: first-use imports and caches
        kinds, per_step = count_calls(steps[0])
    finally:
        index.close()
    r0, r1 = post.chunk_bounds(batch, result, n_chunks, paired=True)[0][:2]
    print(f"one chunk of {r1 - r0:,} reads ({batch.n:,} in the batch): {kinds['call'] + kinds['c_call']:,} calls "
          f"({kinds['call']:,} Python, {kinds['c_call']:,} C); {kinds['operator']:,} operator instructions "
          f"in plan_pairs and finish")
    for name, n in per_step.most_common():
        print(f"  {n:6,}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
