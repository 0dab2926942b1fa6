"""Per-thread summary of py-spy's collapsed stacks (``py-spy record --threads -f raw [--idle]``).

    python -m benchmarks.spy_threads SPY.txt [--thread peanut-device] [--top 20]

Without --thread: samples per thread (the postprocessing pool's threads summed as "post"). With it: that
thread's samples by the innermost peanut_py frame and the leaf function, the device thread's map_batch
samples split into host work and waits in blocking copies (``enqueue_copy`` leaves). Samples recorded with
--idle include the time a thread sleeps (waiting for work, a lock or the interpreter lock); without it only
the time on a CPU (NVIDIA's driver spins in a blocking copy, which counts as on CPU).
"""
import argparse
import collections
import sys


def read(path):
    """[(thread name, frames (outermost first), samples)] of a raw py-spy file."""
    out = []
    with open(path) as f:
        for line in f:
            stack, n = line.rstrip("\n").rsplit(" ", 1)
            frames = stack.split(";")
            out.append((frames[0].split(": ", 1)[-1], frames[1:], int(n)))
    return out


def _short(frame):
    name, _, where = frame.partition(" (")
    return f"{name}@{where.rstrip(')').split('/')[-1]}" if where else name


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spy")
    ap.add_argument("--thread")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args(argv)
    rows = read(a.spy)
    if not a.thread:
        per = collections.Counter()
        for name, _, n in rows:
            per["post" if name.startswith("peanut-post") else name] += n
        for name, n in per.most_common(a.top):
            print(f"{n:7,d}  {name}")
        return 0
    per, wait, host = collections.Counter(), 0, 0
    for name, frames, n in rows:
        if name != a.thread:
            continue
        ours = [f for f in frames if "peanut_py/" in f]
        leaf = frames[-1].split(" (")[0] if frames else "?"
        if any(f.startswith("DeviceStage.map_batch ") for f in frames):
            if leaf == "enqueue_copy":
                wait += n
            else:
                host += n
        per[(_short(ours[-1]) if ours else "-") + " | " + leaf] += n
    if wait or host:
        print(f"map_batch: host {host:,} samples, waiting in blocking copies {wait:,}")
    for key, n in per.most_common(a.top):
        print(f"{n:7,d}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
