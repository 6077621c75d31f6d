"""The summary's newest complete checkpoint: what --resume would pick, found without listing every rank's
directory when rank 0's holds none (a complete step is one rank 0 saved)."""

import os
import types

from launcher.checkpoint import names as ckptnames
from launcher.execute import results


def make_run(tmp_path, world_size, saved):
    """A run directory whose ranks' ckpt/ hold the (epoch, step) files ``saved[rank]`` names."""
    for rank in range(world_size):
        ckpt = tmp_path / f"rank_{rank:03d}" / "ckpt"
        ckpt.mkdir(parents=True)
        for epoch, step in saved.get(rank, ()):
            (ckpt / ckptnames.dlaunch_name("ckpt", epoch, step)).write_bytes(b"x")
    return types.SimpleNamespace(run_dir=str(tmp_path), world_size=world_size)


def count_listings(monkeypatch):
    listed = []
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path=".": listed.append(path) or real(path))
    return listed


def test_the_newest_step_every_rank_saved(tmp_path):
    plan = make_run(tmp_path, 4, {0: [(1, 10), (2, 20)], 1: [(1, 10), (2, 20)], 2: [(1, 10), (2, 20)],
                                  3: [(1, 10)]})
    assert results._newest_complete_checkpoint(plan) == "ckpt-1_10"   # rank 3 has no 2_20: incomplete


def test_rank_0_without_checkpoints_ends_the_search_after_one_listing(tmp_path, monkeypatch):
    plan = make_run(tmp_path, 64, {rank: [(1, 10)] for rank in range(1, 64)})   # every rank but 0 saved
    listed = count_listings(monkeypatch)
    assert results._newest_complete_checkpoint(plan) is None
    assert listed == [os.path.join(plan.run_dir, "rank_000", "ckpt")]


def test_rank_0_with_checkpoints_still_needs_every_rank(tmp_path, monkeypatch):
    plan = make_run(tmp_path, 8, {rank: [(1, 10)] for rank in range(7)})   # rank 7 saved nothing
    listed = count_listings(monkeypatch)
    assert results._newest_complete_checkpoint(plan) is None
    assert len(listed) > 8   # rank 0's, then every rank's: the early end applies only to an empty rank 0


def scheduler_pod_summary(tmp_path, returncode=0, interrupted_by=None) -> dict:
    """The summary of an operator's scheduler pod (its plan: MindSpore's scheduler alone) whose scheduler ended
    with ``returncode``."""
    from launcher.contract import Role
    from tests.unit.plan.test_make import scheduler_pod_plan

    plan = scheduler_pod_plan(tmp_path)
    spec = plan.scheduler
    sched = results.RankResult(spec.rank, spec.local_rank, spec.device_id, spec.server_id, spec.log_file,
                               spec.error_file, pid=4242, start=1.0, end=2.0, returncode=returncode,
                               role=Role.SCHEDULER)
    failed = returncode != 0 and interrupted_by is None
    attempt = results.AttemptResult(attempt=0, ranks=[], scheduler=sched, root_cause=sched if failed else None,
                                    interrupted_by=interrupted_by)
    return results.summarize(plan, [attempt], started=0.0)


def test_the_scheduler_pods_closing_line_names_the_scheduler_not_a_rank(in_tmp):
    summary = scheduler_pod_summary(in_tmp)
    assert summary["ranks"] == [] and summary["scheduler"]["exit_code"] == 0 and summary["exit_code"] == 0
    [line] = results.closing_lines(summary, "summary.json")
    assert line.startswith("the MindSpore scheduler exited 0 in ") and "rank" not in line


def test_the_scheduler_pods_exit_code_is_its_schedulers(in_tmp):
    summary = scheduler_pod_summary(in_tmp, returncode=3)
    assert (summary["status"], summary["exit_code"]) == ("failed", 3)
    lines = results.closing_lines(summary, "summary.json")
    assert lines[0].startswith("the MindSpore scheduler (host scheduler) exited with code 3; log: ")
    assert lines[-1] == "exit code 3; summary summary.json"   # no "stopped all 0 rank(s)"
    interrupted = results.closing_lines(scheduler_pod_summary(in_tmp, -15, interrupted_by=15), "summary.json")
    assert interrupted == ["interrupted by SIGTERM; stopped the MindSpore scheduler; summary summary.json"]


def _aborted_summary(last_line: str, signal_name: str | None = "SIGABRT") -> dict:
    cause = {"rank": 1, "local_rank": 1, "device_id": 1, "host": "h", "pid": 1, "exit_code": 134,
             "signal": signal_name, "log": "rank_001/output.log", "log_tail": ["step 9", last_line]}
    return {"ranks": [dict(cause, rank=0), cause], "started": 0.0, "ended": 1.0, "root_cause": cause,
            "status": "failed", "exit_code": 134, "run_dir": "run"}


def test_torchs_teardown_abort_gets_the_destroy_process_group_hint():
    """Issue 38, item 13: SIGABRT right after "terminate called without an active exception" is torch's teardown
    of a process group never destroyed: the closing lines say what makes the exit code the script's own."""
    lines = results.closing_lines(_aborted_summary("terminate called without an active exception"), "s.json")
    assert results.TEARDOWN_ABORT_HINT in lines
    assert lines.index(results.TEARDOWN_ABORT_HINT) == lines.index("    | terminate called without an active "
                                                                   "exception") + 1
    assert results.TEARDOWN_ABORT_HINT not in results.closing_lines(_aborted_summary("Aborted"), "s.json")
    assert results.TEARDOWN_ABORT_HINT not in results.closing_lines(
        _aborted_summary("terminate called without an active exception", "SIGSEGV"), "s.json")


def test_the_closing_line_counts_restarts_that_started_and_ranks_that_were_still_running():
    from launcher.execute.results import closing_lines, restarts_said

    assert restarts_said({"attempts": [{}, {"unfit": True}], "ranks": []}) == ""   # the gate: nothing restarted
    ranks = [{"rank": 0, "end": 5.0, "exit_code": 0}, {"rank": 2, "end": 30.0, "exit_code": 143},
             {"rank": 1, "end": 20.0, "exit_code": 4, "restarts": [{}, {}]}]
    summary = {"attempts": [{}, {}], "ranks": ranks}
    assert restarts_said(summary) == " after 1 restart(s) and 2 restart(s) of rank(s) 1"
    cause = {**ranks[2], "host": "h", "device_id": 1, "log": "l", "log_tail": []}
    lines = closing_lines({**summary, "status": "failed", "root_cause": cause, "exit_code": 4, "started": 0.0,
                           "ended": 31.0, "run_dir": "d"}, "s.json")
    assert lines[-1] == ("stopped the other 1 rank(s); exit code 4 after 1 restart(s) and 2 restart(s) of rank(s) 1; "
                         "summary s.json")   # rank 0 had exited 0 before rank 1 failed
