"""The HDF5 reference index: ``build_index`` (``peanut index``) and ``ReferenceIndex`` (the host-side reader).

The index holds the reference in the padded global coordinates of docs/architecture.md: the 2-bit packed
sequence, the non-ACGT letters as exception intervals, and the table P of indexed q-gram positions sorted by
(q-gram value, position) with highly repetitive q-grams masked.  P is addressed by a bucket table on the top
``bucket_bits`` bits of the q-gram value; the value itself is not stored, since the packed sequence gives it
for every position.  The layout is specified in docs/FORMAT.md.

Building never sorts one giant array: q-grams are counted per fine bucket (the top 12 bits of their value),
then scattered round by round into a bounded buffer of 64-bit keys ``value << 32 | position`` and sorted
group by group (on ``threads`` threads), which yields P in final order; a counting sweep and a writing sweep
over the sorted groups let the big arrays be contiguous datasets of exact length, which the mapper maps from
the file.
"""
import hashlib
import mmap
import os
import resource
import threading
import time

import h5py
import numpy as np

from ._version import __version__
from .errors import InputError, PeanutError
from .sam import is_special_file
from .options import IndexOptions, check
from .outfiles import remove_stale_temporaries, replace_unless_interrupted, temporary_beside

DEFAULT_Q = IndexOptions.q
DEFAULT_STEP = IndexOptions.step
# q-grams occurring more often than this are left out of P (options.py)
DEFAULT_MASK_THRESHOLD = IndexOptions.mask_threshold
CONTIG_GAP = 1024
# Version 2: the bucket table /qgrams/buckets replaced the distinct q-gram values and their CSR starts.
FORMAT_VERSION = 2
FORMAT_NAME = "peanut-py reference index"

FINE_BITS = 12  # buckets = top FINE_BITS bits of a q-gram value (all of them when 2q < FINE_BITS); 4096
# write streams scatter faster than 65536 (fewer TLB misses) and still give ~1 M keys per bucket for a human genome
SORT_GROUP = 1 << 20  # keys per sort: consecutive buckets are sorted together up to about this many
ROUND_KEYS = 1 << 29  # keys per scatter round (8 bytes each: 4 GiB); bounds the build's memory
CHUNK = 1 << 20  # HDF5 chunk length in elements of the large datasets
FLUSH_ELEMENTS = 1 << 22  # elements buffered per dataset before a write to HDF5 (rounded to whole chunks)
MAX_GLOBAL = 1 << 32  # global positions are uint32 on the device
# The bucket table has about one bucket per BUCKET_POSITIONS indexed positions (1-2 bytes per position), up to
# 2^MAX_BUCKET_BITS buckets (512 MiB: a 3.1 Gbp genome at step 2 then has about 11 positions per bucket).
# Filtration looks each distinct q-gram of a read buffer up in its bucket by binary search, reading the
# q-gram of every position it probes from the packed sequence: fewer positions per bucket, fewer probes.
BUCKET_POSITIONS = 4
MAX_BUCKET_BITS = 27
# Genomes from this many bases on get step 2 from `--step auto` (docs/indexing.md): the q-gram table of a
# human genome at step 1 needs more than a 16 GB card or laptop holds.
AUTO_STEP_BASES = 1_000_000_000
# `peanut index --compress` only: the bucket table is ascending, so shuffle + gzip level 1 shrinks it many
# times; positions and packed gain under 20 % and would load 10x slower, so they are never compressed
# (measurements in FORMAT.md).
SMALL = dict(compression="gzip", compression_opts=1, shuffle=True)

# sequence letters (already uppercase) to base codes: A0 C1 G2 T3, anything else 4
_CODE_TABLE = bytes({65: 0, 67: 1, 71: 2, 84: 3}.get(b, 4) for b in range(256))
_LETTERS = np.frombuffer(b"ACGTN", dtype=np.uint8)


def _round16(n):
    return (n + 15) // 16 * 16


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _check_params(q, step, mask_threshold):
    check(IndexOptions(q=q, step=step, mask_threshold=mask_threshold))


def auto_step(total_bases):
    """The step of ``--step auto``: 1 below AUTO_STEP_BASES bases, else 2."""
    return 1 if total_bases < AUTO_STEP_BASES else 2


