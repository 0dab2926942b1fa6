"""Every kernel of peanut_py/kernels/*.cl under Oclgrind (Debian package ``oclgrind``): a simulated OpenCL device
that checks each memory access. tests/oclgrind_driver.py maps a few real reads (single-end, pairs with mate
rescue, the device aligner; once as a GPU and once with a CPU device's buffer handling) and calls the wrapper
variants no mapping run takes, under ``oclgrind --data-races --uninitialized --check-api``. Oclgrind must
report nothing in our kernels -- no data race, no out-of-bounds access, no read of an uninitialised value, no
barrier divergence, no API misuse -- every entry point of every kernel file must have run, and every result
must equal the default device's (whose results the other test modules check against the NumPy and Python
references): evidence that the kernels are portable OpenCL, not lucky on one vendor's device."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import oclgrind_driver as driver
from helpers import REPO, in_ci, run_cli, sam_body

OCLGRIND = shutil.which("oclgrind")
# Checks beyond Oclgrind's default (out-of-bounds accesses, barrier divergence). The kernels are built
# without optimisation: Oclgrind 21.10 cannot run the funnel-shift intrinsics that LLVM 14 makes of the
# bit-vector shifts in myers_words.clh. Work-groups of at most 64 work-items: pyopencl sizes its scans by
# the device's limit, and the simulator's time grows with the work-items of a group, busy or not.
OCLGRIND_ARGS = ["--data-races", "--uninitialized", "--check-api", "--max-wgsize", "64",
                 "--build-options", "-cl-opt-disable"]
# seconds for the whole driver: it takes about 950-1,000 s on a 2-core machine (the simulator runs every
# work-item of every kernel with its checks); the limit leaves room for a slower one and still ends a hang
TIME_LIMIT = 2400

# Findings in code that is not ours, each with its exact form, so that anything else fails.
# pyopencl's GenericScanKernel (scans.py builds every prefix sum with it) writes its partial sums to global
# memory and reads them back in another work-item of the group after barrier(CLK_LOCAL_MEM_FENCE), which
# orders local memory only; the OpenCL memory model calls that a race. Only the statements of pyopencl's
# template qualify: a race that involves our scan expressions names another line.
PYOPENCL_SCAN_LINES = {
    "scan_lev1": {"psc_dest[psc_linear_index] = psc_src[remainder];",
                  "psc_interval_results[psc_GID_0] = psc_partial_scan_buffer[psc_interval_end - 1];"},
    "scan_lev2": {"psc_dest[psc_linear_index] = psc_src[remainder];",
                  "psc_scan_type psc_scan_value = psc_INPUT_EXPR(psc_read_i);"},
}
# pyopencl asks for optional device properties (vendor extensions) and falls back when a device has none.
PYOPENCL_DEVICE_QUERY = ["Oclgrind - OpenCL runtime error detected", "Function: clGetDeviceInfo",
                         "Error:    CL_INVALID_VALUE", "For argument 'param_name'"]


def missing_oclgrind():
    what = "oclgrind not installed (Debian/Ubuntu: apt-get install oclgrind; `make test` installs it where it can)"
    if in_ci():
        pytest.fail(f"{what}; under CI=true the kernels must be checked, so this is a failure", pytrace=False)
    pytest.skip(what)


# ------------------------------------------------------------------ Oclgrind's log

def log_messages(text):
    """Oclgrind's messages: each starts with a line at column 0, its details are indented."""
    messages = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0] in " \t" and messages:
            messages[-1].append(line.strip())
        else:
            messages.append([line.strip()])
    return messages


def kernel_of(message):
    for line in message:
        if line.startswith("Kernel: "):
            return line[len("Kernel: "):]
    return None


def source_lines(message):
    """The source statements a message quotes (the line after each "At line N ... of input.cl:")."""
    return [message[i + 1] for i, line in enumerate(message[:-1]) if re.match(r"At line \d+ .*of input\.cl:", line)]


def is_known_third_party(message):
    if message == PYOPENCL_DEVICE_QUERY:
        return True
    allowed = PYOPENCL_SCAN_LINES.get(kernel_of(message))
    lines = source_lines(message)
    return (message[0].startswith("Read-write data race at global memory address") and allowed is not None
            and len(lines) == 2 and set(lines) <= allowed)


def findings(text):
    """Oclgrind's messages other than the known ones of third-party code, as text."""
    return ["\n  ".join(m) for m in log_messages(text) if not is_known_third_party(m)]


