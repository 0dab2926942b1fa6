"""benchmarks/postprocess_cpu.py on the bundled 200 kb slice: the replayed postprocessing gives the run's SAM
records byte for byte, for pairs and single-end reads, and leaves peanut_py as it found it."""
import os
import sys

import pytest

from helpers import EXAMPLE
from peanut_py import map_paired, map_single

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # benchmarks/ is a package of the repository, not of the installed peanut_py

from benchmarks import postprocess_cpu  # noqa: E402

R1 = str(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz")
R2 = str(EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz")


@pytest.mark.parametrize("mates, local, reads", [(R2, True, 4000), (None, False, 2000)], ids=["pairs", "single"])
def test_replay_reproduces_the_run(example_index, mates, local, reads):
    before = (map_single.SingleEndRun.post_steps, map_paired.PairedRun.post_steps)
    out = postprocess_cpu.measure(str(example_index), R1, mates, threads=2, batch_size=700, local=local, reps=1,
                                  profile=5, calls=5)
    assert out["reads"] == reads
    assert out["matches"], "the replayed text differs from the run's records"
    assert out["cpu_seconds"] > 0 and out["us_per_read"] == pytest.approx(1e6 * out["cpu_seconds"] / reads)
    assert "tottime" in out["profile"]
    # one chunk's calls under the interpreter lock: half a batch of 700 reads, counted, the profiler removed
    assert out["chunk_reads"] == 350 and out["python_calls"] > 0 and out["c_calls"] > 0 and out["lines"] > 0
    counts = [n for n, _ in out["top_calls"]]
    assert len(counts) == 5 and counts == sorted(counts, reverse=True)
    assert sys.getprofile() is None and sys.gettrace() is None
    assert (map_single.SingleEndRun.post_steps, map_paired.PairedRun.post_steps) == before


def test_command_line(example_index, capsys):
    assert postprocess_cpu.main([str(example_index), R1, R2, "-t", "1", "--reps", "1"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("4,000 reads: postprocessing") and "equals the run's records" in line
