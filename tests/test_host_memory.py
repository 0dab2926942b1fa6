"""Host memory of a run: the genome's windows unpacked from the packed sequence (genome.HostGenome) give the
codes ReferenceIndex.codes gives, and the reference's mapped pages leave the resident set once a GPU has them
(reference.release_pages, resident._copy_to_device), without changing a byte the run reads."""
import mmap

import numpy as np
import pytest

from peanut_py import resident as resident_mod
from peanut_py.device import Device
from peanut_py.genome import HostGenome
from peanut_py.reference import ReferenceIndex, build_index, release_pages
from peanut_py.resident import ResidentReference


def resident_kib(array):
    """Rss (KiB) of the mapping that holds ``array``'s first byte, from /proc/self/smaps."""
    address = array.ctypes.data
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError("no mapping holds the array")


def file_kib(path):
    """Rss (KiB) of every mapping of the file ``path`` in this process."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


@pytest.fixture(scope="module")
def edge_index(tmp_path_factory):
    """Contigs that start and end with N runs, hold IUPAC letters and lowercase, and lengths that are not
    multiples of 16: every case of the windows' painting."""
    rng = np.random.default_rng(7)
    d = tmp_path_factory.mktemp("edges")
    contigs = []
    for i, n in enumerate((1000, 37, 4099, 2500)):
        seq = np.array(list("ACGT"), dtype="<U1")[rng.integers(0, 4, n)]
        if i == 0:
            seq[:5] = "N"
        if i in (0, 2):
            seq[-3:] = "N"
        seq[n // 2 : n // 2 + 2] = ["R", "y"]
        text = "".join(seq)
        contigs.append(text[: n // 3].lower() + text[n // 3 :])
    fasta = d / "edges.fa"
    fasta.write_text("".join(f">c{i}\n{s}\n" for i, s in enumerate(contigs)))
    build_index(fasta, d / "edges.h5")
    return d / "edges.h5"


@pytest.mark.parametrize("which", ["edge_index", "yeast_index", "chr20_index"])
def test_windows_equal_the_index_codes(which, request):
    """Random windows (inside contigs, across gaps, over N runs, past the end, empty) against the codes of
    the whole padded genome, on real genomes (chr20: N runs; yeast: 17 contigs and their gaps)."""
    with ReferenceIndex(request.getfixturevalue(which)) as index:
        genome = HostGenome.from_index(index)
        full = index.codes(0, index.total_padded + 64)
        rng = np.random.default_rng(3)
        starts = rng.integers(0, index.total_padded + 32, 20_000)
        lengths = rng.integers(0, 700, starts.size)
        # every contig's first and last bases and the runs' edges
        s, e, _ = index.exceptions()
        edges = np.concatenate([index.offsets, index.offsets + index.lengths, s, e])
        starts = np.concatenate([starts, edges - 20, edges - 1, edges])
        lengths = np.concatenate([lengths, np.full(3 * edges.size, 40)])
        keep = (starts >= 0) & (starts + lengths <= full.size)
        starts, lengths = starts[keep], lengths[keep]
        codes, offsets = genome.windows(starts, lengths)
        assert np.array_equal(np.diff(offsets), lengths)
        assert np.array_equal(codes, np.concatenate([full[a : a + n] for a, n in zip(starts, lengths)]))
        assert (codes == 4).any() and (codes < 4).any()
        assert np.array_equal(genome.codes(10, 10), np.empty(0, dtype=np.uint8))


def test_windows_of_a_genome_without_runs_and_bad_windows():
    """Every code of a packed word comes back at every alignment; a negative window is refused."""
    codes = np.arange(64, dtype=np.uint8) % 4
    packed = np.zeros(4, dtype=np.uint32)
    for g, c in enumerate(codes):
        packed[g >> 4] |= np.uint32(int(c) << (2 * (g & 15)))
    genome = HostGenome(packed, [], [])
    for lo in range(0, 64):
        for hi in range(lo, 70):
            expect = np.concatenate([codes[lo:hi], np.full(max(0, hi - 64), 4, dtype=np.uint8)])
            assert np.array_equal(genome.codes(lo, hi), expect[: hi - lo])
    with pytest.raises(IndexError):
        genome.windows([-1], [5])


def test_the_packed_sequence_is_mapped_from_the_file(chr20_index):
    """The host genome costs no fresh memory: its words are the index file's pages."""
    with ReferenceIndex(chr20_index) as index:
        genome = HostGenome.from_index(index)
        assert isinstance(genome.packed.base.obj, mmap.mmap)
        assert not genome.packed.flags.writeable


def test_release_pages_keeps_the_bytes_and_leaves_other_arrays_alone(chr20_index):
    with ReferenceIndex(chr20_index) as index:
        positions = index.positions()
        expect = np.array(positions[: 1 << 22])
        total = int(positions.sum(dtype=np.uint64))  # touches every page
        assert resident_kib(positions) * 1024 >= 0.9 * positions.nbytes
        release_pages(positions[: positions.size // 2])
        assert resident_kib(positions) * 1024 <= 0.6 * positions.nbytes
        release_pages(positions)
        assert resident_kib(positions) <= 8
        assert np.array_equal(positions[: 1 << 22], expect)
        assert int(positions.sum(dtype=np.uint64)) == total
        fresh = np.arange(1 << 20, dtype=np.uint32)  # not mapped from a file: must be left as it is
        release_pages(fresh)
        assert np.array_equal(fresh, np.arange(1 << 20, dtype=np.uint32))


def test_a_gpu_upload_leaves_the_table_out_of_the_resident_set(chr20_index, monkeypatch):
    """The GPU path (a CPU device told to copy, as a GPU does) checks and copies the table block by block: the
    device arrays equal the index's, and of the index file's 260 MB at most a few blocks stay resident in this
    process (all of it did when the whole arrays were checked and copied)."""
    monkeypatch.setattr(resident_mod, "UPLOAD_BLOCK", 3 << 20)  # several blocks, the last one short
    gpu = Device(host_memory=False)
    path = chr20_index.resolve()
    with ReferenceIndex(path) as index:
        ref = ResidentReference.from_index(gpu, index)
        assert not ref.streamed
        assert file_kib(path) * 1024 <= 16 << 20 < index.positions().nbytes
        table = (index.buckets(np.uint32), index.positions())
        for host, dev in zip(table, (ref.buckets, ref.positions)):
            assert np.array_equal(dev.get(), host)
        assert np.array_equal(ref.packed.get(), index.packed())
        assert np.array_equal(ref.ambiguous.get(), index.ambiguity_bitmap())


def test_a_cpu_device_keeps_the_table_mapped(chr20_index, device):
    """A CPU device reads the mapped table in place: nothing is released there (it would only be read back)."""
    if not device.host_memory:
        pytest.skip("the default device is not a CPU device")
    path = chr20_index.resolve()
    with ReferenceIndex(path) as index:
        ref = ResidentReference.from_index(device, index)
        assert file_kib(path) * 1024 >= index.positions().nbytes
        assert not ref.streamed
