"""dlaunch cluster --ssh against real sshd hosts on 127.0.0.2, 127.0.0.3 (tests/sshd_hosts.py).

Every test runs the real CLI as a user would; the hosts are real OpenSSH
servers with real host-key checking, so what passes here is what happens
between real machines, minus the distance.  Rank tables name the servers by
address, as HCCL tables do; their device_ip values are documentation addresses
that nothing ever contacts.
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import psutil
import pytest
from sshd_hosts import cluster_fixture, require_sshd, start_cluster

from tests.launching import (
    RANK_PROGRAM,
    ROOT,
    free_port,
    kill_run,
    pid_alive,
    processes_of_run,
    records,
    run_dlaunch,
    start_dlaunch,
    summary,
    wait_until,
    write_rank_table,
)

HOSTS = ("127.0.0.2", "127.0.0.3")

ssh_cluster = cluster_fixture(2)


def write_table(path, devices_per_host, hosts=HOSTS):
    return write_rank_table(path, hosts, devices_per_host)


def cluster_args(cluster, table, out, *extra, config=None, profile="a2", run_id=None):
    return ["cluster", RANK_PROGRAM, "--rank-table", table, "--ssh", "--ssh-config", config or cluster.ssh_config,
            "--output-dir", out, "--profile", profile, "--master-port", free_port(HOSTS[0]),
            *(["--run-id", run_id] if run_id else []), *extra]


def wait_for_pids(run_dir, ranks, with_children=False):
    need = 2 if with_children else 1

    def ready():
        found = {r: records(run_dir / f"rank_{r:03d}", "pids.jsonl") for r in ranks}
        return found if all(len(p) >= need for p in found.values()) else None

    found = wait_until(ready, timeout=30)
    assert found, f"ranks {ranks} did not all start"
    return [entry["pid"] for pids in found.values() for entry in pids]


def sshd_command_lines(cluster):
    """(pid, command line) of every process the test sshds spawned: sessions, remote launchers, ranks."""
    found = []
    for host in cluster.hosts:
        if not host.is_running():  # a stopped host has no processes left (stop_host ends them all)
            continue
        for proc in psutil.Process(host.process.pid).children(recursive=True):
            try:
                found.append((proc.pid, " ".join(proc.cmdline())))
            except psutil.NoSuchProcess:
                continue  # ended since it was listed: it shows nothing any more
    return found


def waiting_launchers(cluster):
    """Remote launchers still alive on the hosts (a failed preflight must leave none waiting)."""
    return [cmdline for _, cmdline in sshd_command_lines(cluster) if "launcher cluster --from-head" in cmdline]


def config_with_known_hosts(cluster, tmp_path, known_hosts):
    """The cluster's ssh_config, with its UserKnownHostsFile replaced."""
    path = tmp_path / "ssh_config"
    path.write_text(cluster.ssh_config.read_text().replace(str(cluster.known_hosts), str(known_hosts)))
    return path


@pytest.fixture
def out(tmp_path):
    return tmp_path / "runs"


# ------------------------------------------------------------ launches that succeed


