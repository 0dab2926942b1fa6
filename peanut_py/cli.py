"""Command line: ``peanut index``, ``peanut info``, ``peanut devices``, ``peanut map``.

User errors (bad input, missing device) end with one line on stderr and a non-zero exit, never a traceback.
"""
import argparse
import os
import shlex
import signal
import sys

from ._version import __version__
from .device import DeviceOpening
from .errors import PeanutError, error_text
from .outfiles import INTERRUPTED
from .options import (IndexOptions, MapOptions, RunOptions, Scoring, check, default_of, flags_of, help_of, metavar_of,
                      parse_mode)


def _log(msg):
    print(f"[peanut] {msg}", file=sys.stderr, flush=True)


def _print(text):
    """Print a command's result; started with standard output closed, that is an error, not a silent exit 0."""
    if sys.stdout is None:
        raise PeanutError("standard output is closed: nowhere to print the result")
    print(text)


def cmd_index(args):
    from . import reference

    if args.info:
        _print(reference.ReferenceIndex(args.reference).describe())
        return
    if args.check:
        with reference.ReferenceIndex(args.reference) as index:
            checked = index.verify(full=True)
            index.check_table(index.buckets(), index.positions())
        sums = (f"all {checked} datasets match their checksums" if checked else
                "no checksums stored (built by an older peanut-py; rebuild it to get them)")
        _print(f"ok: {args.reference}: {sums}; the q-gram table is consistent")
        return
    opts = check(IndexOptions(q=args.q, step=args.step, mask_threshold=args.mask_threshold, compress=args.compress,
                              threads=args.threads))
    reference.build_index(
        args.reference,
        args.output,
        q=opts.q,
        step=opts.step,
        mask_threshold=opts.mask_threshold,
        command_line=args.command_line,
        compress=opts.compress,
        threads=opts.threads,
        log=None if args.quiet else _log,
    )


def cmd_info(args):
    from . import reference

    _print(reference.ReferenceIndex(args.index).describe())


def _mode(text):
    if parse_mode(text) is not None:
        return text
    raise argparse.ArgumentTypeError(f"invalid mode {text!r} (best, all or strata:N)")


def _identity(text):
    """A fraction, or percent like PEANUT's -i 80; the range is checked with the other options."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid identity {text!r}") from None
    return value / 100.0 if value > 1 else value


def _size(text):
    """A byte count such as 2G, 512M, 8GB or 1500000000."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    number, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        value = int(float(number) * units[unit])
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (e.g. 2G, 512M)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return value


def _insert_size(text):
    from .insert_size import parse_insert_size

    try:
        return parse_insert_size(text)
    except PeanutError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cmd_map(args):
    if args.interleaved and args.mates is not None:
        raise PeanutError("-p/--interleaved takes one reads file (mates interleaved), not a second file MATES")
    paired = args.interleaved or args.mates is not None
    if args.insert_size is not None and not paired:
        raise PeanutError("-I applies to paired-end reads only (give MATES or -p)")
    scoring = Scoring(match=args.match, mismatch=args.mismatch, gap_open=args.gap_open, gap_extend=args.gap_extend,
                      clip=args.clip)
    opts = check(MapOptions(
        mode=args.mode, max_hits=args.max_hits, min_identity=args.min_identity, local=not args.semiglobal,
        min_score=args.min_score, secondary=args.secondary, scoring=scoring, validate_all=args.validate_all, align_on=args.align_on,
    ))
    run = check(RunOptions(threads=args.threads, batch_size=args.batch_size, memory_cap=args.memory_cap,
                           workers=args.workers, processes=args.processes))
    from .shards import wanted

    if wanted(run.processes, args.device, run.threads):
        from .shards import map_in_processes

        map_in_processes(
            args.index, args.reads, opts, output=args.output, output_format=args.output_format,
            hit_only=args.no_unmapped, run=run, device_spec=args.device,
            read_group=args.read_group, reference=args.reference, command_line=args.command_line,
            log=None if args.quiet else _log, mates=args.mates, interleaved=args.interleaved,
            insert_size=args.insert_size,
        )
        return
    # the OpenCL platform and context come up while the mapping modules load and the index opens
    opening = DeviceOpening(args.device, run.memory_cap)
    try:
        from .mapping import map_reads

        # -M is accepted and changes nothing: there are no supplementary records to mark (see its help)
        map_reads(
            args.index, args.reads, opts, output=args.output, output_format=args.output_format,
            hit_only=args.no_unmapped, run=run, device_spec=args.device,
            read_group=args.read_group, reference=args.reference, command_line=args.command_line,
            log=None if args.quiet else _log, mates=args.mates, interleaved=args.interleaved,
            insert_size=args.insert_size, devices=opening,
        )
    finally:
        opening.join()


