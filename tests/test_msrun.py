"""dlaunch msrun's flag mapping, without MindSpore: msrun's defaults, one node and several, refusals.

``translate`` is checked directly; what the plan makes of it (the env each rank and the scheduler get) through
``--dry-run`` of the real CLI.  The real launch with MindSpore is in test_ms_scheduler.py.
"""

import re

import pytest

from launcher.cli import build_parser
from launcher.cli.msrun import translate
from launcher.errors import UsageError
from launcher.table.model import loads


def msrun(*argv):
    return build_parser().parse_args(["msrun", *map(str, argv)])


def test_msrun_defaults_are_msrun_2_10s():
    ns = msrun("train.py")
    assert (ns.worker_num, ns.local_worker_num, ns.master_addr, ns.master_port, ns.node_rank, ns.log_dir,
            ns.join, ns.cluster_time_out, ns.rank_table_file, ns.tail_worker_log) == \
        (8, 8, "127.0.0.1", 8118, -1, "", False, 600, "", "-1")
    done = translate(ns, "127.0.0.1", list(range(8)), environ={})
    assert (done.command, done.script) == ("run", "train.py")
    assert done.flags == {"ms_scheduler": True, "profile": "structure", "master_addr": "127.0.0.1",
                          "master_port": 8118, "console": "all", "ms_topo_timeout": 600, "ranks": 8}
    assert done.rank_table_text is None and not done.checked


def test_one_node_line_maps_every_flag_and_keeps_script_arguments_apart():
    ns = msrun("--worker_num=4", "--local_worker_num", "4", "--master_port=9123", "--log_dir", "msrun_log",
               "--join=True", "--cluster_time_out", "120", "--tail_worker_log", "0,2", "--node_rank", "0",
               "train.py", "--worker_num", "2", "--lr", "0.1")
    done = translate(ns, "127.0.0.1", [0, 1, 2, 3], environ={})
    flags = done.flags
    assert (done.command, done.script) == ("run", "train.py") and flags["ms_scheduler"]
    assert flags["ranks"] == 4 and flags["master_port"] == 9123 and flags["output_dir"] == "msrun_log"
    assert flags["ms_topo_timeout"] == 120 and flags["console"] == "0,2"
    assert done.script_args == ["--worker_num", "2", "--lr", "0.1"]   # after the script: the script's, as msrun
    assert not done.notes


@pytest.mark.parametrize("task, script, what, rest", [
    (["python", "train.py", "--a"], "train.py", {}, ["--a"]),
    (["python3", "-m", "pkg.train", "--a"], "pkg.train", {"module": True}, ["--a"]),
    (["python", "-u", "train.py"], "python", {"no_python": True}, ["-u", "train.py"]),
    (["pytest", "-x", "tests"], "pytest", {"no_python": True}, ["-x", "tests"]),
    (["train.py", "python"], "train.py", {}, ["python"]),
])
def test_task_script_as_msrun_runs_it(task, script, what, rest):
    done = translate(msrun("--worker_num=2", "--local_worker_num=2", *task), "127.0.0.1", [0, 1], environ={})
    assert done.script == script and done.script_args == rest
    assert {k: done.flags.get(k) for k in ("module", "no_python") if k in done.flags} == what


def test_node_rank_over_several_nodes_is_cluster_with_this_nodes_share():
    ns = msrun("--worker_num=8", "--local_worker_num=4", "--node_rank=1", "--master_addr=10.1.2.3", "train.py")
    done = translate(ns, "10.1.2.3", [4, 5, 6, 7], environ={})
    assert done.command == "cluster"
    assert done.flags["rank_start"] == 4 and done.flags["master_addr"] == "10.1.2.3"
    table = loads(done.rank_table_text)
    assert [s.server_id for s in table.servers] == ["node0", "node1"]
    assert [[(d.device, d.rank) for d in s.devices] for s in table.servers] == \
        [[(4, 0), (5, 1), (6, 2), (7, 3)], [(4, 4), (5, 5), (6, 6), (7, 7)]]


def test_negative_cluster_time_out_waits_forever_and_one_node_ignores_node_rank():
    done = translate(msrun("--worker_num=2", "--local_worker_num=2", "--node_rank=3", "--cluster_time_out=-1",
                           "train.py"), "127.0.0.1", [0, 1], environ={})
    assert "ms_topo_timeout" not in done.flags and done.checked == {"ms_topo_timeout": -1.0}
    assert done.notes == ["all 2 workers run on this node, so --node_rank 3 is ignored (as msrun does)"]


