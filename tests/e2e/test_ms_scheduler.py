"""Real MindSpore 2.10 (CPU) under --ms-scheduler and dlaunch msrun: the cluster forms, and dlaunch's guarantees hold.

MindSpore takes seconds to import and its cluster seconds to form, so launches are few: one 4-rank msrun line
(init, AllReduce, a DATA_PARALLEL step), then 2-rank launches side by side: three failures (a rank exits
3 after init; Ctrl-C; the scheduler SIGKILLed), an msrun line over two nodes of one rank each, MindSpore's
recovery, and an AscendJob's scheduler pod beside its worker pod.  Skipped
without MindSpore, unless CI or DLAUNCH_REQUIRE_MINDSPORE=1 (scripts/test.sh) says it must be there: then its
absence fails.
"""

import importlib.util
import json
import os
import signal
from pathlib import Path

import pytest

from tests.launching import (
    ROOT,
    free_port,
    kill_run,
    pid_alive,
    processes_of_run,
    records,
    run_dlaunch,
    side_by_side,
    start_dlaunch,
    summary,
    wait_until,
)

MS_RANK = str(ROOT / "tests" / "programs" / "ms_rank.py")
QUIET = {"GLOG_v": "3"}          # MindSpore's own log: errors only (its INFO/WARNING lines are thousands)
FORMING = 240                    # seconds a 2-core machine may take to import MindSpore in every process


def _required() -> bool:
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return ci or os.environ.get("DLAUNCH_REQUIRE_MINDSPORE") == "1"


@pytest.fixture(scope="module", autouse=True)
def mindspore_installed():
    if importlib.util.find_spec("mindspore") is None:
        if _required():
            pytest.fail("MindSpore is not installed but CI or DLAUNCH_REQUIRE_MINDSPORE=1 requires it: "
                        "pip install -e '.[mindspore]' (scripts/test.sh does)")
        pytest.skip("MindSpore is not installed (pip install -e '.[mindspore]')")


def ms_records(rank_dir: Path) -> dict:
    return {entry["what"]: entry for entry in records(rank_dir, "ms.jsonl")}


def test_msrun_line_forms_the_cluster_allreduces_and_averages_gradients(tmp_path):
    """The msrun line a user has, with 'msrun' changed to 'dlaunch msrun': every rank's MindSpore rank is
    dlaunch's RANK, AllReduce sums, one DATA_PARALLEL step applies the mean gradient on every rank."""
    port = free_port("127.0.0.1")
    result = run_dlaunch("msrun", "--worker_num=4", "--local_worker_num=4", f"--master_port={port}",
                         "--log_dir=msrun_log", "--join=True", "--tail_worker_log=0", "--run-id=ms4",
                         MS_RANK, "--allreduce", "--train-step", cwd=tmp_path, timeout=FORMING, env=QUIET)
    run_dir = tmp_path / "msrun_log" / "ms4"
    try:
        assert result.returncode == 0, result.stderr[-3000:]
        assert "all 4 rank(s) exited 0" in result.stderr
        pids = []
        for rank in range(4):
            seen = ms_records(run_dir / f"rank_{rank:03d}")
            assert seen["init"]["ms_rank"] == rank and seen["init"]["RANK"] == str(rank), seen
            assert seen["init"]["ms_size"] == 4 and seen["init"]["RANK_ID"] == str(rank)
            assert seen["allreduce"]["sum"] == 1 + 2 + 3 + 4
            # each rank's gradient is rank+1; the mean (2.5) is what every rank applies, lr 1, from 10
            assert seen["train"]["w"] == [7.5, 7.5, 7.5]
            pids.append(seen["init"]["pid"])
        done = summary(run_dir)
        assert done["scheduler"]["role"] == "scheduler" and done["scheduler"]["exit_code"] == 0
        assert "MS_ROLE=MS_SCHED\n" in (run_dir / "scheduler" / "env.log").read_text()
        assert "MS_NODE_ID=2\n" in (run_dir / "rank_002" / "env.log").read_text()
        assert "[rank0]: rank 0 done" in result.stdout and "[rank1]:" not in result.stdout   # --tail_worker_log=0
        assert not processes_of_run("ms4") and not any(pid_alive(pid) for pid in pids)
    finally:
        kill_run("ms4")