def bucket_bits_for(n_positions, q):
    """Bits of the q-gram value prefix that addresses the bucket table: about one bucket per
    BUCKET_POSITIONS positions, at most MAX_BUCKET_BITS and 2q."""
    return int(min(2 * q, MAX_BUCKET_BITS, max(1, (int(n_positions) // BUCKET_POSITIONS).bit_length())))


def qgram_values(packed, positions, q):
    """The q-gram value (first base in the highest bits) at each global position, from the packed words.

    Every position must have its q bases inside the packed sequence.  The device computes the same in
    ``qgram_at`` (kernels/filter.cl)."""
    p = np.asarray(positions, dtype=np.int64)
    values = np.zeros(p.size, dtype=np.uint64)
    packed = np.asarray(packed)
    for k in range(q):
        g = p + k
        code = (packed[g >> 4].astype(np.uint64) >> (2 * (g & 15)).astype(np.uint64)) & np.uint64(3)
        values |= code << np.uint64(2 * (q - 1 - k))
    return values.astype(np.uint32)


def reference_checksum(names, md5s):
    """Hex MD5 over 'name<TAB>md5<LF>' of every contig in order: identifies the reference an index was built from."""
    h = hashlib.md5()
    for name, md5 in zip(names, md5s):
        h.update(f"{name}\t{md5}\n".encode("utf-8"))
    return h.hexdigest()


def _exception_runs(seq, codes):
    """Maximal runs of the same non-ACGT letter in one contig: (start, end, letter), contig-local."""
    idx = np.flatnonzero(codes == 4)
    if idx.size == 0:
        e = np.empty(0, dtype=np.int64)
        return e, e.copy(), np.empty(0, dtype=np.uint8)
    letters = np.frombuffer(seq, dtype=np.uint8)[idx]
    brk = np.flatnonzero((np.diff(idx) != 1) | (np.diff(letters) != 0)) + 1
    first = np.concatenate(([0], brk))
    last = np.concatenate((brk, [idx.size]))
    return idx[first].astype(np.int64), idx[last - 1].astype(np.int64) + 1, letters[first]


class _Writer:
    """Writes one 1-D dataset front to back in blocks of whole chunks (a compressed chunk is then written
    once, never read back and rewritten)."""

    def __init__(self, ds, flush_elements=FLUSH_ELEMENTS):
        self.ds, self.parts, self.pending, self.size = ds, [], 0, 0
        self.block = ds.chunks[0] * max(1, flush_elements // ds.chunks[0]) if ds.chunks else flush_elements

    def append(self, arr):
        if arr.size:
            self.parts.append(arr)
            self.pending += arr.size
            if self.pending >= self.block:
                self.flush(final=False)

    def flush(self, final=True):
        if not self.parts:
            return
        data = np.concatenate(self.parts) if len(self.parts) > 1 else self.parts[0]
        n = data.size if final else data.size - data.size % self.block
        self.ds[self.size:self.size + n] = data[:n]
        self.size += n
        rest = data[n:]
        self.parts, self.pending = ([rest], rest.size) if rest.size else ([], 0)


def build_index(fasta_path, out_path=None, q=DEFAULT_Q, step=DEFAULT_STEP, mask_threshold=DEFAULT_MASK_THRESHOLD,
                command_line="", log=None, *, compress=False, threads=1, round_keys=ROUND_KEYS,
                sort_group=SORT_GROUP, flush_elements=FLUSH_ELEMENTS, chunk=CHUNK):
    """Build the HDF5 index of a FASTA file (plain or gzip) and return a summary dict.

    ``step``: an int, or "auto" (:func:`auto_step` of the genome's size).  ``threads``: threads that sort
    and sweep the q-gram groups; the file is the same for every number.

    out_path defaults to ``<fasta_path>.peanut.h5``. The file is written to a temporary file in the output
    directory and renamed into place only when complete; on any error (or Ctrl-C) nothing is left behind.
    The big arrays are stored contiguous and uncompressed on page boundaries, so the mapper maps them from the
    page cache instead of inflating them into fresh memory (index/FORMAT.md); ``compress`` stores the
    bucket table compressed instead (a smaller file, slower start-up).
    ``round_keys`` bounds the scatter buffer (8 bytes per key); tests lower it to exercise several rounds,
    and lower ``sort_group`` (keys per sort), ``flush_elements`` (elements buffered per dataset before a write)
    and ``chunk`` (HDF5 chunk length) to take the code paths of a human genome; none changes the index's
    arrays.
    """
    _check_params(q, step, mask_threshold)
    fasta_path = os.fspath(fasta_path)
    out_path = os.fspath(out_path) if out_path is not None else fasta_path + ".peanut.h5"
    log = log or (lambda msg: None)
    if not os.path.exists(fasta_path):
        raise InputError(fasta_path, "no such file")
    if os.path.isdir(fasta_path):
        raise InputError(fasta_path, "is a directory, not a FASTA file")
    if os.path.isdir(out_path):
        raise InputError(out_path, "output is a directory; give a file name")
    if os.path.exists(out_path) and os.path.samefile(out_path, fasta_path):
        raise InputError(out_path, "output would overwrite the input FASTA")
    if is_special_file(out_path):
        # renaming the finished index onto it would replace a device node, FIFO or /dev/stdout link
        raise InputError(out_path, "output is not a regular file (a device, FIFO or standard stream); an index "
                         "is an HDF5 file and needs a file name")
    out_dir = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(out_dir):
        raise InputError(out_path, f"output directory {out_dir} does not exist")
    stale = remove_stale_temporaries(out_path)
    if stale:
        log(f"removed {len(stale)} temporary file{'s' if len(stale) > 1 else ''} that a killed build left "
            f"beside {out_path}")
    try:
        tmp, fd = temporary_beside(out_path)
    except OSError as e:
        raise InputError(out_path, f"cannot write to directory {out_dir}: {e.strerror or e}") from None
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # the index gets the usual permissions
        t0 = time.perf_counter()
        # Datasets of a page and more start on a page boundary: mapped, they are page-aligned arrays, which a
        # CPU OpenCL device uses in place (resident.py).
        with h5py.File(tmp, "w", alignment_threshold=PAGE, alignment_interval=PAGE) as h5:
            summary = _write_index(h5, fasta_path, q, step, mask_threshold, command_line, log, round_keys,
                                   compress, sort_group, flush_elements, chunk, max(1, int(threads)))
            write_checksums(h5)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        replace_unless_interrupted(tmp, out_path)
        try:
            dfd = os.open(out_dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass  # directories cannot be fsynced on every platform; the rename is already atomic
    except BaseException as e:
        failure = _os_error_of(e)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if failure is not None:
            reason = os.strerror(failure.errno) if failure.errno else str(failure).splitlines()[0]
            error = InputError(out_path, f"cannot write index: {reason}")
            # h5py crashes (SIGSEGV) when the objects of a file whose close failed are freed later, at the
            # latest at interpreter exit: the command line leaves the process at once after this error
            error.exit_at_once = True
            raise error from None
        raise
    seconds = time.perf_counter() - t0
    summary.update(path=out_path, seconds=seconds, peak_rss_mb=_peak_rss_mb())
    masking = (f"{summary['positions_masked']:,} masked ({summary['kmers_masked']:,} q-grams occurring "
               f"> {mask_threshold:,} times)" if mask_threshold else "no masking")
    log(
        f"indexed {summary['n_contigs']:,} contigs, {summary['total_bases']:,} bases: "
        f"step {summary['step']}, {summary['positions_kept']:,} q-gram positions kept, {masking}; "
        f"{seconds:.1f} s, peak memory {summary['peak_rss_mb']:,.0f} MB -> {out_path}"
    )
    return summary


def _os_error_of(e):
    """The OSError behind a failed write: ``e`` itself, or the one h5py raised first when closing the file
    then failed too (a full disk ends in a RuntimeError from HDF5's close, with the OSError as its context)."""
    while e is not None and not isinstance(e, PeanutError):
        if isinstance(e, OSError):
            return e
        e = e.__context__
    return None


def _extension():
    try:
        from . import _indexbuild
    except ImportError as e:
        raise PeanutError(f"the compiled extension peanut_py._indexbuild is missing ({e}); reinstall peanut-py "
                          "or run `python setup.py build_ext --inplace` in the source tree") from None
    return _indexbuild


def _write_index(h5, fasta_path, q, step, mask_threshold, command_line, log, round_keys, compress,
                 sort_group=SORT_GROUP, flush_elements=FLUSH_ELEMENTS, chunk=CHUNK, threads=1):
    from .fasta import read_fasta

    _indexbuild = _extension()

    bits = min(FINE_BITS, 2 * q)
    shift = 2 * q - bits
    counts = np.zeros(1 << bits, dtype=np.int64)
    scan_step = 1 if step == "auto" else step  # auto: counted at step 1, recounted below when it resolves to 2

    # ---- pass 1: parse, pack, record exceptions, count q-grams per bucket
    names, lengths, offsets, md5s = [], [], [], []
    contigs = []  # (words, length, offset, exc_start_local, exc_end_local)
    exc_parts = []
    seq_end = 0  # end of the last contig (global)
    last_log = time.perf_counter()
    for rec in read_fasta(fasta_path):
        seq = rec.sequence
        n = len(seq)
        offset = _round16(seq_end) + CONTIG_GAP
        if offset + n >= MAX_GLOBAL:
            raise InputError(fasta_path, "reference too large: padded coordinates exceed 2^32", rec.number)
        codes = np.frombuffer(seq.translate(_CODE_TABLE), dtype=np.uint8)
        words = np.zeros((n + 15) // 16, dtype=np.uint32)
        _indexbuild.pack_codes(codes, words)
        es, ee, el = _exception_runs(seq, codes)
        _indexbuild.count_buckets(words, n, es, ee, q, scan_step, shift, counts)
        names.append(rec.name)
        lengths.append(n)
        offsets.append(offset)
        md5s.append(hashlib.md5(seq).hexdigest())
        contigs.append((words, n, offset, es, ee))
        exc_parts.append((es + offset, ee + offset, el))
        seq_end = offset + n
        del seq, codes, rec
        now = time.perf_counter()
        if n >= 10_000_000 or now - last_log > 10:
            log(f"read {len(names):,} contigs, {sum(lengths):,} bases (last: {names[-1]}, {n:,} bp)")
            last_log = now

    if step == "auto":
        step = auto_step(sum(lengths))
        if step != scan_step:
            counts[:] = 0
            for words, n, offset, es, ee in contigs:
                _indexbuild.count_buckets(words, n, es, ee, q, step, shift, counts)
        log(f"--step auto: step {step} for {sum(lengths):,} bases")
    total_padded = _round16(seq_end)
    packed = h5.create_dataset("sequence/packed", shape=(total_padded // 16,), dtype=np.uint32, fillvalue=0)
    for words, n, offset, es, ee in contigs:
        packed[offset // 16: offset // 16 + words.size] = words
    exc = h5.create_group("sequence/exceptions")
    for i, (name, dtype) in enumerate((("start", np.int64), ("end", np.int64), ("letter", np.uint8))):
        data = np.concatenate([p[i] for p in exc_parts]) if exc_parts else np.empty(0, dtype)
        exc.create_dataset(name, data=data.astype(dtype), maxshape=(None,), chunks=(max(1, min(chunk, data.size)),))
    g = h5.create_group("contigs")
    g.create_dataset("names", data=np.array(names, dtype=object), dtype=h5py.string_dtype("utf-8"))
    g.create_dataset("lengths", data=np.array(lengths, dtype=np.int64))
    g.create_dataset("offsets", data=np.array(offsets, dtype=np.int64))
    g.create_dataset("md5", data=np.array(md5s, dtype=object), dtype=h5py.string_dtype("ascii"))

    # ---- pass 2: scatter keys round by round, sort groups, mask, write P and its bucket table into the file
    qg = h5.create_group("qgrams")
    total_keys = int(counts.sum())
    bucket_bits = bucket_bits_for(total_keys, q)
    starts_dtype = np.uint32 if total_keys < 1 << 32 else np.int64

    def create(n_positions):
        # Exact lengths, so the big arrays can be contiguous (the mapper maps them; HDF5 cannot resize those).
        out = []
        for name, dtype, n in (("buckets", starts_dtype, (1 << bucket_bits) + 1), ("positions", np.uint32, n_positions)):
            if compress and name == "buckets":
                ds = qg.create_dataset(name, shape=(n,), maxshape=(None,), dtype=dtype,
                                       chunks=(max(1, min(chunk, n)),), **SMALL)
            else:
                ds = qg.create_dataset(name, shape=(n,), dtype=dtype)
            out.append(_Writer(ds, flush_elements))
        return out

    kept, masked, kmers_masked, n_kmers, masked_values = _sort_qgrams(contigs, counts, q, step, shift,
                                                                      mask_threshold, round_keys, total_keys, log,
                                                                      create, sort_group, bucket_bits, threads)
    # Modes all and strata:N lower a read strand's votes threshold by its q-grams with these values (docs/core.md).
    qg.create_dataset("masked", data=masked_values.astype(np.uint32))

    checksum = reference_checksum(names, md5s)
    attrs = dict(
        format_version=FORMAT_VERSION,
        q=q,
        step=step,
        mask_threshold=mask_threshold,
        peanut_version=__version__,
        checksum=checksum,
        command_line=command_line,
        source_fasta=os.path.abspath(fasta_path),
        contig_gap=CONTIG_GAP,
        n_contigs=len(names),
        total_bases=int(sum(lengths)),
        positions_kept=kept,
        positions_masked=masked,
        kmers_kept=n_kmers,
        kmers_masked=kmers_masked,
        bucket_bits=bucket_bits,
    )
    for k, v in attrs.items():
        h5.attrs[k] = v
    # Written last: a file cut short before this point is never taken for an index.
    h5.attrs["format"] = FORMAT_NAME
    return dict(attrs, n_kmers=n_kmers, total_padded=total_padded,
                exception_runs=int(sum(p[0].size for p in exc_parts)))


def _group_p(keys, mask_threshold):
    """The sorted keys of one sort group -> (kmers, counts, positions) of its kept q-grams, kmers masked,
    positions masked, the masked q-gram values."""
    values = (keys >> np.uint64(32)).astype(np.uint32)
    first = np.concatenate(([0], np.flatnonzero(values[1:] != values[:-1]) + 1))
    cnt = np.diff(np.append(first, values.size))
    positions = keys.astype(np.uint32)  # the low 32 bits
    kv = values[first]
    kmers_masked = masked = 0
    masked_values = kv[:0]
    if mask_threshold > 0:
        keep = cnt <= mask_threshold
        if not keep.all():
            kmers_masked = int(keep.size - np.count_nonzero(keep))
            masked = int(cnt[~keep].sum())
            masked_values = kv[~keep]
            positions = positions[np.repeat(keep, cnt)]
            kv, cnt = kv[keep], cnt[keep]
    return kv, cnt, positions, kmers_masked, masked, masked_values


def _sort_qgrams(contigs, counts, q, step, shift, mask_threshold, round_keys, total_keys, log, create,
                 sort_group=SORT_GROUP, bucket_bits=None, threads=1):
    """Scatter keys round by round, sort groups, mask, and write P with its bucket table.

    The datasets need their exact lengths before the first write (``create(n_positions)`` returns the
    writers of the bucket table and of the positions), and those are known only after masking: a first
    sweep over the sorted groups counts, a second writes. With one round (up to ROUND_KEYS positions: chr20,
    yeast, any genome up to ~500 Mbp) the key buffer stays sorted between the sweeps; with several rounds (a
    human genome) every round is scattered and sorted twice, which doubles the sorting time but needs no disk
    beyond the index.  The groups of a round are sorted and swept on ``threads`` threads (NumPy's sort
    releases the GIL) and consumed in order, so the file does not depend on their number.
    Returns (positions kept, positions masked, kmers masked, kmers kept, the masked values in ascending order)."""
    from concurrent.futures import ThreadPoolExecutor

    _indexbuild = _extension()
    if bucket_bits is None:
        bucket_bits = bucket_bits_for(total_keys, q)
    groups = _plan(counts, sort_group)
    rounds = _plan_rounds(groups, counts, round_keys)
    buf = np.empty(max((r[2] for r in rounds), default=0), dtype=np.uint64)
    pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None

    def round_bounds(r):
        """Where each bucket of round r starts in buf (with a closing entry)."""
        b_lo, b_hi = rounds[r][:2]
        bounds = np.zeros(b_hi - b_lo + 1, dtype=np.int64)
        np.cumsum(counts[b_lo:b_hi], out=bounds[1:])
        return bounds

    def group_keys(r):
        b_lo, _, _, round_groups = rounds[r]
        bounds = round_bounds(r)
        return [buf[bounds[g_lo - b_lo]:bounds[g_hi - b_lo]] for g_lo, g_hi in round_groups]

    def scatter(r):
        """Scatter round r's keys into buf, laid out by bucket."""
        b_lo, b_hi = rounds[r][:2]
        bounds = round_bounds(r)
        cursor = np.zeros(counts.size, dtype=np.int64)
        cursor[b_lo:b_hi] = bounds[:-1]
        for words, n, offset, es, ee in contigs:
            _indexbuild.scatter_keys(words, n, offset, es, ee, q, step, shift, buf, cursor, b_lo, b_hi)
        if not np.array_equal(cursor[b_lo:b_hi], bounds[1:]):
            raise AssertionError("q-gram scatter does not match the bucket counts")

    def swept(r, sweep, work):
        """work(keys) of every group of round r, in group order; the groups are sorted first unless the single
        round is still sorted from the first sweep."""
        sort = not (len(rounds) == 1 and sweep == 1)
        if sort:
            if len(rounds) > 1 or total_keys >= 10_000_000:
                log(f"sorting q-grams ({'counting' if sweep == 0 else 'writing'}): round {r + 1}/{len(rounds)}, "
                    f"{rounds[r][2]:,} of {total_keys:,} positions")
            scatter(r)

        def one(keys):
            if sort:
                keys.sort()
            return work(keys)

        keys = group_keys(r)
        if pool is None:
            return map(one, keys)
        return _ordered(pool, one, keys, 2 * threads)

    def count(keys):
        kv, _, positions, km, m, mv = _group_p(keys, mask_threshold)
        return kv.size, positions.size, km, m, mv

    kept = masked = kmers_masked = n_kmers = 0
    masked_values = [np.zeros(0, np.uint32)]
    try:
        for r in range(len(rounds)):
            for nk, npos, km, m, mv in swept(r, 0, count):
                n_kmers += nk
                kept += npos
                kmers_masked += km
                masked += m
                masked_values.append(mv)
        buckets_out, pos_out = create(kept)
        table = _BucketTable(buckets_out, 2 * q - bucket_bits, 1 << bucket_bits)
        for r in range(len(rounds)):
            for kv, cnt, positions, _, _, _ in swept(r, 1, lambda keys: _group_p(keys, mask_threshold)):
                table.add(kv, cnt)
                pos_out.append(positions)
    finally:
        if pool is not None:
            pool.shutdown()
    table.close()
    pos_out.flush()
    if table.written != kept or pos_out.size != kept:
        raise AssertionError("the writing sweep does not match the counting sweep")
    return kept, masked, kmers_masked, n_kmers, np.concatenate(masked_values)


def _ordered(pool, fn, items, window):
    """fn(item) for every item on ``pool``, at most ``window`` at a time, yielded in the items' order."""
    from collections import deque

    pending = deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


class _BucketTable:
    """Writes the bucket table front to back from the kept q-grams in ascending value order: entry b is the
    number of kept positions whose q-gram value is below b << suffix_bits (one closing entry, the total)."""

    def __init__(self, writer, suffix_bits, n_buckets):
        self.writer, self.suffix_bits, self.n_buckets = writer, suffix_bits, n_buckets
        self.next, self.written = 0, 0  # next entry to write; positions before this group

    def add(self, kv, cnt):
        if not kv.size:
            return
        bucket = (kv >> np.uint32(self.suffix_bits)).astype(np.int64)  # suffix_bits < 32: bucket_bits >= 1
        last = int(bucket[-1])
        if last >= self.next:
            before = np.concatenate(([0], np.cumsum(cnt)))
            first = np.searchsorted(bucket, np.arange(self.next, last + 1), side="left")
            self.writer.append((self.written + before[first]).astype(self.writer.ds.dtype))
            self.next = last + 1
        self.written += int(cnt.sum())

    def close(self):
        if self.next <= self.n_buckets:
            self.writer.append(np.full(self.n_buckets + 1 - self.next, self.written, dtype=self.writer.ds.dtype))
            self.next = self.n_buckets + 1
        self.writer.flush()


def _plan(counts, target):
    """Split buckets into consecutive groups of about `target` keys (a bigger bucket is a group of its own)."""
    groups = []
    lo, acc = 0, 0
    nz = np.flatnonzero(counts)
    for b in nz:
        c = int(counts[b])
        if acc and acc + c > target:
            groups.append((lo, int(b)))
            lo, acc = int(b), 0
        elif not acc:
            lo = int(b)
        acc += c
    if acc:
        groups.append((lo, int(nz[-1]) + 1))
    return groups


def _plan_rounds(groups, counts, round_keys):
    """Pack consecutive sort groups into scatter rounds of at most round_keys keys (at least one group each)."""
    rounds = []
    cur, size = [], 0
    for g_lo, g_hi in groups:
        c = int(counts[g_lo:g_hi].sum())
        if cur and size + c > round_keys:
            rounds.append((cur[0][0], cur[-1][1], size, cur))
            cur, size = [], 0
        cur.append((g_lo, g_hi))
        size += c
    if cur:
        rounds.append((cur[0][0], cur[-1][1], size, cur))
    return rounds


PAGE = 4096


def page_aligned_empty(n, dtype):
    """An uninitialised 1-D array whose data starts on a page boundary: a CPU OpenCL device (PoCL) uses such
    an array in place as a read-only buffer instead of copying it (resident.py)."""
    dtype = np.dtype(dtype)
    raw = np.empty(n * dtype.itemsize + PAGE, dtype=np.uint8)
    skip = (-raw.ctypes.data) % PAGE
    return raw[skip : skip + n * dtype.itemsize].view(dtype)


def _file_mapping(array):
    """The read-only file mapping (mmap) that ``array``'s data lies in, or None: a dataset mapped by
    :meth:`ReferenceIndex._mapped`, or a slice of one."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return base if isinstance(base, mmap.mmap) else None


def release_pages(array):
    """Take the pages under ``array`` out of this process's resident set when it is mapped from an index file
    (:meth:`ReferenceIndex._mapped`); a no-op for any other array.

    The bytes stay in the page cache, and a later read maps them again from there, so the array is unchanged;
    but a GPU run that has copied the q-gram table to the device no longer counts it in its own memory, and
    the kernel may reclaim those pages under pressure without touching this process.
    """
    m = _file_mapping(array)
    if m is None or array.size == 0 or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = array.ctypes.data - np.frombuffer(m, dtype=np.uint8).ctypes.data
    end = start + array.nbytes
    start -= start % mmap.PAGESIZE
    m.madvise(mmap.MADV_DONTNEED, start, min(end, len(m)) - start)


def read_chunks_parallel(ds, path, threads=None, dtype=None):
    """A 1-D chunked dataset, stored raw or as gzip (deflate) chunks, optionally byte-shuffled, read on all
    cores and converted to ``dtype`` (default: the dataset's) chunk by chunk.

    h5py reads chunk after chunk on one core under its global lock, which for a human genome's gigabytes of
    positions is seconds; pread and zlib release the GIL, so the chunks
    are read in a thread pool, inflated and unshuffled there, and each lands in its slice of the result.
    Returns None when the layout is anything else (the caller falls back to h5py); the result equals
    ``ds[...].astype(dtype)`` and is page-aligned.
    """
    import zlib
    from concurrent.futures import ThreadPoolExecutor

    plist = ds.id.get_create_plist()
    filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    if ds.ndim != 1 or ds.chunks is None or not set(filters) <= {h5py.h5z.FILTER_DEFLATE, h5py.h5z.FILTER_SHUFFLE} \
            or ds.dtype.hasobject or (h5py.h5z.FILTER_SHUFFLE in filters and h5py.h5z.FILTER_DEFLATE not in filters):
        return None
    deflated = h5py.h5z.FILTER_DEFLATE in filters
    shuffled = h5py.h5z.FILTER_SHUFFLE in filters
    n_chunks = ds.id.get_num_chunks()
    rows, size = ds.chunks[0], ds.dtype.itemsize
    infos = [ds.id.get_chunk_info(i) for i in range(n_chunks)]
    if n_chunks * rows < ds.shape[0] or any(info.filter_mask for info in infos):
        return None
    out = page_aligned_empty(ds.shape[0], dtype or ds.dtype)
    fd = os.open(path, os.O_RDONLY)
    # Fresh memory is slow to touch (a page fault on a virtual machine costs microseconds), so no chunk
    # allocates more than it must: raw chunks of the stored type are read straight into the result, and each
    # thread unshuffles into one scratch buffer of its own.
    local = threading.local()
    direct = not deflated and not shuffled and out.dtype == ds.dtype

    def read(info):
        first = info.chunk_offset[0]
        n = min(rows, ds.shape[0] - first)
        if direct:
            target = out[first:first + n].view(np.uint8)
            if os.preadv(fd, [target], info.byte_offset) != target.nbytes:
                raise OSError(f"{path}: short read of a chunk of {ds.name}")
            return
        raw = os.pread(fd, info.size, info.byte_offset)
        if deflated:
            raw = zlib.decompress(raw)
        data = np.frombuffer(raw, dtype=np.uint8)
        if shuffled:
            scratch = getattr(local, "scratch", None)
            if scratch is None:
                scratch = local.scratch = np.empty(rows * size, dtype=np.uint8)
            scratch.reshape(rows, size)[:] = data[: rows * size].reshape(size, rows).T
            data = scratch
        out[first:first + n] = data[: n * size].view(ds.dtype)

    try:
        with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
            list(pool.map(read, infos))
    except (zlib.error, OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return out


# Every dataset of an index, in file order; each carries the CRC-32 of its bytes (attribute crc32).
DATASETS = ("contigs/names", "contigs/lengths", "contigs/offsets", "contigs/md5", "sequence/packed",
            "sequence/exceptions/start", "sequence/exceptions/end", "sequence/exceptions/letter",
            "qgrams/buckets", "qgrams/positions", "qgrams/masked")
# Datasets that an index may lack (readers go on without them; peanut map says what that costs).
OPTIONAL_DATASETS = ("qgrams/masked",)
# Datasets up to this size are verified at every start-up: the contigs, the exceptions and the packed
# sequence of genomes up to about 270 Mbp.
VERIFY_BYTES = 64 << 20
CHECK_BLOCK = 1 << 22  # entries per block of the structural checks (bounded scratch memory)


def _h5_message(e):
    return " ".join(str(e).split())[:120] or type(e).__name__


def dataset_crc32(ds, index=None):
    """CRC-32 of a dataset's elements as stored (native byte order), read block by block (mapped from the
    file where it can be, see ReferenceIndex)."""
    import zlib

    mapped = index._mapped(ds) if index is not None and ds.dtype.kind != "O" else None
    crc, n, step = 0, ds.shape[0], max(1, (16 << 20) // max(1, ds.dtype.itemsize))
    for lo in range(0, n, step):
        block = mapped[lo : lo + step] if mapped is not None else ds[lo : lo + step]
        if block.dtype.kind == "O":
            crc = zlib.crc32(b"\0".join(b if isinstance(b, bytes) else str(b).encode() for b in block) + b"\0", crc)
        else:
            crc = zlib.crc32(np.ascontiguousarray(block).tobytes(), crc)
    return crc


def write_checksums(h5):
    """Store the CRC-32 of every dataset of a freshly written index (attribute crc32)."""
    for name in DATASETS:
        if name in h5:
            h5[name].attrs["crc32"] = np.uint32(dataset_crc32(h5[name]))


class ReferenceIndex:
    """Read access to an index written by build_index. Large arrays are read on demand, not cached: mapped
    from the file when stored contiguous and raw, else read and inflated."""

    def __init__(self, path):
        path = os.fspath(path)
        self.path = path
        if not os.path.exists(path):
            raise InputError(path, "no such file")
        if os.path.isdir(path):
            raise InputError(path, "is a directory, not an index file")
        try:
            self._h5 = h5py.File(path, "r")
        except OSError:
            with open(path, "rb") as f:
                hdf5 = f.read(8) == b"\x89HDF\r\n\x1a\n"
            raise InputError(path, "damaged index (an HDF5 file cut short or corrupted); rebuild it with `peanut index`"
                             if hdf5 else "not a peanut-py index (not an HDF5 file)") from None
        try:
            self._load()
        except (RuntimeError, KeyError, ValueError, TypeError, OSError) as e:
            self._h5.close()
            if isinstance(e, PeanutError):
                raise
            raise InputError(path, f"damaged index ({_h5_message(e)}); rebuild it with `peanut index`") from None
        except BaseException:
            self._h5.close()
            raise

    def _load(self):
        h5, path = self._h5, self.path
        a = h5.attrs
        fmt = a.get("format")
        if isinstance(fmt, bytes):
            fmt = fmt.decode("utf-8", "replace")
        if fmt != FORMAT_NAME:
            raise InputError(path, "not a peanut-py reference index (incomplete, or another HDF5 file)")
        version = int(a.get("format_version", -1))
        if version != FORMAT_VERSION:
            source = a.get("source_fasta")
            if isinstance(source, bytes):
                source = source.decode("utf-8", "replace")
            how = f"peanut index -o {path} {source}" if source else f"peanut index -o {path} REF.fa"
            raise InputError(
                path,
                f"index format version {version} is not supported by peanut-py {__version__} "
                f"(reads version {FORMAT_VERSION}); rebuild it from its FASTA: {how}",
            )
        for ds in DATASETS:
            if ds in OPTIONAL_DATASETS and ds not in h5:
                continue
            if ds not in h5:
                raise InputError(path, f"damaged index: dataset /{ds} is missing")
            h5[ds]  # opens its object header: damage there is reported here, not at first use
        self.q = int(a["q"])
        self.step = int(a["step"])
        self.bucket_bits = int(a["bucket_bits"])
        if not (4 <= self.q <= 16 and 1 <= self.step <= 1024 and 1 <= self.bucket_bits <= min(2 * self.q, 32)):
            raise InputError(path, f"damaged index: q {self.q}, step {self.step} and bucket bits {self.bucket_bits} "
                             "are not those of an index (q 4..16, step 1..1024, bucket bits 1..2q); rebuild it with "
                             "`peanut index`")
        self.mask_threshold = int(a["mask_threshold"])
        self.checksum = str(a["checksum"])
        self.attrs = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in a.items()}
        self.names = list(h5["contigs/names"].asstr()[:])
        self.lengths = h5["contigs/lengths"][:].astype(np.int64)
        self.offsets = h5["contigs/offsets"][:].astype(np.int64)
        self.md5s = list(h5["contigs/md5"].asstr()[:])
        self.total_padded = int(h5["sequence/packed"].shape[0]) * 16
        self._exc = None

    # ---- context manager
    def close(self):
        if getattr(self, "_h5", None) is not None:
            self._h5.close()
            self._h5 = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"ReferenceIndex({self.path!r})"

    # ---- whole arrays
    def _read(self, name, dtype=None):
        try:
            return self._read_raw(name, dtype)
        except (RuntimeError, KeyError, ValueError, OSError) as e:
            if isinstance(e, PeanutError):
                raise
            raise InputError(self.path, f"damaged index: /{name} cannot be read ({_h5_message(e)}); rebuild it with "
                             "`peanut index`") from None

    def _read_raw(self, name, dtype=None):
        ds = self._h5[name]
        dtype = np.dtype(dtype or ds.dtype)
        if not ds.shape[0]:
            return np.empty(0, dtype=dtype)
        mapped = self._mapped(ds)
        if mapped is not None:
            return mapped if mapped.dtype == dtype else mapped.astype(dtype)
        fast = read_chunks_parallel(ds, self.path, dtype=dtype)
        return fast if fast is not None else ds[...].astype(dtype, copy=False)

    @staticmethod
    def _mappable(ds):
        """Whether ``ds`` is stored so that it can be mapped: 1-D, contiguous in this file, unfiltered, native."""
        plist = ds.id.get_create_plist()
        return (ds.ndim == 1 and plist.get_layout() == h5py.h5d.CONTIGUOUS and not plist.get_nfilters()
                and not plist.get_external_count() and ds.dtype.isnative and not ds.dtype.hasobject)

    def _mapped(self, ds):
        """A mappable dataset (:meth:`_mappable`) as a read-only array mapped from the file, else None.

        Mapped pages come from the page cache, shared with every other process mapping the same index; an
        inflated copy costs fresh memory, which a virtual machine charges for dearly (docs/device.md, "Memory on CPU devices")."""
        if not self._mappable(ds):
            return None
        offset = ds.id.get_offset()
        if offset is None:
            return None
        nbytes = ds.shape[0] * ds.dtype.itemsize
        if offset + nbytes > os.path.getsize(self.path):
            # Touching a mapped page beyond the end of the file would kill the process (SIGBUS).
            raise InputError(self.path, f"damaged index: dataset {ds.name} extends past the end of the file")
        base = offset - offset % mmap.ALLOCATIONGRANULARITY
        with open(self.path, "rb") as f:
            m = mmap.mmap(f.fileno(), offset - base + nbytes, access=mmap.ACCESS_READ, offset=base)
        return np.frombuffer(m, dtype=ds.dtype, count=ds.shape[0], offset=offset - base)

    def packed(self):
        return self._read("sequence/packed", np.uint32)

    def exceptions(self):
        if self._exc is None:
            self._exc = (
                self._read("sequence/exceptions/start").astype(np.int64, copy=False),
                self._read("sequence/exceptions/end").astype(np.int64, copy=False),
                self._read("sequence/exceptions/letter").astype(np.uint8, copy=False),
            )
        return self._exc

    def ambiguity_bitmap(self):
        """uint32 words, bit g & 31 of word g >> 5 set for every non-ACGT reference base (docs/architecture.md)."""
        bits = np.zeros((self.total_padded + 31) // 32, dtype=np.uint32)
        s, e, _ = self.exceptions()
        _extension().fill_bitmap(s, e, bits)
        return bits

    def buckets(self, dtype=np.int64):
        """The bucket table: positions[buckets[b] .. buckets[b + 1]) are those whose q-gram value has the top
        ``bucket_bits`` bits b.  uint32 on disk (int64 from 2^32 positions); ``dtype=np.uint32`` is valid below
        2^32 positions, and mapped from the file when stored so."""
        return self._read("qgrams/buckets", dtype)

    def qgram_values(self, positions):
        """The q-gram value at each of ``positions`` (global), from the packed sequence."""
        return qgram_values(self.packed(), positions, self.q)

    @property
    def n_positions(self):
        return int(self._h5["qgrams/positions"].shape[0])

    def positions(self):
        return self._read("qgrams/positions", np.uint32)

    def masked_kmers(self):
        """The masked q-gram values (ascending uint32), or None for an index written before they were stored."""
        if "qgrams/masked" not in self._h5:
            return None
        return np.array(self._read("qgrams/masked", np.uint32))

    # ---- coordinates and sequence
    def contig_of(self, global_positions):
        """Index of the last contig starting at or before each position (-1 before the first contig).

        A position in the gap after contig i maps to i; compare with offsets + lengths to exclude gaps."""
        g = np.asarray(global_positions, dtype=np.int64)
        return (np.searchsorted(self.offsets, g, side="right") - 1).astype(np.intp)

    def contig_index(self, name):
        try:
            return self.names.index(name)
        except ValueError:
            raise PeanutError(f"{self.path}: no contig named {name!r}") from None

    def codes(self, global_start, global_end):
        """Base codes 0..3 of [global_start, global_end); 4 for non-ACGT bases and for gaps between contigs."""
        lo, hi = int(global_start), int(global_end)
        if lo < 0 or hi < lo:
            raise PeanutError(f"{self.path}: bad global range [{lo}, {hi})")
        out = np.full(hi - lo, 4, dtype=np.uint8)
        top = min(hi, self.total_padded)
        if top <= lo:
            return out
        w0, w1 = lo >> 4, (top + 15) >> 4
        words = self._h5["sequence/packed"][w0:w1].astype(np.uint32, copy=False)
        _extension().unpack_codes(np.ascontiguousarray(words), lo, out[: top - lo])
        # gaps between (and after) contigs and the non-ACGT runs inside them are 4: a handful of intervals
        ends = self.offsets + self.lengths
        starts_out = np.concatenate([[lo], ends])
        ends_out = np.concatenate([self.offsets, [top]])
        s, e, _ = self.exceptions()
        for a, b in zip(np.concatenate([starts_out, s]).tolist(), np.concatenate([ends_out, e]).tolist()):
            a, b = max(a, lo), min(b, top)
            if a < b:
                out[a - lo: b - lo] = 4
        return out

    def fetch(self, contig_index, start, end):
        """Uppercase sequence of contig `contig_index`, local [start, end), with the FASTA's non-ACGT letters."""
        i = int(contig_index)
        if not 0 <= i < len(self.names):
            raise PeanutError(f"{self.path}: no contig number {i} (index has {len(self.names)})")
        n = int(self.lengths[i])
        start, end = int(start), int(end)
        if not 0 <= start <= end <= n:
            raise PeanutError(f"{self.path}: range [{start}, {end}) outside contig {self.names[i]!r} of length {n}")
        lo, hi = int(self.offsets[i]) + start, int(self.offsets[i]) + end
        letters = _LETTERS[self.codes(lo, hi)]
        s, e, l = self.exceptions()
        j0 = np.searchsorted(e, lo, side="right")
        j1 = np.searchsorted(s, hi, side="left")
        if j1 > j0:
            # runs are disjoint, so a difference array of letter values paints each run with its letter
            d = np.zeros(hi - lo + 1, dtype=np.int32)
            np.add.at(d, np.clip(s[j0:j1] - lo, 0, hi - lo), l[j0:j1].astype(np.int32))
            np.add.at(d, np.clip(e[j0:j1] - lo, 0, hi - lo), -l[j0:j1].astype(np.int32))
            paint = np.cumsum(d[:-1])
            letters = np.where(paint > 0, paint, letters).astype(np.uint8)
        return letters.tobytes().decode("ascii")

    def _storage(self):
        """How `peanut map` gets the q-gram table from this file: mapped, or read and inflated."""
        raw = all(self._mappable(self._h5[n]) for n in ("qgrams/buckets", "qgrams/positions"))
        return ("contiguous and raw: mapped from the page cache by peanut map" if raw
                else "chunked or compressed: read and inflated into memory by peanut map at start-up")

    # ---- integrity
    def verify(self, full=False):
        """Check the stored CRC-32 of every dataset written with one (indexes built since checksums were
        added): with ``full``, all of them; else those of at most VERIFY_BYTES (contigs, sequence,
        exceptions), which costs little at start-up; the q-gram table then gets :meth:`check_table`'s
        structural checks when it is loaded.  Raises InputError naming the first damaged dataset; returns the
        number of datasets verified."""
        checked = 0
        for name in DATASETS:
            if name not in self._h5:
                continue
            ds = self._h5[name]
            want = ds.attrs.get("crc32")
            if want is None or (not full and ds.size * ds.dtype.itemsize > VERIFY_BYTES):
                continue
            try:
                crc = dataset_crc32(ds, self)
            except (RuntimeError, ValueError, OSError) as e:
                raise InputError(self.path, f"damaged index: /{name} cannot be read ({_h5_message(e)}); rebuild it "
                                 "with `peanut index`") from None
            if crc != int(want):
                raise InputError(self.path, f"damaged index: /{name} does not match its checksum; rebuild it with "
                                 "`peanut index`")
            checked += 1
        return checked

    def check_table(self, buckets, positions, release=False):
        """Structural checks of the q-gram table before it reaches a kernel, which would read out of bounds on
        a damaged one: 2^bucket_bits + 1 bucket starts ascending from 0 to the number of positions, and every
        position's q bases inside the packed sequence.  Raises InputError naming the dataset.  With
        ``release``, the pages of mapped arrays leave the resident set block by block once checked
        (:func:`release_pages`), so that the checks never hold the whole table."""
        def damaged(name, what):
            return InputError(self.path, f"damaged index: /qgrams/{name} {what}; rebuild it with `peanut index`")

        n = (1 << self.bucket_bits) + 1
        if len(buckets) != n:
            raise damaged("buckets", f"has {len(buckets):,} entries for 2^{self.bucket_bits} buckets")
        if int(buckets[0]) != 0 or int(buckets[n - 1]) != len(positions):
            raise damaged("buckets", "does not run from 0 to the number of positions")
        for lo in range(0, n - 1, CHECK_BLOCK):
            s = np.asarray(buckets[lo : lo + CHECK_BLOCK + 1])
            if (s[1:] < s[:-1]).any():
                raise damaged("buckets", "is not ascending")
            if release:
                release_pages(buckets[lo : lo + CHECK_BLOCK])
        for lo in range(0, len(positions), CHECK_BLOCK):
            block = positions[lo : lo + CHECK_BLOCK]
            if int(np.max(block)) + self.q > self.total_padded:
                raise damaged("positions", "holds a position beyond the genome")
            if release:
                release_pages(block)

    def describe(self):
        a = self.attrs
        n_kmers = int(a.get("kmers_kept", 0))
        s, e, _ = self.exceptions()
        non_acgt = int((e - s).sum())
        size = os.path.getsize(self.path)
        lines = [
            f"peanut-py reference index {self.path}",
            f"  format version     {a.get('format_version')} (written by peanut-py {a.get('peanut_version')})",
            f"  source FASTA       {a.get('source_fasta')}",
            f"  command line       {a.get('command_line') or '-'}",
            f"  checksum           {self.checksum}",
            f"  contigs            {len(self.names):,}",
            f"  bases              {int(self.lengths.sum()):,} ({non_acgt:,} non-ACGT in {s.size:,} runs)",
            f"  padded length      {self.total_padded:,} (contig gap {a.get('contig_gap')})",
            f"  q / step           {self.q} / {self.step}",
            f"  mask threshold     {self.mask_threshold}" + ("  (no masking)" if self.mask_threshold == 0 else ""),
            f"  q-gram positions   {int(a.get('positions_kept', 0)):,} kept, {int(a.get('positions_masked', 0)):,} masked",
            f"  distinct q-grams   {n_kmers:,} kept, {int(a.get('kmers_masked', 0)):,} masked",
            f"  bucket table       2^{self.bucket_bits} buckets on the top {self.bucket_bits} bits of a q-gram value",
            f"  q-gram table       {self._storage()}",
            f"  file size          {size / 1e6:,.1f} MB",
        ]
        show = 10
        width = max(len(n) for n in self.names[:show]) if self.names else 0
        for i, name in enumerate(self.names[:show]):
            lines.append(f"    {name:<{width}}  {int(self.lengths[i]):>13,} bp  md5 {self.md5s[i]}")
        if len(self.names) > show:
            lines.append(f"    ... and {len(self.names) - show:,} more contigs")
        return "\n".join(lines)
