"""range_writes.py: blocks queued in any order land at their offsets, through a shared mapping or pwrite; a
failing file is an error at the next write or at close, never a lost block or a signal."""
import os
import random
import subprocess
import sys
import textwrap

import pytest

from peanut_py import range_writes


def _blocks(seed, n=120, largest=200_000):
    rng = random.Random(seed)
    blocks, offset = [], rng.randrange(0, 5000)  # the first block after a header of any length
    for _ in range(n):
        size = rng.randrange(1, largest)
        blocks.append((offset, rng.randbytes(size)))
        offset += size
    return blocks


def _fill(path, blocks, threads, flags=os.O_RDWR, mapped=True):
    fd = os.open(path, os.O_CREAT | flags, 0o644)
    try:
        writer = range_writes.RangeWriter(fd, threads=threads, mapped=mapped)
        order = blocks[:]
        random.Random(len(blocks)).shuffle(order)
        for offset, data in order:
            writer.write(offset, data)
        writer.close()
        return writer.mapped
    finally:
        os.close(fd)


def _file_system(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return range_writes.file_system_type(fd)
    finally:
        os.close(fd)


def _expected(blocks, header):
    return header + b"".join(data for _, data in blocks)


def _folders(tmp_path):
    folders = [tmp_path]
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        folders.append("/dev/shm")
    return folders


@pytest.mark.parametrize("threads,mapped", [(1, True), (3, True), (2, False)])
def test_blocks_in_any_order_land_at_their_offsets(tmp_path, threads, mapped):
    for i, folder in enumerate(_folders(tmp_path)):
        path = os.path.join(folder, f"peanut-range-writes-{os.getpid()}-{threads}.out")
        blocks = _blocks(threads * 10 + i)
        header = random.Random(i).randbytes(blocks[0][0])
        with open(path, "wb") as f:
            f.write(header)
        try:
            mappable = _file_system(path) in range_writes.MAPPED_FILE_SYSTEMS and range_writes._fallocate()
            assert _fill(path, blocks, threads, mapped=mapped) is bool(mapped and mappable)
            with open(path, "rb") as f:
                assert f.read() == _expected(blocks, header)
        finally:
            os.unlink(path)


def test_pwrite_where_the_file_system_is_not_known_safe(tmp_path, monkeypatch):
    monkeypatch.setattr(range_writes, "MAPPED_FILE_SYSTEMS", frozenset())
    blocks = _blocks(5)
    path = tmp_path / "out"
    path.write_bytes(b"@" * blocks[0][0])
    assert _fill(str(path), blocks, 2) is False
    assert path.read_bytes() == _expected(blocks, b"@" * blocks[0][0])


def test_a_write_only_file_falls_back_to_pwrite(tmp_path):
    # standard output redirected by a shell is write-only: no shared mapping of it can be made
    blocks = _blocks(6, n=20)
    path = tmp_path / "out"
    path.write_bytes(b"h" * blocks[0][0])
    assert _fill(str(path), blocks, 2, flags=os.O_WRONLY) is False
    assert path.read_bytes() == _expected(blocks, b"h" * blocks[0][0])


def test_file_system_type_names_the_mount():
    fd = os.open(".", os.O_RDONLY)
    try:
        kind = range_writes.file_system_type(fd)
    finally:
        os.close(fd)
    with open("/proc/self/mountinfo") as f:
        kinds = {line.partition(" - ")[2].split()[0] for line in f if " - " in line}
    assert kind in kinds
    r, w = os.pipe()
    try:
        assert range_writes.file_system_type(r) is None  # a pipe is on no mounted file system
    finally:
        os.close(r)
        os.close(w)


def test_a_failing_file_is_an_error_not_a_lost_block(tmp_path):
    path = tmp_path / "out"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        writer = range_writes.RangeWriter(fd, threads=2)
        writer.write(0, b"x" * 1000)
        with pytest.raises(OSError):
            writer.close()
    finally:
        os.close(fd)


def test_a_full_file_system_is_an_error_not_a_signal(tmp_path):
    # a file-size limit makes fallocate fail as a full disk would (EFBIG instead of ENOSPC); through a
    # mapping without the reservation the copy would end the process with SIGBUS
    script = textwrap.dedent(f"""
        import os, resource, signal, sys
        from peanut_py import range_writes
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        fd = os.open({str(tmp_path / 'out')!r}, os.O_CREAT | os.O_RDWR, 0o644)
        writer = range_writes.RangeWriter(fd, threads=1)
        writer.write(0, b"a" * 4096)
        writer.write(2 << 20, b"b" * 4096)
        try:
            writer.close()
        except OSError as e:
            print("error", e.errno)
            sys.exit(0)
        print("no error")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("error"), done.stdout
    with open(tmp_path / "out", "rb") as f:
        assert f.read(4096) == b"a" * 4096
