"""`peanut map` for pairs: two files or one interleaved file, insert size, mate rescue, pair-aware records.

The insert-size distribution is estimated once, before the pipeline starts, from the first
``pairing.ESTIMATE_PAIRS`` pairs of the input (whatever the batch size or thread count): the first batches
are mapped on the device until they cover that many pairs, and their device results are kept and reused by
the pipeline, so no read is mapped twice. In the pipeline, a second stage after the device thread rescues
mates (rescue.py) while the device maps the next batch, and the postprocessor places pairs (pairing.py,
report.Postprocessor.process_pairs).
"""
import time
from concurrent.futures import ThreadPoolExecutor

from . import reads as readsmod
from . import sam
from .core import DeviceResult
from .errors import PeanutError
from .pairing import ESTIMATE_PAIRS, estimate_insert_size, insert_sample
from .pipeline import StageTimes, run_pipeline
from .rescue import merge_hits, rescue_batch

# threads computing a batch's rescue windows side by side (ranges of pairs; VM, 262,144 reads: 0.14 s alone)
RESCUE_THREADS = 4


def pair_batches(reads_path, mates_path, batch_size):
    if mates_path is None:
        return readsmod.read_interleaved_batches(reads_path, max_reads=batch_size)
    return readsmod.read_pair_batches(reads_path, mates_path, max_reads=batch_size)


def estimate_from_results(prefetched, contig_offsets, opts, n_pairs=ESTIMATE_PAIRS):
    """The insert size from the first ``n_pairs`` pairs of ``prefetched`` [(batch, DeviceResult), ...]."""
    import numpy as np

    parts, lengths, base, left = [], [], 0, 2 * n_pairs
    for batch, result in prefetched:
        take = min(batch.n, left)
        if take <= 0:
            break
        cut = int(np.searchsorted(result.rs >> 1, take))
        parts.append((result.rs[:cut].astype(np.int64) + 2 * base, result.ref_start[:cut], result.ref_end[:cut],
                      result.dist[:cut]))
        lengths.append(batch.lengths[:take])
        base += take
        left -= take
    if not parts:
        return None, 0
    rs, start, end, dist = (np.concatenate([p[i] for p in parts]) for i in range(4))
    sample = insert_sample(rs, start, end, dist, np.concatenate(lengths), contig_offsets, opts)
    return estimate_insert_size(sample), base // 2


def map_pairs(core, post, index, header, reads_path, mates_path, opts, output=None, threads=1, batch_size=None,
              insert_size=None, log=None, t_start=None):
    """Map pairs (``mates_path`` None: ``reads_path`` is interleaved); returns a summary dict."""
    t_start = time.perf_counter() if t_start is None else t_start
    device, resident = core.device, core.resident
    offsets, ends = post.offsets, post.ends  # contig bounds, global coordinates
    batches = iter(pair_batches(reads_path, mates_path, batch_size))
    stats = {"raw_hits": 0, "candidates": 0, "rescue_windows": 0, "rescued_hits": 0}
    cached = {}

    # estimate the insert size from the first ESTIMATE_PAIRS pairs, before any output is opened
    prefetched = []
    times = StageTimes()
    if insert_size is None:
        covered = 0
        while covered < ESTIMATE_PAIRS:
            batch = next(batches, None)
            if batch is None:
                break
            t0 = time.perf_counter()
            result = core.map_batch(batch.codes, batch.offsets)
            times.add("device", time.perf_counter() - t0)
            prefetched.append((batch, result))
            cached[batch.first_record] = result
            covered += batch.n // 2
        insert_size, sampled = estimate_from_results(prefetched, offsets, opts)
        if log:
            if insert_size is None:
                log(f"insert size: fewer than 10 uniquely mapped FR pairs among the first {sampled:,} pairs; "
                    "no pair is marked proper and mates are not rescued (give -I MEAN,STD to pair them)")
            else:
                log(f"{insert_size.describe()} of the first {sampled:,} pairs")
    elif log:
        log(insert_size.describe())

    def device_step(batch):
        result = cached.pop(batch.first_record, None)
        if result is None:
            result = core.map_batch(batch.codes, batch.offsets)
        stats["raw_hits"] += result.raw_hits
        stats["candidates"] += result.candidates
        return result

    side_queue = device.side_queue()
    rescue_pool = ThreadPoolExecutor(max_workers=RESCUE_THREADS, thread_name_prefix="peanut-windows")

    def rescue_step(batch, result):
        # its own thread and queue: the host part (anchors, windows) and the rescue kernel of batch k run
        # while the device thread maps batch k + 1; the windows are computed in ranges of pairs side by side
        base = (result.rs, result.ref_start, result.ref_end, result.dist)
        extra, n_windows = rescue_batch(device, resident, batch, *base, insert_size, opts, offsets, ends,
                                        queue=side_queue, pool=rescue_pool, n_chunks=min(threads, RESCUE_THREADS))
        stats["rescue_windows"] += n_windows
        stats["rescued_hits"] += len(extra[0])
        if len(extra[0]):
            rs, start, end, dist = merge_hits(base, extra)
            result = DeviceResult(rs=rs, ref_start=start, ref_end=end, dist=dist, raw_hits=result.raw_hits,
                                  candidates=result.candidates, seconds=result.seconds)
        return result

    def post_steps(batch, result):
        return post.pair_chunk_steps(batch, result, max(1, threads) * post.CHUNKS_PER_THREAD, insert_size)

    def all_batches():
        while prefetched:
            yield prefetched.pop(0)[0]
        yield from batches

    with rescue_pool, sam.open_output(output, header, threads=threads) as out:
        n_reads, _ = run_pipeline(all_batches(), device_step, post_steps, out.write, threads=threads, log=log,
                                  times=times, second_step=rescue_step)
        if n_reads == 0:
            raise PeanutError(f"{reads_path}: empty file (no reads)")
    wall = time.perf_counter() - t_start
    counts = times.counts
    mapped, proper = counts.get("mapped", 0), counts.get("proper", 0)
    summary = {
        "reads": n_reads,
        "pairs": n_reads // 2,
        "mapped": mapped,
        "unmapped": n_reads - mapped,
        "proper": proper,
        "mate_unmapped": counts.get("mate_unmapped", 0),
        "multi": counts.get("multi", 0),
        "insert_size": insert_size,
        "rescue_windows": stats["rescue_windows"],
        "rescued_hits": stats["rescued_hits"],
        "seconds": wall,
        "stages": dict(times.seconds),
        "candidates_per_read": stats["candidates"] / max(n_reads, 1),
        "raw_hits_per_read": stats["raw_hits"] / max(n_reads, 1),
    }
    if log:
        pct = 100.0 / max(n_reads, 1)
        stage_text = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(times.seconds.items()))
        log(
            f"{n_reads // 2:,} pairs ({n_reads:,} reads) in: {mapped:,} reads mapped ({mapped * pct:.2f} %), "
            f"{proper:,} properly paired ({proper * pct:.2f} %), {summary['mate_unmapped']:,} with the mate "
            f"unmapped; {stats['rescued_hits']:,} hits rescued in {stats['rescue_windows']:,} mate windows; "
            f"{wall:.1f} s ({n_reads / max(wall, 1e-9):,.0f} reads/s)"
        )
        log(f"stage seconds (summed over threads): {stage_text}")
    return summary


__all__ = ["map_pairs", "pair_batches", "estimate_from_results"]
