"""The mapping process's allocator settings (allocator.py): large blocks stay in malloc's heaps."""
import os
import subprocess
import sys

import pytest

from peanut_py import allocator

GLIBC = allocator._glibc() is not None

PROBE = r"""
import ctypes, sys
import numpy as np
from peanut_py import allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
applied = allocator.keep_freed_memory() if sys.argv[1] == "1" else False
before = libc.mallinfo2().hblkhd
arrays = [np.ones(1 << 20) for _ in range(4)]  # 8 MiB each
print(int(applied), libc.mallinfo2().hblkhd - before, int(allocator.keep_freed_memory()))
"""


def _probe(apply, env=None):
    out = subprocess.run([sys.executable, "-c", PROBE, "1" if apply else "0"], capture_output=True, text=True,
                         env=env, check=True).stdout.split()
    return [int(x) for x in out]


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's; other C libraries keep their defaults")
def test_large_arrays_come_from_the_heap_once_applied():
    env = {k: v for k, v in os.environ.items() if k not in allocator.USER_SETTINGS}
    applied, mapped, again = _probe(True, env)
    assert applied == 1 and again == 0  # applied once per process
    assert mapped == 0  # no 8 MiB array was given its own mapping
    applied, mapped, _ = _probe(False, env)
    assert applied == 0 and mapped >= 4 * 8 << 20  # glibc's default: each array mmapped


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_a_users_malloc_setting_wins():
    env = {k: v for k, v in os.environ.items() if k not in allocator.USER_SETTINGS}
    env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    applied, mapped, _ = _probe(True, env)
    assert applied == 0 and mapped >= 4 * 8 << 20