def test_log_parser_reports_our_kernels_and_passes_only_the_known_third_party_messages():
    ours = """
Invalid read of size 4 at global memory address 0x1000000000040
\tKernel: count_hits
\tEntity: Global(7,0,0) Local(7,0,0) Group(0,0,0)
\t  %12 = load i32, i32 addrspace(1)* %11, align 4
\tAt line 104 (column 17) of input.cl:
\t  ulong kk = k_base + present[j];
"""
    scan = """
Read-write data race at global memory address 0x20000000001698
\tKernel: scan_lev1
\t
\tFirst entity:  Global(6,0,0) Local(6,0,0) Group(0,0,0)
\t  store i32 %8118, i32 addrspace(1)* %arrayidx16530, align 4, !dbg !20589
\tAt line 12060 (column 52) of input.cl:
\t  psc_dest[psc_linear_index] = psc_src[remainder];
\t
\tSecond entity: Global(0,0,0) Local(0,0,0) Group(0,0,0)
\t  %12426 = load i64, i64 addrspace(1)* %arrayidx26469, align 8, !dbg !32844
\tAt line 18033 (column 47) of input.cl:
\t  psc_interval_results[psc_GID_0] = psc_partial_scan_buffer[psc_interval_end - 1];
"""
    query = "\nOclgrind - OpenCL runtime error detected\n\tFunction: clGetDeviceInfo\n\tError:    CL_INVALID_VALUE\n" \
            "\tFor argument 'param_name'\n"
    assert findings(scan + query + scan) == []
    got = findings(query + ours + scan)
    assert len(got) == 1 and got[0].startswith("Invalid read of size 4") and "count_hits" in got[0]
    # the same race in our part of a scan (its input expression in the first level) is reported
    ours_in_scan = scan.replace("psc_interval_results[psc_GID_0] = psc_partial_scan_buffer[psc_interval_end - 1];",
                                "psc_scan_type psc_scan_value = psc_INPUT_EXPR(psc_read_i);")
    assert len(findings(ours_in_scan)) == 1
    fatal = "\nOCLGRIND FATAL ERROR (./src/core/WorkItem.cpp:1681)\nUndefined external function: llvm.fshl.i64\n"
    assert len(findings(fatal)) == 2
    assert findings(query.replace("CL_INVALID_VALUE", "CL_INVALID_MEM_OBJECT"))


# ------------------------------------------------------------------ runs under Oclgrind

