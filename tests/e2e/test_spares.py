"""Spare hosts (``cluster --spares K``): a lost or unfit host's place taken by a spare, the job's rank table
rewritten for it, training resumed from the newest complete step.

Three hosts on 127.0.0.2-4 started by hand (as Slurm or a person would), two ranks each, real gloo training
(tests/programs/spare_train.py) on one output directory all hosts share (as a cluster's shared filesystem):
the third host stands by. Short --host-timeout and grace periods keep the file fast.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: sshd_hosts

from sshd_hosts import cluster_fixture  # noqa: E402

from launcher.contract import ExitCode  # noqa: E402
from tests.e2e.test_health_gate import stand_ins  # noqa: E402
from tests.e2e.test_job_hosts_ssh import remote_python  # noqa: E402
from tests.launching import (  # noqa: E402
    ROOT,
    free_port,
    kill_run,
    processes_of_run,
    run_dlaunch,
    start_dlaunch,
    wait_until,
)

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
TRAIN = ROOT / "tests" / "programs" / "spare_train.py"
STEPS, PAUSE = 40, 0.2


def write_pool(path):
    servers = [{"server_id": host, "host_nic_ip": "reserve",
                "device": [{"device_id": str(d), "device_ip": f"192.0.2.{10 * index + d + 10}",
                            "rank_id": str(2 * index + d)} for d in (0, 1)]}
               for index, host in enumerate(HOSTS)]
    path.write_text(json.dumps({"version": "1.0", "server_count": "3", "server_list": servers,
                                "status": "completed"}))
    return path


class SpareJob:
    def __init__(self, tmp_path, run_id):
        self.tmp_path, self.run_id = tmp_path, run_id
        self.table = write_pool(tmp_path / "rt.json")
        self.port = free_port(HOSTS[0], span=2)
        self.out = tmp_path / "runs"   # every host's: the shared filesystem
        self.procs: dict[int, subprocess.Popen] = {}

    @property
    def run_dir(self):
        return self.out / self.run_id

    def start(self, index, *flags, env=None):
        cwd = self.tmp_path / f"host{index}"
        cwd.mkdir(exist_ok=True)
        self.procs[index] = start_dlaunch(
            "cluster", TRAIN, "--rank-table", self.table, "--rank-start", 2 * index, "--run-id", self.run_id,
            "--output-dir", self.out, "--master-port", self.port, "--profile", "structure", "--spares", "1",
            "--grace-period", "1", "--host-timeout", "1", "--join-timeout", "30", *flags, "--", STEPS, PAUSE,
            cwd=cwd, env=env)

    def wait(self, index, timeout=90):
        _, stderr = self.procs[index].communicate(timeout=timeout)
        return self.procs[index].returncode, stderr

    def steps(self, rank):
        path = self.run_dir / f"rank_{rank:03d}" / "steps.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def cleanup(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        kill_run(self.run_id)


@pytest.fixture
def spare_jobs():
    made = []
    yield lambda *a: made.append(SpareJob(*a)) or made[-1]
    for job in made:
        job.cleanup()


def check_rewritten_table(job, spare_host):
    """The table the spare's ranks read: the two active servers, ranks 0-3 in server order, valid."""
    table_file = job.run_dir / f"rank_table.{spare_host}.1.json"
    table = json.loads(table_file.read_text())
    assert [s["server_id"] for s in table["server_list"]] == [HOSTS[0], spare_host]
    assert [d["rank_id"] for s in table["server_list"] for d in s["device"]] == ["0", "1", "2", "3"]
    assert table["server_count"] == "2" and table["status"] == "completed"
    spare_ips = [d["device_ip"] for d in table["server_list"][1]["device"]]
    assert spare_ips == ["192.0.2.30", "192.0.2.31"]   # the spare's own device addresses, from its block
    checked = run_dlaunch("validate-ranktable", table_file, "--profile", "structure", cwd=job.tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_spare_takes_a_killed_hosts_place_and_training_resumes_from_the_newest_complete_step(tmp_path,
                                                                                               spare_jobs):
    job = spare_jobs(tmp_path, "sparekill")
    for index in range(3):
        job.start(index, "--exclude-cooldown", "1")
    assert wait_until(lambda: len(job.steps(2)) >= 5, timeout=60), "host 1's ranks never trained"
    lost_at = time.time()
    os.kill(job.procs[1].pid, signal.SIGKILL)
    job.procs[1].communicate()
    assert wait_until(lambda: any(entry["resumed"] for entry in job.steps(2)), timeout=60)
    time.sleep(0.5)   # past host 1's cooldown (1 s from the restart's verdict): started again, it stands by
    job.start(1, "--exclude-cooldown", "1")
    back, back_err = job.wait(1)
    assert back == 0, back_err
    assert "stands by (attempt 1): a spare" in back_err and "with this host standing by as a spare" in back_err
    results = {index: job.wait(index) for index in (0, 2)}
    for code, stderr in results.values():
        assert code == 0, stderr
    code0, err0 = results[0]
    assert "host 127.0.0.3 was lost" in err0 and "restarting the job on every host (restart 1 of 1)" in err0
    assert "spare host 127.0.0.4 takes host 127.0.0.3's place" in err0
    assert "stands by (attempt 0): a spare" in results[2][1]
    check_rewritten_table(job, HOSTS[2])
    for rank in range(4):
        steps = job.steps(rank)
        assert steps[-1]["step"] == STEPS and steps[-1]["value"] == STEPS * 4, steps[-1]   # nothing lost or twice
        resumed = [entry for entry in steps if entry["resumed"]]
        assert resumed, f"rank {rank} never resumed"
        step = int(resumed[0]["resumed"].split("_")[1])
        assert resumed[0]["step"] == step + 1 and step >= 5
        before = [entry["step"] for entry in steps if not entry["resumed"]]
        assert step in before   # the newest step every rank completed, not an older one
    took = min(entry["time"] for entry in job.steps(2) if entry["resumed"]) - lost_at
    # how soon depends on the machine's load (26 s under the suite's three workers): bench_spares.py measures it
    print(f"the spare's ranks trained again {took:.2f} s after host 127.0.0.3's dlaunch was SIGKILLed")
    summary = json.loads((job.run_dir / f"summary.{HOSTS[0]}.json").read_text())
    roster = summary["job"]["roster"]
    assert roster["active"] == [HOSTS[0], HOSTS[2]] and roster["replaced"][HOSTS[1]]["by"] == HOSTS[2]
    assert roster["standing_by"] == [HOSTS[1]] and roster["excluded"] == {}   # back as a spare after its cooldown
    status = run_dlaunch("status", job.run_dir, cwd=tmp_path).stdout
    assert "succeeded, exit code 0" in status, status
    assert f"replaced {HOSTS[1]} (by {HOSTS[2]}" in status and f"active {HOSTS[0]}, {HOSTS[2]}" in status
    report = run_dlaunch("report", job.run_dir, "-o", tmp_path / "report.html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "report.html").read_text()
    assert "job&#39;s hosts" in page or "job's hosts" in page
    assert f"replaced {HOSTS[1]} (by {HOSTS[2]}" in page
    assert wait_until(lambda: processes_of_run("sparekill") == [], timeout=10)


def test_a_spare_killed_while_it_stands_by_and_started_again_stands_by_again(tmp_path, spare_jobs):
    """Its rank table file from its first life is its own (named for it): replaced by the same table, nothing
    of another host's touched, and the job keeps its spare."""
    job = spare_jobs(tmp_path, "sparerestart")
    for index in range(3):
        job.start(index)
    spare_table = job.run_dir / f"rank_table.{HOSTS[2]}.json"
    assert wait_until(lambda: spare_table.exists() and len(job.steps(0)) >= 2, timeout=60)
    before = {path: path.read_bytes() for path in job.run_dir.glob("rank_table.*.json")}
    os.kill(job.procs[2].pid, signal.SIGKILL)
    job.procs[2].communicate()
    job.start(2)
    results = {index: job.wait(index) for index in (2, 0, 1)}
    assert [code for code, _ in results.values()] == [0, 0, 0], results[2][1]
    assert "stands by (attempt 0): a spare" in results[2][1]
    summary = json.loads((job.run_dir / f"summary.{HOSTS[0]}.json").read_text())
    assert summary["job"]["roster"]["standing_by"] == [HOSTS[2]]
    assert len(before) == 3 and {path: path.read_bytes() for path in before} == before   # its own: the same


def test_a_replaced_host_started_again_in_its_cooldown_is_told_until_when(tmp_path, spare_jobs):
    job = spare_jobs(tmp_path, "sparecool")
    for index in range(3):
        job.start(index)
    assert wait_until(lambda: len(job.steps(2)) >= 2, timeout=60), "host 1's ranks never trained"
    os.kill(job.procs[1].pid, signal.SIGKILL)
    job.procs[1].communicate()
    assert wait_until(lambda: (job.run_dir / f"rank_table.{HOSTS[2]}.1.json").exists(), timeout=60)
    job.start(1)
    code, stderr = job.wait(1)
    assert code == ExitCode.USAGE, stderr
    assert re.search(rf"host {HOSTS[1]} was replaced by a spare and is excluded from the job until "
                     r"\d\d:\d\d:\d\d \(--exclude-cooldown", stderr), stderr
    assert "choose another --run-id" not in stderr


def test_a_host_whose_device_network_is_faulty_never_starts_and_a_spare_takes_it(tmp_path, spare_jobs):
    """Host 1's stand-in hccn_tool says device 1's net health is Fault: its gate keeps its ranks from starting,
    the job restarts with the spare in its slot, and host 1 (still unfit) leaves with exit 92."""
    job = spare_jobs(tmp_path, "sparegate")
    envs = {}
    for index in range(3):
        tools = tmp_path / f"tools{index}"
        tools.mkdir()
        envs[index] = stand_ins(tools, net_health={"1": "Fault"} if index == 1 else None)
    for index in range(3):
        job.start(index, "--health-gate", env=envs[index])
    results = {index: job.wait(index) for index in range(3)}
    code1, err1 = results[1]
    assert code1 == ExitCode.UNHEALTHY, err1
    assert "device 1: net_health: net health status Fault" in err1
    for index in (0, 2):
        assert results[index][0] == 0, results[index][1]
    assert "spare host 127.0.0.4 takes host 127.0.0.3's place: its health gate found it unfit" in results[0][1]
    check_rewritten_table(job, HOSTS[2])
    for rank in (2, 3):   # host 1 never ran them: every step is the spare's
        steps = job.steps(rank)
        assert steps and steps[-1]["step"] == STEPS and steps[-1]["value"] == STEPS * 4
        assert not [entry for entry in steps if entry["resumed"]]   # nothing was saved before: a fresh start
    plan = json.loads((job.run_dir / f"plan.{HOSTS[2]}.json").read_text())
    assert [spec["rank"] for spec in plan["ranks"]] == [2, 3]
    assert not (job.run_dir / "rank_002" / "output.log").exists()   # no attempt-0 process of host 1's ever ran
    assert wait_until(lambda: processes_of_run("sparegate") == [], timeout=10)


ssh_cluster = cluster_fixture(3)


def test_under_ssh_a_spare_takes_the_place_of_a_host_whose_dlaunch_is_killed(ssh_cluster, tmp_path):
    """The head starts all three hosts (the third standing by) and only watches: the hosts' job link swaps
    the spare in, and the head's verdict is the job's."""
    out = tmp_path / "runs"
    table = write_pool(tmp_path / "rt.json")
    head = start_dlaunch(
        "cluster", TRAIN, "--rank-table", table, "--ssh", "--ssh-config", ssh_cluster.ssh_config, "--output-dir", out,
        "--profile", "structure", "--master-port", free_port(HOSTS[0]), "--run-id", "sparessh", "--spares", "1",
        "--grace-period", "1", "--host-timeout", "1", "--remote-python", remote_python(tmp_path), "--", STEPS, PAUSE,
        cwd=tmp_path)
    try:
        run_dir = out / "sparessh"
        steps = run_dir / "rank_002" / "steps.jsonl"
        assert wait_until(lambda: steps.exists() and len(steps.read_text().splitlines()) >= 5, timeout=60), \
            "host 1's ranks never trained"
        launcher = json.loads((run_dir / f"pids.{HOSTS[1]}.json").read_text())["launcher_pid"]
        os.kill(launcher, signal.SIGKILL)
        _, stderr = head.communicate(timeout=90)
    finally:
        if head.poll() is None:
            head.kill()
            head.communicate()
        kill_run("sparessh")
    assert head.returncode == 0, stderr
    assert "spare host 127.0.0.4 takes host 127.0.0.3's place" in stderr
    assert f"hosts: active {HOSTS[0]}, {HOSTS[2]}" in stderr and f"replaced {HOSTS[1]} (by {HOSTS[2]}" in stderr
    head_summary = json.loads((run_dir / "summary.head.json").read_text())
    assert head_summary["status"] == "succeeded" and head_summary["roster"]["active"] == [HOSTS[0], HOSTS[2]]
    for rank in range(4):
        entries = [json.loads(line) for line in (run_dir / f"rank_{rank:03d}" / "steps.jsonl").read_text().splitlines()]
        assert entries[-1]["step"] == STEPS and entries[-1]["value"] == STEPS * 4
        assert any(entry["resumed"] for entry in entries)
    assert wait_until(lambda: processes_of_run("sparessh") == [], timeout=10)


def test_under_ssh_a_host_whose_device_network_is_faulty_never_starts_and_a_spare_takes_it(ssh_cluster, tmp_path):
    """The stand-in tools on every sshd host, told apart by the address each session came to ($SSH_CONNECTION):
    127.0.0.3's device 1 has net health Fault."""
    from tests.e2e.test_health_gate import PROGRAMS

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("npu-smi", "hccn_tool"):
        (bin_dir / name).write_text(f"#!{sys.executable} -S\n" + (PROGRAMS / name).read_text())
        (bin_dir / name).chmod(0o755)
    npu = tmp_path / "npu.json"
    npu.write_text(json.dumps({"hbm": {"0": 0, "1": 0}, "health": {}}))
    hccn = tmp_path / "hccn.json"
    def device(i, host, d):
        return {"ip": f"10.0.{i}.{d + 1}", "link": "UP", "health": "Fault" if (host, d) == (HOSTS[1], 1) else "Success"}

    hccn.write_text(json.dumps({"hosts": {host: {"devices": {str(d): device(i, host, d) for d in (0, 1)}}
                                          for i, host in enumerate(HOSTS)}}))
    python = tmp_path / "python"   # sshd gives the remote launcher a bare environment: this tree, the tools
    python.write_text(f"#!/bin/sh\nexport PYTHONPATH={ROOT} PATH={bin_dir}:$PATH NPU_SMI_STATE={npu} "
                      f"HCCN_FAKE_STATE={hccn}\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    out = tmp_path / "runs"
    result = run_dlaunch(
        "cluster", TRAIN, "--rank-table", write_pool(tmp_path / "rt.json"), "--ssh", "--ssh-config",
        ssh_cluster.ssh_config, "--output-dir", out, "--profile", "structure", "--master-port", free_port(HOSTS[0]),
        "--run-id", "sparesshgate", "--spares", "1", "--health-gate", "--grace-period", "1", "--host-timeout", "1",
        "--remote-python", python, "--", STEPS, PAUSE, cwd=tmp_path, timeout=120)
    kill_run("sparesshgate")
    assert result.returncode == 0, result.stderr
    assert "device 1: net_health: net health status Fault" in result.stderr
    assert "spare host 127.0.0.4 takes host 127.0.0.3's place: its health gate found it unfit" in result.stderr
    run_dir = out / "sparesshgate"
    assert not (run_dir / "rank_002" / "output.log").exists()   # host 1 never started its ranks
    for rank in range(4):
        entries = [json.loads(line) for line in (run_dir / f"rank_{rank:03d}" / "steps.jsonl").read_text().splitlines()]
        assert entries[-1]["step"] == STEPS and entries[-1]["value"] == STEPS * 4
    head = json.loads((run_dir / "summary.head.json").read_text())
    assert head["status"] == "succeeded" and head["roster"]["active"] == [HOSTS[0], HOSTS[2]]
    hosts = {entry["host"]: entry for entry in head["hosts"]}
    assert hosts[HOSTS[1]]["exit_code"] == ExitCode.UNHEALTHY
