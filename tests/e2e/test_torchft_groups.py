"""TorchFT replica groups (``--replica-groups``, ``--restart-policy group``) with torchft's own DDP example
(tests/clients/torchft/train_ddp.py, on CPU with gloo) and torchft's real lighthouse, which dlaunch starts:
a rank of group 1 killed mid-run -> group 0's processes untouched, stepping on with fewer replicas; group 1
(its ranks and its store) started again alone, healed from group 0; the job ends 0. The same when group 1's
store is what gets killed. The lighthouse and stores of a one-host run answer on loopback alone."""

import errno
import json
import os
import re
import signal
import socket
import sys

import psutil

from tests.launching import ROOT, run_dlaunch, start_dlaunch, wait_until

TRAIN_DDP = ROOT / "tests" / "clients" / "torchft" / "train_ddp.py"
STEP = re.compile(r"^step=(\d+) group=(\d) rank=(\d) participants=(\d)", re.MULTILINE)


def steps(log):
    """(step, participants) of each step line of a rank's log."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [(int(m[1]), int(m[4])) for m in STEP.finditer(text)]


def test_a_failed_replica_group_restarts_alone_and_heals_while_the_other_steps_on(tmp_path):
    lighthouse = os.path.join(os.path.dirname(sys.executable), "torchft_lighthouse")
    assert os.access(lighthouse, os.X_OK), "torchft (scripts/test.sh installs it) ships torchft_lighthouse"
    runs = tmp_path / "runs"
    # torchft's Manager timeouts shortened (a failure of the test ends in seconds, not minutes); a sleep after
    # each step, in which the rank is killed: torchft 0.2.0's DDP hook can assert when a peer's connection
    # resets in the middle of an allreduce, which would fail the surviving group too
    env = {"TORCHFT_STEPS": "100", "TORCHFT_STEP_SLEEP": "0.2", "TORCHFT_LIGHTHOUSE": "",
           "TORCHFT_TIMEOUT_SEC": "10", "TORCHFT_QUORUM_TIMEOUT_SEC": "20"}
    proc = start_dlaunch("run", TRAIN_DDP, "--ranks", "4", "--replica-groups", "2", "--max-restarts", "2",
                         "--output-dir", runs, "--run-id", "ft", "--grace-period", "2", cwd=tmp_path, env=env)
    run_dir = runs / "ft"
    try:
        logs = {rank: run_dir / f"rank_{rank:03d}" / "output.log" for rank in range(4)}
        wait_until(lambda: len(steps(logs[3])) >= 8, timeout=120)   # group 1 is training
        pids = {int(k): v["pid"] for k, v in json.loads((run_dir / "pids.json").read_text())["ranks"].items()} \
            if (run_dir / "pids.json").exists() else None
        assert pids, "pids.json names each rank's process"
        status = run_dlaunch("status", run_dir, cwd=tmp_path).stdout   # the quorum, from the real lighthouse
        assert re.search(r"TorchFT quorum \d+ \(http://127\.0\.0\.1:\d+\): 2 replica group\(s\): train_ddp_0 "
                         r"step \d+, train_ddp_1 step \d+|train_ddp_1 step \d+, train_ddp_0 step \d+", status), status
        seen = len(steps(logs[3]))
        wait_until(lambda: len(steps(logs[3])) > seen, timeout=30, interval=0.01)   # it just stepped: now asleep
        os.kill(pids[3], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    assert "starting its replica group again (--restart-policy group: replica group 1's restart 1 of 2)" in stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    ranks = {r["rank"]: r for r in summary["ranks"]}
    assert [ranks[r]["pid"] for r in (0, 1)] == [pids[0], pids[1]]   # group 0: the same processes throughout
    assert not ranks[0].get("restarts") and not ranks[1].get("restarts")
    assert [len(ranks[r]["restarts"]) for r in (2, 3)] == [1, 1]
    assert ranks[3]["restarts"][0]["exit_code"] == 137 and ranks[2]["pid"] != pids[2]
    assert "its replica group 1 restarts (rank 3 failed)" in ranks[2]["restarts"][0]["why"]
    group0 = steps(logs[0])
    assert any(participants == 1 for _, participants in group0), "group 0 stepped on alone meanwhile"
    assert group0[-1][0] >= 100 and group0[-1][1] == 2, "and with group 1 again at the end"
    healed = re.findall(r"^healed group=1 rank=0 step=(\d+)", logs[2].read_text(), re.MULTILINE)
    assert healed and int(healed[-1]) > 8, "the restarted group took its state from group 0"
    store = (run_dir / "torchft" / "store-group1.log").read_text()
    assert store.count("store of replica group 1") == 2   # the group's store started again with it
    assert (run_dir / "torchft" / "store-group0.log").read_text().count("store of replica group 0") == 1
    status = run_dlaunch("status", run_dir, cwd=tmp_path).stdout
    assert "restarted with its replica group 1x" in status, status


def store_pid(launcher_pid: int, group: int) -> int | None:
    """The pid of replica group ``group``'s store, a child of the launcher (``python -c <store> addr port G``)."""
    for child in psutil.Process(launcher_pid).children():
        try:
            argv = child.cmdline()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if len(argv) > 3 and argv[1] == "-c" and "TCPStore" in argv[2] and argv[-1] == str(group):
            return child.pid
    return None


