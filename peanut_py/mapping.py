"""`peanut map`: wires the index, the device, the pipeline and the SAM writer together."""
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor


from . import reads as readsmod
from . import sam
from .core import MappingCore
from .device import Device
from .errors import PeanutError
from .pipeline import StageTimes, postprocess_threads, run_pipeline
from .qgroup import reads_per_buffer
from .reference import ReferenceIndex, reference_checksum
from .report import Postprocessor
from .resident import ResidentReference


def open_index(path):
    if not os.path.exists(path):
        raise PeanutError(f"{path}: no such index file (build one with `peanut index REF.fa`)")
    index = ReferenceIndex(path)
    if reference_checksum(index.names, index.md5s) != index.checksum:
        raise PeanutError(f"{path}: the index's checksum does not match its sequences; rebuild it with `peanut index`")
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
# that reading, the device and the postprocessing pool work on consecutive batches at the same time (one
# batch of a million reads on the H200: 1.2 s reading, then 1.0 s device, then 1.2 s postprocessing).
PIPELINE_BATCH = 1 << 18
# On a CPU device (PoCL) the buffer is host memory: the first batch pays the kernel's zeroing of every fresh
# page it touches (VM, 200 k reads in one batch: 13 s of system time, 21 s wall), later batches reuse the
# memory pool's pages. Batches of 32 k reads keep that cost to one small batch, while the per-batch fixed work
# (the kmer list scanned against I, clearing I, the S scan: ~0.067 s) stays under 5 % (VM, 200 k reads, -t 2:
# 12.6-13.7 s at 32 k, 14.4-15.1 s at 64 k, 15-21 s at 16 k; with the folded index 16 k and 32 k came out
# within noise, docs/mapping.md "Memory").
CPU_PIPELINE_BATCH = 1 << 15


def _warm_up(core, paired):
    core.warm_up()
    if paired:
        from . import rescue

        rescue.build_programs(core.device)


def pipeline_batch(device):
    """The largest batch the pipeline uses on ``device``, before its memory is considered."""
    return CPU_PIPELINE_BATCH if device.host_memory else PIPELINE_BATCH


def map_reads(index_path, reads_path, opts, output=None, threads=1, device_spec=None, batch_size=None,
              read_group=None, reference=None, command_line=None, log=None, memory_cap=None, mates=None,
              interleaved=False, insert_size=None):
    """Map single-end reads; returns a summary dict. SAM/BAM goes to ``output`` (None = stdout).

    Paired-end: ``mates`` (the second file) or ``interleaved=True``; ``insert_size`` (pairing.InsertSize,
    from ``-I``) replaces the estimate. See :func:`map_pairs`."""
    t_start = time.perf_counter()
    requested, threads = threads, postprocess_threads(threads)
    index = open_index(index_path)
    if reference is not None:
        check_reference(index, reference, index_path)
    rg_line, rg_id = sam.parse_read_group(read_group) if read_group else (None, None)
    opts.read_group_id = rg_id
    device = Device(device_spec, memory_cap=memory_cap)
    t0 = time.perf_counter()
    # the host's base codes (for the final alignment) are unpacked while the device copy loads and uploads
    with ThreadPoolExecutor(max_workers=1) as pool:
        genome = pool.submit(index.codes, 0, int(index.offsets[-1] + index.lengths[-1]))
        resident = ResidentReference.from_index(device, index)
        genome = genome.result()
    upload = time.perf_counter() - t0
    if log:
        table = "q-gram table streamed in chunks" if resident.streamed else "q-gram table resident"
        log(f"device: {device.name}, {device.global_mem / 2**30:.1f} GiB used at most; reference on the device "
            f"({resident.device_bytes / 2**20:,.0f} MiB, {table}; {upload:.1f} s to load and upload); "
            f"-t {requested}: {threads} postprocessing thread{'s' if threads > 1 else ''}")
    if batch_size is None:
        batch_size = reads_per_buffer(device, 150, q=index.q, reserved_bytes=resident.device_bytes,
                                      max_reads=pipeline_batch(device))
    core = MappingCore(device, resident, min_identity=opts.min_identity, best_stratum=opts.best_stratum_selection)
    paired = mates is not None or interleaved
    # the programs build on a side thread while the postprocessor loads and the first batch is read
    warm = threading.Thread(target=_warm_up, args=(core, paired), name="peanut-warm-up", daemon=True)
    warm.start()
    try:
        post = Postprocessor(index, genome, opts, device=device)
        header = sam.sam_header(index.names, index.lengths, md5s=index.md5s, read_group=rg_line,
                                program_command_line=command_line)
        if paired:
            from .paired_mapping import map_pairs

            return map_pairs(core, post, index, header, reads_path, mates, opts, output=output, threads=threads,
                             batch_size=batch_size, insert_size=insert_size, log=log, t_start=t_start)
        return _map_single(core, post, header, reads_path, output, threads, batch_size, log, t_start)
    finally:
        # an exit while the warm-up is inside the driver aborts the process ("terminate called ...")
        warm.join()
        index.close()


def _map_single(core, post, header, reads_path, output, threads, batch_size, log, t_start):
    stats = {"raw_hits": 0, "candidates": 0}

    def device_step(batch):
        result = core.map_batch(batch.codes, batch.offsets)
        stats["raw_hits"] += result.raw_hits
        stats["candidates"] += result.candidates
        return result

    def post_steps(batch, result):
        return post.chunk_steps(batch, result, max(1, threads) * post.CHUNKS_PER_THREAD)

    times = StageTimes()
    batches = readsmod.read_batches(reads_path, max_reads=batch_size)
    with sam.open_output(output, header, threads=threads) as out:
        n_reads, _ = run_pipeline(batches, device_step, post_steps, out.write, threads=threads, log=log, times=times)
        if n_reads == 0:
            # an empty reads file is almost always a mistake upstream; leave no output that looks valid
            raise PeanutError(f"{reads_path}: empty file (no reads)")
    wall = time.perf_counter() - t_start
    mapped = times.counts.get("mapped", 0)
    summary = {
        "reads": n_reads,
        "mapped": mapped,
        "unmapped": n_reads - mapped,
        "multi": times.counts.get("multi", 0),
        "seconds": wall,
        "stages": dict(times.seconds),
        "candidates_per_read": stats["candidates"] / max(n_reads, 1),
        "raw_hits_per_read": stats["raw_hits"] / max(n_reads, 1),
    }
    if log:
        pct = 100.0 * mapped / max(n_reads, 1)
        stage_text = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(times.seconds.items()))
        log(
            f"{n_reads:,} reads in, {mapped:,} mapped ({pct:.2f} %), {n_reads - mapped:,} unmapped, "
            f"{summary['multi']:,} multi-mapped; {wall:.1f} s ({n_reads / max(wall, 1e-9):,.0f} reads/s)"
        )
        log(f"stage seconds (summed over threads): {stage_text}")
    return summary


__all__ = ["map_reads"]
