"""What ``status`` makes of a run whose launcher is gone (launcher/observe/processes.py): a run is over
without a summary only when no summary was written, even one written after the run was first read."""

import time

from launcher.execute.results import AttemptResult, RankResult, summarize
from launcher.observe.processes import Observer
from launcher.plan.make import make_plan
from launcher.plan.settle import launch_options
from launcher.plan.share import launch_table
from launcher.rundir.create import create as create_run_dir
from launcher.rundir.create import write_json
from launcher.table.model import dumps
from tests.unit.test_pure_layers import settled


def a_run_that_started(tmp_path):
    """A run directory as dlaunch creates it for 2 ranks, nothing of theirs running and no summary yet."""
    args = settled(tmp_path, "run", "--ranks", "2", "--run-id", "gone", "--master-port", "29412")
    table, index, _, view = launch_table(args, {})
    opts = launch_options(args, table, index, {}, view=view)
    plan = make_plan(table, index, opts, str(tmp_path / "rt.json"), {})
    create_run_dir(plan, dumps(table), shared=False)
    for spec in plan.ranks:   # the ranks ran and ended
        with open(spec.log_file, "w") as fh:
            fh.write("done\n")
    return plan


def the_summary(plan) -> dict:
    ranks = [RankResult(s.rank, s.local_rank, s.device_id, s.server_id, s.log_file, None, pid=1, start=1.0,
                        end=2.0, returncode=7 if s.rank == 1 else -15) for s in plan.ranks]
    return summarize(plan, [AttemptResult(attempt=0, ranks=ranks, root_cause=ranks[1])], time.time() - 5)


def test_a_summary_written_as_the_launcher_exits_is_the_verdict(in_tmp, monkeypatch):
    plan = a_run_that_started(in_tmp)

    def launcher_gone(observer):
        # the launcher writes its summary and exits between the run being read and its liveness being asked
        write_json(plan.host_file("summary", "json"), the_summary(plan))
        return False

    monkeypatch.setattr(Observer, "launcher_alive", launcher_gone)
    snap = Observer(plan.run_dir).snapshot()
    assert (snap["status"], snap["finished"], snap["exit_code"]) == ("failed", True, 7)
    assert {r["rank"]: r["state"] for r in snap["ranks"]} == {0: "died of SIGTERM", 1: "exited 7"}


def test_a_launcher_gone_without_a_summary_ends_the_run_without_one(in_tmp, monkeypatch):
    plan = a_run_that_started(in_tmp)
    monkeypatch.setattr(Observer, "launcher_alive", lambda observer: False)
    snap = Observer(plan.run_dir).snapshot()
    assert (snap["status"], snap["finished"], snap["exit_code"]) == \
        ("ended without a summary (launcher gone)", True, None)


def test_status_scores_the_ranks_step_lines_and_names_the_slowest(in_tmp, monkeypatch):
    from launcher.base.steps import UserPattern
    from launcher.observe.status import format_status

    plan = a_run_that_started(in_tmp)
    for spec in plan.ranks:
        ms = 140.0 if spec.rank == 1 else 100.0
        with open(spec.log_file, "w") as fh:
            fh.writelines(f" iteration {i:8d}/     100 | elapsed time per iteration (ms): {ms:.1f} |\n"
                          for i in range(1, 31))
    write_json(plan.host_file("summary", "json"), the_summary(plan))
    snap = Observer(plan.run_dir).snapshot()
    slowest = snap["steps"]["ranks"][0]
    assert (slowest["rank"], slowest["relative"], slowest["flagged"], slowest["last_step"]) == (1, 0.714, True, 30)
    assert "steps: slowest rank 1 (140.0 ms/step, relative 0.71, individual 1.00, flagged)" in format_status(snap)
    with open(plan.ranks[0].log_file, "w") as fh:
        fh.write("took 300 ms\n")
    mine = Observer(plan.run_dir, step_pattern=UserPattern.parse(r"took (?P<ms>\d+) ms")).snapshot()
    assert mine["steps"]["ranks"][0]["rank"] == 0 and mine["steps"]["ranks"][0]["relative"] == 0.467


def test_status_without_step_lines_has_no_steps(in_tmp, monkeypatch):
    plan = a_run_that_started(in_tmp)
    write_json(plan.host_file("summary", "json"), the_summary(plan))
    assert "steps" not in Observer(plan.run_dir).snapshot()
