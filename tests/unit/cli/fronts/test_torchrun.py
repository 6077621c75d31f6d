"""``dlaunch torchrun``: a torchrun 2.13 command line with dlaunch in front (launcher/cli/fronts/torchrun.py).

Real torchrun and real gloo ranks where a launch is tested; parsing and refusals through main(argv) in-process.
"""

import argparse

import pytest

from launcher.cli import main
from launcher.cli.fronts.torchrun import translate, with_env_defaults
from launcher.errors import UsageError


def _translated(argv, environ=None, nproc=2):
    parser = argparse.ArgumentParser()
    from launcher.cli.fronts import torchrun

    sub = parser.add_subparsers(dest="command")
    torchrun.add_parser(sub)
    ns = with_env_defaults(parser.parse_args(["torchrun", *argv]), environ or {})
    return ns, translate(ns, nproc, list(range(nproc)))


def test_pet_variables_are_defaults_the_command_line_wins():
    environ = {"PET_NPROC_PER_NODE": "3", "PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.0.0.1",
               "PET_MASTER_PORT": "23456", "PET_MAX_RESTARTS": "2", "PET_STANDALONE": "0"}
    ns, done = _translated(["train.py", "--lr", "1"], environ, nproc=3)
    assert ns.nproc_per_node == "3"
    assert done.command == "cluster" and done.script_args == ["--lr", "1"]
    assert {"rank_start": 3, "master_addr": "10.0.0.1", "master_port": 23456, "max_restarts": 2}.items() <= \
        done.flags.items()
    assert done.job is not None and (done.job.nodes, done.job.devices) == (2, (0, 1, 2))
    ns, done = _translated(["--nnodes", "1", "--max_restarts=0", "train.py"], environ)
    assert done.command == "run" and done.flags["ranks"] == 2 and done.flags["max_restarts"] == 0


def test_pet_nproc_per_node_launches_that_many(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")   # the script must exist, a dry run too
    monkeypatch.setenv("PET_NPROC_PER_NODE", "3")
    assert main(["torchrun", "--log-dir", str(tmp_path), "--dry-run", "train.py"]) == 0
    assert "3 rank(s)" in capsys.readouterr().out
    assert main(["torchrun", "--nproc_per_node=2", "--log-dir", str(tmp_path), "--dry-run", "train.py"]) == 0
    assert "2 rank(s)" in capsys.readouterr().out


def test_rank_and_world_size_exported_in_a_shell_are_not_a_pod(tmp_path, monkeypatch, capsys):
    """torchrun ignores a shell's RANK/WORLD_SIZE/MASTER_ADDR (its workers get WORLD_SIZE 2); so does dlaunch:
    a pod needs what only its operator sets (launcher/host/pods.py; tests/data/operators.json)."""
    from launcher.cli.fronts.torchrun import with_pod_defaults
    from launcher.host.pods import detect

    shell = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
             "LOCAL_WORLD_SIZE": "2"}
    assert detect(shell) is None
    ns, _ = _translated(["--nproc-per-node", "2", "train.py"])
    assert with_pod_defaults(ns, shell) == []
    assert detect({**shell, "KUBERNETES_SERVICE_HOST": "10.96.0.1"}).nnodes == 2       # a PyTorchJob pod
    assert detect({**shell, "MINDX_TASK_ID": "uid"}).operator.startswith("Ascend")      # an AscendJob pod
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    for name, value in shell.items():
        monkeypatch.setenv(name, value)
    assert main(["torchrun", "--nproc-per-node", "2", "--log-dir", str(tmp_path), "--dry-run", "train.py"]) == 0
    out = capsys.readouterr().out
    assert "2 rank(s)" in out and "pod" not in out.lower()


def test_endpoint_module_and_console_mapping():
    _, done = _translated(["--nnodes", "2:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3:29400",
                           "--node-rank", "0", "--local-ranks-filter", "1", "--rdzv-id", "job7", "-m", "pkg.train"])
    assert done.script == "pkg.train" and done.flags["module"]
    assert {"master_addr": "10.1.2.3", "master_port": 29400, "rank_start": 0, "console": "1",
            "run_id": "job7"}.items() <= done.flags.items()
    _, done = _translated(["--standalone", "-r", "3", "--no-python", "./train.sh"])
    assert (done.script, done.flags["no_python"], done.flags["console"]) == ("./train.sh", True, "none")
    assert "master_port" not in done.flags   # a free port, as torchrun --standalone


