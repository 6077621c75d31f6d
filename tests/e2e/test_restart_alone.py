"""Restarting only what failed (execute/local/recovery.py) with real launches: --restart-policy rank, and
MindCluster's reset file followed by simulated AscendJob pods (2 pods x 4 ranks, each a dlaunch cluster on its
own loopback address; the reset file is what ClusterD writes, ascend-common's ResetCmInfo, at a temporary path
instead of /user/restore/reset/config/reset.json)."""

import hashlib
import json
import signal
import time

import pytest

from tests.e2e.test_job_hosts import HOSTS
from tests.launching import free_port, kill_run, run_dlaunch, start_dlaunch, wait_until, write_rank_table

# Each run of a rank appends its pid to runs.txt; SIGTERM is recorded (the trap set first: a test that waits
# for runs.txt then stops the rank must find sigterm.txt), then the rank exits 143.
RANK = """
trap 'echo "$(date +%s.%N)" > "$DLAUNCH_RANK_DIR/sigterm.txt"; exit 143' TERM
echo "$$ $(date +%s.%N)" >> "$DLAUNCH_RANK_DIR/runs.txt"
env | grep -E '^(RANK|LOCAL_RANK|WORLD_SIZE|MASTER_PORT|DLAUNCH_RANK_DIR|TORCHELASTIC_RESTART_COUNT)=' | sort \
  >> "$DLAUNCH_RANK_DIR/env.txt"
env | grep '^HCCL_ASYNC_ERROR_HANDLING=' >> "$DLAUNCH_RANK_DIR/env.txt"
if [ "$RANK" = "$FAIL_RANK" ] && [ "$(wc -l < "$DLAUNCH_RANK_DIR/runs.txt")" = 1 ]; then sleep 0.5; exit 3; fi
i=0; while [ $i -lt $((STEPS * 10)) ]; do sleep 0.1; i=$((i + 1)); done
"""


def runs(rank_dir):
    return [line.split()[0] for line in (rank_dir / "runs.txt").read_text().splitlines()]


def test_restart_policy_rank_starts_only_the_failed_rank_again_with_its_own_restart_count(tmp_path):
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "3", "--profile", "structure", "--restart-policy",
                         "rank", "--max-restarts", "2", "--output-dir", tmp_path / "runs", "--run-id", "alone",
                         "--", "-c", RANK, cwd=tmp_path, env={"FAIL_RANK": "1", "STEPS": "2"})
    assert result.returncode == 0, result.stderr
    assert ("rank 1 exited with code 3; starting it again alone once the other 2 rank(s) here have ended (torch's "
            "process group cannot take it back) (--restart-policy rank: restart 1 of 2)" in result.stderr)
    run_dir = tmp_path / "runs" / "alone"
    assert [len(runs(run_dir / f"rank_{r:03d}")) for r in range(3)] == [1, 2, 1]   # 0 and 2: never restarted
    first, second = (run_dir / "rank_001" / "env.txt").read_text().split("DLAUNCH_RANK_DIR")[1:]
    assert "TORCHELASTIC_RESTART_COUNT=0" in first and "TORCHELASTIC_RESTART_COUNT=1" in second
    assert first.replace("COUNT=0", "") == second.replace("COUNT=1", "")   # else the same ids and environment
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["attempts"]) == 1
    rank1 = next(r for r in summary["ranks"] if r["rank"] == 1)
    assert [r["exit_code"] for r in rank1["restarts"]] == [3] and rank1["exit_code"] == 0
    status = run_dlaunch("status", run_dir, cwd=tmp_path).stdout
    assert "exited 0, restarted alone 1x" in status, status
    page = run_dlaunch("report", run_dir, "-o", "-", cwd=tmp_path).stdout
    assert "restarted alone 1x (--restart-policy rank: restart 1 of 2)" in page


