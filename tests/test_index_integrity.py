"""Index integrity: a CRC-32 per dataset written at build and checked at load (small datasets at every start,
all of them with `peanut index --check`), structural checks of the q-gram table before it reaches a kernel,
and damaged HDF5 metadata as a one-line error."""
import gzip
import shutil

import h5py
import numpy as np
import pytest

from helpers import EXAMPLE, run_cli

from peanut_py.errors import InputError
from peanut_py.reference import DATASETS, ReferenceIndex

READS = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"


@pytest.fixture(scope="module")
def fresh_index(tmp_path_factory):
    """The bundled chr20 slice plus a contig with N runs and a tandem repeat whose q-grams are masked (so that
    every dataset, the exceptions and the masked q-grams too, holds data), indexed by this peanut-py."""
    folder = tmp_path_factory.mktemp("integrity")
    rng = np.random.default_rng(5)
    extra = "".join("N" * 20 if i % 50 == 7 else "ACGT"[rng.integers(4)] for i in range(3000)) + "GATTACA" * 400
    fasta = folder / "ref.fa"
    fasta.write_bytes(gzip.decompress((EXAMPLE / "chr20_slice.fa.gz").read_bytes()) + f">extra\n{extra}\n".encode())
    out = folder / "ref.h5"
    rc, _, err = run_cli("index", str(fasta), "-o", str(out))
    assert rc == 0, err
    return out


def _one_line_error(rc, out, err, *needles):
    lines = err.strip().splitlines()
    assert rc == 1 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith("peanut: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def _damage(src, dst, name):
    """A copy of ``src`` with 32 bytes in the middle of dataset ``name`` inverted (the HDF5 structure intact)."""
    shutil.copy(src, dst)
    with h5py.File(dst, "r") as h5:
        ds = h5[name]
        offset, n = ds.id.get_offset(), ds.id.get_storage_size()
        if offset is None:  # chunked: the first chunk
            info = ds.id.get_chunk_info(0)
            offset, n = info.byte_offset, info.size
    assert offset is not None and n > 0
    where = offset + n // 2
    with open(dst, "r+b") as f:
        f.seek(where)
        data = f.read(min(32, n - n // 2))
        f.seek(where)
        f.write(bytes(255 - b for b in data))
    return dst


def test_every_dataset_carries_its_checksum(fresh_index):
    with ReferenceIndex(fresh_index) as index:
        assert index.verify(full=True) == len(DATASETS)
    rc, out, err = run_cli("index", "--check", str(fresh_index))
    assert rc == 0 and out.startswith("ok: ") and f"all {len(DATASETS)} datasets match" in out, err


@pytest.mark.parametrize("name", [n for n in DATASETS if not n.startswith("contigs/names")
                                  and not n.startswith("contigs/md5")])
def test_a_damaged_dataset_is_named_by_check_and_by_map(fresh_index, tmp_path, name):
    damaged = _damage(fresh_index, tmp_path / "damaged.h5", name)
    rc, out, err = run_cli("index", "--check", str(damaged))
    _one_line_error(rc, out, err, str(damaged), f"damaged index: /{name}")
    rc, out, err = run_cli("map", "-q", str(damaged), str(READS), "-o", str(tmp_path / "o.sam"))
    _one_line_error(rc, out, err, str(damaged), "damaged index")
    assert not (tmp_path / "o.sam").exists()


def test_damaged_hdf5_metadata_is_one_line(fresh_index, tmp_path):
    damaged = tmp_path / "meta.h5"
    data = bytearray(fresh_index.read_bytes())
    at = data.find(b"SNOD")  # an HDF5 symbol table node's signature
    assert at > 0
    data[at : at + 4] = b"XXXX"
    damaged.write_bytes(bytes(data))
    for args in (["info", str(damaged)], ["index", "--check", str(damaged)],
                 ["map", "-q", str(damaged), str(READS), "-o", str(tmp_path / "o.sam")]):
        rc, out, err = run_cli(*args)
        _one_line_error(rc, out, err, str(damaged), "damaged index")


def test_structural_checks_name_the_dataset(fresh_index):
    with ReferenceIndex(fresh_index) as index:
        buckets, positions = index.buckets().copy(), index.positions().copy()
        index.check_table(buckets, positions)
        cases = []
        s = buckets.copy()
        s[100] = s[101] + 7
        cases.append(((s, positions), "/qgrams/buckets is not ascending"))
        s = buckets.copy()
        s[-1] += 1
        cases.append(((s, positions), "/qgrams/buckets does not run from 0"))
        cases.append(((buckets[:-1], positions), "/qgrams/buckets has"))
        p = positions.copy()
        p[7] = index.total_padded + 3
        cases.append(((buckets, p), "/qgrams/positions holds a position beyond the genome"))
        p = positions.copy()
        p[7] = index.total_padded - index.q + 1  # its q-gram would end past the packed sequence
        cases.append(((buckets, p), "/qgrams/positions holds a position beyond the genome"))
        for arrays, message in cases:
            with pytest.raises(InputError, match=message):
                index.check_table(*arrays)


def test_a_damaged_table_without_checksums_stops_before_the_kernels(fresh_index, tmp_path):
    """An index without checksums whose bucket table is damaged: the structural
    check stops the run with one line (the filtration kernel would read out of bounds)."""
    damaged = tmp_path / "old.h5"
    shutil.copy(fresh_index, damaged)
    with h5py.File(damaged, "r+") as h5:
        for name in DATASETS:
            del h5[name].attrs["crc32"]
        starts = h5["qgrams/buckets"]
        starts[len(starts) // 2] = np.iinfo(starts.dtype).max
    rc, out, err = run_cli("map", "-q", str(damaged), str(READS), "-o", str(tmp_path / "o.sam"))
    _one_line_error(rc, out, err, str(damaged), "/qgrams/buckets")
    rc, out, err = run_cli("index", "--check", str(damaged))
    _one_line_error(rc, out, err, "/qgrams/buckets")