def run_under_oclgrind(script, work, timeout):
    """``python script work`` under oclgrind with OCLGRIND_ARGS: (exit status, standard error, the log)."""
    log = work / "oclgrind.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]),
               # pyopencl's binary cache would hand Oclgrind programs built without the options above
               PYOPENCL_NO_CACHE="1")
    env.pop("PYOPENCL_CTX", None)
    try:
        proc = subprocess.run([OCLGRIND, *OCLGRIND_ARGS, "--log", str(log), sys.executable, str(script), str(work)],
                              env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{script.name} under oclgrind took more than {timeout} s", pytrace=False)
    return proc.returncode, proc.stderr, log.read_text() if log.exists() else ""


FLAWED_KERNELS = """
__kernel void out_of_bounds(__global uint *a, const uint n) { a[0] = a[n]; }
__kernel void uninitialised(__global uint *a) { uint x[2]; x[0] = 1u; a[0] = x[get_global_id(0) + 1]; }
__kernel void race(__global uint *a) { a[0] = get_global_id(0); }
"""
FLAWED_DRIVER = """
import sys
import numpy as np
from peanut_py.device import Device
device = Device("oclgrind", kernel_dir=sys.argv[1])
knl = device.kernels("flawed")
a = device.zeros(4, np.uint32)
device.launch(knl.out_of_bounds, 1, a.data, np.uint32(4))
device.launch(knl.uninitialised, 1, a.data)
device.launch(knl.race, 4, a.data, preferred=4)
device.queue.finish()
"""


def test_the_checks_find_flawed_kernels(tmp_path):
    """The same options and log parsing report an out-of-bounds read, an uninitialised value and a data race
    in kernels that have them: an empty report from the driver means clean kernels, not checks that are off."""
    if OCLGRIND is None:
        missing_oclgrind()
    (tmp_path / "flawed.cl").write_text(FLAWED_KERNELS)
    (tmp_path / "flawed.py").write_text(FLAWED_DRIVER)
    rc, stderr, log = run_under_oclgrind(tmp_path / "flawed.py", tmp_path, 300)
    assert rc == 0, stderr[-2000:]
    found = findings(log)
    for what in ("Invalid read", "Uninitialized", "data race"):
        assert any(what in f for f in found), (what, found)


@pytest.fixture(scope="module")
def oclgrind_run(tmp_path_factory):
    """The driver under Oclgrind: (work folder, Oclgrind's log, the driver's standard error)."""
    if OCLGRIND is None:
        missing_oclgrind()
    work = tmp_path_factory.mktemp("oclgrind")
    driver.write_inputs(work)
    rc, _, err = run_cli("index", "-q", str(driver.Q), work / "ref.fa", "-o", work / "ref.h5")
    assert rc == 0, err
    rc, stderr, text = run_under_oclgrind(REPO / "tests" / "oclgrind_driver.py", work, TIME_LIMIT)
    assert rc == 0, f"driver failed under oclgrind (exit {rc}):\n{stderr[-3000:]}\n{text[-3000:]}"
    return work, text, stderr


@pytest.mark.slow
def test_oclgrind_reports_nothing_in_our_kernels(oclgrind_run):
    _, log, stderr = oclgrind_run
    # --check-api messages go to standard error, the others to the log
    found = findings(log) + findings("\n".join(line for line in stderr.splitlines()
                                               if not line.startswith("[peanut]")))
    assert not found, f"{len(found)} Oclgrind messages, the first:\n" + "\n\n".join(found[:5])


@pytest.mark.slow
def test_every_kernel_entry_point_ran_under_oclgrind(oclgrind_run):
    work, _, _ = oclgrind_run
    report = json.loads((work / "kernels.json").read_text())
    files = sorted(p.stem for p in (REPO / "peanut_py" / "kernels").glob("*.cl"))
    assert sorted(report["programs"]) == files, "kernel files never built under oclgrind"
    entry_points = {(f, k) for f, names in report["programs"].items() for k in names}
    assert len(entry_points) >= 28  # the entry points when this test was written; more may come, none may go
    not_run = sorted(f"{f}.cl: {k}" for f, k in entry_points if k not in report["launched"])
    assert not not_run, f"kernels that never ran under oclgrind: {not_run}"


@pytest.mark.slow
def test_mapping_under_oclgrind_equals_the_default_device(oclgrind_run, tmp_path):
    work, _, _ = oclgrind_run
    inputs = [work / a if a.endswith(".fq") else a for a in driver.MAP_ARGS]
    rc, _, err = run_cli("map", "-o", tmp_path / "want.sam", work / "ref.h5", *inputs)
    assert rc == 0, err
    want = sam_body(tmp_path / "want.sam")
    assert sam_body(work / "map.sam") == want
    records = [line.split("\t") for line in want if not line.startswith("@")]
    assert len(records) == 2 * (driver.PAIRS + 2)
    mapped = [r for r in records if not int(r[1]) & 4]
    assert len(mapped) >= 2 * driver.PAIRS
    assert sum(1 for r in mapped if int(r[1]) & 2) >= 2 * driver.PAIRS  # the rescued mates are paired too
    assert any(int(f[5:]) > 0 for r in mapped for f in r[11:] if f.startswith("NM:i:"))  # with edits


@pytest.mark.slow
def test_wrapper_variants_under_oclgrind_equal_the_default_device(oclgrind_run, device):
    work, _, _ = oclgrind_run
    got = np.load(work / "wrappers.npz")
    want = driver.wrapper_results(device, work)
    assert sorted(got.files) == sorted(want)
    for name in sorted(want):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert len(want["masked.rs"]) > 0 and len(want["windows.rs"]) > 0 and len(want["wide.rs"]) > 0
    # the work-group slot sort, with slots beyond its local block, finds the per-position variant's candidates
    assert want["group_sort.votes"].max() > driver.GROUP_SORT_LOCAL
    for field in ("rs", "diag_lo", "diag_hi", "votes"):
        np.testing.assert_array_equal(want[f"group_sort.{field}"], want[f"per_position.{field}"], err_msg=field)
    # O sorted by work-groups, with slots beyond their local block: ascending inside every slot
    O, Sp = want["group_sort.O"].astype(np.int64), want["group_sort.Sp"].astype(np.int64)
    assert np.diff(Sp).max() > driver.GROUP_SORT_LOCAL and Sp[-1] == len(O)
    inside = np.ones(len(O), bool)
    inside[Sp[:-1]] = False
    assert (np.diff(O)[inside[1:]] > 0).all()
    assert (want["align_item.pos"] >= 0).sum() >= 8
