"""Device faults: a batch the device has no memory for is mapped in halves (same result); any other OpenCL
error ends the run with one error line and no output."""
import pyopencl as cl
import pytest

from helpers import EXAMPLE, sam_body

from peanut_py import cli
from peanut_py.device import Device
from peanut_py.device_stage import DeviceStage, is_out_of_device_memory
from peanut_py.mapping import open_index
from peanut_py.reads import read_batches
from peanut_py.resident import ResidentReference

READS = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"


class SmallDevice(DeviceStage):
    """A device stage that fails like an exhausted device on batches of more than ``limit`` reads."""

    limit = 300
    error = staticmethod(lambda: cl.MemoryError("clCreateBuffer", -4, "out of device memory"))

    def map_batch(self, codes, offsets):
        if len(offsets) - 1 > self.limit:
            raise self.error()
        return super().map_batch(codes, offsets)


@pytest.fixture(scope="module")
def stage_parts(example_index):
    device = Device()
    return device, ResidentReference.from_index(device, open_index(example_index))


@pytest.mark.parametrize("error", [
    lambda: cl.MemoryError("clCreateBuffer", -4, "out of device memory"),
    lambda: cl.RuntimeError(cl._cl._ErrorRecord("clEnqueueNDRangeKernel", -5, "out of resources")),
], ids=["allocation", "resources"])
def test_a_batch_without_device_memory_is_mapped_in_halves(stage_parts, error):
    device, resident = stage_parts
    batch = next(read_batches(str(READS), max_reads=1500))
    whole = DeviceStage(device, resident).map_batch(batch.codes, batch.offsets)
    small = SmallDevice(device, resident)
    small.error = staticmethod(error)
    splits = []
    parts = small.map_batch_or_split(batch.codes, batch.offsets, on_split=splits.append)
    # 1500 -> 750 -> 375 -> 187/188: said once, when the first batch failed
    assert splits == [1500] and small.fits == 187
    for field in ("rs", "ref_start", "ref_end", "dist"):
        assert getattr(parts, field).tolist() == getattr(whole, field).tolist()
    assert (parts.candidates, parts.too_long) == (whole.candidates, whole.too_long)


def test_other_errors_are_not_taken_for_memory(stage_parts):
    device, resident = stage_parts
    small = SmallDevice(device, resident)
    small.error = staticmethod(lambda: cl.LogicError(cl._cl._ErrorRecord("clSetKernelArg", -51, "bad size")))
    batch = next(read_batches(str(READS), max_reads=500))
    with pytest.raises(cl.LogicError):
        small.map_batch_or_split(batch.codes, batch.offsets)
    assert is_out_of_device_memory(cl.MemoryError("x"))
    assert not is_out_of_device_memory(ValueError("x"))
    assert not is_out_of_device_memory(cl.RuntimeError(cl._cl._ErrorRecord("clFinish", -36, "invalid queue")))


def _run_cli(argv, capsys):
    try:
        cli.main(argv)
        code = 0
    except SystemExit as ended:
        code = ended.code
    return code, capsys.readouterr().err


def test_an_opencl_fault_mid_run_is_one_line_and_leaves_no_output(example_index, tmp_path, monkeypatch, capsys):
    """A device lost mid-run (here: the third batch's launch fails) ends with one error line, exit 1, and
    no output file; a batch that only lacked memory maps in halves and the output is unchanged."""
    import signal

    kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)}
    original = DeviceStage.map_batch
    calls = []

    def lost(self, codes, offsets):
        calls.append(len(offsets) - 1)
        if len(calls) == 3:
            raise cl.RuntimeError(cl._cl._ErrorRecord("clEnqueueNDRangeKernel", -9999, "device lost"))
        return original(self, codes, offsets)

    out = tmp_path / "out.sam"
    try:
        monkeypatch.setattr(DeviceStage, "map_batch", lost)
        code, err = _run_cli(["map", "-q", "--batch-size", "300", str(example_index), str(READS), "-o", str(out)],
                             capsys)
        assert code == 1 and err.count("\n") == 1 and err.startswith("peanut: error: OpenCL device error")
        assert "device lost" in err and "Traceback" not in err
        assert list(tmp_path.iterdir()) == []

        def short_of_memory(self, codes, offsets):
            if len(offsets) - 1 > 200:
                raise cl.MemoryError("clCreateBuffer", -4, "out of device memory")
            return original(self, codes, offsets)

        monkeypatch.setattr(DeviceStage, "map_batch", short_of_memory)
        code, err = _run_cli(["map", "--batch-size", "700", str(example_index), str(READS), "-o", str(out)], capsys)
        assert code == 0, err
        # said once: later batches are split before they are tried
        assert err.count("ran out of memory") == 1 and "for a batch of 700 reads" in err
        monkeypatch.setattr(DeviceStage, "map_batch", original)
        plain = tmp_path / "plain.sam"
        code, err = _run_cli(["map", "-q", "--batch-size", "700", str(example_index), str(READS), "-o", str(plain)],
                             capsys)
        assert sam_body(out) == sam_body(plain)
    finally:
        for s, handler in kept.items():
            signal.signal(s, handler)
