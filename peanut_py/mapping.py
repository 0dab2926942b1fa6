"""`peanut map`: the index, the device, the pipeline and the SAM writer wired together for one run.

The single-end and paired-end parts of a run (its batches, host stage, postprocessing steps and summary)
live in map_single.py and map_paired.py; this module owns what both share.
"""
import contextlib
import os
import resource
import threading
import time
from dataclasses import replace

from . import sam
from .clipped import ClippedSearch
from .device import open_devices
from .device_stage import DeviceStage
from .errors import PeanutError
from .genome import HostGenome
from .input_streams import check_inputs, display_name
from .layout import MAX_READ_LENGTH, default_fold, index_fixed_bytes, reads_per_buffer
from .options import RunOptions, check
from .outfiles import remove_stale_temporaries
from .pipeline import StageTimes, TwoPhaseSteps, postprocess_threads, run_pipeline
from .post_processes import ProcessPostprocessor, WorkerProcesses, use_processes, worker_processes
from .postprocess import Postprocessor, resolve_align_on
from .insert_size import ESTIMATE_PAIRS, estimate_before_run
from .reference import ReferenceIndex, reference_checksum
from .resident import ResidentReference


def open_index(path):
    if not os.path.exists(path):
        raise PeanutError(f"{path}: no such index file (build one with `peanut index REF.fa`)")
    index = ReferenceIndex(path)
    try:
        if reference_checksum(index.names, index.md5s) != index.checksum:
            raise PeanutError(f"{path}: the index's checksum does not match its sequences; rebuild it with "
                              "`peanut index`")
        index.verify(full=False)
    except BaseException:
        index.close()
        raise
    return index


def check_reference(index, fasta_path, index_path):
    """Refuse an index built from another FASTA than ``fasta_path`` (compares per-contig MD5s)."""
    import hashlib

    from .fasta import read_fasta

    names, md5s = [], []
    for record in read_fasta(fasta_path):
        names.append(record.name)
        md5s.append(hashlib.md5(record.sequence).hexdigest())
    if reference_checksum(names, md5s) != index.checksum:
        raise PeanutError(f"{index_path}: this index was not built from {fasta_path} (sequence checksums differ)")


# Reads per batch at most: enough to fill a GPU (filtration streams the reference once per batch), few enough
# that reading, the device and the postprocessing pool work on consecutive batches at the same time.
PIPELINE_BATCH = 1 << 18
# Pairs on a GPU: twice as many reads (as many pairs as PIPELINE_BATCH has reads). A batch of pairs carries
# more host steps than one of single reads (mate rescue, the pairs' postprocessing), whose share of the run
# shrinks with larger batches; single-end runs gain nothing from it (docs/gpu.md, "Where the device sits idle,
# and the batch size for pairs").
PAIRED_PIPELINE_BATCH = 1 << 19
# On a CPU device (PoCL) the buffer is host memory, and the first batch pays the kernel's zeroing of every
# fresh page it touches while later batches reuse the pool's pages; small batches keep that cost to one
# small batch, while the per-batch fixed work (the kmer list scanned against I, clearing I, the S scan) stays
# a small share (docs/device.md, "Memory on CPU devices").
CPU_PIPELINE_BATCH = 1 << 15


# A warm-up still running after this many seconds is compiling kernels, not loading them from a cache.
COMPILE_NOTICE_AFTER = 2.0


def _warm_up(stage, paired, log=None, failed=None):
    """Build the run's programs ahead of the first batch; with ``log``, say so when that means compiling
    (the first run with a device, driver or peanut-py version), which can take a minute on a CPU device.
    Nothing is said once ``failed`` (an Event) is set: a failed run ends with its one error line."""
    shown = []

    def notice():
        if failed is not None and failed.is_set():
            return
        shown.append(time.perf_counter())
        log(f"compiling the OpenCL kernels for {stage.device.name}; this happens once per device and "
            "peanut-py version (later runs load them from the OpenCL driver's or PyOpenCL's cache)")

    timer = threading.Timer(COMPILE_NOTICE_AFTER, notice) if log else None
    t0 = time.perf_counter()
    if timer:
        timer.daemon = True
        timer.start()
    try:
        stage.warm_up()
        if paired:
            from . import rescue

            rescue.build_programs(stage.device)
    finally:
        if timer:
            timer.cancel()
            timer.join()
        if shown and not (failed is not None and failed.is_set()):
            # PoCL builds a program's kernels for real at their first launch, so there the first batch still
            # pays for part of the compile; saying "ready" would promise too much
            later = ("; a CPU device finishes compiling each kernel at its first launch, in the first batch"
                     if stage.device.host_memory else "")
            log(f"OpenCL kernels built after {time.perf_counter() - t0:.1f} s{later}")


