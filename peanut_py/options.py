"""Every option of ``peanut index`` and ``peanut map``: defaults, help text and range checks in one place.

Options are frozen dataclasses.  Each numeric field carries its command-line flag, its help text and its
range in the field's metadata; :func:`check` checks a whole options object against them and raises a
one-line :class:`PeanutError` that names the flag.  The command line (cli.py) builds its arguments from the
same metadata, so a default or a range is written once.
"""
import math
from dataclasses import dataclass, field, fields, replace

from .errors import PeanutError


def _opt(default, flags, help, lo=None, hi=None, metavar=None, lo_open=False, auto=False):
    """A field with its command-line flags, help text and numeric range [lo, hi] ((lo, hi] with ``lo_open``);
    with ``auto``, the string "auto" is a value too."""
    return field(default=default, metadata={"flags": flags, "help": help, "lo": lo, "hi": hi, "metavar": metavar,
                                            "lo_open": lo_open, "auto": auto})


def check(options):
    """Raise PeanutError (one line, naming the flag) unless every numeric field of ``options`` lies in its range.

    Nested options (``MapOptions.scoring``) are checked too.  Returns ``options``."""
    for f in fields(options):
        value = getattr(options, f.name)
        if hasattr(value, "__dataclass_fields__"):
            check(value)
            continue
        meta = f.metadata
        lo, hi = meta.get("lo"), meta.get("hi")
        if value is None or (lo is None and hi is None) or (meta.get("auto") and value == "auto"):
            continue
        name = "/".join(meta.get("flags") or (f.name,))
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        span = _range(lo, hi, meta.get("lo_open"))
        integral = isinstance(f.default, int) or f.type in (int, "int") or meta.get("auto")
        if not is_number or (isinstance(value, float) and not math.isfinite(value)) or \
                (integral and not float(value).is_integer()):
            raise PeanutError(f"{name} {value!r}: expected {'an integer' if integral else 'a number'} in {span}")
        too_low = lo is not None and (value <= lo if meta.get("lo_open") else value < lo)
        if too_low or (hi is not None and value > hi):
            raise PeanutError(f"{name} {value}: must lie in {span}")
    if hasattr(options, "check_more"):
        options.check_more()
    return options


def _range(lo, hi, lo_open=False):
    if lo_open:
        return f"({lo}, {hi}]"
    return f"{lo}.." if hi is None else f"{lo}..{hi}"


@dataclass(frozen=True)
class IndexOptions:
    """``peanut index``: the q-gram table of the reference."""

    q: int = _opt(16, ("-q",), "q-gram length; the mapper's q-group index takes 4..16", 4, 16)
    step: int = _opt("auto", ("-s", "--step"), "index every STEP-th reference position; 1 = every position; auto: 1 "
                     "below 1 Gbp, else 2 (a human genome's table then fits 8 GB)", 1, 1024, auto=True)
    # Chosen on GRCh37 chr20, see docs/indexing.md.
    mask_threshold: int = _opt(300, ("-m", "--mask"), "mask q-grams occurring more than N times in the reference; "
                               "0 = no masking", 0, 2**31 - 1, metavar="N")
    compress: bool = False
    threads: int = _opt(1, ("-t", "--threads"), "threads that sort the q-gram table; the index is the same for "
                        "any number", 1, 1024, metavar="N")


@dataclass(frozen=True)
class Scoring:
    """Affine-gap scoring of the final alignment, as bwa's -A -B -O -E -L."""

    match: int = _opt(1, ("-A",), "match score", 1, 100, metavar="INT")
    mismatch: int = _opt(4, ("-B",), "mismatch penalty", 0, 100, metavar="INT")
    gap_open: int = _opt(6, ("-O",), "gap open penalty (a gap of length L costs O + L*E)", 0, 100, metavar="INT")
    gap_extend: int = _opt(1, ("-E",), "gap extension penalty", 0, 100, metavar="INT")
    clip: int = _opt(5, ("-L",), "clipping penalty in local mode", 0, 1000, metavar="INT")

    def check_more(self):
        if self.gap_open + self.gap_extend < 1:
            raise PeanutError(f"-O {self.gap_open} -E {self.gap_extend}: a gap must cost something (O + E >= 1)")


DEFAULT_MIN_IDENTITY = 0.8


