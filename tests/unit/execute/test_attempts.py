"""The launch's seams (launcher/execute/attempts.py): what ``Launch.decide`` makes of an attempt's end, and
what ``next_plan`` runs after it. Nothing is started: a ``Launch`` does nothing until ``run``."""

import signal

from launcher.execute.attempts import Decision, Launch
from launcher.execute.results import AttemptResult, RankResult, first_failure
from launcher.plan.make import make_plan
from launcher.plan.settle import launch_options
from launcher.plan.share import launch_table
from tests.unit.test_pure_layers import settled


def a_launch(tmp_path, *flags) -> Launch:
    args = settled(tmp_path, "run", "--ranks", "2", "--master-port", "29411", *flags)
    table, index, _, view = launch_table(args, {})
    opts = launch_options(args, table, index, {}, view=view)
    plan = make_plan(table, index, opts, str(tmp_path / "rt.json"), {})
    return Launch(table, index, opts, plan, environ={"KEPT": "1"})


def ended(plan, *codes, interrupted_by=None) -> AttemptResult:
    ranks = [RankResult(r, r, r, "127.0.0.1", f"log{r}", None, returncode=code, start=1.0, end=2.0 + r)
             for r, code in enumerate(codes)]
    seen = next((rank for rank in ranks if rank.returncode), None)   # the first failure the workers saw
    result = AttemptResult(attempt=plan.attempt, ranks=ranks, interrupted_by=interrupted_by, root_cause=seen)
    result.root_cause = first_failure(result)
    return result


def test_success_concludes(in_tmp):
    launch = a_launch(in_tmp, "--max-restarts", "2")
    assert launch.decide(ended(launch.plan, 0, 0)) is Decision.SUCCEEDED


def test_a_failed_rank_restarts_while_restarts_are_left(in_tmp, capsys):
    launch = a_launch(in_tmp, "--max-restarts", "1")
    assert launch.decide(ended(launch.plan, 0, 3)) is Decision.RESTART
    assert "rank 1 exited with code 3; restarting all ranks (restart 1 of 1)" in capsys.readouterr().err
    launch.plan = launch.next_plan(1)
    assert (launch.plan.attempt, launch.plan.master_port) == (1, 29411)   # a port given stays
    assert launch.plan.ranks[0].env["TORCHELASTIC_RESTART_COUNT"] == "1"
    assert launch.decide(ended(launch.plan, 0, 3)) is Decision.STOP      # none left


def test_no_restart_without_max_restarts_or_after_a_signal(in_tmp):
    launch = a_launch(in_tmp)
    assert launch.decide(ended(launch.plan, 3, 0)) is Decision.STOP
    launch = a_launch(in_tmp, "--max-restarts", "3")
    assert launch.decide(ended(launch.plan, -signal.SIGTERM, 0, interrupted_by=signal.SIGTERM)) is Decision.STOP


def test_the_environment_is_the_one_given(in_tmp):
    launch = a_launch(in_tmp, "--max-restarts", "1")
    assert launch.next_plan(1).ranks[0].env.get("KEPT") is None   # inherited at spawn, not copied into the plan
    assert launch.inherited == {"KEPT": "1"}


def test_a_rank_or_group_policy_never_restarts_the_whole_job(in_tmp):
    """Under 'rank' or 'group' the restarts happen in place; a rank (group) that used them up stops the job,
    it is not the whole job's first restart."""
    for flags in (("--restart-policy", "rank"), ("--replica-groups", "2")):
        launch = a_launch(in_tmp, "--max-restarts", "3", *flags)
        assert launch.decide(ended(launch.plan, 0, 3)) is Decision.STOP, flags
