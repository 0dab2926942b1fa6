"""`peanut map` for single-end reads: the batches and the postprocessing steps of the pipeline
(reader -> device stage -> postprocessing pool -> writer, pipeline.py)."""
from . import reads as readsmod


class SingleEndRun:
    """The single-end parts of a run: its batches and its postprocessing steps (no host stage)."""

    host_stage = None
    host_name = None

    def __init__(self, post, reads_path, threads):
        self.post, self.reads_path, self.threads = post, reads_path, threads

    def batches(self, batch_size, shard=None, assignments=None):
        """The run's batches; a mapping process of several (shards.py) reads every n-th batch (``shard``) or
        the byte ranges the writing process assigns to it (``assignments``: reads._parts)."""
        return readsmod.read_batches(self.reads_path, max_reads=batch_size, shard=shard, assignments=assignments)

    def n_chunks(self):
        return max(1, self.threads) * self.post.CHUNKS_PER_THREAD

    def post_steps(self, batch, result):
        """Per chunk on the pool, or in two phases around one device alignment of the batch."""
        if self.post.align_on == "device":
            return self.post.two_phase_steps(batch, result, self.n_chunks())
        return self.post.chunk_steps(batch, result, self.n_chunks())

    def details(self):
        """What the summary needs beyond the counts (shards.py merges them over mapping processes)."""
        return {}

    @staticmethod
    def summary(n_reads, counts, summary, details=None):
        mapped = summary["mapped"]
        pct = 100.0 * mapped / max(n_reads, 1)
        line = (f"{n_reads:,} reads in, {mapped:,} mapped ({pct:.2f} %), {n_reads - mapped:,} unmapped, "
                f"{summary['multi']:,} multi-mapped")
        return summary, line


__all__ = ["SingleEndRun"]