@dataclass(frozen=True)
class MapOptions:
    """``peanut map``: what is reported and how it is scored."""

    mode: str = "best"  # best | all | strata:N
    max_hits: int = _opt(5, ("--max-hits",), "report at most N hits per read", 1, 10_000, metavar="N")
    min_identity: float = _opt(DEFAULT_MIN_IDENTITY, ("-i", "--min-identity"),
                               "minimum identity (len - edits) / len of a hit, in (0, 1] or percent (0, 100]", 0.0,
                               1.0, metavar="ID", lo_open=True)
    local: bool = True
    # local mode: a read without a whole-read hit maps when its local alignment scores at least this (clipped.py)
    min_score: int = _opt(30, ("-T", "--min-score"), "local mode: a read whose whole length misses the identity "
                          "threshold still maps when its best local alignment scores at least INT (bwa mem's -T)",
                          0, 1_000_000, metavar="INT")
    secondary: bool = False  # True: other hits as 0x100 records; False: BWA's XA tag on the primary
    scoring: Scoring = field(default_factory=Scoring)
    read_group_id: str = None
    validate_all: bool = False  # mode best: no best-stratum selection (selection.py)
    # final alignment: "cpu" (align.py on the pool), "device" (align_device.py, one launch per batch) or "auto"
    # (the device on GPUs with few host threads, else the pool; postprocess.resolve_align_on)
    align_on: str = "auto"

    def __post_init__(self):
        if self.align_on not in ("auto", "cpu", "device"):
            raise PeanutError(f"--align-on {self.align_on!r}: must be auto, cpu or device")
        if parse_mode(self.mode) is None:
            raise PeanutError(f"--mode {self.mode!r}: must be best, all or strata:N with N >= 1")

    @property
    def n_strata(self):
        """Strata reported: 1 (best), 0 (all) or N (strata:N)."""
        return parse_mode(self.mode)

    @property
    def best_stratum_selection(self):
        return self.mode == "best" and not self.validate_all

    def with_read_group(self, read_group_id):
        return replace(self, read_group_id=read_group_id)


def parse_mode(text):
    """Strata of ``--mode``: 1 for best, 0 for all, N for strata:N (N >= 1); None when invalid."""
    if text == "best":
        return 1
    if text == "all":
        return 0
    if isinstance(text, str) and text.startswith("strata:") and text[7:].isdigit() and int(text[7:]) >= 1:
        return int(text[7:])
    return None


@dataclass(frozen=True)
class RunOptions:
    """``peanut map``: how the run uses the machine (never changes the output)."""

    threads: int = _opt(1, ("-t", "--threads"), "threads, as bwa counts them: above 2, two go to reading and the "
                        "device", 1, 4096)
    batch_size: int = _opt(None, ("--batch-size",), "reads per device buffer (default: from device memory)", 1,
                           1 << 26, metavar="N")
    memory_cap: int = _opt(None, ("--memory-cap",), "use at most SIZE of device memory (e.g. 2G): buffers and the "
                           "q-gram table adapt, as on a smaller device (default: the device's global memory)",
                           1 << 20, None, metavar="SIZE")
    workers: str = _opt("auto", ("--workers",), "where postprocessing runs: worker processes (no interpreter lock "
                        "between them) or threads of this process; auto: processes with 48 or more postprocessing "
                        "workers when the CPU aligns (see --align-on), else threads")

    processes: int = _opt("auto", ("--processes",), "mapping processes, each with its share of -t and of the "
                          "devices, mapping every n-th batch of the input (same output; at most one per core); auto: "
                          "one per device (all, or a list), two per GPU with 48 or more of the threads", 1, 256,
                          metavar="N", auto=True)

    def check_more(self):
        if self.workers not in ("auto", "threads", "processes"):
            raise PeanutError(f"--workers {self.workers!r}: expected auto, threads or processes")


def help_of(cls, name):
    """The help text of field ``name`` of an options class, with its default."""
    f = {f.name: f for f in fields(cls)}[name]
    default = f.default
    text = f.metadata["help"]
    return text if default is None else f"{text} (default {default})"


def flags_of(cls, name):
    return {f.name: f for f in fields(cls)}[name].metadata["flags"]


def metavar_of(cls, name):
    return {f.name: f for f in fields(cls)}[name].metadata.get("metavar")


def default_of(cls, name):
    return {f.name: f for f in fields(cls)}[name].default
