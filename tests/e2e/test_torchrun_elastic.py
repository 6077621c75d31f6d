"""``--nnodes MIN:MAX``: elastic membership, as torchrun runs it.

PyTorch's own test_launch_elastic and test_launch_elastic_multiple_agents (test/distributed/launcher/
test_run.py, torch 2.x: c10d rendezvous, no --node-rank) with their command lines under ``dlaunch torchrun``
and their worker script (tests/clients/pytorch_launcher/test_script.py); then a job of two hosts that loses
one (it forms again with the one left, MIN 1) and a job that grows at a restart (the second host came after
it formed). Real dlaunch processes on loopback.
"""

import os
import subprocess
import time
import uuid

from tests.launching import ROOT, dlaunch_argv, dlaunch_env, free_port, kill_run, start_dlaunch, wait_until

SCRIPT = str(ROOT / "tests" / "clients" / "pytorch_launcher" / "test_script.py")
SENTINEL = {"TEST_SENTINEL_PARENT": "FOOBAR"}   # what PyTorch's setUp exports for its workers to print


def torchrun(tmp_path, touched, *flags):
    return subprocess.Popen(dlaunch_argv("torchrun", *flags, SCRIPT, f"--touch_file_dir={touched}"), cwd=tmp_path,
                            env=dlaunch_env(SENTINEL), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_pytorchs_test_launch_elastic_one_agent_of_at_most_two(tmp_path):
    touched = tmp_path / "touched"
    touched.mkdir()
    run_id = str(uuid.uuid4().int)
    agent = torchrun(tmp_path, touched, "--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                     f"--rdzv-endpoint=localhost:{free_port()}",
                     "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'", f"--rdzv-id={run_id}",
                     "--monitor-interval=1", "--start-method=spawn")
    _, stderr = agent.communicate(timeout=60)
    kill_run(run_id)
    assert agent.returncode == 0, stderr
    assert {str(i) for i in range(4)} == set(os.listdir(touched))   # world size 4: one node
    assert "the job formed with 1 host(s) (--nnodes 1:2)" in stderr


def test_pytorchs_test_launch_elastic_multiple_agents(tmp_path):
    touched = tmp_path / "touched"
    touched.mkdir()
    run_id = str(uuid.uuid4().int)
    line = ("--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{free_port()}",
            "--rdzv_conf=timeout=5", f"--rdzv-id={run_id}", "--monitor-interval=1", "--start-method=spawn")
    agents = [torchrun(tmp_path, touched, *line) for _ in range(2)]
    outputs = [agent.communicate(timeout=90) for agent in agents]
    kill_run(run_id)
    assert [agent.returncode for agent in agents] == [0, 0], [err for _, err in outputs]
    assert {str(i) for i in range(8)} == set(os.listdir(touched))   # both nodes: ranks 0-7
    said = "".join(err for _, err in outputs)
    assert "this host is node 0 (it listens for the job" in said and "this host is node 1" in said


RANK = """
echo "$TORCHELASTIC_RESTART_COUNT $RANK $WORLD_SIZE" >> "$DLAUNCH_RANK_DIR/seen.txt"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ -n "$FAIL_FIRST" ]; then sleep 2; exit 5; fi
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exec sleep 60; fi
sleep 0.5
"""


def node(tmp_path, index, port, run_id, env=None):
    cwd = tmp_path / f"node{index}"
    cwd.mkdir(exist_ok=True)
    return start_dlaunch("cluster", "--no-python", "/bin/sh", "--nnodes", "1:2", "--node-rank", index,
                         "--nproc-per-node", "1", "--master-addr", "127.0.0.2", "--master-port", port, "--run-id",
                         run_id, "--output-dir", tmp_path / "runs", "--grace-period", "1", "--host-timeout", "1",
                         "--join-timeout", "20", "--last-call", "0.5", "--max-restarts", "1", "--", "-c", RANK,
                         cwd=cwd, env=env)


def end(procs, run_id):
    """Whatever a test left running: its launchers, then every process of its run."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    kill_run(run_id)


def seen(tmp_path, run_id, rank):
    path = tmp_path / "runs" / run_id / f"rank_{rank:03d}" / "seen.txt"
    return path.read_text().split("\n")[:-1] if path.exists() else []


def test_a_job_that_loses_a_host_forms_again_with_the_one_left(tmp_path):
    port, run_id = free_port("127.0.0.2"), "elastic-shrink"
    nodes = [node(tmp_path, index, port, run_id) for index in (0, 1)]
    try:
        assert wait_until(lambda: seen(tmp_path, run_id, 1), timeout=30)
        nodes[1].kill()   # node 1's dlaunch SIGKILLed: lost
        _, stderr = nodes[0].communicate(timeout=60)
    finally:
        end(nodes, run_id)
    assert nodes[0].returncode == 0, stderr
    assert "host node1 was lost" in stderr and "the job runs on 1 host(s) (--nnodes 1:2): node0" in stderr
    assert seen(tmp_path, run_id, 0) == ["0 0 2", "1 0 1"]   # world size 2, then 1


def test_a_host_that_comes_after_the_job_formed_stands_by_and_joins_at_the_restart(tmp_path):
    port, run_id = free_port("127.0.0.2"), "elastic-grow"
    first = node(tmp_path, 0, port, run_id, env={"FAIL_FIRST": "1"})
    try:
        assert wait_until(lambda: seen(tmp_path, run_id, 0), timeout=30)   # formed alone, after the last call
        time.sleep(0.3)
        second = node(tmp_path, 1, port, run_id)
        _, err0 = first.communicate(timeout=60)
        _, err1 = second.communicate(timeout=60)
    finally:
        kill_run(run_id)
    assert (first.returncode, second.returncode) == (0, 0), err0 + err1
    assert "stands by" in err1 and "the job runs on 2 host(s) (--nnodes 1:2): node0, node1" in err0
    assert seen(tmp_path, run_id, 0) == ["0 0 1", "1 0 2"]   # alone, then with node 1 after rank 0 failed
    assert seen(tmp_path, run_id, 1) == ["1 1 2"]


def test_an_npu_job_over_a_rank_table_shrinks_by_whole_servers_its_table_rewritten(tmp_path):
    """--rank-table of three 8-NPU servers with --nnodes 2:3 (Atlas 910 rules): one host lost, the job forms
    again with two and every rank reads a table of 2 x 8 devices, ranks 0-15, that validate-ranktable passes."""
    import json

    from tests.launching import run_dlaunch, write_rank_table

    hosts = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
    table = write_rank_table(tmp_path / "rt24.json", hosts=hosts, devices_per_host=8)
    port, run_id = free_port(hosts[0]), "elastic-npu"
    procs = []
    for index in range(3):
        cwd = tmp_path / f"h{index}"
        cwd.mkdir()
        procs.append(start_dlaunch(
            "cluster", "--no-python", "/bin/sh", "--rank-table", table, "--nnodes", "2:3", "--rank-start", 8 * index,
            "--run-id", run_id, "--output-dir", tmp_path / "runs", "--master-port", port, "--grace-period", "1",
            "--host-timeout", "1", "--join-timeout", "20", "--max-restarts", "1", "--", "-c", RANK, cwd=cwd))
    try:
        assert wait_until(lambda: len(seen(tmp_path, run_id, 23)) == 1, timeout=30)
        procs[2].kill()
        _, stderr = procs[0].communicate(timeout=60)
    finally:
        end(procs, run_id)
    assert procs[0].returncode == 0, stderr
    assert seen(tmp_path, run_id, 15) == ["0 15 24", "1 15 16"]   # rank 15: world 24, then 16
    rewritten = tmp_path / "runs" / run_id / "rank_table.127.0.0.2.1.json"
    servers = json.loads(rewritten.read_text())["server_list"]
    assert [s["server_id"] for s in servers] == list(hosts[:2])
    assert [d["rank_id"] for s in servers for d in s["device"]] == [str(r) for r in range(16)]
    checked = run_dlaunch("validate-ranktable", rewritten, cwd=tmp_path)   # the default profile: Atlas 910
    assert checked.returncode == 0, checked.stdout + checked.stderr
