"""peanut-py's kernels on the Oclgrind simulator: the program that tests/test_oclgrind.py runs under
``oclgrind``, and the inputs and wrapper calls that the test repeats on the default device to compare.

    python tests/oclgrind_driver.py WORKDIR

WORKDIR holds the inputs of :func:`write_inputs` and an index of ``ref.fa`` (``ref.h5``). The driver maps the
pairs with ``peanut map MAP_ARGS`` (``map.sam``), calls the wrappers of :func:`wrapper_results`
(``wrappers.npz``) and writes ``kernels.json``: the kernel entry points of every program built from
peanut_py/kernels/*.cl, and the kernels launched.

Everything runs in the main thread: Oclgrind's uninitialised-value checker (21.10) crashes on a host-to-device
copy issued from any other thread, so the mapping pipeline runs its stages one after the other here (same
batches, same steps, same order) instead of on its threads.
"""
import gzip
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "index" / "example"

# The reference: two contigs cut from the bundled chr20 slice, with a run of Ns inside a read's span.
CONTIGS = (("a", 80_000, 90_500), ("b", 90_500, 100_000))
N_RUN = (4_000, 4_006)  # in contig a
Q = 10  # a q-group bitmap of 4^10 bits: 4^16 would keep the simulator busy for hours
PAIRS = 8  # real read pairs that lie inside one contig
RESCUED_MATES = 2  # mates 2 of the first pairs, mutated so that only mate rescue finds them
INSERT_SIZE = "316,70"  # the library's; -I makes rescue run, the estimate needs more pairs than these
# Diagonals added on both sides of candidates so that validation needs bit-vectors of 1 to 4 words.
WIDENINGS = (0, 20, 50, 80)
RESCUE_TASKS, RESCUE_MARGIN = 8, 40
# Slot entries sorted in local memory at once by the work-group slot sort of the "group_sort" variant: few
# enough that read strands exceed it, so their slots are sorted in local blocks and then merged.
GROUP_SORT_LOCAL = 16

# peanut map's arguments after INDEX: the GPU path (Oclgrind reports a GPU) of every stage, rescue included.
MAP_ARGS = ["-I", INSERT_SIZE, "r1.fq", "r2.fq"]

_COMPLEMENT = str.maketrans("ACGTN", "TGCAN")
_CHANGE = str.maketrans("ACGTN", "CGTAN")


def _slice_sequence():
    with gzip.open(EXAMPLE / "chr20_slice.fa.gz", "rt") as f:
        return "".join(line.strip() for line in f if not line.startswith(">")).upper()


def _fastq(path):
    with gzip.open(path, "rt") as f:
        lines = f.read().splitlines()
    return [lines[i:i + 4] for i in range(0, len(lines), 4)]


def _write_fastq(path, records):
    Path(path).write_text("".join(f"{name}\n{seq}\n+\n{qual}\n" for name, seq, _, qual in records))


