"""Fast tests of the pure layers, in-process, nothing started: options -> plan -> environment, the SSH plan,
the results model and the run-directory reader. End-to-end tests elsewhere start real processes."""

import dataclasses
import json
import os
import signal

import pytest

from launcher.cli.parsers import build_parser
from launcher.cli.request import request_from_args
from launcher.errors import UsageError
from launcher.execute.results import RankResult, how_it_ended, job_verdict
from launcher.plan.describe import describe
from launcher.plan.make import make_plan
from launcher.plan.settle import launch_options
from launcher.plan.share import launch_table
from launcher.rundir.paths import HEAD_SUMMARY, LAYOUT_VERSION
from launcher.rundir.read import load_run
from tests.launching import write_rank_table


def settled(tmp_path, *argv, environ=None):
    """Arguments as dlaunch settles them, run from ``tmp_path`` (the launch directory)."""
    script = tmp_path / "train.py"
    script.write_text("")
    parser = build_parser()
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args([argv[0], str(script), *argv[1:cut]])
    args.script_args = list(argv[cut + 1:])
    return request_from_args(args, cut < len(argv), environ=environ or {})


def plan_for(tmp_path, *argv, inherited=None):
    args = settled(tmp_path, *argv)
    table, index, _, view = launch_table(args, {})
    opts = launch_options(args, table, index, {}, view=view)
    return opts, make_plan(table, index, opts, str(tmp_path / "rt.json"), inherited or {})


# ------------------------------------------------------------------ options -> plan -> environment


def test_every_setting_reaches_the_plan_and_the_dry_run(in_tmp):
    opts, plan = plan_for(in_tmp, "run", "--ranks", "2", "--hang-timeout", "30", "--env", "API_TOKEN=s3cret",
                          "--max-restarts", "2", "--master-port", "29999", "--", "--password", "pw1",
                          "--wandb-api-key=k2", "DB_PASS=pw3", "--lr", "1")
    assert (opts.policy.hang_timeout, opts.fixed_port, opts.policy.prefix_host, opts.shared_run_dir) == \
        (30.0, True, False, False)
    assert plan.policy is opts.policy and plan.master_port == 29999 and plan.policy.max_restarts == 2
    assert plan.to_dict()["hang_timeout"] == 30.0   # plan.json keeps its flat keys
    written = plan.to_dict()   # exactly the dataclasses' fields: to_dict copies each object's __dict__
    assert set(written) == {f.name for f in dataclasses.fields(plan) if f.name != "policy"} | \
        {f.name for f in dataclasses.fields(plan.policy)}
    assert [list(spec) for spec in written["ranks"]] == [[f.name for f in dataclasses.fields(spec)]
                                                         for spec in plan.ranks]
    rank1 = plan.ranks[1]
    assert rank1.env["API_TOKEN"] == "s3cret" and rank1.argv[-2:] == ["--lr", "1"] and rank1.cwd == str(in_tmp)
    text = describe(plan)
    assert "stop after 30 s without a sign of life" in text and "API_TOKEN='****'" in text and "s3cret" not in text
    assert json.dumps(plan.to_dict()).count("s3cret") == 0
    assert rank1.argv[-6:] == ["--password", "pw1", "--wandb-api-key=k2", "DB_PASS=pw3", "--lr", "1"]  # as given
    for secret in ("pw1", "k2", "pw3"):   # nothing shown or written has them
        assert secret not in text and secret not in json.dumps(plan.to_dict())
    assert "--password '****' '--wandb-api-key=****' 'DB_PASS=****' --lr 1" in text


def test_the_rank_environment_is_torchruns_and_the_seeds(in_tmp):
    _, plan = plan_for(in_tmp, "run", "--ranks", "4", "--master-port", "29400")
    env = plan.ranks[3].env
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")} == {
        "RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "0",
        "ROLE_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", "TORCHELASTIC_RESTART_COUNT": "0"}
    assert (env["DEVICE_ID"], env["RANK_ID"], env["RANK_SIZE"]) == ("3", "3", "4")
    assert env["RANK_TABLE_FILE"] == str(in_tmp / "rt.json") and env["OMP_NUM_THREADS"] == "1"
    assert env["DLAUNCH_CKPT_DIR"] == os.path.join(plan.run_dir, "rank_003", "ckpt")


def test_env_cannot_override_the_rank_contract_and_user_threads_win(in_tmp):
    _, plan = plan_for(in_tmp, "run", "--ranks", "2", "--env", "RANK=7", inherited={"OMP_NUM_THREADS": "8"})
    assert plan.ranks[1].env["RANK"] == "1" and "OMP_NUM_THREADS" not in plan.ranks[1].env