def test_elastic_nnodes_is_a_cluster_job_of_max_nodes_forming_with_min_and_node_ranks_given_on_arrival():
    """PyTorch's own test_launch_elastic line: node ranks given on arrival, its --rdzv-conf quotes and all."""
    _, done = _translated(["--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                           "--rdzv-endpoint=localhost:29400",
                           "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'", "--rdzv-id=7", "t.py"])
    assert done.command == "cluster" and (done.job.nodes, done.job.min_nodes) == (2, 1)
    assert "rank_start" not in done.flags and done.flags["last_call"] == "1" and done.flags["join_timeout"] == "5"
    assert any("timeout=5" in note and "no effect" in note for note in done.notes)
    _, fixed = _translated(["--nnodes=2:2", "--node-rank=1", "--rdzv-endpoint=h:1", "t.py"])
    assert fixed.job.min_nodes is None and fixed.flags["rank_start"] == 2   # node 1 of 2-rank nodes


def test_lines_torchrun_2_13_runs_are_taken():
    """torchrun runs each of these (checked against torch 2.13): its own --logs-specs value, a filter naming
    a local rank the node lacks (nothing of it shown), a run id with ':' and --master-port 0 on one node."""
    _, done = _translated(["--logs-specs", "default", "--local-ranks-filter", "5", "t.py"])
    assert done.command == "run" and done.flags["console"] == "none"
    assert any("5 show nothing" in note for note in done.notes)
    _, done = _translated(["--local-ranks-filter", "1,5", "t.py"])
    assert done.flags["console"] == "1"
    _, done = _translated(["--rdzv-id", "job:7", "--master-port", "0", "t.py"])
    assert done.flags["run_id"] == "job_7" and "master_port" not in done.flags   # a free port
    with pytest.raises(UsageError, match="--master-port 0 picks a free port"):
        _translated(["--nnodes", "2", "--node-rank", "0", "--master-port", "0", "t.py"])
    with pytest.raises(UsageError, match="--logs-specs is not supported"):
        _translated(["--logs-specs", "mine", "t.py"])


@pytest.mark.parametrize("argv, says", [
    (["--nnodes", "4:1", "t.py"], "MIN is more than MAX"),
    (["--rdzv-backend", "etcd", "--rdzv-endpoint", "h:2379", "t.py"], "--rdzv-backend etcd"),
    (["--nnodes", "2", "t.py"], "needs --node-rank"),
    (["--standalone", "--nnodes", "2", "t.py"], "--standalone runs one node"),
    (["--role", "trainer", "t.py"], "--role trainer"),
    (["--nnodes", "2", "--node-rank", "2", "t.py"], "--node-rank"),
    (["--nproc-per-node", "many", "t.py"], "--nproc-per-node"),
    (["--virtual-local-rank", "t.py"], "--virtual-local-rank"),
    (["--shutdown-timeout", "x", "t.py"], "expected seconds, not 'x'"),   # was a traceback, exit 1
])
def test_what_dlaunch_cannot_honour_is_one_line_and_exit_2(argv, says, capsys):
    assert main(["torchrun", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_malformed_pet_flag_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("PET_STANDALONE", "yes")
    assert main(["torchrun", "t.py"]) == 2
    assert "PET_STANDALONE" in capsys.readouterr().err


@pytest.mark.parametrize("argv, instead", [
    (["run", "--nproc-per-node", "4", "x.py"], "--ranks N"),
    (["run", "x.py", "--nproc_per_node=4"], "--ranks N"),
    (["run", "--nnodes", "2", "x.py"], "dlaunch cluster --nnodes N --node-rank K"),
    (["run", "x.py", "--log-dir", "logs"], "--output-dir DIR"),
    (["run", "x.py", "--rdzv-endpoint", "h:1"], "dlaunch torchrun"),
    (["cluster", "x.py", "--local-ranks-filter", "0"], "--console RANKS"),
])
def test_torchrun_flags_under_run_get_a_hint(argv, instead, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "torchrun's flag" in err and instead in err and "dlaunch torchrun" in err


def test_redirected_output_that_is_also_teed_is_on_the_console():
    """torchrun -r 3 -t 3 writes every worker's output to files and tees it to the console (PyTorch's
    test_capture_logs_using_default_logs_specs); -r 3 alone keeps it off the console (issue 38, item 15)."""
    _, teed = _translated(["-r", "3", "-t", "3", "t.py"])
    _, redirected = _translated(["-r", "3", "t.py"])
    assert (teed.flags["console"], redirected.flags["console"]) == ("all", "none")
