"""Reading back the run of an operator's MindSpore scheduler pod (issue 38, item 10): its one process is the
scheduler (``--rank scheduler``), and asking for rank 0 says so rather than listing no ranks."""

import pytest

from launcher.contract import Role
from launcher.errors import UsageError
from launcher.rundir.create import create
from launcher.rundir.read import load_run, select_ranks
from tests.unit.plan.test_make import scheduler_pod_plan


def test_a_scheduler_pods_run_has_the_scheduler_and_no_rank(in_tmp):
    plan = scheduler_pod_plan(in_tmp)
    create(plan, "{}", shared=True)
    run = load_run(plan.run_dir)
    assert [(ref.role, ref.host, ref.rank_dir) for ref in run.ranks] == [
        (Role.SCHEDULER, "scheduler", plan.scheduler.rank_dir)]
    assert select_ranks(run, ["scheduler"]) == run.ranks
    with pytest.raises(UsageError, match="no rank 0: it ran MindSpore's scheduler alone .*--rank scheduler"):
        select_ranks(run, ["0"])