def test_16_ranks_on_2_hosts_get_the_env_contract(ssh_cluster, tmp_path, out):
    table = write_table(tmp_path / "rt16.json", 8)
    port = free_port(HOSTS[0])
    result = run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table, "--ssh", "--ssh-config",
                         ssh_cluster.ssh_config, "--output-dir", out, "--run-id", "env16", "--master-port", port,
                         "--", "--dump-env", cwd=tmp_path,
                         env={"HCCL_WHITELIST_DISABLE": "1", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "2",
                              "NOT_FORWARDED": "x"})
    assert result.returncode == 0, result.stderr
    run_dir = out / "env16"
    for rank in range(16):
        group, local, host = rank // 8, rank % 8, HOSTS[rank // 8]
        rank_dir = run_dir / f"rank_{rank:03d}"
        env = json.loads((rank_dir / "env.json").read_text())
        expected = {
            "RANK": str(rank), "LOCAL_RANK": str(local), "GROUP_RANK": str(group), "WORLD_SIZE": "16",
            "LOCAL_WORLD_SIZE": "8", "GROUP_WORLD_SIZE": "2", "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": "16",
            "MASTER_ADDR": "127.0.0.2", "MASTER_PORT": str(port), "DEVICE_ID": str(local), "RANK_ID": str(rank),
            "RANK_SIZE": "16", "RANK_TABLE_FILE": str(run_dir / f"rank_table.{host}.json"),
            "CUDA_VISIBLE_DEVICES": None, "DLAUNCH_RUN_ID": "env16", "TORCHELASTIC_RUN_ID": "env16",
            "DLAUNCH_RANK_DIR": str(rank_dir), "OMP_NUM_THREADS": "2",
            "HCCL_WHITELIST_DISABLE": "1", "NCCL_DEBUG": "INFO", "PYTHONPATH": str(ROOT),
        }
        assert {k: env.get(k) for k in expected} == expected, rank
        assert "NOT_FORWARDED" not in env
        # the rank really ran in a session of its own host's sshd
        assert env["SSH_CONNECTION"].split()[2] == host
    head = summary(run_dir, "summary.head.json")
    assert head["status"] == "succeeded" and head["exit_code"] == 0 and head["root_cause"] is None
    assert [(h["host"], h["status"], h["exit_code"]) for h in head["hosts"]] == [(h, "succeeded", 0) for h in HOSTS]
    assert all(h["started_at"] for h in head["hosts"]) and 0 <= head["hosts_started_within_s"] < 10
    assert "hosts started within" in result.stderr and "(HCCL_CONNECT_TIMEOUT default 120 s)" in result.stderr
    assert "[127.0.0.2][rank0]: rank 0 done\n" in result.stdout  # rank 0's console, whole lines, host-prefixed


def test_gloo_all_reduce_across_4_ranks_on_2_hosts(ssh_cluster, tmp_path, out):
    table = write_table(tmp_path / "rt4.json", 2)
    result = run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table, "--ssh", "--ssh-config",
                         ssh_cluster.ssh_config, "--output-dir", out, "--run-id", "gloo4", "--profile", "a2",
                         "--master-port", free_port(HOSTS[0]), "--", "--allreduce", cwd=tmp_path, timeout=150,
                         env={"GLOO_SOCKET_IFNAME": "lo"})  # forwarded (GLOO_*): the ranks' traffic stays on lo
    assert result.returncode == 0, result.stderr[-3000:]
    sums = [records(out / "gloo4" / f"rank_{r:03d}", "allreduce.jsonl") for r in range(4)]
    assert sums == [[{"sum": 10.0, "world": 4}]] * 4


def test_value_with_quotes_and_command_substitution_arrives_intact_and_off_the_command_line(
        ssh_cluster, tmp_path, out):
    env_value = f"""it's "quoted" $(touch {tmp_path}/pwned) `touch {tmp_path}/pwned2` \\ ;|& end"""
    arg_value = f"""arg 'single' "double" $(touch {tmp_path}/pwned3) $HOME end"""
    table = write_table(tmp_path / "rt.json", 2)
    proc = start_dlaunch(*cluster_args(ssh_cluster, table, out, "--env", f"ODD_VALUE={env_value}", run_id="odd"),
                         "--", "--dump-env", f"--label={arg_value}", "--sleep", "30", cwd=tmp_path)
    try:
        run_dir = out / "odd"
        rank_pids = wait_for_pids(run_dir, range(4))
        assert wait_until(lambda: all((run_dir / f"rank_{r:03d}" / "labels.jsonl").exists() for r in range(4)))
        remote = sshd_command_lines(ssh_cluster)
        launchers = [cmdline for _, cmdline in remote if "launcher cluster" in cmdline]
        assert len(launchers) >= 2  # one per host (plus the watchdog each forks, same command line)
        assert set(launchers) == {f"{sys.executable} -m launcher cluster --from-head --announce"}
        assert sum(pid in rank_pids for pid, _ in remote) == 4
        for pid, cmdline in remote:
            assert env_value not in cmdline, cmdline
            assert pid in rank_pids or arg_value not in cmdline, cmdline  # only a rank's own argv holds it
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        for rank in range(4):
            rank_dir = run_dir / f"rank_{rank:03d}"
            assert json.loads((rank_dir / "env.json").read_text())["ODD_VALUE"] == env_value
            assert records(rank_dir, "labels.jsonl") == [{"labels": [arg_value]}]
        assert not list(tmp_path.glob("pwned*"))  # no shell ever expanded either value
    finally:
        proc.kill()
        proc.wait()
        kill_run("odd")


