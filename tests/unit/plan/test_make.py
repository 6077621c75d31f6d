"""The plan of an operator's MindSpore scheduler pod (issue 38, item 10): MindSpore's scheduler alone, as
``--ms-scheduler`` plans its scheduler, never "rank 0 on device 0 of a one-server table"."""

import pytest

from launcher.cli.parsers import build_parser
from launcher.cli.request import request_from_args
from launcher.contract import Role
from launcher.errors import UsageError
from launcher.plan.describe import describe
from launcher.plan.make import make_plan
from launcher.plan.settle import launch_options
from launcher.plan.share import adopt_pod, launch_table

POD = {"MINDX_TASK_ID": "job-uid-1", "MS_SCHED_HOST": "10.0.0.7", "MS_SCHED_PORT": "8118", "MS_LOCAL_WORKER": "8",
       "MS_WORKER_NUM": "16", "MS_NODE_RANK": "0", "MS_SERVER_NUM": "0", "MS_ROLE": "MS_SCHED"}


def scheduler_pod_plan(tmp_path, *flags, environ=POD):
    """``dlaunch cluster train.py FLAGS`` planned as in the scheduler pod, its environment ``environ``."""
    (tmp_path / "train.py").write_text("")
    args = request_from_args(build_parser().parse_args(["cluster", "train.py", *flags]), False, environ=environ)
    args = adopt_pod(args, environ)
    table, index, _, view = launch_table(args, environ)
    opts = launch_options(args, table, index, environ, view=view)
    return make_plan(table, index, opts, str(tmp_path / "rt.json"), dict(environ))


def test_the_scheduler_pod_plans_mindspores_scheduler_alone_not_rank_0(in_tmp):
    plan = scheduler_pod_plan(in_tmp)
    assert plan.ranks == [] and [spec.role for spec in plan.processes()] == [Role.SCHEDULER]
    sched = plan.scheduler
    assert (sched.rank, sched.device_id, sched.ckpt_dir) == (None, None, None)
    assert sched.rank_dir == f"{plan.run_dir}/scheduler" and sched.log_file == f"{plan.run_dir}/scheduler/output.log"
    assert {k: sched.env[k] for k in ("MS_ROLE", "MS_WORKER_NUM", "MS_SCHED_HOST", "MS_SCHED_PORT", "RANK_SIZE",
                                      "DLAUNCH_RANK_DIR")} == {
        "MS_ROLE": "MS_SCHED", "MS_WORKER_NUM": "16", "MS_SCHED_HOST": "10.0.0.7", "MS_SCHED_PORT": "8118",
        "RANK_SIZE": "16", "DLAUNCH_RANK_DIR": sched.rank_dir}
    assert not {"RANK", "LOCAL_RANK", "DEVICE_ID", "RANK_TABLE_FILE", "DLAUNCH_CKPT_DIR"} & set(sched.env)
    assert plan.world_size == 16 and sched.console   # the pod's log shows it, as rank 0's would be elsewhere
    assert plan.to_dict()["scheduler"]["rank_dir"] == sched.rank_dir and plan.to_dict()["ranks"] == []
    text = describe(plan)
    assert "MindSpore's scheduler alone" in text and "rank 0 " not in text and "0 rank(s)" not in text


def test_console_none_keeps_the_scheduler_off_the_pods_console(in_tmp):
    assert not scheduler_pod_plan(in_tmp, "--console", "none").scheduler.console


def test_the_scheduler_pod_without_the_jobs_size_is_one_line(in_tmp):
    with pytest.raises(UsageError, match="MS_WORKER_NUM='': MindSpore's scheduler pod needs the job's number"):
        scheduler_pod_plan(in_tmp, environ={k: v for k, v in POD.items() if k != "MS_WORKER_NUM"})
