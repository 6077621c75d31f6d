"""The health gate (--health-gate, --health-check; launcher/host/health.py) with the suite's stand-in tools:
npu-smi reporting a device's Health, hccn_tool reporting net health Fault, an external checker answering
NVIDIA's {"fail_count": N}. An unfit host starts no rank and exits 92, before the first attempt and before
a restart; a fit one runs as without the gate."""

import json
import shutil
import stat
import sys

from tests.launching import ROOT, run_dlaunch

PROGRAMS = ROOT / "tests" / "programs"
RANK = ('echo ran >> "$DLAUNCH_RANK_DIR/ran.txt"; '
        '[ -n "$FAIL" ] && [ "$RANK" = 1 ] && touch "$FAIL" && exit 3; exit 0')


def stand_ins(tmp_path, npu_health=None, net_health=None):
    """A bin directory with npu-smi and hccn_tool stand-ins for devices 0 and 1; returns the env to run with."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("npu-smi", "hccn_tool"):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable} -S\n" + (PROGRAMS / name).read_text())
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    npu_state = tmp_path / "npu.json"
    npu_state.write_text(json.dumps({"hbm": {"0": 0, "1": 0}, "health": npu_health or {}}))
    devices = {str(d): {"ip": f"10.0.0.{d + 1}", "link": "UP", "health": (net_health or {}).get(str(d), "Success")}
               for d in (0, 1)}
    hccn_state = tmp_path / "hccn.json"
    hccn_state.write_text(json.dumps({"hosts": {"local": {"devices": devices}}}))
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "NPU_SMI_STATE": str(npu_state), "HCCN_FAKE_STATE": str(hccn_state),
            "HCCN_FAKE_HOST": "local"}


def launch(tmp_path, *flags, env=None):
    return run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--profile", "structure", "--output-dir",
                       tmp_path / "runs", "--run-id", "gate", *flags, "--", "-c", RANK, cwd=tmp_path, env=env)


def ran(tmp_path):
    return sorted(p.parent.name for p in (tmp_path / "runs" / "gate").glob("rank_*/ran.txt"))


def test_a_fit_host_runs_as_without_the_gate(tmp_path):
    result = launch(tmp_path, "--health-gate", env=stand_ins(tmp_path))
    assert result.returncode == 0, result.stderr
    assert ran(tmp_path) == ["rank_000", "rank_001"]
    calls = (tmp_path / "npu.json.calls").read_text()
    assert '"info"' in calls   # npu-smi was asked


def test_a_device_npu_smi_calls_unhealthy_keeps_every_rank_from_starting(tmp_path):
    result = launch(tmp_path, "--health-gate", env=stand_ins(tmp_path, npu_health={"1": "Alarm"}))
    assert result.returncode == 92, result.stderr
    assert "host 127.0.0.1, device 1: npu: npu-smi says Health Alarm" in result.stderr
    assert ran(tmp_path) == []
    summary = json.loads((tmp_path / "runs" / "gate" / "summary.json").read_text())
    assert summary["exit_code"] == 92


def test_net_health_fault_keeps_the_host_from_starting(tmp_path):
    result = launch(tmp_path, "--health-gate", env=stand_ins(tmp_path, net_health={"0": "Fault"}))
    assert result.returncode == 92, result.stderr
    assert "device 0: net_health: net health status Fault; check the device's network" in result.stderr
    assert ran(tmp_path) == []


def test_the_external_checker_decides_before_the_first_start_and_before_a_restart(tmp_path):
    checker = tmp_path / "checker.sh"
    marker = tmp_path / "rank1-failed"
    checker.write_text(f'if [ -e {marker} ]; then echo \'{{"fail_count": 1}}\'; '
                       f'else echo \'{{"fail_count": 0}}\'; fi\n')
    sh = shutil.which("sh")
    result = launch(tmp_path, "--health-check", f"{sh} {checker}", "--max-restarts", "2",
                    env={"FAIL": str(marker)})
    assert result.returncode == 92, result.stderr   # attempt 0 ran; rank 1 failed; the restart found the host unfit
    assert f"external: '{sh} {checker}' says fail_count 1" in result.stderr
    assert ran(tmp_path) == ["rank_000", "rank_001"]
    assert all((tmp_path / "runs" / "gate" / r / "ran.txt").read_text().count("ran") == 1 for r in ran(tmp_path))
    summary = json.loads((tmp_path / "runs" / "gate" / "summary.json").read_text())
    assert len(summary["attempts"]) == 2 and summary["exit_code"] == 92


def test_a_checker_without_an_answer_is_a_failure_not_a_pass(tmp_path):
    result = launch(tmp_path, "--health-check", "/bin/echo all good")
    assert result.returncode == 92, result.stderr
    assert 'gave no usable answer (no {"fail_count": N} line)' in result.stderr


def test_an_unfit_host_of_a_job_stops_the_other_hosts_too(tmp_path):
    """Two hosts started by hand: host 1's checker fails; host 0, which started its rank, is stopped."""
    from tests.e2e.test_job_hosts import HOSTS, Job
    from tests.launching import free_port

    job = Job(tmp_path, 2, free_port(HOSTS[0], span=2), "gatejob")
    try:
        job.start(0, "--sleep", "60")
        job.start(1, "--sleep", "60", extra=("--health-check", """/bin/echo '{"fail_count": 3}'"""))
        code1, err1 = job.wait(1)
        code0, err0 = job.wait(0)
    finally:
        job.cleanup()
    assert code1 == 92, err1
    assert "says fail_count 3" in err1
    assert code0 != 0 and "the health gate found host 127.0.0.3 unfit" in err0, err0
    assert job.summary(0)["job"]["root_cause"]["kind"] == "unhealthy"


