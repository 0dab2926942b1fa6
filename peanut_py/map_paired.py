"""`peanut map` for pairs: two files or one interleaved file, insert size, mate rescue, pair-aware records.

Reads flow through the pipeline (pipeline.py): reader -> device stage -> host stage -> postprocessing pool ->
writer.  The host stage first makes the insert size known (insert_size.insert_size_stage: estimated from the
first ``insert_size.ESTIMATE_PAIRS`` pairs, or ``-I``), then rescues mates on the device's side queue
(rescue.py) while the device maps the next batch; the postprocessor places pairs
(postprocess.Postprocessor.process_pairs, or in two phases around one device alignment of the batch).
"""
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from . import reads as readsmod
from .device_stage import DeviceResult
from .hit_lists import merge_hits
from .insert_size import insert_size_stage
from .rescue import rescue_batch

# threads computing a batch's rescue windows side by side (ranges of pairs)
RESCUE_THREADS = 4


def pair_batches(reads_path, mates_path, batch_size, shard=None, assignments=None):
    """Batches of pairs from two files, or one interleaved file (``mates_path`` None); ``shard`` and
    ``assignments``: as for SingleEndRun.batches."""
    if mates_path is None:
        return readsmod.read_interleaved_batches(reads_path, max_reads=batch_size, shard=shard,
                                                 assignments=assignments)
    return readsmod.read_pair_batches(reads_path, mates_path, max_reads=batch_size, shard=shard,
                                      assignments=assignments)


class PairedRun:
    """The paired-end parts of a run: its batches, its host stage and its postprocessing steps."""

    host_name = "rescue"

    def __init__(self, stages, post, reads_path, mates_path, opts, threads, insert_size=None, log=None,
                 insert_size_known=False):
        """``stages``: the run's device stages, one per device (rescue uses each of them in turn).
        ``insert_size``: from ``-I``; with ``insert_size_known`` it is taken as it is, None too (a mapping
        process of several estimated it before the run: shards.py) and not logged again."""
        self.stages, self.post, self.opts, self.threads, self.log = list(stages), post, opts, threads, log
        self.stage = self.stages[0]
        self.reads_path, self.mates_path = reads_path, mates_path
        self.given = insert_size
        self.known = insert_size_known
        self.insert_size = insert_size
        self.stats = {"rescue_windows": 0, "rescued_hits": 0}

    def batches(self, batch_size, shard=None, assignments=None):
        return pair_batches(self.reads_path, self.mates_path, batch_size, shard=shard, assignments=assignments)

    def n_chunks(self):
        return max(1, self.threads) * self.post.CHUNKS_PER_THREAD

    def host_stage(self, items):
        """The insert size, then mate rescue: on its own thread and a device's side queue, so that the host
        part (anchors, windows) and the rescue kernel of batch k run while the device maps batch k + 1.
        With several devices, batch k is rescued on device k mod n, up to one batch per device at a time."""
        post, n = self.post, len(self.stages)
        side_queues = [stage.device.side_queue() for stage in self.stages]

        def rescue(k, batch, result, insert_size):
            stage = self.stages[k % n]
            base = (result.rs, result.ref_start, result.ref_end, result.dist)
            extra, n_windows = rescue_batch(stage.device, stage.resident, batch, *base, insert_size, self.opts,
                                            post.offsets, post.ends, queue=side_queues[k % n], pool=windows_pool,
                                            n_chunks=min(self.threads, RESCUE_THREADS))
            if len(extra[0]):
                rs, start, end, dist = merge_hits(base, extra)
                result = DeviceResult(rs=rs, ref_start=start, ref_end=end, dist=dist, raw_hits=result.raw_hits,
                                      candidates=result.candidates, seconds=result.seconds)
            return batch, result, n_windows, len(extra[0])

        def finished(done):
            batch, result, n_windows, n_rescued = done
            self.stats["rescue_windows"] += n_windows
            self.stats["rescued_hits"] += n_rescued
            return batch, result

        with ThreadPoolExecutor(max_workers=RESCUE_THREADS, thread_name_prefix="peanut-windows") as windows_pool, \
                ThreadPoolExecutor(max_workers=n, thread_name_prefix="peanut-rescue") as devices_pool:
            pending = deque()
            stream = insert_size_stage(items, post.offsets, self.opts.scoring, given=self.given, known=self.known,
                                       log=self.log)
            for k, (batch, result, insert_size) in enumerate(stream):
                self.insert_size = insert_size
                if n == 1:
                    # one device: this stage's own thread is the overlap; issuing its device work from the
                    # thread that reads the stream keeps every command of a queue on one thread
                    yield finished(rescue(k, batch, result, insert_size))
                    continue
                # batch k + n goes to the device of batch k only once batch k is done with it
                pending.append(devices_pool.submit(rescue, k, batch, result, insert_size))
                if len(pending) >= n:
                    yield finished(pending.popleft().result())
            while pending:
                yield finished(pending.popleft().result())

    def post_steps(self, batch, result):
        """Per chunk on the pool, or in two phases around one device alignment of the batch."""
        if self.post.align_on == "device":
            return self.post.two_phase_steps(batch, result, self.n_chunks(), self.insert_size, paired=True)
        return self.post.pair_chunk_steps(batch, result, self.n_chunks(), self.insert_size)

    def details(self):
        """What the summary needs beyond the counts (shards.py merges them over mapping processes)."""
        return {"insert_size": self.insert_size, **self.stats}

    @staticmethod
    def summary(n_reads, counts, summary, details):
        """The paired-end fields of the run's summary, and its log line; ``details`` as :meth:`details`."""
        mapped, proper = counts.get("mapped", 0), counts.get("proper", 0)
        summary.update({
            "pairs": n_reads // 2,
            "proper": proper,
            "mate_unmapped": counts.get("mate_unmapped", 0),
            "insert_size": details["insert_size"],
            "rescue_windows": details["rescue_windows"],
            "rescued_hits": details["rescued_hits"],
        })
        pct = 100.0 / max(n_reads, 1)
        line = (f"{n_reads // 2:,} pairs ({n_reads:,} reads) in: {mapped:,} reads mapped ({mapped * pct:.2f} %), "
                f"{proper:,} properly paired ({proper * pct:.2f} %), {summary['mate_unmapped']:,} with the mate "
                f"unmapped; {details['rescued_hits']:,} hits rescued in {details['rescue_windows']:,} mate "
                "windows")
        return summary, line


__all__ = ["PairedRun", "pair_batches"]