def _mutate(seq, every):
    """Every ``every``-th base changed (so no q-gram of the read survives, but the alignment does)."""
    s = list(seq)
    for i in range(every // 2, len(s), every):
        s[i] = s[i].translate(_CHANGE)
    return "".join(s)


def write_inputs(workdir):
    """ref.fa and r1.fq/r2.fq in ``workdir``: real pairs (of which some mates only rescue finds), a pair with a
    mate over the Ns, and a pair of a read shorter than q and a read of Ns."""
    workdir = Path(workdir)
    genome = _slice_sequence()
    contigs = {name: genome[lo:hi] for name, lo, hi in CONTIGS}
    a = contigs["a"]
    contigs["a"] = a[:N_RUN[0]] + "N" * (N_RUN[1] - N_RUN[0]) + a[N_RUN[1]:]
    with open(workdir / "ref.fa", "w") as f:
        for name, seq in contigs.items():
            f.write(f">{name}\n" + "".join(seq[i:i + 60] + "\n" for i in range(0, len(seq), 60)))

    # pairs whose mates both lie well inside one contig (original positions are 1-based in the slice)
    spans = {}
    with gzip.open(EXAMPLE / "original_positions.tsv.gz", "rt") as f:
        for line in f:
            name, _, _, pos, _ = line.split("\t")
            spans.setdefault(name, []).append(int(pos) - 1)
    inside = [(lo + 200, hi - 400) for _, lo, hi in CONTIGS]
    r1 = _fastq(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz")
    r2 = _fastq(EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz")
    picked = [i for i, rec in enumerate(r1)
              if any(all(lo <= p <= hi for p in spans[rec[0][1:].split()[0]]) for lo, hi in inside)][:PAIRS]
    mates1 = [r1[i] for i in picked]
    mates2 = [list(r2[i]) for i in picked]
    for rec in mates2[:RESCUED_MATES]:
        rec[1] = _mutate(rec[1], 9)

    def record(name, seq):
        return (f"@{name}", seq, "+", "I" * len(seq))

    a = contigs["a"]
    mates1 += [record("over_ns", a[N_RUN[0] - 300:N_RUN[0] - 200]), record("short_and_n", contigs["b"][700:710])]
    mates2 += [record("over_ns", _mutate(a[N_RUN[0] - 60:N_RUN[0] + 60], 31).translate(_COMPLEMENT)[::-1]),
               record("short_and_n", "N" * 50)]
    _write_fastq(workdir / "r1.fq", mates1)
    _write_fastq(workdir / "r2.fq", mates2)


def wrapper_results(device, workdir):
    """The wrapper calls of the check besides the mapping run, on ``device``: filtration as a whole, per
    reference position, in hit windows smaller than a read strand's hits (merged afterwards), with masked
    q-grams, with the q-gram table in parts and streamed, and with the slots sorted by a work-group each in
    local blocks of GROUP_SORT_LOCAL entries (the GPU's slot sort, whatever ``device`` is); the q-group
    index unfolded with O sorted the same way; validation of
    candidates widened to need every bit-vector size; mate rescue in work-groups of
    several sizes; the final alignment in both scratch layouts.  A dict of arrays."""
    import pyopencl.array as cla

    from align_oracle import BWA_MEM, make_batch, random_pair
    from peanut_py import filtration, qgroup, rescue
    from peanut_py.align_device import LAYOUTS, align_batch_device
    from peanut_py.filtration import Candidates, filter_reference
    from peanut_py.options import MapOptions
    from peanut_py.qgroup import QGroupIndex, ReadBuffer
    from peanut_py.reads import read_batches
    from peanut_py.reference import ReferenceIndex
    from peanut_py.resident import ResidentReference
    from peanut_py.validation import validate_hits

    workdir = Path(workdir)
    out = {}
    with ReferenceIndex(workdir / "ref.h5") as index:
        resident = ResidentReference.from_index(device, index)
        # the q-gram table in parts (several slot ranges per read buffer) and streamed (packed positions)
        tables = {"parts": ResidentReference.from_index(device, index, part_positions=resident.n_positions // 3),
                  "streamed": ResidentReference.from_index(device, index, table_budget=0,
                                                           chunk_positions=resident.n_positions // 3)}
        starts, ends = index.offsets.astype(np.int64), (index.offsets + index.lengths).astype(np.int64)
    batches = [next(iter(read_batches(str(workdir / name), 1 << 10))) for name in ("r1.fq", "r2.fq")]
    codes = np.concatenate([b.codes for b in batches])
    offsets = np.concatenate([batches[0].offsets, batches[1].offsets[1:] + batches[0].offsets[-1]])
    rb = ReadBuffer(device, codes, offsets, q=resident.q)
    qi = QGroupIndex(device, rb, resident.q)
    first = codes[offsets[0]:offsets[0] + 40].astype(np.uint64)
    weights = np.uint64(4) ** np.arange(Q - 1, -1, -1, dtype=np.uint64)
    masked = np.unique([int((first[i:i + Q] * weights).sum()) for i in range(0, 40 - Q, 3)]).astype(np.uint32)
    variants = {
        "whole": {},
        "per_position": dict(per_position=True, min_votes=1),
        "masked": dict(masked_kmers=masked),
    }
    for name, kwargs in variants.items():
        cand = filter_reference(device, resident, qi, rb, **kwargs)
        for field, values in cand.to_host().items():
            out[f"{name}.{field}"] = values
    saved = filtration.SLOT_SORT_BY_GROUP, filtration.SORT_LOCAL
    filtration.SLOT_SORT_BY_GROUP, filtration.SORT_LOCAL = True, GROUP_SORT_LOCAL
    try:
        for field, values in filter_reference(device, resident, qi, rb, min_votes=1).to_host().items():
            out[f"group_sort.{field}"] = values
    finally:
        filtration.SLOT_SORT_BY_GROUP, filtration.SORT_LOCAL = saved
    # O sorted by a work-group per slot of more than one entry, in local blocks of GROUP_SORT_LOCAL (a GPU's
    # sort of O, unfolded), over the reads and tandem repeats (slots of hundreds of entries, merged in passes)
    repeats = np.concatenate([np.resize(np.array(m, np.uint8), 70) for m in ([0], [1, 2], [0, 3, 1]) * 6])
    rep_codes = np.concatenate([codes, repeats])
    rep_offsets = np.concatenate([offsets, offsets[-1] + 70 * np.arange(1, 19)])
    saved = qgroup.SORT_BY_GROUP, qgroup.SORT_BY_GROUP_ABOVE, qgroup.SORT_LOCAL
    qgroup.SORT_BY_GROUP, qgroup.SORT_BY_GROUP_ABOVE, qgroup.SORT_LOCAL = True, 1, GROUP_SORT_LOCAL
    try:
        unfolded = QGroupIndex(device, ReadBuffer(device, rep_codes, rep_offsets, q=resident.q), resident.q, fold=0)
        out["group_sort.O"] = unfolded.O.get()[: unfolded.n_occurrences]
        out["group_sort.Sp"] = unfolded.Sp.get()[: unfolded.n_distinct + 1]
    finally:
        qgroup.SORT_BY_GROUP, qgroup.SORT_BY_GROUP_ABOVE, qgroup.SORT_LOCAL = saved
    for name, table in tables.items():
        assert len(table.parts) > 1 if name == "parts" else table.streamed
        for field, values in filter_reference(device, table, qi, rb).to_host().items():
            out[f"{name}.{field}"] = values
    # hit windows: the first read alone, in windows one hit smaller than its strand's hits, so that strand is
    # emitted in two windows and merged (every range and merge costs many scans, slow on the simulator)
    first_read = out["per_position.rs"] < 2
    hits = np.bincount(out["per_position.rs"][first_read], weights=out["per_position.votes"][first_read]).max()
    rb1 = ReadBuffer(device, codes[:offsets[1]], offsets[:2], q=resident.q)
    cand = filter_reference(device, resident, QGroupIndex(device, rb1, resident.q), rb1, min_votes=1,
                            max_hits_per_pass=int(hits) - 1)
    for field, values in cand.to_host().items():
        out[f"windows.{field}"] = values

    found = {f: out[f"whole.{f}"] for f in Candidates.FIELDS}
    spread = np.resize(np.array(WIDENINGS, dtype=np.uint32), len(found["rs"]))
    wide = [found["rs"], found["diag_lo"] - spread, found["diag_hi"] + spread, found["votes"]]
    wide = Candidates(len(spread), *(cla.to_device(device.queue, a.astype(np.uint32)) for a in wide))
    for field, values in validate_hits(device, resident, rb, wide).to_host().items():
        out[f"wide.{field}"] = values

    # rescue windows: RESCUE_MARGIN bases beyond the first candidates, inside their contigs (every cell of
    # a window costs the simulator as much as a validation's column)
    task = {f: v[:RESCUE_TASKS] for f, v in found.items()}
    contig = np.searchsorted(starts, task["diag_lo"], side="right") - 1
    length = np.diff(rb.rs_start_host.astype(np.int64))[task["rs"]]
    lo = np.maximum(starts[contig], task["diag_lo"].astype(np.int64) - RESCUE_MARGIN)
    hi = np.minimum(ends[contig], task["diag_hi"].astype(np.int64) + length + RESCUE_MARGIN)
    for group in (1, 3, 64):
        got = rescue.align_windows(device, resident, rb.text.get(), rb.rs_start_host, task["rs"], lo, hi,
                                   MapOptions(), group=group)
        for field, values in zip(("score", "end_i", "end_j", "start_diag"), got):
            out[f"rescue_{group}.{field}"] = values

    rng = np.random.default_rng(7)
    pairs = [random_pair(rng) for _ in range(12)]
    rseq, roff, fseq, foff = make_batch([(p[0], p[1]) for p in pairs])
    gstart = rng.integers(1024, 1 << 30, size=len(pairs))
    band_lo = np.array([p[2] for p in pairs], dtype=np.int64)
    band_hi = np.array([p[3] for p in pairs], dtype=np.int64)
    local = np.arange(len(pairs)) % 2 == 0
    for layout in LAYOUTS:
        res = align_batch_device(device, rseq, roff, fseq, foff, gstart, band_lo, band_hi, local, **BWA_MEM,
                                 layout=layout)
        for field in ("pos", "ref_end", "read_begin", "read_end", "score", "nm", "cigar", "cigar_offsets"):
            out[f"align_{layout}.{field}"] = getattr(res, field)
    return out


def run_sequentially(batches, device_step, post_steps, write, threads=1, queue_size=2, log=None, times=None,
                     host_stage=None, host_name="rescue"):
    """pipeline.run_pipeline's contract, all in the calling thread."""
    from peanut_py.pipeline import StageTimes, TwoPhaseSteps

    times = times if times is not None else StageTimes()
    if isinstance(device_step, (list, tuple)):  # one step per device; the driver opens one device
        (device_step,) = device_step
    results = ((batch, device_step(batch)) for batch in batches)
    if host_stage is not None:
        results = host_stage(results)
    n_reads = 0
    for batch, result in results:
        steps = post_steps(batch, result)
        if isinstance(steps, TwoPhaseSteps):
            steps = steps.join([plan() for plan in steps.plans])
        for step in steps:
            text, n, *extra = step()
            write(text)
            n_reads += n
            for stats in extra:
                times.count(stats)
    return n_reads, times


def main(workdir):
    import pyopencl as cl

    from peanut_py import cli, device as device_module, mapping
    from peanut_py.device import KERNEL_DIR, Device

    workdir = Path(workdir)
    launched = set()
    devices = []
    kernel_call = cl.Kernel.__call__

    def recording_call(self, *args, **kwargs):
        launched.add(self.function_name)
        return kernel_call(self, *args, **kwargs)

    class RecordedDevice(Device):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            devices.append(self)

    cl.Kernel.__call__ = recording_call
    mapping.run_pipeline = run_sequentially
    mapping._warm_up = lambda *args, **kwargs: None  # the programs build on first use, in this thread
    device_module.Device = RecordedDevice  # the class open_devices makes the run's device from

    class OpenedHere:
        """cli's DeviceOpening without its thread: Oclgrind takes OpenCL calls from one thread only."""

        def __init__(self, spec=None, memory_cap=None):
            self._args = (spec, memory_cap)

        def result(self):
            return device_module.open_devices(*self._args)

        def join(self):
            pass

    cli.DeviceOpening = OpenedHere
    cli.main(["map", "--device", "oclgrind", "-o", str(workdir / "map.sam"), str(workdir / "ref.h5"),
              *(str(workdir / a) if a.endswith(".fq") else a for a in MAP_ARGS)])
    # the wrappers with a CPU device's buffer handling (host memory: folded index, blocked kmer scan,
    # per-position slot counts, the zeroing kernel), which no GPU run takes
    device = RecordedDevice("oclgrind", host_memory=True)
    np.savez(workdir / "wrappers.npz", **wrapper_results(device, workdir))

    programs = {}
    for dev in devices:
        for key in dev.built_keys():
            if key[0] == "program" and (KERNEL_DIR / f"{key[1]}.cl").exists():
                names = {k.function_name for k in dev.program(key[1], **dict(key[2])).all_kernels()}
                programs.setdefault(key[1], set()).update(names)
    (workdir / "kernels.json").write_text(json.dumps(
        {"programs": {k: sorted(v) for k, v in sorted(programs.items())}, "launched": sorted(launched)}, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tests"))
    main(sys.argv[1])