def test_output_of_every_host_arrives_in_whole_lines(ssh_cluster, tmp_path, out):
    # 5,000 lines of 70 bytes per rank: far more than one SSH packet (32 KiB), so chunks end mid-line
    table = write_table(tmp_path / "rt.json", 2)
    result = run_dlaunch(*cluster_args(ssh_cluster, table, out, "--console", "all"), "--", "--print", "5000",
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    seen = {rank: 0 for rank in range(4)}
    for line in result.stdout.splitlines():
        match = re.fullmatch(r"\[(127\.0\.0\.[23])\]\[rank(\d)\]: rank (\d) (?:line (\d+) x{50}|done)", line)
        assert match, repr(line)
        host, rank, again, number = match.groups()
        assert host == HOSTS[int(rank) // 2] and rank == again
        if number is not None:
            assert int(number) == seen[int(rank)]  # every line, in order
            seen[int(rank)] += 1
    assert seen == {rank: 5000 for rank in range(4)}


def test_dry_run_prints_every_hosts_plan_without_connecting(tmp_path, out):
    config = tmp_path / "ssh_config"
    config.write_text("Host 127.0.0.*\n    Port 1\n    User nobody\n")  # nothing listens on port 1
    table = write_table(tmp_path / "rt.json", 2)
    result = run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table, "--ssh", "--ssh-config", config,
                         "--output-dir", out, "--profile", "a2", "--dry-run", "--hang-timeout", "30",
                         "--env", "API_TOKEN=hunter2",
                         "--env", "PLAIN=a b", "--", "--sleep", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    command = next(line for line in text.splitlines() if line.startswith("remote command: "))
    assert f"; cd {shlex.quote(str(tmp_path))} " in command and f"test -f {RANK_PROGRAM} " in command
    assert command.endswith(f"; exec {sys.executable} -m launcher cluster --from-head --announce")
    assert "host 127.0.0.2 (nobody@127.0.0.2:1): ranks 0-1" in text and "host 127.0.0.3 (nobody@127.0.0.3:1)" in text
    assert "--server-id 127.0.0.3" in text and "--master-addr 127.0.0.2" in text
    host_line = next(line for line in text.splitlines() if "--server-id 127.0.0.3" in line)
    # per-host features reach every host
    assert "--grace-period 10.0" in host_line and "--hang-timeout 30.0" in host_line
    assert "API_TOKEN='****'" in text and "hunter2" not in text and "PLAIN='a b'" in text
    assert not out.exists()


# ------------------------------------------------------------ failure, signals, no orphans


def test_rank_failing_on_host_2_stops_host_1_with_its_exit_code(ssh_cluster, tmp_path, out):
    table = write_table(tmp_path / "rt.json", 2)
    started = time.monotonic()
    result = run_dlaunch(*cluster_args(ssh_cluster, table, out, run_id="fail"), "--", "--fail-rank", "3",
                         "--code", "7", "--after", "1", "--sleep", "60", "--trap", "SIGTERM", "--child",
                         cwd=tmp_path, timeout=60)
    assert result.returncode == 7, result.stderr
    assert time.monotonic() - started < 20
    run_dir = out / "fail"
    head = summary(run_dir, "summary.head.json")
    cause = head["root_cause"]
    assert (cause["rank"], cause["host"], cause["exit_code"], head["exit_code"]) == (3, "127.0.0.3", 7, 7)
    assert {h["host"]: h["status"] for h in head["hosts"]} == {"127.0.0.2": "stopped", "127.0.0.3": "failed"}
    assert "rank 3 on host 127.0.0.3 (device 1) exited with code 7" in result.stderr
    for rank in (0, 1):  # host 1's ranks were told, through their launcher, to stop
        assert records(run_dir / f"rank_{rank:03d}", "signals.jsonl") == [{"signal": "SIGTERM", "rank": rank}]
    assert wait_until(lambda: processes_of_run("fail") == [], timeout=5), processes_of_run("fail")


def test_a_hang_on_host_2_stops_every_host(ssh_cluster, tmp_path, out):
    table = write_table(tmp_path / "rt.json", 2)
    result = run_dlaunch(*cluster_args(ssh_cluster, table, out, "--hang-timeout", "4", run_id="hang"), "--",
                         "--heartbeat-for", "60", "--heartbeat-ranks", "0,1", "--sleep", "60", cwd=tmp_path,
                         timeout=90)
    assert result.returncode == 124, result.stderr
    head = summary(out / "hang", "summary.head.json")
    cause = head["root_cause"]
    assert cause["host"] == "127.0.0.3" and cause["rank"] in (2, 3) and cause.get("hung") is True
    assert {h["host"]: h["status"] for h in head["hosts"]} == {"127.0.0.2": "stopped", "127.0.0.3": "failed"}
    assert (out / "hang" / f"rank_{cause['rank']:03d}" / "stack.txt").exists()
    assert wait_until(lambda: processes_of_run("hang") == [], timeout=5), processes_of_run("hang")


def test_head_sigkilled_leaves_no_rank_alive_on_any_host(ssh_cluster, tmp_path, out):
    table = write_table(tmp_path / "rt.json", 2)
    proc = start_dlaunch(*cluster_args(ssh_cluster, table, out, run_id="headkill"), "--", "--sleep", "120",
                         "--child", cwd=tmp_path)
    try:
        pids = wait_for_pids(out / "headkill", range(4), with_children=True)
        assert len(pids) == 8 and all(pid_alive(p) for p in pids)
        proc.kill()
        proc.wait(10)
        assert wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=5), [p for p in pids if pid_alive(p)]
        assert wait_until(lambda: processes_of_run("headkill") == [], timeout=5)
    finally:
        proc.kill()
        proc.wait()
        kill_run("headkill")


def signal_the_head(cluster, tmp_path, out, run_id, sig, *extra):
    """Start a 4-rank job on both hosts whose ranks trap ``sig``, send ``sig`` to the head once every rank runs,
    check every rank received it; (the head's exit code, its stderr)."""
    table = write_table(tmp_path / "rt.json", 2)
    proc = start_dlaunch(*cluster_args(cluster, table, out, *extra, run_id=run_id), "--", "--sleep", "60",
                         "--trap", sig.name, cwd=tmp_path)
    try:
        wait_for_pids(out / run_id, range(4))  # rank.py installs its trap before it writes its pid
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=30)
        for rank in range(4):
            assert records(out / run_id / f"rank_{rank:03d}", "signals.jsonl") == [{"signal": sig.name,
                                                                                   "rank": rank}]
        return proc.returncode, stderr
    finally:
        proc.kill()
        proc.wait()
        kill_run(run_id)


