"""``--fault-tolerant`` (issue 49, item 1): the options it settles, an explicit value winning, the config key, and
the hosts of ``cluster --ssh`` deciding what depends on them."""

from pathlib import Path

import pytest

from launcher.cli.parsers import build_parser
from launcher.cli.request import request_from_args
from launcher.plan.faults import fault_tolerance
from launcher.plan.settle import launch_options
from launcher.plan.share import launch_table

ROOT = Path(__file__).resolve().parents[3]


def request(*flags, environ=None, command="run"):
    return request_from_args(build_parser().parse_args([command, "train.py", *flags]), False,
                             environ={} if environ is None else environ)


def options(*flags, environ=None):
    """run's settled Options for ``flags``, as this host settles them (its PATH from ``environ``)."""
    environ = {"PATH": ""} if environ is None else environ
    args = request(*flags, "--ranks", "2", environ=environ)
    table, index, _, view = launch_table(args, environ)
    return launch_options(args, table, index, environ, view=view)


def switch(*flags, torch=True, tools=("npu-smi",), policy="job", environ=None):
    return fault_tolerance(request(*flags, environ=environ), restart_policy=policy, torch=torch, tools=list(tools),
                           hang_bound=1800.0)


def test_the_switch_settles_what_a_job_of_many_devices_should_have():
    found = switch("--fault-tolerant")
    assert dict(found.settled) == {"max_restarts": 10, "survivor_window": 10.0, "warm_restarts": "torch",
                                   "hang_learn": True, "health_gate": True, "memory_ckpt": True}
    assert found.line == ("--fault-tolerant: turned on --max-restarts 10 (exit 93 after 3 failed in a row without "
                          "a new checkpoint), --survivor-window 10 (for the ranks that ask for a notice; ends once "
                          "each saved or exited), --memory-ckpt (each rank's DLAUNCH_MEMORY_DIR and memory saves, "
                          "persisted by dlaunch), --warm-restarts torch, --hang-learn (at most 1800 s), --health-gate "
                          "(npu-smi)")
    assert switch().settled == {} and switch().line == ""   # off by default: a plain job keeps failing fast


def test_the_settled_options_reach_the_plan(in_tmp, monkeypatch):
    (in_tmp / "train.py").write_text("")
    monkeypatch.setattr("launcher.plan.faults.torch_importable", lambda: True)
    policy = options("--fault-tolerant").policy
    assert (policy.max_restarts, policy.restarts_without_progress, policy.survivor_window, policy.warm_restarts,
            policy.hang_learn, policy.hang_timeout, policy.health_gate) == (10, 3, 10.0, "torch", True, 1800.0, False)
    assert policy.memory_ckpt and policy.memory_root == "/dev/shm" and policy.memory_budget > 0   # auto: a number
    assert "left off --health-gate (no npu-smi, nvidia-smi or hccn_tool here)" in policy.fault_tolerance
    tools = in_tmp / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text("#!/bin/sh\n")
    (tools / "nvidia-smi").chmod(0o755)
    policy = options("--fault-tolerant", environ={"PATH": str(tools)}).policy
    assert policy.health_gate and "--health-gate (nvidia-smi)" in policy.fault_tolerance
    plain = options().policy
    assert (plain.max_restarts, plain.survivor_window, plain.warm_restarts, plain.hang_learn, plain.hang_timeout,
            plain.fault_tolerance) == (0, 0.0, None, False, None, "")


def test_an_explicit_value_wins_turning_one_off_included():
    found = switch("--fault-tolerant", "--max-restarts", "0", "--no-hang-learn", "--warm-restarts", "none",
                   "--no-health-gate", "--survivor-window", "60", "--hang-timeout", "600",
                   "--no-memory-ckpt")
    assert found.settled == {}
    assert found.line == ("--fault-tolerant: turned nothing on; as given: --max-restarts 0, --survivor-window 60, "
                          "--no-memory-ckpt, --warm-restarts none, --no-hang-learn, --hang-timeout 600, "
                          "--no-health-gate")
    # a DLAUNCH_* variable is as explicit as a flag
    found = switch("--fault-tolerant", environ={"DLAUNCH_MAX_RESTARTS": "2", "DLAUNCH_HEALTH_GATE": "0"})
    assert "max_restarts" not in found.settled and "health_gate" not in found.settled
    assert found.line.endswith("as given: --max-restarts 2, --no-health-gate")


def test_warm_restarts_none_is_a_cold_restart_in_the_plan(in_tmp):
    (in_tmp / "train.py").write_text("")
    assert options("--fault-tolerant", "--warm-restarts", "none").policy.warm_restarts is None
    assert options("--warm-restarts", "none").policy.warm_restarts is None


