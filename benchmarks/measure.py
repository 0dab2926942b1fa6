#!/usr/bin/env python3
"""One process measured, for the GPU host's scripts (benchmarks/gpu_*.sh):

    python3 benchmarks/measure.py NAME CMD...         # stdout to NAME.out, stderr to NAME.err
    python3 benchmarks/measure.py --score TRUTH SAM    # placement accuracy against mason's truth SAM
    python3 benchmarks/measure.py --score-first TRUTH SAM   # the same, TRUTH being the first reads of SAM's input

The first prints one line: exit status, wall clock, peak RSS and CPU time (``os.wait4``), and where
``nvidia-smi`` exists the most GPU memory in use while the command ran (sampled every 100 ms: the whole GPU's,
so run one tool at a time). ``MEASURE_GPU=0`` leaves nvidia-smi out (each call of it takes the driver for a
while, which slows a GPU program's start on hosts with several GPUs); ``MEASURE_STAMPS=1`` puts the seconds
since the start before every line of NAME.err and adds a last line with the exit time, which shows where a
run spends its start-up and its end; ``MEASURE_HOST_CPU=1`` adds the share of the host's cores that were busy
(user and system time of every process, from /proc/stat), which also counts child processes that are never
waited for.  The second prints the fraction of reads placed within 20 bp of the truth and the
wrong reads at MAPQ >= 20 (benchmarks/scoring.py).
"""
import os
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

GPU_SAMPLE_S = 0.1


def run_measured(cmd, stdout=None, stderr=None, stamps=False):
    """(returncode, wall s, peak RSS MB, CPU s) of one process; with ``stamps``, each line it writes to
    standard error goes to ``stderr`` after the seconds since its start."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE if stamps else stderr)
    if stamps:
        for line in proc.stderr:
            stderr.write(b"[+%.2f] " % (time.perf_counter() - t0) + line)
    _, status, usage = os.wait4(proc.pid, 0)
    if stamps:
        stderr.write(b"[+%.2f] exit\n" % (time.perf_counter() - t0))
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - t0, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


class GpuMemory:
    """The most memory in use on the GPU(s) (MiB, summed over GPUs) while the context is open, by nvidia-smi;
    ``peak`` stays None without nvidia-smi."""

    def __init__(self, enabled=True):
        self.peak = None
        self._smi = shutil.which("nvidia-smi") if enabled else None
        self._stop = threading.Event()

    def _sample(self):
        while not self._stop.is_set():
            out = subprocess.run([self._smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True)
            try:
                used = sum(int(x) for x in out.stdout.split())
            except ValueError:
                used = None
            if used is not None:
                self.peak = used if self.peak is None else max(self.peak, used)
            self._stop.wait(GPU_SAMPLE_S)

    def __enter__(self):
        if self._smi:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._smi:
            self._thread.join()


def host_cpu_ticks():
    """(busy, total) clock ticks of all cores since boot (/proc/stat's first line); None where it is missing."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def measure(name, cmd):
    before = host_cpu_ticks() if os.environ.get("MEASURE_HOST_CPU") == "1" else None
    with open(f"{name}.out", "wb") as out, open(f"{name}.err", "wb") as err, \
            GpuMemory(os.environ.get("MEASURE_GPU") != "0") as gpu:
        rc, wall, rss, cpu = run_measured(cmd, stdout=out, stderr=err, stamps=os.environ.get("MEASURE_STAMPS") == "1")
    line = f"{name:<22} rc={rc} wall={wall:.2f} s peak RSS {rss:,.0f} MB CPU {cpu:.0f} s"
    after = host_cpu_ticks() if before is not None else None
    if before is not None and after is not None and after[1] > before[1]:
        line += f" host cores busy {100 * (after[0] - before[0]) / (after[1] - before[1]):.0f} %"
    return line + (f" GPU peak {gpu.peak:,} MiB" if gpu.peak is not None else "")


def score(truth_path, sam_path, first_part=False):
    from benchmarks import scoring

    s = scoring.score_sam(sam_path, scoring.load_truth(truth_path), first_part=first_part)
    return (f"  {sam_path}: {s['correct']:,} of {s['n_truth']:,} correct ({100 * s['frac_correct']:.3f} %), "
            f"wrong at MAPQ >= 20: {s['wrong_at'].get('20')}, missing {s['missing']}, "
            f"correct at MAPQ >= 20: {s['mapped_at'].get('20') - s['wrong_at'].get('20'):,}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] in ("--score", "--score-first"):
        print(score(argv[1], argv[2], first_part=argv[0] == "--score-first"), flush=True)
    elif len(argv) >= 2 and not argv[0].startswith("-"):
        print(measure(argv[0], argv[1:]), flush=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