def test_ctrl_c_on_the_head_reaches_ranks_on_both_hosts(ssh_cluster, tmp_path, out):
    code, stderr = signal_the_head(ssh_cluster, tmp_path, out, "ctrlc", signal.SIGINT)
    assert code == 130, stderr
    head = summary(out / "ctrlc", "summary.head.json")
    assert head["interrupted_by"] == "SIGINT" and head["status"] == "interrupted"
    assert {h["status"] for h in head["hosts"]} == {"stopped"}
    assert "interrupted by SIGINT" in stderr


def test_sigusr1_on_the_head_reaches_ranks_on_both_hosts_and_the_job_goes_on(ssh_cluster, tmp_path, out):
    """Slurm's warning signal (or a user's) to the head: every host's launcher passes it to its ranks, and
    nothing is stopped (each rank here saves its trap and then leaves by itself, exit 0)."""
    code, stderr = signal_the_head(ssh_cluster, tmp_path, out, "usr1", signal.SIGUSR1, "--forward-signals", "WINCH")
    assert code == 0, stderr
    head = summary(out / "usr1", "summary.head.json")
    assert head["status"] == "succeeded" and not head.get("interrupted_by")


def test_second_ctrl_c_kills_every_rank_at_once(ssh_cluster, tmp_path, out):
    table = write_table(tmp_path / "rt.json", 2)
    proc = start_dlaunch(*cluster_args(ssh_cluster, table, out, "--grace-period", "60", run_id="ctrlc2"), "--",
                         "--sleep", "60", "--trap", "SIGINT", "--trap-delay", "60", cwd=tmp_path)
    try:
        pids = wait_for_pids(out / "ctrlc2", range(4))
        proc.send_signal(signal.SIGINT)  # every rank's handler now takes 60 s, as a slow checkpoint would
        time.sleep(0.5)
        second = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 130 and time.monotonic() - second < 10, stderr
        assert not any(pid_alive(p) for p in pids)
        assert all(records(out / "ctrlc2" / f"rank_{r:03d}", "signals.jsonl") == [] for r in range(4))
    finally:
        proc.kill()
        proc.wait()
        kill_run("ctrlc2")


