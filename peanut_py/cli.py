"""Command line: ``peanut index``, ``peanut info``, ``peanut devices``, ``peanut map``.

User errors (bad input, missing device) end with one line on stderr and a non-zero exit, never a traceback.
"""
import argparse
import shlex
import signal
import sys

from ._version import __version__
from .errors import PeanutError


def _log(msg):
    print(f"[peanut] {msg}", file=sys.stderr, flush=True)


def cmd_index(args):
    from . import reference

    if args.info:
        print(reference.ReferenceIndex(args.reference).describe())
        return
    reference.build_index(
        args.reference,
        args.output,
        q=args.q,
        step=args.step,
        mask_threshold=args.mask,
        command_line=args.command_line,
        log=_log,
    )


def cmd_info(args):
    from . import reference

    print(reference.ReferenceIndex(args.index).describe())


def cmd_devices(args):
    from . import device

    infos = device.list_devices()
    chosen = device.default_device_index(args.device)
    for info in infos:
        mark = "*" if info.index == chosen else " "
        print(f"{mark} {info.describe()}")
    print("(* = the device a run would use; choose another with --device INDEX|NAME or PYOPENCL_CTX)")


def build_parser():
    from . import reference

    parser = argparse.ArgumentParser(
        prog="peanut",
        description="peanut-py: portable OpenCL read mapper (q-group index, filtration, Myers validation)",
    )
    parser.add_argument("--version", action="version", version=f"peanut-py {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("index", help="build the HDF5 reference index of a FASTA file")
    p.add_argument("reference", metavar="REF.fa[.gz]", help="reference FASTA (plain or gzip); with --info: an index")
    p.add_argument("-o", "--output", metavar="OUT.h5", help="index file (default: REF.fa.peanut.h5 beside the FASTA)")
    p.add_argument("-q", type=int, default=reference.DEFAULT_Q, help="q-gram length, 1..16 (default %(default)s)")
    p.add_argument(
        "-s", "--step", type=int, default=reference.DEFAULT_STEP,
        help="index every STEP-th reference position; 1 = every position (default %(default)s)",
    )
    p.add_argument(
        "-m", "--mask", type=int, default=reference.DEFAULT_MASK_THRESHOLD, metavar="N",
        help="mask q-grams occurring more than N times in the reference (default %(default)s; 0 = no masking)",
    )
    p.add_argument("--info", action="store_true", help="print what an existing index holds and exit")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("info", help="print what an index holds")
    p.add_argument("index", metavar="INDEX.h5")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("devices", help="list OpenCL devices and mark the one a run would use")
    p.add_argument("--device", metavar="D", help="device index or name substring")
    p.set_defaults(func=cmd_devices)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.command_line = " ".join(["peanut"] + [shlex.quote(a) for a in argv])
    # A closed pipe (peanut ... | head) ends quietly like other Unix tools.
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        args.func(args)
    except PeanutError as e:
        print(f"peanut: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("peanut: interrupted", file=sys.stderr)
        sys.exit(130)
    except MemoryError:
        print("peanut: error: out of memory", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
