"""User-facing errors: the CLI prints these as one line and exits non-zero, never with a traceback."""


class PeanutError(Exception):
    """An error caused by the user's input or environment (bad file, no OpenCL device, ...)."""


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