def test_a_killed_group_store_restarts_its_group_and_the_job_ends_0(tmp_path):
    """Group 1's store SIGKILLed (as the OOM killer would): group 1's ranks are stopped and the group starts
    again, store first, while group 0 steps on; the job ends 0 (it ended the job with 1)."""
    runs = tmp_path / "runs"
    env = {"TORCHFT_STEPS": "100", "TORCHFT_STEP_SLEEP": "0.2", "TORCHFT_LIGHTHOUSE": "",
           "TORCHFT_TIMEOUT_SEC": "10", "TORCHFT_QUORUM_TIMEOUT_SEC": "20"}
    proc = start_dlaunch("run", TRAIN_DDP, "--ranks", "4", "--replica-groups", "2", "--max-restarts", "2",
                         "--output-dir", runs, "--run-id", "ft", "--grace-period", "2", cwd=tmp_path, env=env)
    run_dir = runs / "ft"
    try:
        logs = {rank: run_dir / f"rank_{rank:03d}" / "output.log" for rank in range(4)}
        wait_until(lambda: len(steps(logs[3])) >= 8, timeout=120)   # group 1 is training
        pids = {int(k): v["pid"] for k, v in json.loads((run_dir / "pids.json").read_text())["ranks"].items()} \
            if (run_dir / "pids.json").exists() else None
        assert pids, "pids.json names each rank's process"
        store = store_pid(proc.pid, 1)
        assert store is not None, "group 1's store runs beside its ranks"
        seen = len(steps(logs[3]))
        wait_until(lambda: len(steps(logs[3])) > seen, timeout=30, interval=0.01)   # it just stepped: now asleep
        os.kill(store, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    assert ("replica group 1's store died of SIGKILL (exit 137); starting its replica group again "
            "(--restart-policy group: replica group 1's restart 1 of 2)") in stderr, stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    ranks = {r["rank"]: r for r in summary["ranks"]}
    assert [ranks[r]["pid"] for r in (0, 1)] == [pids[0], pids[1]]   # group 0: the same processes throughout
    assert not ranks[0].get("restarts") and not ranks[1].get("restarts")
    assert [len(ranks[r]["restarts"]) for r in (2, 3)] == [1, 1]
    assert [ranks[r]["restarts"][0]["pid"] for r in (2, 3)] == [pids[2], pids[3]]
    assert all(ranks[r]["restarts"][0]["why"] == "its replica group 1 restarts (its store failed)" for r in (2, 3))
    store_log = (run_dir / "torchft" / "store-group1.log").read_text()
    assert store_log.count("store of replica group 1") == 2   # started again, before its ranks (their 2nd life)
    assert (run_dir / "torchft" / "store-group0.log").read_text().count("store of replica group 0") == 1
    group0 = steps(logs[0])
    assert group0[-1][0] >= 100 and group0[-1][1] == 2, "group 0 ends with group 1 back in the quorum"
    healed = re.findall(r"^healed group=1 rank=0 step=(\d+)", logs[2].read_text(), re.MULTILINE)
    assert healed and int(healed[-1]) > 8, "the restarted group took its state from group 0"


def other_addresses() -> list[str]:
    """This machine's IPv4 addresses other than 127.0.0.1: another loopback one, and every interface's."""
    found = ["127.0.0.2"]
    for addresses in psutil.net_if_addrs().values():
        found += [a.address for a in addresses if a.family == socket.AF_INET and not a.address.startswith("127.")]
    return found


def told(env_log) -> tuple[int, int] | None:
    """The lighthouse's and the store's ports in a rank's env.log, when both are on 127.0.0.1."""
    text = env_log.read_text() if env_log.exists() else ""
    lighthouse = re.search(r"^TORCHFT_LIGHTHOUSE=http://127\.0\.0\.1:(\d+)$", text, re.MULTILINE)
    store = re.search(r"^MASTER_PORT=(\d+)$", text, re.MULTILINE)
    if lighthouse and store and re.search(r"^MASTER_ADDR=127\.0\.0\.1$", text, re.MULTILINE):
        return int(lighthouse[1]), int(store[1])
    return None


def connects(address: str, port: int) -> bool:
    """Whether a TCP connection to ``address:port`` is taken (False: refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        code = sock.connect_ex((address, port))
    assert code in (0, errno.ECONNREFUSED), f"{address}:{port}: {os.strerror(code)}"
    return code == 0


def test_the_lighthouse_and_stores_of_one_host_answer_on_loopback_alone(tmp_path):
    """The ranks are told http://127.0.0.1:PORT and their group's store at 127.0.0.1: the lighthouse and the
    stores dlaunch starts listen there and nowhere else, so from this machine's other addresses no one reads
    /status, joins the quorum or writes a group's keys (all three listened on every address)."""
    runs = tmp_path / "runs"
    script = tmp_path / "wait.py"   # each rank waits for the test's word, then ends 0
    script.write_text("import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.05)\n")
    proc = start_dlaunch("run", script, "--ranks", "2", "--replica-groups", "2", "--output-dir", runs,
                         "--run-id", "lh", cwd=tmp_path, env={"TORCHFT_LIGHTHOUSE": ""})
    try:
        ports = {}   # each service, by the port its ranks are told
        for rank in (0, 1):   # one rank of each group: the lighthouse's port and its group's store's
            found = wait_until(lambda rank=rank: told(runs / "lh" / f"rank_{rank:03d}" / "env.log"), timeout=60)
            assert found, f"rank {rank} is told the lighthouse and its store on loopback"
            ports["lighthouse"], ports[f"store of group {rank}"] = found
        for name, port in ports.items():
            assert wait_until(lambda port=port: connects("127.0.0.1", port), timeout=60), f"{name}: not listening"
        refused = {(name, address): not connects(address, port)
                   for name, port in ports.items() for address in other_addresses()}
        (tmp_path / "go").write_text("")
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert refused == dict.fromkeys(refused, True), refused
    assert proc.returncode == 0, stderr[-3000:]
    assert "--bind" in (argv := json.loads((runs / "lh" / "plan.json").read_text())["services"][0]["argv"])
    assert argv[argv.index("--bind") + 1] == f"127.0.0.1:{ports['lighthouse']}"