@pytest.mark.parametrize("flags, says", [
    (["--bind_core=True"], "--bind_core is not supported"),
    (["--bind_numa", '{"device0": ["0"]}'], "--bind_numa is not supported"),
    (["--sim_level=1"], "simulation) is not supported"),
    (["--sim_rank_id=0"], "simulation) is not supported"),
    (["--worker_log_name=w_{ip}"], "--worker_log_name is not supported"),
    (["--cluster_time_out=0"], "no time to form"),
    (["--worker_num=2", "--local_worker_num=4"], "more than --worker_num 2"),
    (["--worker_num=8", "--local_worker_num=4"], "needs --node_rank"),
    (["--worker_num=6", "--local_worker_num=4", "--node_rank=1"], "not a multiple of --local_worker_num 4"),
    (["--worker_num=8", "--local_worker_num=4", "--node_rank=2"], "--node_rank 2 is beyond the 2 node(s)"),
    (["--tail_worker_log=a"], "--tail_worker_log 'a'"),
])
def test_what_dlaunch_cannot_honour_is_refused(flags, says):
    with pytest.raises(UsageError) as caught:
        translate(msrun(*flags, "train.py"), "127.0.0.1", list(range(8)), environ={})
    assert says in str(caught.value)


def test_simulation_from_the_environment_is_refused_too():
    with pytest.raises(UsageError, match="MS_SIMULATION_LEVEL"):
        translate(msrun("train.py"), "127.0.0.1", list(range(8)), environ={"MS_SIMULATION_LEVEL": "1"})


def test_refusals_on_the_command_line_are_one_line_exit_2(run_cli, tmp_path):
    for argv in (["--bind_core=True", "train.py"], ["--worker_num=x", "train.py"], ["--join=maybe", "train.py"],
                 ["--worker_num=8", "--local_worker_num=4", "--node_rank=0", "--master_addr=192.0.2.1",
                  "train.py"]):
        result = run_cli("msrun", *argv, cwd=tmp_path)
        assert result.returncode == 2, (argv, result.stderr)
        assert "Traceback" not in result.stderr and "error:" in result.stderr
    assert "node 0 runs MindSpore's scheduler" in result.stderr   # the last: the master is not this host
    assert not list(tmp_path.iterdir())   # nothing was written


def test_dry_run_shows_the_env_of_ranks_and_scheduler(run_cli, tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "rt.json").write_text("{}")
    result = run_cli("msrun", "--worker_num=2", "--local_worker_num=2", "--master_port=9124",
                     "--cluster_time_out=-1", "--rank_table_file=rt.json", "--log_dir=-logs", "--dry-run",
                     "train.py", "--epochs", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    blocks = re.split(r"\nrank \d+ \(", result.stdout)
    scheduler, ranks = blocks[0].split("MindSpore scheduler", 1)[1], blocks[1:]
    assert len(ranks) == 2
    assert "MS_ROLE=MS_SCHED" in scheduler and "MS_TOPO_TIMEOUT=-1\n" in scheduler
    assert "MS_NODE_ID" not in scheduler and "RANK_ID=0" in scheduler
    for rank, block in enumerate(ranks):
        for line in ("MS_ROLE=MS_WORKER", f"MS_NODE_ID={rank}", f"RANK_ID={rank}", "MS_WORKER_NUM=2",
                     "MS_SCHED_HOST=127.0.0.1", "MS_SCHED_PORT=9124", "MS_TOPO_TIMEOUT=-1", f"DEVICE_ID={rank}",
                     f"RANK_TABLE_FILE={tmp_path / 'rt.json'}"):
            # a rank after rank 0 shows what differs from rank 0's environment (issue 20: compact --dry-run)
            assert f"    {line}\n" in block or ("as rank 0's" in block and f"    {line}\n" in ranks[0]), (line, block)
        assert "train.py --epochs 1" in block
    assert f"run directory: {tmp_path / '-logs'}/" in result.stdout   # a value with a leading "-" stays a value
    assert not (tmp_path / "-logs").exists()   # a dry run writes nothing


def test_dry_run_of_two_nodes_starts_the_scheduler_with_node_0_only(run_cli, tmp_path):
    (tmp_path / "train.py").write_text("")
    shown = {}
    for node in (0, 1):
        result = run_cli("msrun", "--worker_num=4", "--local_worker_num=2", f"--node_rank={node}",
                         "--master_port=9125", "--run-id=job", "--dry-run", "train.py", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        shown[node] = result.stdout
    assert "MindSpore scheduler" in shown[0] and "MindSpore scheduler" not in shown[1]
    assert "rank 0 (local 0" in shown[0] and "rank 1 (local 1" in shown[0]
    assert "rank 2 (local 0" in shown[1] and "rank 3 (local 1" in shown[1]
    assert "    MS_NODE_ID=3\n" in shown[1] and "    MS_WORKER_NUM=4\n" in shown[1]
    assert shown[0].startswith("run job: ") and shown[1].startswith("run job: ")   # one run id for the job