def prepare_output(index_path, reads_path, mates, reference, output, output_format, log):
    """Before any work of a run: the inputs and the output checked (input_streams.check_inputs,
    sam.check_output_path), and the temporary files a killed run left beside the output removed."""
    check_inputs(reads_path, mates)
    sam.check_output_path(output, (index_path, reads_path, mates, reference), fmt=output_format)
    if output not in (None, "-") and not sam.is_special_file(output):
        stale = remove_stale_temporaries(output)
        if stale and log:
            log(f"removed {len(stale)} temporary file{'s' if len(stale) > 1 else ''} that a killed run left beside "
                f"{output}")


@contextlib.contextmanager
def _closing(workers):
    try:
        yield
    finally:
        if workers is not None:
            workers.close()


def pipeline_batch(device, paired=False):
    """The largest batch (reads) the pipeline uses on ``device``, before its memory is considered."""
    if device.host_memory:
        return CPU_PIPELINE_BATCH
    return PAIRED_PIPELINE_BATCH if paired else PIPELINE_BATCH


def map_reads(index_path, reads_path, opts, output=None, run=RunOptions(), device_spec=None, read_group=None,
              reference=None, command_line=None, log=None, mates=None, interleaved=False, insert_size=None,
              output_format=None, hit_only=False, devices=None, shard=None):
    """Map reads; returns a summary dict. SAM/BAM goes to ``output`` (None = stdout): ``output_format`` 'sam'
    or 'bam' (None: from the name, sam.output_format), ``hit_only``: unmapped reads left out
    (sam.drop_unmapped).

    ``opts``: options.MapOptions (what is reported); ``run``: options.RunOptions (threads, batch size, memory
    cap: never the output).  Paired-end: ``mates`` (the second file) or ``interleaved=True``;
    ``insert_size`` (insert_size.InsertSize, from ``-I``) replaces the estimate. ``devices``: a
    device.DeviceOpening already under way for ``device_spec`` (the CLI starts one before it imports this
    module), else the devices are opened here. ``shard``: this process is one mapping process of several
    (shards.ShardLink): it maps its share of the batches and hands their records to the process that writes
    the output, which checked the inputs and the output before it started this one."""
    check(opts)
    check(run)
    if shard is None:
        prepare_output(index_path, reads_path, mates, reference, output, output_format, log)
    t_start = time.perf_counter()
    requested, threads = run.threads, postprocess_threads(run.threads)
    paired = mates is not None or interleaved
    index = open_index(index_path)
    if reference is not None:
        check_reference(index, reference, index_path)
    rg_id = sam.parse_read_group(read_group)[1] if read_group else None  # a bad -R fails here, before the devices open
    opts = opts.with_read_group(rg_id)
    # several devices (--device all or a list): one device thread each, the first one also aligns and rescues
    devices = devices.result() if devices is not None else open_devices(device_spec, memory_cap=run.memory_cap)
    device = devices[0]
    opts = replace(opts, align_on=resolve_align_on(opts.align_on, device, threads))
    # the worker processes start (and open the index) while the reference goes to the devices
    workers = WorkerProcesses(worker_processes(threads), index_path, opts) \
        if use_processes(run.workers, threads, opts.align_on) else None
    with _closing(workers):
        t0 = time.perf_counter()
        residents = ResidentReference.from_index_many(devices, index)
        # the final alignment unpacks its windows from the packed sequence mapped from the index
        genome = HostGenome.from_index(index)
        upload = time.perf_counter() - t0
        batch_size = run.batch_size
        if batch_size is None:
            # one size for every device (the reader makes the batches): the smallest device's
            batch_size = min(reads_per_buffer(d, 150, q=index.q, reserved_bytes=r.device_bytes,
                                              max_reads=pipeline_batch(d, paired)) for d, r in zip(devices, residents))
        if shard is not None:
            # every mapping process must cut the input into the same batches: the smallest one's
            batch_size = shard.agree_batch_size(batch_size)
        if log:
            for d, resident in zip(devices, residents):
                table = ("q-gram table streamed in chunks" if resident.streamed else "q-gram table resident"
                         + (f" in {len(resident.parts)} parts" if len(resident.parts) > 1 else ""))
                which = f"[{d.info.index}] " if len(devices) > 1 else ""
                log(f"device: {which}{d.name} ({d.global_mem / 2**30:.1f} GiB); the run allocates there the reference "
                    f"({resident.device_bytes / 2**20:,.0f} MiB, {table}; {upload:.1f} s to load and upload), the "
                    f"q-group index ({index_fixed_bytes(index.q, fold=default_fold(d)) / 2**20:,.0f} MiB) and per batch "
                    f"of up to {batch_size:,} reads what its reads and hits need")
            n, kind = (workers.n, ("process", "processes")) if workers is not None \
                else (threads, ("thread", "threads"))
            log(f"-t {requested}: {n} postprocessing {kind[n > 1]}"
                + (f", {len(devices)} devices" if len(devices) > 1 else ""))
        stages = [DeviceStage(d, r, min_identity=opts.min_identity, best_stratum=opts.best_stratum_selection,
                              clipped=ClippedSearch.for_options(opts))
                  for d, r in zip(devices, residents)]
        if log and index.mask_threshold and residents[0].masked_kmers is None:
            log(f"note: {index_path} was built before indexes listed their masked q-grams, so the run misses hits "
                "at masked q-grams that it would find with an index rebuilt by `peanut index`")
        stage = stages[0]
        # the programs build on side threads while the postprocessor loads and the first batch is read
        failed = threading.Event()
        warms = [threading.Thread(target=_warm_up, args=(s, paired, log, failed),
                                  name=f"peanut-warm-up-{i}", daemon=True) for i, s in enumerate(stages)]
        for warm in warms:
            warm.start()
        try:
            post = Postprocessor(index, genome, opts, device=device)
            if workers is not None:
                post = ProcessPostprocessor(post, workers)
            header = sam.index_header(index, read_group, command_line)
            if paired:
                from .map_paired import PairedRun, pair_batches

                mates_path = None if interleaved else mates
                known = False
                if shard is not None and insert_size is None:
                    # this process maps only some batches, so it estimates from the first pairs on its own
                    known = True
                    insert_size = estimate_before_run(pair_batches(reads_path, mates_path, 2 * ESTIMATE_PAIRS),
                                                      stage, post.offsets, opts.scoring, log=log)
                part = PairedRun(stages, post, reads_path, mates_path, opts, threads,
                                 insert_size=insert_size, log=log, insert_size_known=known)
            else:
                from .map_single import SingleEndRun

                part = SingleEndRun(post, reads_path, threads)
            if shard is not None:
                return _run_shard(stages, part, header, threads, batch_size, shard, output_format, hit_only)
            return _run(stages, part, header, reads_path, output, threads, batch_size, log, t_start,
                        output_format=output_format, hit_only=hit_only)
        except BaseException:
            failed.set()
            raise
        finally:
            # an exit while the warm-up is inside the driver aborts the process ("terminate called ...")
            for warm in warms:
                warm.join()
            index.close()