def test_ms_scheduler_gives_msruns_contract_and_one_scheduler(in_tmp):
    _, plan = plan_for(in_tmp, "run", "--ranks", "2", "--ms-scheduler", "--master-port", "8118",
                       "--ms-topo-timeout", "90")
    worker = plan.ranks[1].env
    assert {k: worker[k] for k in ("MS_ROLE", "MS_NODE_ID", "MS_WORKER_NUM", "MS_SCHED_HOST", "MS_SCHED_PORT",
                                   "MS_TOPO_TIMEOUT")} == {"MS_ROLE": "MS_WORKER", "MS_NODE_ID": "1",
                                                           "MS_WORKER_NUM": "2", "MS_SCHED_HOST": "127.0.0.1",
                                                           "MS_SCHED_PORT": "8118", "MS_TOPO_TIMEOUT": "90"}
    assert "RANK_TABLE_FILE" not in worker
    sched = plan.scheduler.env
    assert sched["MS_ROLE"] == "MS_SCHED" and "MS_NODE_ID" not in sched and "DEVICE_ID" not in sched
    assert [p.role for p in plan.processes()] == ["scheduler", "rank", "rank"]


def test_cwd_rank_keeps_the_seeds_layout(in_tmp):
    _, plan = plan_for(in_tmp, "run", "--ranks", "2", "--cwd", "rank")
    assert [spec.cwd for spec in plan.ranks] == [spec.rank_dir for spec in plan.ranks]


def test_cluster_options_agree_across_hosts(in_tmp):
    table = str(write_rank_table(in_tmp / "rt.json", ("10.0.0.1", "10.0.0.2"), 2))
    args = settled(in_tmp, "cluster", "--rank-table", table, "--rank-start", "2", "--profile", "a2", "--run-id", "job")
    table, index, _, view = launch_table(args, {})
    opts = launch_options(args, table, index, {}, view=view)
    assert index == 1 and opts.master_addr == "10.0.0.1" and opts.master_port == 29500
    assert opts.host_files_suffix == ".10.0.0.2" and opts.policy.prefix_host and opts.shared_run_dir and opts.fixed_port


def test_run_refuses_a_table_of_several_hosts_naming_the_cluster_command(in_tmp):
    args = settled(in_tmp, "run", "--rank-table", str(write_rank_table(in_tmp / "rt16.json", ("10.0.0.1", "10.0.0.2"))))
    with pytest.raises(UsageError, match="dlaunch cluster .* --rank-start 0"):
        launch_table(args, {})


# ------------------------------------------------------------------ the SSH plan


def test_the_ssh_plan_keeps_values_off_the_command_line(in_tmp):
    from launcher.execute.ssh.plan import make_ssh_plan
    from launcher.plan.share import head_launch

    write_rank_table(in_tmp / "rt.json", devices_per_host=2)
    (in_tmp / "ssh_config").write_text("Host 127.0.0.3\n    Port 2222\n    User alice\n")
    args = settled(in_tmp, "cluster", "--rank-table", str(in_tmp / "rt.json"), "--ssh", "--ssh-config",
                   str(in_tmp / "ssh_config"), "--profile", "a2", "--hang-timeout", "20", "--env",
                   "DB_PASS=x$(reboot)", "--", "--label", "a b")
    plan = make_ssh_plan(args, *head_launch(args, {}), environ={"PATH": "/bin", "NCCL_DEBUG": "INFO"})
    first, second = plan.hosts
    assert (second.target.hostname, second.target.port, second.target.user) == ("127.0.0.3", 2222, "alice")
    assert first.ranks == (0, 1) and second.ranks == (2, 3)
    assert "DB_PASS" not in plan.remote_command and "a b" not in plan.remote_command
    assert second.request["env"]["DB_PASS"] == "x$(reboot)" and second.request["env"]["NCCL_DEBUG"] == "INFO"
    assert "PATH" not in second.request["env"] and second.request["script_args"] == ["--label", "a b"]
    argv = second.request["argv"]
    assert argv[argv.index("--server-id") + 1] == "127.0.0.3" and argv[argv.index("--hang-timeout") + 1] == "20.0"


# ------------------------------------------------------------------ results


def test_one_wording_for_how_a_rank_ended():
    def ended(**kw):
        return RankResult(rank=0, local_rank=0, device_id=0, server_id="h", log_file="", error_file="", **kw)
    assert how_it_ended(ended(returncode=3).to_dict()) == "exited with code 3"
    assert how_it_ended(ended(returncode=-signal.SIGKILL).to_dict()) == "died of SIGKILL (exit 137)"


