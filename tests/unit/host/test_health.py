"""The health gate's checks (launcher/host/health.py), each with the tool's answer given in-process."""

from launcher.host.hccn import ToolError
from launcher.host.health import check_external, check_network, check_npus, check_storage


def answering(text=None, error=None):
    def run(argv, timeout):
        if error:
            raise ToolError(error)
        return text(argv) if callable(text) else text
    return run


def test_storage_passes_where_it_can_write_and_fails_naming_the_directory(tmp_path):
    assert check_storage(str(tmp_path), 5.0) == []
    assert list(tmp_path.iterdir()) == []   # the probe is removed
    found = check_storage(str(tmp_path / "gone"), 5.0)
    assert [f.check for f in found] == ["storage"] and "cannot write in" in found[0].detail


NPU_INFO = """| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| 0     910B3               | OK            | 93.6        40                0    / 0             |
| 1     910B3               | Critical      | 93.6        40                0    / 0             |
| 2     910B3               | Warning       | 93.6        40                0    / 0             |
"""


def test_npu_health_other_than_ok_or_warning_fails_that_device():
    found = check_npus([0, 1, 2, 3], "npu-smi", 1.0, run=answering(NPU_INFO))
    assert [(f.device, f.detail) for f in found] == [(1, "npu-smi says Health Critical"),
                                                     (3, "npu-smi says Health missing")]
    assert check_npus([0], "npu-smi", 1.0, run=answering(error="timed out"))[0].check == "npu"


def test_a_link_down_or_net_health_fault_fails_the_device():
    def tool(argv):
        device, what = argv[2], argv[3]
        if what == "-link":
            return "link status: DOWN" if device == "1" else "link status: UP"
        return "net health status: Fault" if device == "2" else "net health status: Init"
    found = check_network([0, 1, 2], "hccn_tool", 1.0, run=answering(tool))
    assert [(f.device, f.check) for f in found] == [(1, "link"), (2, "net_health")]


def test_the_external_answer_is_nvidias_fail_count():
    assert check_external("checker", 1.0, run=answering('log line\n{"fail_count": 0}\n')) == []
    assert "says fail_count 2" in check_external("checker", 1.0, run=answering('{"fail_count": 2}'))[0].detail
    assert "gave no" in check_external("checker", 1.0, run=answering('{"fail_count": true}'))[0].detail
    assert "failed" in check_external("checker", 1.0, run=answering(error="exit 1"))[0].detail
