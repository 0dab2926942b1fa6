"""Temporary files beside an output: how they are named and created, and how a later run finds those that a
killed run (SIGKILL, the out-of-memory killer, a power cut) left behind.

An output is written to ``.NAME.PID-RANDOM.tmp`` in the target's directory (same file system, so the final
``os.replace`` is atomic) and renamed onto NAME when complete; every error and signal deletes it.  Only a
process that is killed outright leaves one; its PID is in the name, so the next run writing NAME (``peanut
map``, ``peanut index``) removes, once before it starts and saying so, the files whose process no longer
exists (a live PID, even of another program, is left alone).
"""
import glob
import os
import re
import secrets
import threading

# Set by the command line's SIGINT/SIGTERM handler, which also raises KeyboardInterrupt in the main thread.
# Code that the main thread runs may swallow that exception (an error inside a C extension's clean-up is only
# printed), so an output is never renamed into place once this is set: the run then ends as interrupted.
INTERRUPTED = threading.Event()


def replace_unless_interrupted(tmp, path):
    """``os.replace(tmp, path)``; after an interruption ``tmp`` is deleted instead and KeyboardInterrupt raised."""
    if INTERRUPTED.is_set():
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise KeyboardInterrupt()
    os.replace(tmp, path)


def temporary_beside(path):
    """``(temporary path, open fd)`` of a new hidden file beside ``path``; OSError if it cannot be created.
    Opened for reading too: a shared mapping of it needs that (range_writes.py)."""
    directory, base = os.path.split(os.path.abspath(path))
    while True:
        tmp = os.path.join(directory, f".{base}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            return tmp, os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def remove_stale_temporaries(path):
    """Delete the temporary files of ``path`` that killed runs left (their process is gone); returns their
    paths.  Files that cannot be removed are left and not returned."""
    directory, base = os.path.split(os.path.abspath(path))
    pattern = re.compile(re.escape(f".{base}.") + r"(\d+)-[0-9a-f]+\.tmp")
    removed = []
    for candidate in glob.glob(os.path.join(glob.escape(directory), glob.escape(f".{base}.") + "*.tmp")):
        m = pattern.fullmatch(os.path.basename(candidate))
        if m is None or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
            continue
        try:
            os.unlink(candidate)
            removed.append(candidate)
        except OSError:
            pass
    return removed