def cmd_devices(args):
    from . import device

    infos = device.list_devices()
    chosen = device.device_indices(args.device)
    if args.check:
        for index in chosen:
            info = device.check_device(str(index))
            _print(f"ok: [{info.index}] {info.name} compiles and runs OpenCL kernels")
        return
    lines = [f"{'*' if info.index in chosen else ' '} {info.describe()}" for info in infos]
    _print("\n".join(lines + ["(* = the device(s) a run would use; choose others with --device INDEX|NAME, a list "
                              "such as 0,2, all, or PYOPENCL_CTX)"]))


# Set by SIGINT/SIGTERM: whatever error the interruption itself causes in other threads (a kernel build
# cut short, a closed queue) is then reported as the interruption it is, with exit status 130.
_interrupted = INTERRUPTED


def _terminate(signum, frame):
    _interrupted.set()
    raise KeyboardInterrupt()


def _exit_interrupted():
    """Exit 130 at once. Output files are already gone (the writers abort while the exception unwinds; the
    call below catches any left). os._exit skips interpreter shutdown, which would otherwise tear down the
    OpenCL driver under a thread still inside it (PoCL aborts with 'terminate called' when Ctrl-C
    lands during a kernel build)."""
    from .sam import abort_open_writers

    print("peanut: interrupted", file=sys.stderr)
    abort_open_writers()
    _flush_standard_streams()
    os._exit(130)


