"""``dlaunch torchrun``: a torchrun 2.13 command line with dlaunch in front (launcher/cli/fronts/torchrun.py).

Real torchrun and real gloo ranks where a launch is tested; parsing and refusals through main(argv) in-process.
"""

import json
import os
import subprocess
import sys

from launcher.contract import ExitCode
from tests.e2e.test_torchrun_parity import DELIBERATE, DUMP, OWN_VALUES, dumped
from tests.launching import RANK_PROGRAM, ROOT, dlaunch_argv, dlaunch_env, free_port, latest_run

CLEAN = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                                                         "PYTHONUNBUFFERED", "PYTHONPATH")
         and not k.startswith("PET_")}


def test_standalone_worker_environment_matches_real_torchrun(tmp_path):
    """The same torchrun line, once under torchrun and once with dlaunch in front: the same per-rank variables."""
    line = ["--standalone", "--nproc-per-node", "2", DUMP]
    theirs_dir, mine_dir = tmp_path / "torchrun", tmp_path / "dlaunch"
    theirs_dir.mkdir()
    mine_dir.mkdir()
    torchrun = subprocess.run([sys.executable, "-m", "torch.distributed.run", *line], cwd=theirs_dir, env=CLEAN,
                              capture_output=True, text=True, timeout=120)
    assert torchrun.returncode == 0, torchrun.stderr
    ours = subprocess.run(dlaunch_argv("torchrun", "--log-dir", tmp_path / "runs", *line), cwd=mine_dir,
                          env={**CLEAN, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr
    assert (tmp_path / "runs" / "latest").exists()   # --log-dir is where the run directory went
    theirs, mine = dumped(theirs_dir), dumped(mine_dir)
    for rank in range(2):
        added = {k: v for k, v in theirs[rank].items() if CLEAN.get(k) != v}
        assert {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_NAME"} <= set(added)
        for name, value in added.items():
            assert name in mine[rank], f"torchrun sets {name}={value!r}; dlaunch torchrun does not"
            if name in OWN_VALUES:
                continue
            expected = DELIBERATE.get(name, (value, value))
            assert (value, mine[rank][name]) == expected, f"{name}: torchrun {value!r}, dlaunch {mine[rank][name]!r}"


def _node(tmp_path, node_rank, master_port, *script_args, spelling="dash", master="127.0.0.1"):
    flags = (["--nnodes", "2", "--node-rank", str(node_rank), "--nproc-per-node", "1", "--master-addr",
              master, "--master-port", str(master_port)] if spelling == "dash" else
             ["--nnodes=2", f"--node_rank={node_rank}", "--nproc_per_node=1", f"--master_addr={master}",
              f"--master_port={master_port}"])
    out = tmp_path / f"node{node_rank}"
    return out, subprocess.Popen(dlaunch_argv("torchrun", *flags, "--log-dir", out, RANK_PROGRAM, *script_args),
                                 cwd=tmp_path, env=dlaunch_env({"PYTHONPATH": str(ROOT)}),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_nodes_all_reduce_together(tmp_path):
    """Two torchrun lines, node ranks 0 and 1, one rank each: a real gloo all_reduce over both, and each rank
    sees torchrun's variables for its node (GROUP_RANK = node rank)."""
    master_port = free_port("127.0.0.1")
    nodes = [_node(tmp_path, 0, master_port, "--allreduce", "--dump-env"),
             _node(tmp_path, 1, master_port, "--allreduce", "--dump-env", spelling="underscore")]
    for _, proc in nodes:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    for node_rank, (out, _) in enumerate(nodes):
        rank_dir = latest_run(out) / f"rank_{node_rank:03d}"
        lines = (rank_dir / "allreduce.jsonl").read_text().splitlines()
        assert json.loads(lines[-1]) == {"sum": 3.0, "world": 2}
        env = json.loads((rank_dir / "env.json").read_text())
        assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR",
                                    "MASTER_PORT")} == {
            "RANK": str(node_rank), "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": str(node_rank), "GROUP_WORLD_SIZE": "2", "ROLE_RANK": str(node_rank),
            "ROLE_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port)}


def test_a_failing_rank_gives_its_exit_code(tmp_path):
    master_port = free_port("127.0.0.1")
    # rank 0 sleeps, as a rank waiting in its first collective would: on a loaded machine node 1 may start
    # seconds after node 0, and a rank that ended alone before its peer host joined is a job of its own
    nodes = [_node(tmp_path, k, master_port, "--fail-rank", "1", "--code", "7", "--sleep", "60") for k in (0, 1)]
    codes = []
    for _, proc in nodes:
        proc.communicate(timeout=120)
        codes.append(proc.returncode)
    assert codes[1] == 7
    assert codes[0] == ExitCode.STOPPED_BY_PEER   # node 0's rank was stopped because rank 1 failed on node 1
















def test_two_nodes_meet_on_an_ipv6_master_address(tmp_path):
    """Once both nodes stopped with 69 after --join-timeout on ``--master-addr ::1`` (the job link spoke IPv4
    only) while torchrun ran the same job. Without DLAUNCH_JOB_SECRET each node says first that the link is
    open to anyone who can reach it."""
    master_port = free_port("::1")
    nodes = [_node(tmp_path, rank, master_port, "--allreduce", "--dump-env", master="::1") for rank in (0, 1)]
    for node_rank, (out, proc) in enumerate(nodes):
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert f"warning: the job's link on [::1]:{master_port + 1} is open to anyone" in err.splitlines()[0], err
        [summary] = latest_run(out).glob("summary*.json")   # the job's verdict: the link worked over IPv6
        assert json.loads(summary.read_text())["job"]["status"] == "succeeded"
        rank_dir = latest_run(out) / f"rank_{node_rank:03d}"
        assert json.loads((rank_dir / "allreduce.jsonl").read_text().splitlines()[-1]) == {"sum": 3.0, "world": 2}
        assert json.loads((rank_dir / "env.json").read_text())["MASTER_ADDR"] == "::1"


def test_log_line_prefix_template_is_torchruns(tmp_path):
    """TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: the console lines of each rank carry the prefix real torchrun gives
    them (-t 3, where torchrun's console shows its workers' output through the template)."""
    (tmp_path / "hello.py").write_text("import os\nprint('hello from', os.environ['RANK'])\n")
    env = {**CLEAN, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "<${role_name}|${rank}|${local_rank}> "}
    torchrun = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                               "2", "-t", "3", "--log-dir", tmp_path / "torch", "hello.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
    assert torchrun.returncode == 0, torchrun.stderr
    ours = subprocess.run(dlaunch_argv("torchrun", "--standalone", "--nproc-per-node", "2", "--log-dir",
                                       tmp_path / "runs", "hello.py"), cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr

    def shown(text):
        return sorted(line for line in text.splitlines() if line.startswith("<"))
    expected = ["<default|0|0> hello from 0", "<default|1|1> hello from 1"]
    assert shown(torchrun.stdout) == expected and shown(ours.stdout) == expected
