"""ReadBuffer and QGroupIndex (Algorithm 1) against a plain NumPy q-gram index."""
import types

import numpy as np
import pytest

from peanut_py.device import Device
from peanut_py.errors import PeanutError
from peanut_py import device as devmod
from peanut_py import layout
from peanut_py.layout import BUILD_BYTES_PER_BASE, index_fixed_bytes, reads_per_buffer
from peanut_py import qgroup as qgroup_mod
from peanut_py.qgroup import QGroupIndex, ReadBuffer
from qgram_oracle import read_fastq_codes, ref_qgrams, ref_text

HUMAN_R1 = "human/NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz"
YEAST_R1 = "yeast/SRR5204809_Spt5-ChIP_Input1_SacCer_ChIP-Seq_ss100k_R1.fastq.gz"


# ---------------------------------------------------------------- plain references

def ref_qgroup(g, t, q, sample_s, fold=0, stride=layout.S_STRIDE):
    """The q-group index by definition: bit per present key (the q-gram without its last ``fold`` bases),
    prefix sums, positions sorted by (g, t)."""
    I = np.zeros(4 ** (q - fold) // 32, dtype=np.uint32)
    distinct, counts = np.unique(g >> np.uint64(2 * fold), return_counts=True)
    np.add.at(I, (distinct >> np.uint64(5)).astype(np.int64), (np.uint32(1) << (distinct & np.uint64(31)).astype(np.uint32)))
    pc = np.bitwise_count(I).astype(np.uint64)
    S = (np.cumsum(pc) - pc).astype(np.uint32)
    Sp = np.concatenate([[0], np.cumsum(counts)]).astype(np.uint32)
    O = t[np.lexsort((t, g))].astype(np.uint32)
    return I, (S[::stride] if sample_s else S), Sp, O


def random_reads(rng, n, lo, hi, n_rate=0.0):
    lengths = rng.integers(lo, hi + 1, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    codes = rng.integers(0, 4, offsets[-1]).astype(np.uint8)
    codes[rng.random(len(codes)) < n_rate] = 4
    return codes, offsets


# ---------------------------------------------------------------- fixtures

def check_index(device, codes, offsets, q, sample_s, fold=0, stride=layout.S_STRIDE):
    rb = ReadBuffer(device, codes, offsets)
    text, rs_start, pos_rs = ref_text(codes, offsets)
    qi = QGroupIndex(device, rb, q, sample_s=sample_s, fold=fold, s_stride=stride)
    got = qi.to_host()
    g, t = ref_qgrams(text, rs_start, pos_rs, q)
    forward = pos_rs[t] % 2 == 0  # the index holds the forward read strands' q-grams only
    g, t = g[forward], t[forward]
    I, S, Sp, O = ref_qgroup(g, t, q, sample_s, fold, stride)
    for name, a, b in (("I", got.I, I), ("S", got.S, S), ("S'", got.S_prime, Sp), ("O", got.O, O)):
        if not np.array_equal(a, b):  # the fast check first: I is 512 MiB at q = 16
            np.testing.assert_array_equal(a, b, err_msg=name)
    if fold:  # the last base of each entry's q-gram
        np.testing.assert_array_equal(qi.Ob.get()[: len(O)], text[O.astype(np.int64) + q - 1])
    assert qi.n_distinct == len(Sp) - 1 and qi.n_occurrences == len(t)
    return qi


# ---------------------------------------------------------------- ReadBuffer

def test_read_buffer_matches_numpy(device):
    rng = np.random.default_rng(7)
    codes, offsets = random_reads(rng, 300, 0, 300, n_rate=0.02)
    codes[::97] = 9  # any code above 3 is N
    rb = ReadBuffer(device, codes, offsets)
    text, rs_start, pos_rs = ref_text(codes, offsets)
    got = rb.to_host()
    np.testing.assert_array_equal(got["text"], text)
    np.testing.assert_array_equal(got["rs_start"], rs_start)
    np.testing.assert_array_equal(rb.rs_start_host, rs_start)
    np.testing.assert_array_equal(got["pos_rs"], pos_rs)
    assert (rb.n_reads, rb.n_rs, rb.max_len) == (300, 600, int(np.diff(offsets).max()))


def test_read_buffer_rejects_bad_input(device):
    with pytest.raises(PeanutError):
        ReadBuffer(device, np.zeros(1100, np.uint8), np.array([0, 1100]))  # longer than 1024
    with pytest.raises(PeanutError):
        ReadBuffer(device, np.zeros(10, np.uint8), np.array([0, 5]))  # offsets do not cover codes


# ---------------------------------------------------------------- QGroupIndex

@pytest.mark.parametrize("fold", [0, 1])
@pytest.mark.parametrize("q", [4, 8, 11])  # q = 4: fewer groups (8, folded 2) than one stride of 16
@pytest.mark.parametrize("stride", [1, 2, 4, 16])  # S for every group, every second (the paper's), ...
def test_qgroup_random_reads(device, q, stride, fold):
    sample_s = stride > 1
    rng = np.random.default_rng(q)
    codes, offsets = random_reads(rng, 400, 30, 300, n_rate=0.01)
    # Repeats inside the buffer: frequent q-grams give long slots in O.
    codes[offsets[5] : offsets[5] + 200] = 0
    codes[offsets[9] : offsets[9] + 100] = np.tile([0, 1], 50)
    check_index(device, codes, offsets, q, sample_s, fold, max(stride, 2))


# (fold, by_group, SORT_LOCAL, SORT_GROUP): one work-item per slot (a CPU device's way), and on unfolded
# indexes (a GPU's) the slots above SORT_BY_GROUP_ABOVE entries by a work-group: local blocks of the default
# size or of 64 / 16 entries merged in passes, groups of 128, fewer work-items than blocks, one work-item.
SORT_VARIANTS = [(0, False, None, None), (1, False, None, None), (0, True, None, 128), (0, True, 64, 4),
                 (0, True, 16, 1), (0, True, 64, 128)]


@pytest.mark.parametrize("fold,by_group,sort_local,group", SORT_VARIANTS)
def test_sort_occurrences_any_order(device, monkeypatch, fold, by_group, sort_local, group):
    """The slot sort of O on shuffled slots: insertion within budget, heapsort for badly ordered long slots,
    or a work-group per long slot; folded, by (last base of the q-gram at the position, position)."""
    import pyopencl.array as cla

    monkeypatch.setattr(qgroup_mod, "SORT_BY_GROUP", by_group)
    if sort_local:
        monkeypatch.setattr(qgroup_mod, "SORT_LOCAL", sort_local)
    if group:
        monkeypatch.setattr(qgroup_mod, "SORT_GROUP", group)
    rng = np.random.default_rng(5)
    q = 8
    sizes = np.array([1, 0, 2, 5, 32, 33, 200, 1000, 4000, 3, 7000, 64, 65, 4096, 4097, 129, 8192 + 17])
    Sp = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint32)
    top = 1 << 31 if fold == 0 else 20_000  # folded: positions of a text of random bases
    O = rng.integers(0, top, Sp[-1], dtype=np.uint64).astype(np.uint32)
    O[Sp[7] : Sp[8]] = np.arange(1000)[::-1]  # descending: the worst case for insertion
    O[Sp[8] : Sp[9]] = np.arange(4000) ^ 1  # nearly sorted: insertion within budget
    O[Sp[16] : Sp[16] + 100] = 12345  # equal entries
    text = rng.integers(0, 4, 20_000 + q).astype(np.uint8)
    d_O, d_Ob = cla.to_device(device.queue, O), cla.zeros(device.queue, len(O), np.uint8)
    knl = qgroup_mod.qgroup_kernels(device, q, fold=fold)
    assert (qgroup_mod.occurrence_sort_group(device, knl, fold) is not None) == by_group
    qgroup_mod.sort_occurrences(device, knl, cla.to_device(device.queue, Sp), len(sizes), len(O),
                                cla.to_device(device.queue, text), d_O, d_Ob, fold)
    last = text[O.astype(np.int64) + q - 1].astype(np.uint64) if fold else np.zeros(len(O), np.uint64)
    key = (last << np.uint64(32)) | O
    want = np.concatenate([np.sort(key[Sp[i] : Sp[i + 1]]) for i in range(len(sizes))])
    np.testing.assert_array_equal(d_O.get(), (want & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    np.testing.assert_array_equal(d_Ob.get(), (want >> np.uint64(32)).astype(np.uint8))  # stays 0 unfolded


@pytest.mark.parametrize("sort_local", [None, 32])
def test_qgroup_by_group_sort_on_repeats(device, monkeypatch, sort_local):
    """The whole index with O sorted by work-groups (a GPU's way, run on this device): random reads with
    tandem repeats and copies of one read, so that slots of thousands of occurrences arise."""
    monkeypatch.setattr(qgroup_mod, "SORT_BY_GROUP", True)
    if sort_local:
        monkeypatch.setattr(qgroup_mod, "SORT_LOCAL", sort_local)
    rng = np.random.default_rng(11)
    n = 6000  # the forward strands' q-grams only: enough reads for slots of twice SORT_LOCAL
    codes, offsets = random_reads(rng, n, 80, 150, n_rate=0.002)
    codes = codes.copy()
    for r in range(0, n, 7):  # tandem repeats of a few motifs
        motif = rng.integers(0, 4, rng.integers(1, 4)).astype(np.uint8)
        a, b = offsets[r], offsets[r + 1]
        codes[a:b] = np.resize(motif, b - a)
    first = codes[offsets[1] : offsets[2]].copy()
    for r in range(3, n, 11):  # copies of one read (its q-grams in hundreds of reads)
        a = offsets[r]
        n = min(len(first), offsets[r + 1] - a)
        codes[a : a + n] = first[:n]
    qi = check_index(device, codes, offsets, 12, True, fold=0)
    sizes = np.diff(qi.Sp.get()[: qi.n_distinct + 1].astype(np.int64))
    assert sizes.max() > 2 * (sort_local or qgroup_mod.SORT_LOCAL) and (sizes > qgroup_mod.SORT_BY_GROUP_ABOVE).sum() > 50


@pytest.mark.parametrize("fold", [0, 1])
def test_qgroup_short_and_empty_reads(device, fold):
    rng = np.random.default_rng(3)
    codes, offsets = random_reads(rng, 500, 0, 14, n_rate=0.05)  # many reads shorter than q, some empty
    qi = check_index(device, codes, offsets, 11, True, fold)
    assert 0 < qi.n_occurrences < len(codes)


@pytest.mark.parametrize("fold", [0, 1])
def test_qgroup_reads_shorter_than_q(device, fold):
    codes, offsets = random_reads(np.random.default_rng(4), 50, 0, 7)
    qi = check_index(device, codes, offsets, 8, True, fold)
    assert qi.n_distinct == 0 and qi.n_occurrences == 0


@pytest.mark.parametrize("fold", [0, 1])
def test_qgroup_empty_buffer(device, fold):
    qi = check_index(device, np.zeros(0, np.uint8), np.array([0]), 8, False, fold)
    assert qi.n_distinct == 0


@pytest.mark.parametrize("fold", [pytest.param(0, marks=pytest.mark.slow), 1])  # unfolded: I is 512 MiB
def test_qgroup_q16(device, fold):
    # q = 16 fills one 32-bit word: I alone is 512 MiB (folded 128 MiB), so keep the reads few.
    codes, offsets = random_reads(np.random.default_rng(16), 60, 10, 150, n_rate=0.01)
    codes[offsets[3] : offsets[3] + 60] = 3
    qi = check_index(device, codes, offsets, 16, True, fold)
    assert qi.I.nbytes == 4 ** (16 - fold) // 8


def test_qgroup_default_fold(device):
    """A CPU device folds one base out of the key, a GPU does not (qgroup.default_fold)."""
    codes, offsets = random_reads(np.random.default_rng(6), 20, 30, 60)
    qi = QGroupIndex(device, ReadBuffer(device, codes, offsets), 8)
    assert qi.fold == (1 if device.host_memory else 0) == layout.default_fold(device)
    with pytest.raises(PeanutError):
        QGroupIndex(device, ReadBuffer(device, codes, offsets), 8, fold=2)


@pytest.mark.parametrize("fold", [0, 1])
@pytest.mark.parametrize("path,q", [(HUMAN_R1, 11), (YEAST_R1, 12), pytest.param(HUMAN_R1, 16, marks=pytest.mark.slow)])
def test_qgroup_real_reads(device, shared_data, path, q, fold):
    codes, offsets = read_fastq_codes(shared_data / path, 2000 if q < 16 else 300)
    assert (codes == 4).any()  # real reads carry N
    check_index(device, codes, offsets, q, True, fold)


# ---------------------------------------------------------------- buffer sizing

def fake_device(global_mem, max_alloc):
    return types.SimpleNamespace(global_mem=global_mem, max_alloc=max_alloc, name="fake")


def test_reads_per_buffer_small_and_large_devices():
    small = fake_device(2 << 30, 512 << 20)
    n_small = reads_per_buffer(small, 100, q=16)
    # Everything built for one buffer stays inside the usable part of the 2 GB device.
    assert n_small > 50_000
    assert index_fixed_bytes(16) + n_small * (BUILD_BYTES_PER_BASE * 100 + 8) < 0.75 * small.global_mem
    assert n_small * 100 * 8 <= small.max_alloc
    big = fake_device(143 << 30, 35 << 30)
    n_big = reads_per_buffer(big, 100, q=16, reserved_bytes=30 << 30)
    assert n_big > 100 * n_small
    assert 2 * n_big * 100 < 1 << 31  # the int32 index of the scans
    assert reads_per_buffer(big, 100, max_reads=1000) == 1000
    with pytest.raises(PeanutError):
        reads_per_buffer(small, 100, q=16, reserved_bytes=1 << 30)


@pytest.fixture(scope="module")
def forced_devices():
    """The default device as a CPU device (host memory) and as a GPU (not) would handle buffers."""
    return {flag: Device(host_memory=flag) for flag in (True, False)}


@pytest.mark.parametrize("host_memory", [True, False])
@pytest.mark.parametrize("n", [1, devmod.ZERO_SPAN - 1, devmod.ZERO_SPAN, 3 * devmod.ZERO_SPAN + 17])
def test_zero_words_clears_exactly_the_array(forced_devices, host_memory, n):
    """Both ways of clearing I (the kernel on CPU devices, the fill command elsewhere) zero every word of the
    array and nothing past it, for lengths around the kernel's span."""
    import pyopencl.array as cla

    device = forced_devices[host_memory]
    assert device.host_memory == host_memory
    rng = np.random.default_rng(n)
    host = rng.integers(1, 2**32, n + 100, dtype=np.uint32)
    a = cla.to_device(device.queue, host)
    device.zero_words(a[:n])
    got = a.get()
    assert not got[:n].any() and np.array_equal(got[n:], host[n:])