# Rank 1 saves a checkpoint in its own directory on each run, then fails twice; each run records what it was given.
OWN_CHECKPOINT = """
[ "$RANK" = 0 ] && exit 0
n=$(ls "$DLAUNCH_CKPT_DIR" | wc -l)
echo "count=$TORCHELASTIC_RESTART_COUNT from=${DLAUNCH_RESUME_FROM:-none} step=${DLAUNCH_RESUME_STEP:-none}" \
  >> "$DLAUNCH_RANK_DIR/given.txt"
echo saved > "$DLAUNCH_CKPT_DIR/ckpt-0_$((n * 10 + 5)).pt"
[ "$n" -lt 2 ] && exit 3
exit 0
"""


def test_a_rank_restarted_alone_gets_its_restart_count_and_its_own_newest_checkpoint(tmp_path):
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--restart-policy", "rank",
                         "--max-restarts", "2", "--output-dir", tmp_path / "runs", "--run-id", "own", "--", "-c",
                         OWN_CHECKPOINT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rank_dir = tmp_path / "runs" / "own" / "rank_001"
    ckpt = rank_dir / "ckpt"
    assert (rank_dir / "given.txt").read_text().splitlines() == [
        "count=0 from=none step=none",
        f"count=1 from={ckpt / 'ckpt-0_5.pt'} step=0_5",
        f"count=2 from={ckpt / 'ckpt-0_15.pt'} step=0_15"]
    assert f"DLAUNCH_RESUME_FROM={ckpt / 'ckpt-0_15.pt'}" in (rank_dir / "env.log").read_text()


# Rank 1 fails at once; rank 0 ends later as a broken process group ends it (exit 1); each run's start and
# rank 0's end are written, in the order they happen, to one file.
TORCH_RACE = """
echo "$RANK start $TORCHELASTIC_RESTART_COUNT" >> "$ORDER"
[ "$TORCHELASTIC_RESTART_COUNT" != 0 ] && exit 0
[ "$RANK" = 1 ] && exit 3
sleep 1; echo "0 end" >> "$ORDER"; exit 1
"""


def test_a_torch_job_under_restart_policy_rank_restarts_a_rank_only_once_rank_0_has_ended(tmp_path):
    order = tmp_path / "order.txt"
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--restart-policy", "rank",
                         "--max-restarts", "1", "--output-dir", tmp_path / "runs", "--", "-c", TORCH_RACE,
                         cwd=tmp_path, env={"ORDER": str(order)})
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    said = [line for line in lines if "torch's process groups cannot take a peer back" in line]
    assert len(said) == 1 and lines.index(said[0]) < next(i for i, line in enumerate(lines) if "rank 1 exited" in line)
    happened = order.read_text().splitlines()
    assert sorted(happened) == ["0 end", "0 start 0", "0 start 1", "1 start 0", "1 start 1"], happened
    assert happened.index("0 end") < happened.index("1 start 1"), happened   # the old store's host had ended
    assert happened.index("0 end") < happened.index("0 start 1"), happened