def test_the_gate_says_each_check_passed_or_skipped_and_why_at_the_start(tmp_path):
    result = launch(tmp_path, "--health-gate", env=stand_ins(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    said = [line.removeprefix("dlaunch: health gate: ") for line in lines if line.startswith("dlaunch: health gate: ")]
    assert lines[1:len(said) + 1] == [f"dlaunch: health gate: {line}" for line in said]   # after the run directory
    assert [line.split(":")[0] for line in said] == [
        "storage passed", "npu passed", "gpu skipped", "link, net_health passed", "nic skipped", "external skipped"]
    assert "gpu skipped: no nvidia-smi on PATH" in said and "external skipped: no --health-check" in said
    assert "npu passed: npu-smi info: device(s) 0-1 OK or Warning" in said
    (tmp_path / "dry").mkdir()
    dry = launch(tmp_path, "--health-gate", "--dry-run", env=stand_ins(tmp_path / "dry"))
    assert "health gate:   before every start: storage, npu (npu-smi)" in dry.stdout, dry.stdout
    assert "health gate:   off (--health-gate)" in launch(tmp_path, "--dry-run").stdout


def test_an_unfit_host_keeps_the_checkers_words_and_status_shows_the_findings(tmp_path):
    checker = tmp_path / "checker.sh"
    marker = tmp_path / "rank1-failed"
    checker.write_text(f'echo "fake ECC error"; if [ -e {marker} ]; then echo \'{{"fail_count": 1}}\'; '
                       f'else echo \'{{"fail_count": 0}}\'; fi\n')
    sh = shutil.which("sh")
    result = launch(tmp_path, "--health-check", f"{sh} {checker}", "--max-restarts", "2", env={"FAIL": str(marker)})
    assert result.returncode == 92, result.stderr
    run_dir = tmp_path / "runs" / "gate"
    kept = run_dir / "health.txt"
    assert f"see what the checker reports (kept in {kept})" in result.stderr
    assert kept.read_text().count("fake ECC error") == 2   # the fit start's answer and the unfit restart's
    closing = result.stderr.splitlines()[-1]
    assert "restart(s)" not in closing and "no rank of this host started; exit code 92;" in closing, closing
    status = run_dlaunch("status", run_dir, cwd=tmp_path).stdout
    assert "health gate: host 127.0.0.1 unfit, its ranks not started:" in status, status
    assert f"external: '{sh} {checker}' says fail_count 1" in status
    assert "not started: its host was unfit (health gate)" in status
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"]["cause"]["output"] == str(kept) and summary["attempts"][1]["unfit"] is True
    page = run_dlaunch("report", run_dir, "-o", "-", cwd=tmp_path).stdout
    assert "<strong>host 127.0.0.1</strong> was unfit: its ranks did not start" in page
    assert f"says fail_count 1; see what the checker reports (kept in {kept})" in page