def host_run(server_id, **state):
    """A HostRun as the session leaves it, built from plain data (the outcome logic is pure)."""
    from launcher.execute.ssh.plan import HostLaunch, Target
    from launcher.execute.ssh.session import HostRun

    target = Target(server_id, server_id, 22, "user", (), False, (), "/dev/null", None)
    run = HostRun(HostLaunch(target, (0,), {}), client=None, channel=None)
    for name, value in state.items():
        setattr(run, name, value)
    return run


def test_root_cause_is_the_failure_that_ended_first():
    from launcher.execute.ssh.outcome import root_cause

    def failed(host, rank, code, end):
        return host_run(host, exit_code=code, ended_at=end + 1,
                        summary={"exit_code": code, "root_cause": {"rank": rank, "exit_code": code, "end": end}})

    late, early = failed("127.0.0.2", 1, 5, 200.0), failed("127.0.0.3", 3, 7, 100.0)
    lost = host_run("127.0.0.4", exit_code=255, lost="SSH connection lost", ended_at=150.0)
    stopped = host_run("127.0.0.5", exit_code=143, told=signal.SIGTERM, ended_at=50.0)  # the head's doing
    assert {k: root_cause([late, lost, early, stopped])[k] for k in ("host", "rank", "exit_code")} == \
        {"host": "127.0.0.3", "rank": 3, "exit_code": 7}
    assert root_cause([late, lost, stopped])["reason"] == "SSH connection lost"
    assert root_cause([stopped, host_run("127.0.0.6", exit_code=0)]) is None


# ------------------------------------------------------------ host keys


