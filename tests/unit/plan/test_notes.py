"""What a restart policy will not do, said at the start (issue 49): a torch job under --restart-policy rank, and
--warm-restarts where no standby serves."""

from launcher.plan.make import Command, Options, Policy, make_plan
from launcher.plan.notes import policy_lines, refusal, torch_rank_restarts
from launcher.table.build import single_server_table


def plan_of(tmp_path, **policy):
    opts = Options(command=Command("train.py"), run_id="r1", output_dir=str(tmp_path), launch_dir=str(tmp_path),
                   python="/py", policy=Policy(**policy))
    return make_plan(single_server_table([0, 1], "127.0.0.1"), 0, opts, "rt.json", {})


def test_a_torch_job_under_restart_policy_rank_is_said_once_and_other_jobs_are_not(tmp_path):
    torch = plan_of(tmp_path, restart_policy="rank", max_restarts=2)
    assert torch_rank_restarts(torch) and refusal(torch) is None
    assert [line for line in policy_lines(torch) if "cannot take a peer back" in line] == policy_lines(torch)
    assert policy_lines(plan_of(tmp_path, restart_policy="rank", max_restarts=0)) == []   # nothing restarts
    assert not torch_rank_restarts(plan_of(tmp_path, restart_policy="rank", ms_recovery=True))
    assert not torch_rank_restarts(plan_of(tmp_path, restart_policy="rank", reset_config="/reset.json"))
    assert policy_lines(plan_of(tmp_path, max_restarts=2)) == []


def test_warm_restarts_unused_under_a_policy_that_restarts_in_place(tmp_path):
    lines = policy_lines(plan_of(tmp_path, restart_policy="rank", warm_restarts="torch", ms_recovery=True))
    assert lines == ["--warm-restarts torch is not used under --restart-policy rank: standbys serve the restarts "
                     "of every rank (--restart-policy job); a rank started again alone starts cold"]
    assert policy_lines(plan_of(tmp_path, warm_restarts="torch", max_restarts=1)) == []