def _launch(tmp_path: Path, run_id: str, *script_args: str, flags=(), env=None):
    return start_dlaunch("run", MS_RANK, "--ranks", "2", "--ms-scheduler", "--grace-period", "5",
                         "--output-dir", tmp_path / "runs", "--run-id", run_id, *flags, "--", *script_args,
                         cwd=tmp_path, env={**QUIET, **(env or {})})


def _both_ready(run_dir: Path) -> bool:
    return all(records(run_dir / f"rank_{rank:03d}", "ready.jsonl") for rank in range(2))


def _finish(proc, run_id: str, run_dir: Path) -> dict:
    try:
        out, err = proc.communicate(timeout=FORMING)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    pids = [entry["pid"] for rank in range(2) for entry in records(run_dir / f"rank_{rank:03d}", "ms.jsonl")[:1]]
    left = processes_of_run(run_id)
    kill_run(run_id)
    return {"code": proc.returncode, "stderr": err, "left": left, "rank_pids": pids, "run_dir": run_dir}


def _rank_fails_after_init(tmp_path: Path) -> dict:
    proc = _launch(tmp_path, "fail", "--fail-rank", "1", "--code", "3", "--sleep", "300")
    return _finish(proc, "fail", tmp_path / "runs" / "fail")


def _ctrl_c(tmp_path: Path) -> dict:
    run_dir = tmp_path / "runs" / "ctrlc"
    proc = _launch(tmp_path, "ctrlc", "--sleep", "300")
    ready = wait_until(lambda: _both_ready(run_dir) or proc.poll() is not None, timeout=FORMING, interval=0.2)
    if ready and proc.poll() is None:
        proc.send_signal(signal.SIGINT)    # to dlaunch only, as a terminal's Ctrl-C reaches the launcher
    return {**_finish(proc, "ctrlc", run_dir), "ready": _both_ready(run_dir)}


def _scheduler_killed(tmp_path: Path) -> dict:
    run_dir = tmp_path / "runs" / "schedkill"
    proc = _launch(tmp_path, "schedkill", "--sleep", "300")
    ready = wait_until(lambda: _both_ready(run_dir) or proc.poll() is not None, timeout=FORMING, interval=0.2)
    killed = None
    if ready and proc.poll() is None:
        killed = json.loads((run_dir / "pids.json").read_text())["scheduler"]["pid"]
        os.kill(killed, signal.SIGKILL)
    return {**_finish(proc, "schedkill", run_dir), "ready": _both_ready(run_dir), "killed": killed}


def _recovered(tmp_path: Path) -> dict:
    """MindSpore's recovery (MS_ENABLE_RECOVERY=1): rank 1 kills itself after init() and is relaunched alone
    (after --restart-delay 1) with its MS_NODE_ID, rejoining the cluster as rank 1; then the scheduler is killed
    and relaunched as MS_NODE_ID=sched, the ranks running on; SIGTERM to dlaunch ends it."""
    run_dir = tmp_path / "runs" / "recover"
    proc = _launch(tmp_path, "recover", "--crash-once-rank", "1", "--sleep", "300",
                   flags=("--max-restarts", "2", "--restart-delay", "1"), env={"MS_ENABLE_RECOVERY": "1"})
    pids = run_dir / "pids.json"

    def scheduler_pid():
        return json.loads(pids.read_text()).get("scheduler", {}).get("pid") if pids.exists() else None

    ready = wait_until(lambda: _both_ready(run_dir) or proc.poll() is not None, timeout=FORMING, interval=0.2)
    killed = relaunched = None
    if ready and proc.poll() is None:
        killed = scheduler_pid()
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: scheduler_pid() not in (None, killed) or proc.poll() is not None, timeout=30)
        relaunched = scheduler_pid()
        proc.send_signal(signal.SIGTERM)
    return {**_finish(proc, "recover", run_dir), "ready": _both_ready(run_dir), "killed": killed,
            "relaunched": relaunched}


def _msrun_two_nodes(tmp_path: Path) -> dict:
    """Two msrun nodes of one rank each, as two hosts would start them: node 0 brings the scheduler."""
    port = free_port("127.0.0.1")

    def node(rank: int):
        return run_dlaunch("msrun", "--worker_num=2", "--local_worker_num=1", f"--node_rank={rank}",
                           f"--master_port={port}", "--log_dir=nodes", "--run-id=two", MS_RANK, "--allreduce",
                           cwd=tmp_path, timeout=FORMING, env=QUIET)

    results = side_by_side(node, 0, 1)
    run_dir = tmp_path / "nodes" / "two"
    left = processes_of_run("two")
    kill_run("two")
    return {"results": results, "run_dir": run_dir, "left": left}


