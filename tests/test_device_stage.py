"""DeviceStage (device_stage.py): the device stage of one batch; its warm-up builds what the batches then use."""
import pytest

from helpers import EXAMPLE
from peanut_py import rescue
from peanut_py.device_stage import DeviceStage
from peanut_py.device import Device
from peanut_py.mapping import open_index
from peanut_py.reads import read_batches, read_pair_batches
from peanut_py.resident import ResidentReference


@pytest.mark.parametrize("best_stratum", [True, False])
def test_warm_up_builds_every_program_a_batch_uses(example_index, best_stratum):
    """After ``warm_up`` (and the rescue kernel's build, for pairs), mapping real reads builds nothing more:
    the warm-up asks for the same programs with the same defines as the steps themselves."""
    device = Device()
    resident = ResidentReference.from_index(device, open_index(example_index))
    core = DeviceStage(device, resident, best_stratum=best_stratum)
    core.warm_up()
    rescue.build_programs(device)
    built = device.built_keys()
    assert any(k[:2] == ("program", "qgroup") for k in built) and "where" in built
    batch = next(read_pair_batches(str(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"),
                                   str(EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"), max_reads=4000))
    result = core.map_batch(batch.codes, batch.offsets)
    assert len(result.rs) > 0.9 * batch.n
    assert device.built_keys() == built


def test_warm_up_errors_are_left_to_the_batch(example_index, tmp_path):
    """A program that fails to build in the warm-up is built again (and its error raised) by the batch."""
    import shutil

    from peanut_py.device import KERNEL_DIR
    from peanut_py.errors import PeanutError

    for path in KERNEL_DIR.iterdir():
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "qgroup.cl").write_text("__kernel void broken(__global int *x) { x[0] = undefined_name; }\n")
    device = Device(kernel_dir=tmp_path)
    resident = ResidentReference.from_index(device, open_index(example_index))
    core = DeviceStage(device, resident)
    core.warm_up()
    batch = next(read_batches(str(EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"), max_reads=100))
    with pytest.raises(PeanutError, match="qgroup.cl failed"):
        core.map_batch(batch.codes, batch.offsets)
