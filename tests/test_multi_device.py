"""Several OpenCL devices in one process (``--device all`` or a list, ``--processes 1``): the SAM equals a
one-device run.

Without GPUs, PoCL provides the devices: ``POCL_DEVICES="pthread pthread"`` makes it expose two CPU devices,
each with its own context, queue and resident reference, which is the code path of two GPUs."""
import pytest

from helpers import EXAMPLE, sam_body

from peanut_py.device import DeviceInfo, _pick_many, is_multi_spec
from peanut_py.errors import PeanutError

TWO_POCL_DEVICES = {"POCL_DEVICES": "pthread pthread"}
R1 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R1.fastq.gz"
R2 = EXAMPLE / "NA12878_chr20_slice_2000pairs_R2.fastq.gz"


def _map(cli, tmp_path, name, *args, env=None):
    out = tmp_path / f"{name}.sam"
    rc, _, err = cli("map", *args, "-o", out, env=env)
    assert rc == 0, err
    return sam_body(out), err


@pytest.fixture(scope="module")
def devices_used(cli):
    """The devices ``--device all`` picks with two PoCL devices exposed."""
    rc, out, err = cli("devices", "--device", "all", env=TWO_POCL_DEVICES)
    assert rc == 0, err
    used = [line for line in out.splitlines() if line.startswith("*")]
    assert len(used) >= 2, f"PoCL exposed fewer than two working devices with {TWO_POCL_DEVICES}:\n{out}"
    return used


@pytest.mark.parametrize("paired", [False, True], ids=["single", "paired"])
def test_two_devices_give_the_sam_of_one(cli, tmp_path, example_index, devices_used, paired):
    reads = [R1, R2] if paired else [R1]
    one, _ = _map(cli, tmp_path, "one", "-t", "2", "--batch-size", "400", example_index, *reads)
    for batch in ("250", "400"):
        # one process with a device thread per device (the default, one process per device: test_shards.py)
        two, err = _map(cli, tmp_path, f"two{batch}", "-t", "2", "--batch-size", batch, "--device", "all",
                        "--processes", "1", example_index, *reads, env=TWO_POCL_DEVICES)
        assert "2 devices" in err
        assert two == one
    assert sum(1 for line in one if not line.startswith("@")) == (4000 if paired else 2000)


def test_a_device_list_by_index(cli, tmp_path, example_index, devices_used):
    indices = [line.split("[")[1].split("]")[0] for line in devices_used[:2]]
    one, _ = _map(cli, tmp_path, "one", "--batch-size", "300", example_index, R1)
    two, err = _map(cli, tmp_path, "two", "--batch-size", "300", "--device", ",".join(indices), "--processes", "1",
                    example_index, R1, env=TWO_POCL_DEVICES)
    assert "2 devices" in err and two == one


def _fake(n):
    infos = [DeviceInfo(index=i, platform="P", name=f"dev{i}", type="GPU", compute_units=1, global_mem=1 << 30,
                        max_alloc=1 << 28, max_work_group=256, opencl_version="OpenCL 1.2") for i in range(n)]
    return [(info, object()) for info in infos]


def test_device_lists_are_checked():
    found = _fake(3)
    assert [i.index for i, _ in _pick_many(found, "2,0")] == [2, 0]
    assert [i.index for i, _ in _pick_many(found, "dev1, 2")] == [1, 2]
    for spec, message in [("0,0", "same device"), ("0,dev0", "same device"), ("0,,1", "empty entry"),
                          ("0,7", "only 3 OpenCL devices"), ("0,nope", "matches no OpenCL device")]:
        with pytest.raises(PeanutError, match=message):
            _pick_many(found, spec)
    assert is_multi_spec("all") and is_multi_spec("ALL") and is_multi_spec("0,1")
    assert not is_multi_spec("1") and not is_multi_spec(None) and not is_multi_spec("NVIDIA")


def test_a_bad_device_list_is_one_line_error(cli, tmp_path, example_index):
    rc, out, err = cli("map", "--device", "0,0", example_index, R1, "-o", tmp_path / "x.sam")
    assert rc == 1 and err.count("\n") == 1 and "same device" in err and "Traceback" not in err
    assert not (tmp_path / "x.sam").exists()