def _operator_pods(tmp_path: Path) -> dict:
    """An AscendJob's MindSpore pods as ascend-operator starts them (tests/e2e/test_pods.py): a scheduler pod
    (MS_ROLE=MS_SCHED) and one worker pod of two ranks, each a dlaunch cluster with no flag, on its own address."""
    from tests.e2e.test_pods import clean_env, pod_env

    root = tmp_path / "operator"
    table = root / "hccl.json"
    root.mkdir()
    table.write_text(json.dumps({"status": "completed", "version": "1.0", "server_count": "1", "server_list": [
        {"server_id": "127.0.0.9", "host_ip": "127.0.0.9", "container_ip": "127.0.0.3", "device": [
            {"device_id": str(d), "device_ip": f"192.0.2.{10 + d}", "rank_id": str(d)} for d in range(2)]}]}))
    port = free_port("127.0.0.2")

    def pod(role: str):
        cwd = root / role
        cwd.mkdir()
        env = clean_env({**pod_env("ascendjob_mindspore", 0, master="127.0.0.2", port=str(port), nproc="2",
                                   world="2", ms_role=role), **QUIET, "POD_IP": "127.0.0.3",
                         "DLAUNCH_ASCEND_RANK_TABLE_DEFAULT": str(table)})
        return run_dlaunch("cluster", MS_RANK, "--", "--allreduce", cwd=cwd, timeout=FORMING, env=env), cwd

    return side_by_side(pod, "MS_SCHED", "MS_WORKER")


@pytest.fixture(scope="module")
def side_launches(tmp_path_factory):
    """Four 2-rank launches at once (three failures, two msrun nodes): one wait for MindSpore, not four."""
    tmp = tmp_path_factory.mktemp("ms-side")
    return side_by_side(lambda run: run(tmp), _rank_fails_after_init, _ctrl_c, _scheduler_killed, _msrun_two_nodes,
                        _recovered, _operator_pods)


def _nothing_left(outcome: dict) -> None:
    assert outcome["left"] == [], outcome["left"]
    assert len(outcome["rank_pids"]) == 2 and not any(pid_alive(pid) for pid in outcome["rank_pids"])


def test_a_rank_exiting_3_after_init_stops_the_job_with_exit_3(side_launches):
    outcome = side_launches[_rank_fails_after_init]
    assert outcome["code"] == 3, outcome["stderr"][-3000:]
    assert "rank 1 (host 127.0.0.1, device 1) exited with code 3" in outcome["stderr"]
    cause = summary(outcome["run_dir"])["root_cause"]
    assert cause["rank"] == 1 and cause["exit_code"] == 3
    _nothing_left(outcome)


def test_ctrl_c_stops_ranks_and_scheduler_with_exit_130(side_launches):
    outcome = side_launches[_ctrl_c]
    assert outcome["ready"], outcome["stderr"][-3000:]
    assert outcome["code"] == 130, outcome["stderr"][-3000:]
    done = summary(outcome["run_dir"])
    assert done["status"] == "interrupted" and done["interrupted_by"] == "SIGINT"
    assert done["scheduler"]["end"] is not None
    _nothing_left(outcome)


def test_the_scheduler_killed_mid_run_fails_the_job_naming_it(side_launches):
    outcome = side_launches[_scheduler_killed]
    assert outcome["ready"] and outcome["killed"], outcome["stderr"][-3000:]
    assert outcome["code"] == 128 + signal.SIGKILL, outcome["stderr"][-3000:]
    assert "the MindSpore scheduler (host 127.0.0.1) died of SIGKILL (exit 137)" in outcome["stderr"]
    assert "stopped all 2 rank(s)" in outcome["stderr"]
    cause = summary(outcome["run_dir"])["root_cause"]
    assert cause["role"] == "scheduler" and cause["pid"] == outcome["killed"]
    _nothing_left(outcome)
    # status and the report name the scheduler too, never "rank None (..., device None)"
    status = run_dlaunch("status", outcome["run_dir"], cwd=outcome["run_dir"].parent)
    assert "root cause: the MindSpore scheduler (host 127.0.0.1) died of SIGKILL" in status.stdout, status.stdout
    page = outcome["run_dir"].parent / "report.html"
    assert run_dlaunch("report", outcome["run_dir"], "-o", page, cwd=outcome["run_dir"].parent).returncode == 0
    assert "the MindSpore scheduler</strong>" in page.read_text() and "None" not in page.read_text()


