"""The test suite's own rules (helpers.py): missing shared data is a skip with its reason, but a failure under
CI=true; missing tools are skips with their reason."""
import sys

import pytest

from helpers import needs_tool, require_shared_data


def test_present_shared_data_is_returned(tmp_path, monkeypatch):
    (tmp_path / "human").mkdir()
    for ci in ("true", ""):
        monkeypatch.setenv("CI", ci)
        assert require_shared_data(root=tmp_path) == tmp_path
        assert require_shared_data("human", root=tmp_path) == tmp_path / "human"


@pytest.mark.parametrize("ci", [None, "", "false", "1"])
def test_missing_shared_data_is_a_skip_outside_ci(tmp_path, monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception) as info:
        require_shared_data("human", "GRCh37_chr20.fa.gz", root=tmp_path / "nowhere")
    assert str(tmp_path / "nowhere" / "human" / "GRCh37_chr20.fa.gz") in str(info.value)


@pytest.mark.parametrize("ci", ["true", "True"])
def test_missing_shared_data_fails_under_ci(tmp_path, monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception) as info:
        require_shared_data("phix", root=tmp_path / "nowhere")
    assert str(tmp_path / "nowhere" / "phix") in str(info.value) and "CI=true" in str(info.value)


def test_missing_tool_is_a_skip_with_its_reason():
    mark = needs_tool("no-such-tool-xyz", "the XYZ suite")
    assert mark.args == (True,) and mark.kwargs["reason"].startswith("the XYZ suite not installed")
    assert needs_tool(sys.executable).args == (False,)