def test_unknown_host_key_is_refused_before_anything_starts(ssh_cluster, tmp_path, out):
    config = config_with_known_hosts(ssh_cluster, tmp_path, ssh_cluster.known_hosts_without(1))
    table = write_table(tmp_path / "rt.json", 2)
    result = run_dlaunch(*cluster_args(ssh_cluster, table, out, config=config, run_id="unknown"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    port = ssh_cluster.hosts[1].port
    lines = result.stderr.splitlines()
    refused = [line for line in lines if "host 127.0.0.3" in line]
    assert len(refused) == 1 and "unknown host key for [127.0.0.3]:" in refused[0]
    assert f"ssh-keyscan -p {port} 127.0.0.3 >> " in refused[0] and "--trust-new-hosts" in refused[0]
    assert not any("host 127.0.0.2" in line for line in lines)  # the known host passed its preflight
    assert "nothing was started" in lines[-1] and "Traceback" not in result.stderr
    assert not out.exists() and processes_of_run("unknown") == []
    assert wait_until(lambda: not waiting_launchers(ssh_cluster), timeout=5)  # host 1's hung up on, gone


def test_trust_new_hosts_accepts_and_records_an_unknown_key(ssh_cluster, tmp_path, out):
    known = tmp_path / "known_hosts"
    known.write_text(ssh_cluster.known_hosts_without(1).read_text())
    config = config_with_known_hosts(ssh_cluster, tmp_path, known)
    table = write_table(tmp_path / "rt.json", 1)
    args = cluster_args(ssh_cluster, table, out, config=config, profile="structure")
    result = run_dlaunch(*args, "--trust-new-hosts", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    host = ssh_cluster.hosts[1]
    assert f"[127.0.0.3]:{host.port} {host.host_key_pub_line}\n" in known.read_text()
    assert "trusted new host key of [127.0.0.3]:" in result.stderr
    assert run_dlaunch(*args, cwd=tmp_path).returncode == 0  # now known: no flag needed


def test_changed_host_key_is_refused_even_with_trust_new_hosts(ssh_cluster, tmp_path, out):
    first, second = ssh_cluster.hosts
    known = tmp_path / "known_hosts"  # host 2's entry carries host 1's key: what a man in the middle looks like
    known.write_text(f"[{first.address}]:{first.port} {first.host_key_pub_line}\n"
                     f"[{second.address}]:{second.port} {first.host_key_pub_line}\n")
    config = config_with_known_hosts(ssh_cluster, tmp_path, known)
    table = write_table(tmp_path / "rt.json", 1)
    result = run_dlaunch(*cluster_args(ssh_cluster, table, out, "--trust-new-hosts", config=config,
                                       profile="structure"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "HOST KEY CHANGED for [127.0.0.3]:" in result.stderr and "ssh-keygen -R" in result.stderr
    assert known.read_text().count(first.host_key_pub_line) == 2 and second.host_key_pub_line not in known.read_text()
    assert not out.exists()


# ------------------------------------------------------------ preflight


def test_every_failing_host_is_reported_at_once(ssh_cluster, tmp_path, out):
    table = write_table(tmp_path / "rt.json", 1)
    result = run_dlaunch(*cluster_args(ssh_cluster, table, out, "--remote-python", "/nonexistent/python3",
                                       profile="structure"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    for host in HOSTS:
        assert sum(f"host {host} " in line and "cannot run /nonexistent/python3 -m launcher" in line
                   for line in lines) == 1, result.stderr
    assert lines[-1] == "dlaunch: error: preflight failed on 2 of 2 host(s); nothing was started"
    assert not out.exists()


@pytest.mark.parametrize("target, extra, what", [
    ("nowhere.py", [], "script {tmp}/nowhere.py"),
    ("no-such-executable-4f2a", ["--no-python"], "executable no-such-executable-4f2a"),
])
def test_missing_script_on_the_hosts_is_found_by_the_preflight(ssh_cluster, tmp_path, out, target, extra, what):
    table = write_table(tmp_path / "rt.json", 1)
    args = cluster_args(ssh_cluster, table, out, *extra, profile="structure")
    args[1] = target
    result = run_dlaunch(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count(what.format(tmp=tmp_path) + " not found there") == 2, result.stderr
    assert not out.exists()


def test_default_ssh_config_is_the_users(ssh_cluster, tmp_path, out):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(ssh_cluster.ssh_config.read_text())
    table = write_table(tmp_path / "rt.json", 1)
    result = run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table, "--ssh", "--output-dir", out,
                         "--profile", "structure", cwd=tmp_path, env={"HOME": str(home)})
    assert result.returncode == 0, result.stderr


def _cluster_of_2(tmp_path):
    require_sshd()
    return start_cluster(tmp_path / "sshd", 2)


def test_unreachable_host_at_preflight_starts_nothing(tmp_path, out):
    with _cluster_of_2(tmp_path) as cluster:
        cluster.stop_host(1)
        table = write_table(tmp_path / "rt.json", 2)
        result = run_dlaunch(*cluster_args(cluster, table, out, run_id="down"), cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        down = [line for line in result.stderr.splitlines() if "host 127.0.0.3" in line]
        assert len(down) == 1
        assert f"cannot connect to 127.0.0.3:{cluster.hosts[1].port}: Connection refused" in down[0]
        assert "host 127.0.0.2" not in result.stderr and "nothing was started" in result.stderr
        assert not out.exists() and processes_of_run("down") == []
        assert wait_until(lambda: not waiting_launchers(cluster), timeout=5)


def test_host_that_never_answers_is_bounded_by_the_connect_timeout(tmp_path, out):
    with _cluster_of_2(tmp_path) as cluster:
        frozen = cluster.hosts[0].process
        frozen.send_signal(signal.SIGSTOP)  # the kernel still accepts TCP; sshd never says a word
        try:
            table = write_table(tmp_path / "rt.json", 1)
            started = time.monotonic()
            # 3 s: long enough for the healthy host's handshake on a loaded 2-core machine
            result = run_dlaunch(*cluster_args(cluster, table, out, "--connect-timeout", "3", profile="structure"),
                                 cwd=tmp_path)
            assert result.returncode == 2 and time.monotonic() - started < 10, result.stderr
            lines = result.stderr.splitlines()
            port = cluster.hosts[0].port
            assert lines[0] == (f"dlaunch: error: host 127.0.0.2 (root@127.0.0.2:{port}): no SSH answer from "
                                f"127.0.0.2:{port} within --connect-timeout 3 s"), result.stderr
            assert len(lines) == 2 and "nothing was started" in lines[1]
            assert not out.exists()
        finally:
            frozen.send_signal(signal.SIGCONT)


def test_connection_dropping_mid_run_stops_the_other_host(tmp_path, out):
    with _cluster_of_2(tmp_path) as cluster:
        table = write_table(tmp_path / "rt.json", 2)
        proc = start_dlaunch(*cluster_args(cluster, table, out, run_id="drop"), "--", "--sleep", "60",
                             "--trap", "SIGTERM", cwd=tmp_path)
        try:
            wait_for_pids(out / "drop", range(4))
            cluster.stop_host(1)  # host 2 goes down: its sshd, session, launcher and ranks
            _, stderr = proc.communicate(timeout=40)
            head = summary(out / "drop", "summary.head.json")
            cause = head["root_cause"]
            assert (cause["host"], cause["rank"], cause["reason"]) == ("127.0.0.3", None, "SSH connection lost")
            assert proc.returncode == head["exit_code"] == 255
            assert {h["host"]: h["status"] for h in head["hosts"]}["127.0.0.2"] == "stopped"
            for rank in (0, 1):
                assert records(out / "drop" / f"rank_{rank:03d}", "signals.jsonl") == [{"signal": "SIGTERM",
                                                                                        "rank": rank}]
            assert "dlaunch: host 127.0.0.3 failed: SSH connection lost" in stderr
            assert wait_until(lambda: processes_of_run("drop") == [], timeout=5)
        finally:
            proc.kill()
            proc.wait()
            kill_run("drop")


# ------------------------------------------------------------ bad input, imports


@pytest.mark.parametrize("extra, message", [
    (["--server-id", "127.0.0.2"], "with --ssh every server of the table is started"),
    (["--ssh-config", "/nonexistent/ssh_config"], "cannot read SSH config /nonexistent/ssh_config"),
    (["--connect-timeout", "0"], "--connect-timeout: 0 seconds is out of range"),
    (["--env", "1BAD=x"], "--env: expected KEY=VALUE"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, out, extra, message):
    table = write_table(tmp_path / "rt.json", 1)
    result = run_dlaunch("cluster", RANK_PROGRAM, "--rank-table", table, "--ssh", "--output-dir", out,
                         "--profile", "structure", *extra, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()   # one error line, after the command's usage when argparse found it
    assert len(lines) == 1 or (len(lines) == 2 and lines[0].startswith("usage:")), lines
    assert message in result.stderr
    assert not out.exists()


def test_ssh_needs_a_rank_table(tmp_path):
    result = run_dlaunch("cluster", RANK_PROGRAM, "--ssh", cwd=tmp_path)
    assert result.returncode == 2 and "--ssh needs --rank-table" in result.stderr


def test_cli_and_remote_module_import_neither_paramiko_nor_torch():
    code = ("import sys, launcher.cli, launcher.execute.ssh.head; "
            "print(sorted({'paramiko', 'torch'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.stdout.strip() == "[]", result.stderr