def _flush_standard_streams():
    """Flush stdout and stderr before os._exit (which skips it); a closed or broken stream is left alone."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def _int_or_auto(text):
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or auto, got {text!r}") from None


def _option(parser, cls, name, type=int, note="", **kwargs):
    """An argument for field ``name`` of an options class: its flags, help, default and metavar from there;
    ``note`` is added to the help text."""
    parser.add_argument(*flags_of(cls, name), dest=name, type=type, default=default_of(cls, name),
                        help=(help_of(cls, name) + note).replace("%", "%%"), metavar=metavar_of(cls, name), **kwargs)


class _CommandParser(argparse.ArgumentParser):
    """The parser of one command (``peanut map`` ...): an unknown option is reported by the command itself,
    with its usage line, instead of by the top-level parser with ``peanut COMMAND ...``.

    ``no_number_after``: flags that take no value here but a number in another mapper (bwa mem's ``-U 17``),
    with the error to give when a number follows one (it would otherwise be taken for a file name)."""

    no_number_after = {}

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        for flag, value in zip(args, args[1:]):
            if flag in self.no_number_after and value.isdigit() and not os.path.exists(value):
                self.error(self.no_number_after[flag])
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


# Read by peanut_py/reads.py (from the content, not the name); tests/test_cli_compat.py checks the list.
READS_COMPRESSION = "plain or compressed with gzip, bzip2, xz or zstd (recognised from the content)"


def build_parser():
    parser = argparse.ArgumentParser(
        prog="peanut",
        description="peanut-py: portable OpenCL read mapper (q-group index, filtration, Myers validation)",
    )
    parser.add_argument("--version", action="version", version=f"peanut-py {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)
    sub.required = True

    p = sub.add_parser("index", help="build the HDF5 reference index of a FASTA file",
                       usage="%(prog)s [options] REF.fa[.gz]")
    p.add_argument("reference", metavar="REF.fa[.gz]",
                   help="reference FASTA, plain or gzip (bgzip too; decompress bzip2, xz or zstd first); "
                        "with --info or --check: an index")
    p.add_argument("-o", "--output", metavar="OUT.h5", help="index file (default: REF.fa.peanut.h5 beside the FASTA)")
    _option(p, IndexOptions, "q", note="; -q is this, not --quiet as in `peanut map`")
    _option(p, IndexOptions, "step", type=_int_or_auto)
    for name in ("mask_threshold", "threads"):
        _option(p, IndexOptions, name)
    p.add_argument("--compress", action="store_true",
                   help="store the bucket table compressed: a smaller file, but every `peanut map` then inflates it "
                        "into memory instead of mapping it from the page cache")
    p.add_argument("--info", action="store_true", help="print what an existing index holds and exit")
    p.add_argument("--check", action="store_true",
                   help="verify an existing index (REF is then the index): every dataset against its checksum, "
                   "and the q-gram table's structure; exit 1 naming the first damaged dataset")
    p.add_argument("--quiet", action="store_true",
                   help="no progress or summary on stderr (long form only: -q is the q-gram length here)")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("info", help="print what an index holds")
    p.add_argument("index", metavar="INDEX.h5")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("map", help="map reads to an index; SAM on stdout (or -o OUT.sam|OUT.bam)",
                       usage="%(prog)s [options] INDEX.h5 READS [MATES]")
    p.add_argument("index", metavar="INDEX.h5")
    p.add_argument("reads", metavar="READS", help=f"FASTQ or FASTA, {READS_COMPRESSION}; a file, a FIFO, "
                   "<(...) or - (standard input), read once as a stream")
    p.add_argument("mates", metavar="MATES", nargs="?",
                   help="second mates of READS (paired-end, FR orientation); names must match READS record by record; "
                        "a file, a FIFO, <(...) or - (not both READS and MATES)")
    p.add_argument("-p", "--interleaved", action="store_true",
                   help="READS holds pairs interleaved (mate 1, mate 2, mate 1, ...)")
    p.add_argument("-I", dest="insert_size", type=_insert_size, metavar="MEAN[,STD[,MAX[,MIN]]]",
                   help="insert size of the pairs instead of estimating it: STD defaults to 10%% of MEAN, "
                        "MAX/MIN to MEAN +- 4 STD")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output file: a .bam name writes BAM, any other SAM (default: standard output)")
    p.add_argument("--output-format", "--output-fmt", dest="output_format", type=str.lower, choices=("sam", "bam"),
                   help="write SAM or BAM whatever -o names, e.g. BAM to standard output (default: from -o's "
                        "name, else SAM); a .sam or .bam name that says otherwise is refused. Not -O, which is "
                        "the gap open penalty as in bwa mem")
    p.add_argument("-U", "--no-unmapped", action="store_true",
                   help="leave unmapped reads out of the output (as `samtools view -F 4`); a pair is kept whole "
                        "when one mate is mapped (minimap2's --sam-hit-only). The summary on stderr still counts "
                        "every read. (bwa mem's -U, the unpaired-pair penalty, has no counterpart here)")
    p.no_number_after = {"-U": "argument -U/--no-unmapped takes no value (bwa mem's -U INT, the unpaired-pair "
                              "penalty, has no counterpart here)"}
    p.add_argument("-M", dest="mark_shorter_split", action="store_true",
                   help="accepted for bwa mem command lines and changes nothing: peanut-py writes no "
                        "supplementary (0x800) records or SA tags, so there are no split hits to mark secondary")
    _option(p, RunOptions, "threads")
    p.add_argument("--device", metavar="D",
                   help="OpenCL device: an index or name substring (see `peanut devices`), a comma-separated list "
                        "of them, or all (every working GPU, else every working CPU device); several devices map "
                        "batches side by side, with the same output as one")
    p.add_argument("-R", "--read-group", metavar="STR", help="read group header line such as '@RG\\tID:x\\tSM:y'")
    p.add_argument("--mode", type=_mode, default="best",
                   help="report the best stratum (best), all strata (all) or the best N strata (strata:N)")
    _option(p, MapOptions, "max_hits")
    _option(p, MapOptions, "min_identity", type=_identity)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--local", action="store_true", help="local alignment, soft-clipping read ends (default)")
    g.add_argument("--semiglobal", action="store_true", help="align every read end to end")
    _option(p, MapOptions, "min_score")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--secondary", action="store_true", help="report other hits as secondary (0x100) records")
    g.add_argument("--xa", action="store_true", help="report other hits in BWA's XA tag (default)")
    p.add_argument("--validate-all", action="store_true",
                   help="mode best: validate every candidate, not only the strongest and their close rivals "
                   "(slower; same best hits, MAPQ from all rivals)")
    p.add_argument("--align-on", choices=("auto", "cpu", "device"), default="auto",
                   help="where the final affine-gap alignment of reported hits runs: the OpenCL device, once per "
                   "batch, or the postprocessing threads (cpu); auto (default): the device on a GPU when -t is "
                   "8 or less, else the threads. The output is identical")
    _option(p, RunOptions, "memory_cap", type=_size)
    _option(p, RunOptions, "batch_size")
    _option(p, RunOptions, "workers", type=str, choices=("auto", "threads", "processes"))
    _option(p, RunOptions, "processes", type=_int_or_auto)
    for name in ("match", "mismatch", "gap_open", "gap_extend", "clip"):
        _option(p, Scoring, name)
    p.add_argument("--reference", metavar="REF.fa", help="refuse to run unless INDEX was built from this FASTA")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress or summary on stderr (in `peanut index`, -q is the q-gram length; --quiet "
                        "means this in both)")
    p.set_defaults(func=cmd_map)

    p = sub.add_parser("devices", help="list OpenCL devices and mark the one a run would use")
    p.add_argument("--device", metavar="D", help="device index or name substring, a list such as 0,2, or all")
    p.add_argument("--check", action="store_true", help="compile and run a trivial kernel on the chosen device")
    p.set_defaults(func=cmd_devices)
    return parser


THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"


def hugepage_env(environ=None, thp_setting=THP_SETTING):
    """The environment for a re-started ``peanut map`` whose malloc asks for transparent huge pages, or None.

    A CPU OpenCL device (PoCL) allocates its buffers with malloc, and one read buffer touches gigabytes of
    fresh memory; on Linux in THP "madvise" mode every 4 KiB page of it is a page fault and a page zeroing,
    which on a small virtual machine costs seconds per run (docs/mapping.md, "Memory"). glibc >= 2.35 asks for
    huge pages for all malloc'd memory when started with GLIBC_TUNABLES=glibc.malloc.hugetlb=1, an order of
    magnitude fewer faults.
    The tunable is read at process start only, hence the re-start. None when it would change nothing."""
    import platform

    environ = os.environ if environ is None else environ
    if sys.platform != "linux" or environ.get("PEANUT_NO_REEXEC"):
        return None
    libc, version = platform.libc_ver()
    try:
        if libc != "glibc" or tuple(int(x) for x in version.split(".")[:2]) < (2, 35):
            return None
        with open(thp_setting) as f:
            if "[madvise]" not in f.read():
                return None
    except (OSError, ValueError):
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in tunables:
        return None
    return dict(environ, GLIBC_TUNABLES=f"{tunables}:glibc.malloc.hugetlb=1" if tunables else "glibc.malloc.hugetlb=1",
                PEANUT_NO_REEXEC="1")


def _restart_with_hugepages(argv):
    """Replace this process by the same ``peanut`` with hugepage_env() (same PID, arguments and package)."""
    env = hugepage_env()
    if env is None:
        return
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = f"import sys; sys.path.insert(0, {package_parent!r}); from peanut_py.cli import main; main()"
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    try:
        os.execve(sys.executable, [sys.executable, "-c", code, *argv], env)
    except OSError:
        pass  # carry on without huge pages


def main(argv=None):
    # Started with standard error closed: messages go nowhere, but the exit status still tells. (Standard
    # output closed is an error only where the output would go there; see sam.open_output.)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")
    program = argv is None  # the peanut command itself, not a caller in this process
    if argv is None:
        argv = sys.argv[1:]
        if argv[:1] == ["map"]:
            _restart_with_hugepages(argv)
    argv = list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.command_line = " ".join(["peanut"] + [shlex.quote(a) for a in argv])
    # A closed pipe (peanut ... | head) ends quietly like other Unix tools.
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # SIGTERM unwinds like Ctrl-C, so atomic writers delete their temporary files
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    try:
        args.func(args)
        if program and args.func is cmd_map:
            # the output is complete and closed; the interpreter's teardown (the OpenCL driver's contexts and
            # buffers, waiting for finished mapping processes) would only add to the run's wall clock
            _flush_standard_streams()
            os._exit(0)
    except KeyboardInterrupt:
        _exit_interrupted()
    except (PeanutError, MemoryError) as e:
        if _interrupted.is_set():
            _exit_interrupted()
        print(f"peanut: error: {error_text(e)}", file=sys.stderr)
        if getattr(e, "exit_at_once", False):
            _flush_standard_streams()
            os._exit(1)
        sys.exit(1)
    except Exception as e:  # noqa: BLE001 - only OpenCL faults are turned into an error line
        text = error_text(e)
        if text is None:
            raise
        if _interrupted.is_set():
            _exit_interrupted()
        # a lost device, a failed launch, resources exhausted beyond what splitting a batch can fix: the
        # atomic writers have already dropped the output while the exception unwound
        print(f"peanut: error: {text}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