def _run(stages, part, header, reads_path, output, threads, batch_size, log, t_start, output_format=None,
         hit_only=False):
    """One run of the pipeline for the single-end or paired-end ``part`` on the device ``stages`` (one per
    device); returns the summary."""
    with sam.open_output(output, header, fmt=output_format, threads=threads, hit_only=hit_only) as out:
        tally = _pipeline(stages, part, part.batches(batch_size), threads, out.encode, out.write_encoded, log,
                          t_start)
        if tally["reads"] == 0:
            # an empty reads file is almost always a mistake upstream; leave no output that looks valid
            raise PeanutError(f"{display_name(reads_path)}: empty file (no reads)")
    return summarize(tally, type(part).summary, time.perf_counter() - t_start, log)


def _run_shard(stages, part, header, threads, batch_size, shard, output_format, hit_only):
    """This mapping process's batches through the pipeline; their records go to the writing process, each
    batch's followed by its end (shards.py); returns the tally."""
    encode = sam.encoder(header, sam.output_format(None, output_format), hit_only)
    batches = shard.batches(part, batch_size)
    # the first batch's time counts from the start of the writing process, as in a run of one process
    t_start = time.perf_counter() - (time.time() - shard.started_at)
    tally = _pipeline(stages, part, batches, threads, encode, shard.send, None, t_start, batch_end=shard.BATCH_END)
    shard.finish(tally)
    return tally