def test_the_job_verdict_across_hosts():
    ok = {"status": "succeeded", "exit_code": 0}
    cause = {"rank": 3, "host": "b", "exit_code": 7}
    failed = {"status": "failed", "exit_code": 7, "root_cause": cause}
    assert job_verdict([ok, ok]) == {"status": "succeeded", "exit_code": 0, "root_causes": []}
    assert job_verdict([ok, failed]) == {"status": "failed", "exit_code": 7, "root_causes": [cause]}
    assert job_verdict([ok], missing_hosts=[{"host": "c"}])["status"] == "incomplete"
    head = {"status": "failed", "exit_code": 124, "root_cause": {**cause, "hung": True}}
    stopped = {"status": "interrupted", "exit_code": 143}
    assert job_verdict([stopped, failed], head) == {"status": "failed", "exit_code": 124,
                                                    "root_causes": [head["root_cause"]]}


def test_across_hosts_the_first_failure_is_the_root_cause_and_its_launcher_says_the_code():
    from launcher.execute.results import cluster_verdict

    hang = {"host": "b", "rank": 2, "end": 10.0, "hung": True, "launcher_exit_code": 124}
    lost = {"host": "a", "rank": None, "end": 12.0, "exit_code": 255, "reason": "connection lost"}
    assert cluster_verdict([lost, hang], None, [255, 124]) == {"status": "failed", "exit_code": 124,
                                                                "root_cause": hang}
    assert cluster_verdict([], signal.SIGINT, [130, 130])["exit_code"] == 130
    assert cluster_verdict([], None, [0, 3]) == {"status": "failed", "exit_code": 3, "root_cause": None}
    assert cluster_verdict([], None, [0, 0])["status"] == "succeeded"


def test_a_hang_under_ssh_is_one_root_cause_in_status_and_the_report(tmp_path):
    """summary.head.json beside the hosts' summaries used to be read as one more host: the cause twice."""
    from launcher.observe.metrics import collect
    from launcher.observe.processes import Observer
    from launcher.observe.report import page_context
    from launcher.observe.status import format_status

    run_dir = tmp_path / "job"
    cause = {"rank": 2, "host": "127.0.0.3", "device_id": 0, "hung": True, "exit_code": 124,
             "reason": "rank 2 showed no sign of life for 4 s", "log": str(run_dir / "rank_002" / "output.log")}
    for host, ranks, summary in (("127.0.0.2", (0, 1), {"status": "interrupted", "exit_code": 143}),
                                 ("127.0.0.3", (2, 3), {"status": "failed", "exit_code": 124, "root_cause": cause})):
        specs = [{"rank": r, "local_rank": r % 2, "server_id": host, "device_id": r % 2,
                  "rank_dir": str(run_dir / f"rank_{r:03d}")} for r in ranks]
        for spec in specs:
            os.makedirs(spec["rank_dir"])
            (run_dir / f"rank_{spec['rank']:03d}" / "output.log").write_text("step 1\n")
        (run_dir / f"plan.{host}.json").write_text(json.dumps({"layout": LAYOUT_VERSION, "run_id": "job",
                                                               "world_size": 4, "server_id": host, "ranks": specs}))
        entries = [{"rank": r, "host": host, "device_id": r % 2, "returncode": 124, "start": 1.0, "end": 2.0}
                   for r in ranks]
        (run_dir / f"summary.{host}.json").write_text(json.dumps({**summary, "ranks": entries, "world_size": 4,
                                                                  "started": 1.0, "ended": 2.0}))
    (run_dir / HEAD_SUMMARY).write_text(json.dumps({"status": "failed", "exit_code": 124, "root_cause": {
        **cause, "launcher_exit_code": 124}, "hosts": []}))
    run = load_run(str(run_dir))
    assert sorted(run.summaries) == [".127.0.0.2", ".127.0.0.3"] and run.head["exit_code"] == 124
    assert run.layout == LAYOUT_VERSION
    text = format_status(Observer(str(run_dir)).snapshot())
    assert text.count("rank 2 showed no sign of life") == 1, text
    assert "failed, exit code 124" in text
    page = page_context(run, collect(run))
    assert [c["rank"] for c in page["root_causes"]] == [2] and page["exit_code"] == 124


def test_runs_of_layout_1_stay_readable(tmp_path):
    """dlaunch 0.1's plans had no layout, peers or scheduler."""
    run_dir = tmp_path / "old"
    (run_dir / "rank_000").mkdir(parents=True)
    (run_dir / "plan.json").write_text(json.dumps({"run_id": "old", "world_size": 1, "server_id": "h", "ranks": [
        {"rank": 0, "local_rank": 0, "server_id": "h", "device_id": 0, "rank_dir": str(run_dir / "rank_000")}]}))
    (run_dir / "summary.json").write_text(json.dumps({"status": "succeeded", "exit_code": 0, "ranks": []}))
    run = load_run(str(run_dir))
    assert run.layout == 1 and [r.rank for r in run.ranks] == [0] and run.missing_hosts == [] and run.finished


