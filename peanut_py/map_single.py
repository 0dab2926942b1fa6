"""`peanut map` for single-end reads: the batches and the postprocessing steps of the pipeline
(reader -> device stage [-> align stage] -> postprocessing pool -> writer, pipeline.py)."""
from concurrent.futures import ThreadPoolExecutor

from . import reads as readsmod

# threads planning a batch's chunks in the align stage (ranking and gathering, before the device aligns)
PLAN_THREADS = 4


class SingleEndRun:
    """The single-end parts of a run: its batches, its host stage (the final alignment on the device, when
    the postprocessor aligns there) and its postprocessing steps."""

    host_name = "align"

    def __init__(self, post, reads_path, threads):
        self.post, self.reads_path, self.threads = post, reads_path, threads
        self.host_stage = self.align_stage if post.align_on == "device" else None

    def batches(self, batch_size):
        return readsmod.read_batches(self.reads_path, max_reads=batch_size)

    def n_chunks(self):
        return max(1, self.threads) * self.post.CHUNKS_PER_THREAD

    def align_stage(self, items):
        """Each batch's chunks planned, aligned on the device in one call, and passed on as finishing steps."""
        with ThreadPoolExecutor(max_workers=min(max(1, self.threads), PLAN_THREADS),
                                thread_name_prefix="peanut-plan") as pool:
            for batch, result in items:
                yield batch, self.post.batch_aligned_steps(batch, result, self.n_chunks(), pool)

    def post_steps(self, batch, item):
        """``item``: the device stage's result, or the align stage's finishing steps."""
        if self.host_stage is not None:
            return item
        return self.post.chunk_steps(batch, item, self.n_chunks())

    def summary(self, n_reads, counts, summary):
        mapped = summary["mapped"]
        pct = 100.0 * mapped / max(n_reads, 1)
        line = (f"{n_reads:,} reads in, {mapped:,} mapped ({pct:.2f} %), {n_reads - mapped:,} unmapped, "
                f"{summary['multi']:,} multi-mapped")
        return summary, line


__all__ = ["SingleEndRun"]
