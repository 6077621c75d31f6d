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


def test_every_infiniband_port_in_sysfs_must_be_active(tmp_path):
    from launcher.host.health import check_nic_ports

    for device, port, state in (("mlx5_0", "1", "4: ACTIVE"), ("mlx5_1", "1", "1: DOWN")):
        ports = tmp_path / device / "ports" / port
        ports.mkdir(parents=True)
        (ports / "state").write_text(state + "\n")
    found = check_nic_ports(str(tmp_path))
    assert [(f.check, f.detail) for f in found] == [("nic", "mlx5_1 port 1 is 1: DOWN")]
    assert check_nic_ports(str(tmp_path / "none")) == []   # no InfiniBand: nothing to check


def test_a_node_health_service_on_a_unix_socket_answers_fail_count(tmp_path):
    import socket
    import threading

    path = str(tmp_path / "nhc.sock")

    def serve(answers):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(path)
            server.listen()
            ready.set()
            for answer in answers:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(answer)

    ready = threading.Event()
    thread = threading.Thread(target=serve, args=([b'{"fail_count": 2}\n', b'{"fail_count": 0}\n'],), daemon=True)
    thread.start()
    assert ready.wait(5)
    first = check_external(f"unix:{path}", 5)
    assert [f.detail for f in first] == [f"'unix:{path}' says fail_count 2"]
    assert check_external(f"unix:{path}", 5) == []
    thread.join(5)
    assert "failed" in check_external(f"unix:{tmp_path / 'gone.sock'}", 1)[0].detail


def test_the_gate_reports_every_check_passed_skipped_or_failed(tmp_path):
    from launcher.host.health import GateSettings, gate

    report = gate([0, 1], str(tmp_path), GateSettings(hccn_tool=None, infiniband=str(tmp_path / "no-ib")),
                  path=str(tmp_path / "empty"))
    assert [(o.check, o.status) for o in report.outcomes] == [
        ("storage", "passed"), ("npu", "skipped"), ("gpu", "skipped"), ("link, net_health", "skipped"),
        ("nic", "skipped"), ("external", "skipped")]
    assert report.findings == [] and report.lines()[1] == "health gate: npu skipped: no npu-smi on PATH"
    broken = gate([0], str(tmp_path / "gone"), GateSettings(infiniband=str(tmp_path / "no-ib")), path="")
    assert broken.outcomes[0].status == "failed" and broken.findings[0].check == "storage"