def test_a_torch_job_across_hosts_is_refused_restart_policy_rank_in_one_line(tmp_path):
    table = write_rank_table(tmp_path / "rt.json", hosts=HOSTS[:2], devices_per_host=1)
    result = run_dlaunch("cluster", "--no-python", "/bin/true", "--rank-table", table, "--rank-start", "0",
                         "--profile", "structure", "--restart-policy", "rank", "--max-restarts", "1", "--dry-run",
                         cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "--restart-policy rank across 2 hosts with a torch job" in result.stderr


def test_warm_restarts_under_restart_policy_rank_are_said_to_be_unused(tmp_path):
    args = ("run", "--no-python", "/bin/sh", "--ranks", "2", "--restart-policy", "rank", "--max-restarts", "1",
            "--warm-restarts", "json", "--output-dir", tmp_path / "runs")
    unused = ("--warm-restarts json is not used under --restart-policy rank: standbys serve the restarts of every "
              "rank (--restart-policy job); a rank started again alone starts cold")
    dry = run_dlaunch(*args, "--dry-run", "--", "-c", "exit 0", cwd=tmp_path)
    assert dry.returncode == 0 and unused in dry.stdout, dry.stdout
    result = run_dlaunch(*args, "--", "-c", "exit 0", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr.count(unused) == 1, result.stderr


def test_restart_policy_rank_stops_the_job_once_a_rank_used_its_restarts(tmp_path):
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "2", "--restart-policy", "rank",
                         "--max-restarts", "1", "--output-dir", tmp_path / "runs", "--run-id", "budget", "--", "-c",
                         '[ "$RANK" = 1 ] && exit 4; sleep 1', cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    assert result.stderr.count("starting it again alone") == 1


def test_the_closing_line_says_each_ranks_restarts_and_stops_no_rank_that_had_ended(tmp_path):
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "3", "--restart-policy", "rank",
                         "--max-restarts", "1", "--output-dir", tmp_path / "runs", "--run-id", "said", "--", "-c",
                         '[ "$RANK" = 1 ] || exit 0; sleep 0.3; exit 4', cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    closing = result.stderr.splitlines()[-1]
    assert closing.startswith("dlaunch: exit code 4 after 1 restart(s) of rank(s) 1; summary "), closing
    assert "stopped the other" not in result.stderr   # ranks 0 and 2 had exited 0 before it failed


def test_the_report_of_a_run_whose_ranks_restarted_alone_gives_the_runs_own_start_and_time(tmp_path):
    result = run_dlaunch("run", "--no-python", "/bin/sh", "--ranks", "1", "--restart-policy", "rank",
                         "--max-restarts", "1", "--output-dir", tmp_path / "runs", "--run-id", "timed", "--", "-c",
                         '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && { sleep 1; exit 3; }; exit 0', cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    took = json.loads((tmp_path / "runs" / "timed" / "summary.json").read_text())
    assert f"all 1 rank(s) exited 0 after 1 restart(s) of rank(s) 0 in {took['ended'] - took['started']:.1f} s" \
        in result.stderr, result.stderr
    page = run_dlaunch("report", tmp_path / "runs" / "timed", "-o", "-", cwd=tmp_path).stdout
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(took["started"]))
    assert f'<dt>started</dt><dd class="clip">{started}</dd>' in page
    assert f'<dt>took</dt><dd class="clip">{took["ended"] - took["started"]:.1f} s</dd>' in page


def job_id(tmp_path):
    """Each test's own run id: a cleanup's kill_run must never reach a job another worker runs meanwhile."""
    return "acjob-" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:8]


def pods(tmp_path, reset, *extra, env=None):
    """Two simulated AscendJob pods of 4 ranks each following ``reset``; returns their Popen objects."""
    table = write_rank_table(tmp_path / "hccl.json", hosts=HOSTS[:2], devices_per_host=4)
    port = free_port(HOSTS[0], span=2)
    procs = []
    for index in (0, 1):
        cwd = tmp_path / f"pod{index}"
        cwd.mkdir()
        procs.append(start_dlaunch(
            "cluster", "--no-python", "/bin/sh", "--rank-table", table, "--rank-start", index * 4, "--run-id",
            job_id(tmp_path), "--master-port", port, "--profile", "structure", "--reset-config", reset,
            "--grace-period", "1", *extra, "--", "-c", RANK, cwd=cwd,
            env={"FAIL_RANK": "none", "STEPS": "60", "MINDX_TASK_ID": "4b1d2a7e", **(env or {})}))
    return procs


def rank_dir(tmp_path, rank):
    return tmp_path / f"pod{rank // 4}" / "dlaunch_runs" / job_id(tmp_path) / f"rank_{rank:03d}"


def write_reset(path, **fields):
    body = {"RankList": [], "UpdateTime": int(time.time()), "RetryTime": 0, "FaultFlushing": False,
            "GracefulExit": 0, "RestartFaultProcess": False, **fields}
    path.with_suffix(".tmp").write_text(json.dumps(body))
    path.with_suffix(".tmp").rename(path)   # as the kubelet swaps a ConfigMap's files


def stop_pods(tmp_path, procs):
    """Whatever a test left running: its pods' dlaunch processes, then every process of its run."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    kill_run(job_id(tmp_path))


@pytest.fixture
def acjob(tmp_path):
    """The two pods running, every rank started once, the reset file as ClusterD first writes it; cleaned up."""
    reset = tmp_path / "reset.json"
    write_reset(reset)
    procs = pods(tmp_path, reset)
    try:
        assert wait_until(lambda: all((rank_dir(tmp_path, r) / "runs.txt").exists() for r in range(8)), timeout=30)
        yield reset, procs
    finally:
        stop_pods(tmp_path, procs)


def ended(procs):
    codes = [proc.wait(timeout=30) for proc in procs]
    return codes, [proc.stderr.read() for proc in procs]


def test_mindcluster_restarts_only_the_faulty_process_then_exits_gracefully(tmp_path, acjob):
    reset, procs = acjob
    before = {r: runs(rank_dir(tmp_path, r)) for r in range(8)}
    write_reset(reset, RankList=[{"RankId": 5, "LogicId": 1, "Status": "fault", "Policy": "RestartRequest",
                                  "ErrorCode": [2147483647]}], RestartFaultProcess=True, FaultFlushing=True)
    time.sleep(2.5)   # flushing: nothing happens
    assert all(runs(rank_dir(tmp_path, r)) == before[r] for r in range(8))
    write_reset(reset, RankList=[{"RankId": 5, "LogicId": 1, "Status": "fault", "Policy": "RestartRequest"}],
                RestartFaultProcess=True)
    assert wait_until(lambda: len(runs(rank_dir(tmp_path, 5))) == 2, timeout=10)
    assert all(runs(rank_dir(tmp_path, r)) == before[r] for r in range(8) if r != 5)   # every other pid
    write_reset(reset, GracefulExit=1)
    codes, stderr = ended(procs)
    assert codes == [143, 143], stderr
    assert "rank 5 died of SIGKILL (exit 137); starting it again alone (MindCluster marked it faulty" in stderr[1]
    assert "MindCluster asked every training process to exit (reset.json GracefulExit=1)" in stderr[0]
    assert all((rank_dir(tmp_path, r) / "sigterm.txt").exists() for r in range(8))   # SIGTERM first, then grace


def test_a_fault_without_restart_fault_process_stops_the_pod_non_zero(tmp_path, acjob):
    reset, procs = acjob
    write_reset(reset, RankList=[{"RankId": 6, "Status": "fault"}])
    codes, stderr = ended(procs)
    assert codes[1] == 1, stderr[1]
    assert "MindCluster marked rank(s) 6 faulty without RestartFaultProcess: this node stops" in stderr[1]
    assert codes[0] != 0 and len(runs(rank_dir(tmp_path, 6))) == 1


# What ascend-operator's env.go gives a pod whose job asks for process recovery (recover-in-place strategy).
PROCESS_RECOVERY = {"PROCESS_RECOVER": "on", "ENABLE_RESTART_FAULT_PROCESS": "on",
                    "ELASTIC_PROCESS_RECOVER_ENABLE": "1", "HCCL_ASYNC_ERROR_HANDLING": "0"}


def test_with_process_recovery_a_failed_rank_waits_for_clusterds_order_and_restarts_alone(tmp_path):
    reset = tmp_path / "reset.json"
    write_reset(reset)
    procs = pods(tmp_path, reset, env={**PROCESS_RECOVERY, "FAIL_RANK": "5"})
    try:
        assert wait_until(lambda: all((rank_dir(tmp_path, r) / "runs.txt").exists() for r in range(8)), timeout=30)
        before = {r: runs(rank_dir(tmp_path, r)) for r in range(8)}
        time.sleep(2)   # rank 5 failed (exit 3) meanwhile: held, nothing stopped
        assert all(proc.poll() is None for proc in procs)
        assert not any((rank_dir(tmp_path, r) / "sigterm.txt").exists() for r in range(8))
        write_reset(reset, RankList=[{"RankId": 5, "Status": "fault", "Policy": "RestartRequest"}],
                    RestartFaultProcess=True)
        assert wait_until(lambda: len(runs(rank_dir(tmp_path, 5))) == 2, timeout=10)
        assert all(runs(rank_dir(tmp_path, r)) == before[r] for r in range(8) if r != 5)
        env_file = rank_dir(tmp_path, 5) / "env.txt"   # written by the restarted rank just after runs.txt
        assert wait_until(lambda: env_file.read_text().count("HCCL_ASYNC_ERROR_HANDLING") == 2, timeout=10)
        env = env_file.read_text().split("DLAUNCH_RANK_DIR")
        assert "TORCHELASTIC_RESTART_COUNT=1" in env[2], "its own restart count"
        assert env[1].replace("COUNT=0", "") == env[2].replace("COUNT=1", ""), "else the same environment and ids"
        assert "HCCL_ASYNC_ERROR_HANDLING=0" in env[2], "the operator's watchdog switch, never turned back on"
        write_reset(reset, GracefulExit=1)
        codes, stderr = ended(procs)
    finally:
        stop_pods(tmp_path, procs)
    assert codes == [143, 143], stderr
    assert "rank 5 exited with code 3; held up to 60 s (--reset-hold) for MindCluster's order" in stderr[1]


def test_a_held_rank_with_no_order_fails_its_pod_when_the_hold_ends(tmp_path):
    reset = tmp_path / "reset.json"
    write_reset(reset)
    procs = pods(tmp_path, reset, "--reset-hold", "1", env={**PROCESS_RECOVERY, "FAIL_RANK": "6"})
    try:
        codes, stderr = ended(procs)
    finally:
        kill_run(job_id(tmp_path))
    assert codes[1] == 3, stderr[1]   # the held rank's own exit code, as without the hold
    assert "held up to 1 s (--reset-hold)" in stderr[1] and codes[0] != 0


def test_an_unrecovered_rank_stops_every_pod_until_the_table_moves_on_then_all_restart(tmp_path):
    """A pod being rescheduled: rank 2 unrecovered. Every rank stops; RetryTime grows but the table's version
    file does not: nothing starts; once the version moves on and every rank is recovered, both pods start
    their ranks again (attempt 1) with the table re-read; GracefulExit then ends them."""
    version = tmp_path / "version"
    version.write_text("1\n")
    reset = tmp_path / "reset.json"
    write_reset(reset)
    procs = pods(tmp_path, reset, "--max-restarts", "1")
    try:
        assert wait_until(lambda: all((rank_dir(tmp_path, r) / "runs.txt").exists() for r in range(8)), timeout=30)
        write_reset(reset, RankList=[{"RankId": 2, "Status": "unrecovered"}], RetryTime=1)
        assert wait_until(lambda: all((rank_dir(tmp_path, r) / "sigterm.txt").exists() for r in range(8)),
                          timeout=15)
        write_reset(reset, RankList=[{"RankId": 2, "Status": "recovered"}], RetryTime=1)
        time.sleep(2.5)   # recovered, but the table has not moved on: nothing starts
        started = {r: runs(rank_dir(tmp_path, r)) for r in range(8)}
        if any(len(pids) != 1 for pids in started.values()):   # once seen in a full run: what each pod said
            stop_pods(tmp_path, procs)
            pytest.fail(f"a rank started again before the table moved on: {started}\n"
                        + "\n".join(proc.stderr.read() for proc in procs))
        version.write_text("2\n")
        assert wait_until(lambda: all(len(runs(rank_dir(tmp_path, r))) == 2 for r in range(8)), timeout=15)
        write_reset(reset, GracefulExit=1)
        codes, stderr = ended(procs)
    finally:
        stop_pods(tmp_path, procs)
    assert codes == [143, 143], stderr
    assert "MindCluster marked rank(s) 2 unrecovered" in stderr[0] + stderr[1]
    env = (rank_dir(tmp_path, 5) / "env.txt").read_text()
    assert "TORCHELASTIC_RESTART_COUNT=1" in env, env


def test_sigterm_while_the_pods_wait_for_mindcluster_starts_nothing_and_exits_143(tmp_path):
    """Issue 45: a stop signal inside the reset hold (every rank stopped, waiting for the rescheduled pod's
    table) ends it at once: no attempt starts, both pods exit 143, though their restart was due."""
    version = tmp_path / "version"
    version.write_text("1\n")
    reset = tmp_path / "reset.json"
    write_reset(reset)
    procs = pods(tmp_path, reset, "--max-restarts", "1", "--join-timeout", "120")
    try:
        assert wait_until(lambda: all((rank_dir(tmp_path, r) / "runs.txt").exists() for r in range(8)), timeout=30)
        write_reset(reset, RankList=[{"RankId": 2, "Status": "unrecovered"}], RetryTime=1)
        assert wait_until(lambda: all((rank_dir(tmp_path, r) / "sigterm.txt").exists() for r in range(8)),
                          timeout=15)
        time.sleep(1.5)   # inside the hold: the ranks ended, the table's version has not moved on
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes, stderr = ended(procs)
    finally:
        stop_pods(tmp_path, procs)
    assert codes == [143, 143], stderr
    assert all(len(runs(rank_dir(tmp_path, r))) == 1 for r in range(8))


def test_an_unfit_pod_exits_192_and_the_job_restarts_once_its_rescheduled_pod_is_in_the_table(tmp_path):
    """AscendJob pods (MINDX_TASK_ID) with --health-gate: pod 1's stand-in hccn_tool says device 1's net
    health is Fault. Pod 1 starts no rank and exits 192, which ascend-operator's ExitCode restart policy
    reschedules (>= 128: kubeflow common's IsRetryableExitCode, called in its checkPodStatus); pod 0 stops its
    ranks and waits for the table's version file to move on; then the rescheduled pod (a fresh dlaunch with
    healthy tools) joins and the job runs again, attempt 1 on both."""
    from tests.e2e.test_health_gate import stand_ins

    version = tmp_path / "version"
    version.write_text("1\n")
    reset = tmp_path / "reset.json"
    write_reset(reset)
    table = write_rank_table(tmp_path / "hccl.json", hosts=HOSTS[:2], devices_per_host=2)
    port = free_port(HOSTS[0], span=2)
    procs = []

    def start(index, name, **faults):
        cwd = tmp_path / name
        cwd.mkdir()
        (tmp_path / f"tools-{name}").mkdir()
        tools = stand_ins(tmp_path / f"tools-{name}", **faults)
        procs.append(start_dlaunch(
            "cluster", "--no-python", "/bin/sh", "--rank-table", table, "--rank-start", index * 2, "--run-id",
            job_id(tmp_path), "--master-port", port, "--profile", "structure", "--reset-config", reset,
            "--grace-period", "1", "--max-restarts", "1", "--health-gate", "--", "-c", RANK, cwd=cwd,
            env={"FAIL_RANK": "none", "STEPS": "2", "MINDX_TASK_ID": "4b1d2a7e", **tools}))
        return procs[-1]

    def ranks_of(name, rank):
        return tmp_path / name / "dlaunch_runs" / job_id(tmp_path) / f"rank_{rank:03d}"

    try:
        pod0 = start(0, "pod0")
        pod1 = start(1, "pod1", net_health={"1": "Fault"})
        assert pod1.wait(timeout=30) == 192, pod1.stderr.read()
        unfit = pod1.stderr.read()
        assert "exit 192, which an operator's ExitCode restart policy reschedules elsewhere" in unfit
        assert not (ranks_of("pod1", 2) / "runs.txt").exists()   # the unfit pod started no rank
        time.sleep(2.5)   # pod 0's ranks are stopped; the table has not moved on: pod 0 waits, nothing starts again
        assert pod0.poll() is None
        assert not any((ranks_of("pod0", r) / "output.1.log").exists() for r in (0, 1))
        version.write_text("2\n")   # the operator rewrote hccl.json for the rescheduled pod
        pod1b = start(1, "pod1-rescheduled")
        codes = [pod0.wait(timeout=60), pod1b.wait(timeout=60)]
        stderr = [pod0.stderr.read(), pod1b.stderr.read()]
    finally:
        stop_pods(tmp_path, procs)
    assert codes == [0, 0], stderr
    assert "the health gate found host 127.0.0.3 unfit" in stderr[0]
    for name, rank in (("pod0", 0), ("pod0", 1), ("pod1-rescheduled", 2), ("pod1-rescheduled", 3)):
        assert "TORCHELASTIC_RESTART_COUNT=1" in (ranks_of(name, rank) / "env.txt").read_text(), name
