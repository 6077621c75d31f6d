"""When an attempt's work is done: every rank ended, or, in an operator's MindSpore scheduler pod (a plan of the
scheduler alone), the scheduler ended. Before issue 38 item 10's fix that pod's scheduler was planned as rank 0;
as the scheduler, with no rank, an attempt must not count as done (and stop it) while it serves the job."""

import types

from launcher.execute.local import recovery
from launcher.execute.local.processes import AttemptProcesses, RankProcess
from launcher.execute.results import RankResult
from tests.unit.plan.test_make import POD, scheduler_pod_plan


def started(plan) -> AttemptProcesses:
    """The attempt as ``workers.py`` holds it once its scheduler started (the handle: a pid, no process)."""
    attempt = AttemptProcesses(plan)
    spec = plan.scheduler
    process = RankProcess(spec, RankResult(spec.rank, spec.local_rank, spec.device_id, spec.server_id,
                                           spec.log_file, spec.error_file, pid=4242, role=spec.role))
    process.proc = types.SimpleNamespace(pid=4242)
    attempt.scheduler = attempt.result.scheduler = process
    return attempt


def test_the_scheduler_pods_attempt_runs_until_its_scheduler_ends(in_tmp):
    attempt = started(scheduler_pod_plan(in_tmp))
    assert not attempt.ranks_done() and attempt.describe_alive() == "the MindSpore scheduler"
    attempt.scheduler.result.returncode = 0
    assert attempt.ranks_done()


def test_mindspores_recovery_starts_the_pods_scheduler_again(in_tmp):
    plan = scheduler_pod_plan(in_tmp, "--max-restarts", "2", environ={**POD, "MS_ENABLE_RECOVERY": "1"})
    attempt = started(plan)
    attempt.scheduler.result.returncode = -9
    assert recovery.restart_reason(attempt, attempt.scheduler) == "MindSpore's recovery (MS_ENABLE_RECOVERY=1): " \
        "restart 1 of 2"
    plain = started(scheduler_pod_plan(in_tmp, "--max-restarts", "2"))
    plain.scheduler.result.returncode = -9
    assert recovery.restart_reason(plain, plain.scheduler) is None   # without recovery its exit ends the pod's job
