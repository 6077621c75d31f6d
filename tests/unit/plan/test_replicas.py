"""TorchFT replica groups in the plan (``plan/replicas.py``): each group its own numbering, store and the one
lighthouse, as torchft's own launch shapes (torchft/torchx.py: one torchrun per group) give them."""

import json

import pytest

from launcher.cli import main
from launcher.contract import Role
from launcher.plan.replicas import ReplicaGroups, group_problem


def _plan(tmp_path, monkeypatch, capsys, *flags, env=None):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")   # the script must exist, a dry run too
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    rc = main(["run", "--output-dir", str(tmp_path / "runs"), "--dry-run", *flags, "train.py"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_each_group_is_numbered_from_zero_with_its_own_store_and_the_one_lighthouse(tmp_path, monkeypatch):
    groups = ReplicaGroups(count=2, size=2, store_addr="127.0.0.1", store_ports={0: 30001, 1: 30002},
                           lighthouse="http://127.0.0.1:30100", lighthouse_port=30100)
    env = {rank: groups.rank_environment(rank) for rank in range(4)}
    assert [env[r]["RANK"] for r in range(4)] == ["0", "1", "0", "1"]
    assert [env[r]["REPLICA_GROUP_ID"] for r in range(4)] == ["0", "0", "1", "1"]
    assert {env[r]["WORLD_SIZE"] for r in range(4)} == {"2"} and env[3]["NUM_REPLICA_GROUPS"] == "2"
    assert [env[r]["MASTER_PORT"] for r in range(4)] == ["30001", "30001", "30002", "30002"]
    assert {env[r]["TORCHFT_LIGHTHOUSE"] for r in range(4)} == {"http://127.0.0.1:30100"}
    assert env[0]["TORCHELASTIC_USE_AGENT_STORE"] == "True"   # the store is the group's own process
    assert groups.store_argv("/py", 1)[-4:] == ["127.0.0.1", "30002", "every", "1"]
    assert "--min_replicas" in groups.lighthouse_argv()
    assert _bind(groups.lighthouse_argv()) == "127.0.0.1:30100"   # where the ranks reach it, nowhere else
    over_ipv6 = ReplicaGroups(count=2, size=2, store_addr="::1", store_ports={0: 1, 1: 2},
                              lighthouse="http://[::1]:30100", lighthouse_port=30100)
    assert _bind(over_ipv6.lighthouse_argv()) == "[::1]:30100"   # an IPv6 master address: that one address


def _bind(argv):
    """The lighthouse's ``--bind`` value."""
    return argv[argv.index("--bind") + 1]


def _cluster_plan(tmp_path, server_id, *flags):
    """This host's plan of ``dlaunch cluster`` for a job of two hosts (127.0.0.2 and 127.0.0.3, 2 ranks each)."""
    from launcher.cli.parsers import build_parser
    from launcher.cli.request import request_from_args
    from launcher.plan.make import make_plan
    from launcher.plan.settle import launch_options
    from launcher.plan.share import launch_table
    from tests.launching import write_rank_table

    (tmp_path / "train.py").write_text("")
    table = write_rank_table(tmp_path / "table.json", devices_per_host=2)
    argv = ["cluster", "train.py", "--rank-table", str(table), "--server-id", server_id,
            "--profile", "structure", "--output-dir", str(tmp_path / "runs"), "--replica-groups", "2", *flags]
    args = request_from_args(build_parser().parse_args(argv), False, environ={})
    table, index, _, view = launch_table(args, {})
    opts = launch_options(args, table, index, {}, view=view)
    return make_plan(table, index, opts, str(tmp_path / "rt.json"), {})


def test_the_lighthouse_listens_on_the_master_address_only_across_hosts(in_tmp, monkeypatch):
    monkeypatch.delenv("TORCHFT_LIGHTHOUSE", raising=False)
    master = _cluster_plan(in_tmp, "127.0.0.2", "--master-addr", "10.9.8.7", "--master-port", "29500")
    lighthouse = next(spec for spec in master.services if spec.role == Role.LIGHTHOUSE)
    assert _bind(lighthouse.argv) == "10.9.8.7:29502"   # not 0.0.0.0: the master address, as the ranks are told
    assert {spec.env["TORCHFT_LIGHTHOUSE"] for spec in master.ranks} == {"http://10.9.8.7:29502"}
    other = _cluster_plan(in_tmp, "127.0.0.3", "--master-addr", "10.9.8.7", "--master-port", "29500")
    assert [spec.role for spec in other.services] == [Role.STORE]   # the master host alone starts it
    assert other.services[0].argv[-4:-1] == ["127.0.0.3", other.ranks[0].env["MASTER_PORT"], "every"]


def test_the_lighthouse_and_stores_of_one_host_listen_on_loopback(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHFT_LIGHTHOUSE", raising=False)
    from launcher.plan.make import Command, Options
    from launcher.plan.settle import replica_groups
    from launcher.table.build import single_server_table

    opts = Options(command=Command("train.py"), run_id="r1", output_dir=str(tmp_path), launch_dir=str(tmp_path),
                   python="/py", master_addr="127.0.0.1", master_port=29500)
    groups = replica_groups(2, single_server_table([0, 1], "127.0.0.1"), 0, opts, {})
    port = groups.lighthouse_port
    assert groups.lighthouse == f"http://127.0.0.1:{port}" and _bind(groups.lighthouse_argv()) == f"127.0.0.1:{port}"
    assert groups.store_argv("/py", 1)[-4:] == ["127.0.0.1", str(groups.store_ports[1]), "only", "1"]


@pytest.mark.parametrize(("count", "world", "servers", "problem"), [
    (3, 8, [8], "does not divide the job's 8 ranks"),
    (1, 16, [8, 8], "would span hosts"),
    (2, 8, [8], None),
    (4, 16, [8, 8], None),
])
def test_groups_must_be_equal_and_each_on_one_host(count, world, servers, problem):
    found = group_problem(count, world, servers)
    assert (found is None) if problem is None else (problem in found), found


def test_the_dry_run_shows_the_stores_the_lighthouse_and_each_ranks_group(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("TORCHFT_LIGHTHOUSE", raising=False)
    rc, out, err = _plan(tmp_path, monkeypatch, capsys, "--ranks", "4", "--replica-groups", "2")
    assert rc == 0, err
    assert "TorchFT lighthouse" in out and "store of TorchFT replica group 1" in out
    assert "REPLICA_GROUP_ID=1" in out and "NUM_REPLICA_GROUPS=2" in out
    assert "restarts allowed: 0" in out


def test_a_given_lighthouse_is_used_and_none_is_started(tmp_path, monkeypatch, capsys):
    rc, out, err = _plan(tmp_path, monkeypatch, capsys, "--ranks", "2", "--replica-groups", "2",
                         env={"TORCHFT_LIGHTHOUSE": "http://lh.example:29510"})
    assert rc == 0, err
    assert "TorchFT lighthouse" not in out and "TORCHFT_LIGHTHOUSE=http://lh.example:29510" in out


@pytest.mark.parametrize(("flags", "message"), [
    (["--ranks", "4", "--replica-groups", "3"], "does not divide the job's 4 ranks"),
    (["--ranks", "4", "--restart-policy", "group"], "--restart-policy group restarts a TorchFT replica group"),
])
def test_bad_groups_are_one_line_and_exit_2(tmp_path, monkeypatch, capsys, flags, message):
    rc, out, err = _plan(tmp_path, monkeypatch, capsys, *flags)
    assert rc == 2 and message in err and "Traceback" not in err, err


def test_plan_json_keeps_the_services_in_start_order(tmp_path):
    from launcher.plan.make import Command, Options, Policy, make_plan
    from launcher.table.build import single_server_table

    groups = ReplicaGroups(count=2, size=1, store_addr="127.0.0.1", store_ports={0: 30001, 1: 30002},
                           lighthouse="http://127.0.0.1:30100", lighthouse_port=30100)
    opts = Options(command=Command("train.py"), run_id="r1", output_dir=str(tmp_path), launch_dir=str(tmp_path),
                   python="/py", policy=Policy(restart_policy="group"), replicas=groups)
    plan = make_plan(single_server_table([0, 1], "127.0.0.1"), 0, opts, "rt.json", {})
    assert [s.role for s in plan.processes()] == [Role.LIGHTHOUSE, Role.STORE, Role.STORE, Role.RANK, Role.RANK]
    assert [s.replica_group for s in plan.ranks] == [0, 1]
    data = json.loads(json.dumps(plan.to_dict()))
    assert [s["role"] for s in data["services"]] == ["lighthouse", "store", "store"]
    assert data["restart_policy"] == "group"
