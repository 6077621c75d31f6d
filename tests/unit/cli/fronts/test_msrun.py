"""dlaunch msrun's flag mapping, without MindSpore: msrun's defaults, one node and several, refusals.

``translate`` is checked directly; what the plan makes of it (the env each rank and the scheduler get) through
``--dry-run`` of the real CLI.  The real launch with MindSpore is in test_ms_scheduler.py.
"""


import pytest

from launcher.cli import build_parser
from launcher.cli.fronts.msrun import translate
from launcher.errors import UsageError
from launcher.table.build import job_table


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
    assert done.job is None and not done.checked


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
    assert done.job is not None
    table = job_table(done.job.nodes, list(done.job.devices))
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