@pytest.mark.parametrize("flags, torch, policy, why", [
    ((), False, "job", "the ranks' Python cannot import torch"),
    (("--no-python",), True, "job", "the script is no Python program (--no-python)"),
    ((), True, "rank", "standbys serve --restart-policy job only, this job's is rank"),
])
def test_what_the_switch_leaves_off_it_says_why(flags, torch, policy, why):
    found = switch("--fault-tolerant", *flags, torch=torch, tools=(), policy=policy)
    assert "warm_restarts" not in found.settled and "health_gate" not in found.settled
    assert f"left off --warm-restarts ({why}), --health-gate (no npu-smi, nvidia-smi or hccn_tool here)" in found.line


def test_the_switch_is_a_config_key_and_the_example_config_uses_it(tmp_path):
    conf = tmp_path / "job.yaml"
    conf.write_text("fault-tolerant: true\nmax-restarts: 4\n")
    found = switch("--config", str(conf))
    assert found.settled["survivor_window"] == 10.0 and "max_restarts" not in found.settled
    assert "as given: --max-restarts 4" in found.line
    assert switch("--config", str(conf), "--no-fault-tolerant").line == ""   # the flag wins over the file
    example = request("--config", str(ROOT / "configs" / "fault_tolerant.yaml"))
    assert example.fault_tolerant and example.source("fault_tolerant").endswith("fault_tolerant.yaml:12")
    found = fault_tolerance(example, restart_policy="job", torch=True, tools=[], hang_bound=1800.0)
    assert found.line.endswith("as given: --survivor-window 60, --hang-timeout 900")


def test_cluster_hosts_get_the_switch_and_the_heads_values_not_its_findings(tmp_path, monkeypatch):
    # cluster --ssh: the head sends --fault-tolerant and what it settled; torch and the device tools are each
    # host's to find, so the head's findings (torch here, a tool on its PATH) are not sent as given values
    from launcher.plan.share import head_launch

    monkeypatch.setattr("launcher.plan.faults.torch_importable", lambda: True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    table_file = tmp_path / "rt.json"
    from tests.launching import write_rank_table

    write_rank_table(table_file)
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    args = request("--rank-table", str(table_file), "--fault-tolerant", "--no-hang-learn", "--ssh", command="cluster")
    words = head_launch(args, {"PATH": str(tmp_path)})[2].host_argv
    assert "--fault-tolerant" in words and "--no-hang-learn" in words
    # what the switch settles and nothing gave is each host's to settle: not sent, the switch is
    for flag in ("--max-restarts", "--survivor-window", "--restarts-without-progress", "--warm-restarts",
                 "--health-gate", "--no-health-gate", "--hang-learn", "--hang-timeout"):
        assert flag not in words, flag
    given = head_launch(request("--rank-table", str(table_file), "--fault-tolerant", "--max-restarts", "2", "--ssh",
                                command="cluster"), {})[2].host_argv
    assert given[given.index("--max-restarts") + 1] == "2"
    plain = head_launch(request("--rank-table", str(table_file), "--ssh", command="cluster"), {})[2].host_argv
    assert not [word for word in plain if word.startswith("--no-") or word == "--fault-tolerant"]
    assert plain[plain.index("--max-restarts") + 1] == "0"   # without the switch, every value is sent, as before


def test_the_memory_tier_reaches_every_rank_and_a_bad_root_is_one_line(in_tmp):
    from launcher.errors import UsageError
    from launcher.plan.make import make_plan

    (in_tmp / "train.py").write_text("")
    opts = options("--memory-ckpt", "--memory-root", str(in_tmp), "--memory-budget", "1G",
                   "--memory-persist-every", "3")
    assert (opts.policy.memory_ckpt, opts.policy.memory_budget, opts.policy.memory_persist_every) == \
        (True, 1 << 30, 3)
    args = request("--ranks", "2", environ={})
    table, index, _, _ = launch_table(args, {})
    plan = make_plan(table, index, opts, "table.json", {})
    assert [spec.env["DLAUNCH_MEMORY_SLOTS"].startswith(f"{in_tmp}/dlaunch-{opts.run_id}-") for spec in plan.ranks] \
        == [True, True]
    assert plan.ranks[1].env["DLAUNCH_MEMORY_PERSIST_EVERY"] == "3"
    assert "DLAUNCH_MEMORY_DIR" not in options().policy.__dict__ and not options().policy.memory_ckpt
    with pytest.raises(UsageError, match="--memory-root .*no such directory"):
        options("--memory-ckpt", "--memory-root", str(in_tmp / "nowhere"))
    assert options("--memory-ckpt", "--memory-root", str(in_tmp)).policy.memory_budget > 0   # auto: this host's
