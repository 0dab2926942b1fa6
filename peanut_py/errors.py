"""User-facing errors: the CLI prints these as one line and exits non-zero, never with a traceback."""


class PeanutError(Exception):
    """An error caused by the user's input or environment (bad file, no OpenCL device, ...)."""


def error_text(e):
    """The one line (after "peanut: error: ") reported for ``e``: a PeanutError's message, out of memory, or an
    OpenCL error (a lost device, a failed launch); None for anything else, a bug, whose traceback is shown."""
    if isinstance(e, PeanutError):
        return str(e)
    if isinstance(e, MemoryError):
        return "out of memory"
    if type(e).__module__.startswith("pyopencl"):
        return f"OpenCL device error ({type(e).__name__}): {' '.join(str(e).split())[:300]}"
    return None


class InputError(PeanutError):
    """Malformed input; the message names the file and the record."""

    # In a mapping process of several that reads assigned byte ranges: the number of the read or pair where the
    # range or batch that met the error begins, by which the writing process reports the file's first error.
    batch_start = None

    def __init__(self, path, message, record=None):
        where = f"{path}" if record is None else f"{path}, record {record}"
        super().__init__(f"{where}: {message}")
        self.path = path
        self.record = record