def test_the_operators_scheduler_pod_serves_the_worker_pods_ranks_as_mindspores_scheduler(side_launches):
    """Issue 38, item 10: the scheduler pod ran its scheduler as "rank 0"; as MindSpore's scheduler (no rank, in
    scheduler/) it still forms the cluster of the worker pod's ranks, and ends with them."""
    pods = side_launches[_operator_pods]
    (sched, sched_dir), (worker, worker_dir) = pods["MS_SCHED"], pods["MS_WORKER"]
    assert worker.returncode == 0, worker.stderr[-3000:]
    assert sched.returncode == 0 and "the MindSpore scheduler exited 0 in " in sched.stderr, sched.stderr[-3000:]
    [run] = (sched_dir / "dlaunch_runs").glob("ascendjob-*")
    assert not list(run.glob("rank_[0-9]*")) and summary(run, "summary.scheduler.json")["scheduler"]["exit_code"] == 0
    [worker_run] = (worker_dir / "dlaunch_runs").glob("ascendjob-*")
    for rank in range(2):
        seen = ms_records(worker_run / f"rank_{rank:03d}")
        assert seen["init"]["ms_rank"] == rank and seen["init"]["ms_size"] == 2 and seen["allreduce"]["sum"] == 3


def test_msrun_over_two_nodes_runs_each_share_and_the_scheduler_with_node_0(side_launches):
    outcome = side_launches[_msrun_two_nodes]
    for node, result in outcome["results"].items():
        assert result.returncode == 0, (node, result.stderr[-3000:])
    run_dir = outcome["run_dir"]
    for rank in range(2):
        seen = ms_records(run_dir / f"rank_{rank:03d}")
        assert seen["init"]["ms_rank"] == rank and seen["init"]["ms_size"] == 2 and seen["allreduce"]["sum"] == 3
        assert summary(run_dir, f"summary.node{rank}.json")["ranks"][0]["rank"] == rank   # node K ran rank K
    assert "scheduler" in summary(run_dir, "summary.node0.json")
    assert "scheduler" not in summary(run_dir, "summary.node1.json")
    assert outcome["left"] == []


def test_with_mindspore_recovery_a_dead_worker_and_the_scheduler_are_relaunched_alone(side_launches):
    outcome = side_launches[_recovered]
    run_dir = outcome["run_dir"]
    assert outcome["ready"] and outcome["killed"], outcome["stderr"][-3000:]
    inits = {rank: [e for e in records(run_dir / f"rank_{rank:03d}", "ms.jsonl") if e["what"] == "init"]
             for rank in range(2)}
    assert [e["ms_rank"] for e in inits[1]] == [1, 1], "relaunched with its MS_NODE_ID: MindSpore's rank 1 again"
    assert len(inits[0]) == 1 and inits[1][0]["pid"] != inits[1][1]["pid"]   # rank 0 never restarted
    assert "rank 1 died of SIGKILL (exit 137); starting it again alone in 1 s (--restart-delay) " \
           "(--restart-policy rank: restart 1 of 2)" in outcome["stderr"], outcome["stderr"][-3000:]
    done = summary(run_dir)
    rank1 = next(r for r in done["ranks"] if r["rank"] == 1)
    assert rank1["start"] - rank1["restarts"][0]["end"] >= 1.0   # not before --restart-delay
    assert not next(r for r in done["ranks"] if r["rank"] == 0).get("restarts")
    assert outcome["relaunched"] not in (None, outcome["killed"]), outcome["stderr"][-3000:]
    assert "the MindSpore scheduler died of SIGKILL (exit 137); starting it again alone" in outcome["stderr"]
    assert done["scheduler"]["restarts"][0]["pid"] == outcome["killed"]
    scheduler_env = (run_dir / "scheduler" / "env.log").read_text()
    assert "MS_NODE_ID=sched\n" in scheduler_env and f"MS_RECOVERY_PATH={run_dir}/ms_recovery\n" in scheduler_env
    assert f"MS_RECOVERY_PATH={run_dir}/ms_recovery\n" in (run_dir / "rank_001" / "env.log").read_text()
    assert outcome["code"] == 143 and done["interrupted_by"] == "SIGTERM"
    _nothing_left(outcome)