def _pipeline(stages, part, batches, threads, encode, write, log, t_start, batch_end=None):
    """The pipeline over ``batches``; returns the run's tally: reads, counters, seconds per stage and of the
    device's parts, first batch, and the part's details (what :func:`summarize` needs). ``batch_end``: as
    :func:`_encoding`."""
    stats = {"raw_hits": 0, "candidates": 0, "too_long": 0}
    device_parts = {}  # seconds of the device stage's parts (index, filter, validate, clipped)
    started = {}  # seconds from the start of the run to the first batch on a device
    stats_lock = threading.Lock()

    def device_step_of(stage):
        def split(n):
            if log:
                log(f"device {stage.device.name} ran out of memory for a batch of {n:,} reads; mapping its halves "
                    "one after the other (same output; --batch-size or --memory-cap make batches smaller)")

        def device_step(batch):
            if "first_batch" not in started:
                started["first_batch"] = time.perf_counter() - t_start
            result = stage.map_batch_or_split(batch.codes, batch.offsets, on_split=split)
            with stats_lock:
                for part, seconds in result.seconds.items():
                    device_parts[part] = device_parts.get(part, 0.0) + seconds
                stats["raw_hits"] += result.raw_hits
                stats["candidates"] += result.candidates
                stats["too_long"] += result.too_long
            return result

        return device_step

    times = StageTimes()
    n_reads, _ = run_pipeline(batches, [device_step_of(s) for s in stages],
                              _encoding(part.post_steps, encode, batch_end), write, threads=threads,
                              log=log, times=times, host_stage=part.host_stage, host_name=part.host_name)
    return {"reads": n_reads, "counts": dict(times.counts), "stages": dict(times.seconds),
            "device_parts": device_parts, "stats": stats, "first_batch": started.get("first_batch"),
            "details": part.details()}


def summarize(tally, part_summary, wall, log):
    """The run's summary dict from its tally (:func:`_pipeline`; summed over the mapping processes of a run
    with several: shards.py), and its log lines. ``part_summary``: SingleEndRun.summary or PairedRun.summary."""
    n_reads, counts, stats, started = tally["reads"], tally["counts"], tally["stats"], tally["first_batch"]
    mapped = counts.get("mapped", 0)
    summary = {
        "reads": n_reads,
        "mapped": mapped,
        "unmapped": n_reads - mapped,
        "multi": counts.get("multi", 0),
        "seconds": wall,
        "stages": dict(tally["stages"]),
        "candidates_per_read": stats["candidates"] / max(n_reads, 1),
        "raw_hits_per_read": stats["raw_hits"] / max(n_reads, 1),
        "too_long": stats["too_long"],
        "start_up": started,
    }
    summary, line = part_summary(n_reads, counts, summary, tally["details"])
    if stats["too_long"]:
        line += (f"; {stats['too_long']:,} reads longer than {MAX_READ_LENGTH:,} bases (not supported yet) "
                 "reported unmapped")
    if log:
        stage_text = ", ".join(f"{k} {v:.1f} s" + (_parts(tally["device_parts"]) if k == "device" else "")
                               for k, v in sorted(tally["stages"].items()))
        start_up = f", the first batch on the device after {started:.1f} s" if started is not None else ""
        log(f"{line}; {wall:.1f} s ({n_reads / max(wall, 1e-9):,.0f} reads/s{start_up})")
        log(f"stage seconds (summed over threads): {stage_text}")
        usage = resource.getrusage(resource.RUSAGE_SELF)
        log(f"process CPU: {usage.ru_utime:.1f} s user, {usage.ru_stime:.1f} s system")
    return summary


def _encoding(post_steps, encode, batch_end=None):
    """``post_steps`` whose every step's text is passed through ``encode`` (the writer's: BAM records, or
    unmapped reads left out) on the pool thread that made it; with ``batch_end`` (a class), one more step per
    batch returns ``batch_end(batch.n)`` as its text, which marks where the batch's records end."""
    def encoded(step):
        def run():
            text, n, *extra = step()
            return (encode(text), n, *extra)
        return run

    def ended(batch, made):
        made = [encoded(s) for s in made]
        if batch_end is not None:
            made.append(lambda: (batch_end(batch.n), 0))
        return made

    def steps(batch, result):
        made = post_steps(batch, result)
        if isinstance(made, TwoPhaseSteps):
            return TwoPhaseSteps(made.plans, lambda planned: ended(batch, made.join(planned)))
        return ended(batch, made)

    return steps


def _parts(seconds):
    return " (" + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()) + ")" if seconds else ""


__all__ = ["map_reads", "open_index", "check_reference", "prepare_output", "summarize"]
