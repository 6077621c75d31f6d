"""A TorchFT replica group's store is part of its group (issue 45): the store ending by itself (the OOM killer's
SIGKILL) restarts the group, counted once, as a failed rank of the group does; a store or the lighthouse ended
after the ranks they serve harms nothing; the lighthouse ending while ranks run stops the job."""

import types

from launcher.contract import Role
from launcher.execute.local import recovery
from launcher.execute.local.processes import AttemptProcesses, RankProcess
from launcher.execute.results import RankResult
from launcher.plan.make import Command, Options, Policy, make_plan
from launcher.plan.replicas import ReplicaGroups
from launcher.table.build import single_server_table


def running(tmp_path, max_restarts=2, policy="group") -> AttemptProcesses:
    """An attempt of 4 ranks in 2 replica groups (the lighthouse, 2 stores), every process started."""
    groups = ReplicaGroups(count=2, size=2, store_addr="127.0.0.1", store_ports={0: 30001, 1: 30002},
                           lighthouse="http://127.0.0.1:30100", lighthouse_port=30100)
    opts = Options(command=Command("train.py"), run_id="r1", output_dir=str(tmp_path), launch_dir=str(tmp_path),
                   python="/py", policy=Policy(restart_policy=policy, max_restarts=max_restarts), replicas=groups)
    plan = make_plan(single_server_table([0, 1, 2, 3], "127.0.0.1"), 0, opts, "rt.json", {})
    attempt = AttemptProcesses(plan)
    for pid, spec in enumerate(plan.processes(), 1000):
        process = RankProcess(spec, RankResult(spec.rank, spec.local_rank, spec.device_id, spec.server_id,
                                               spec.log_file, spec.error_file, pid=pid, role=spec.role))
        process.proc = types.SimpleNamespace(pid=pid)
        (attempt.ranks if spec.role == Role.RANK else attempt.services).append(process)
    return attempt


def store(attempt, group):
    return next(p for p in attempt.services if p.spec.role == Role.STORE and p.spec.replica_group == group)


def test_a_killed_store_restarts_its_group_store_first(tmp_path):
    attempt = running(tmp_path)
    killed = store(attempt, 1)
    killed.result.returncode = -9
    assert recovery.restart_reason(attempt, killed) == "--restart-policy group: replica group 1's restart 1 of 2"
    together = recovery.restarted_with(attempt, killed)
    assert together == [killed, attempt.ranks[2], attempt.ranks[3]] and attempt.group_restarts == {1: 1}
    assert [p.restart_why for p in attempt.ranks] == [None, None] + ["its replica group 1 restarts (its store "
                                                                     "failed)"] * 2
    assert store(attempt, 0).restart_why is None and attempt.services[0].spec.role == Role.LIGHTHOUSE
    killed.waiting = True   # as workers.py marks it
    assert recovery.still_ending(together)   # its ranks are being stopped: the group starts once they ended


def test_a_store_and_a_rank_of_its_group_ended_at_once_are_one_restart(tmp_path):
    """Both exits in one wake-up of the loop: the first handled restarts the group, the second is part of it
    (not a second restart), and the group waits for the second before it starts again."""
    attempt = running(tmp_path)
    rank3, killed = attempt.ranks[3], store(attempt, 1)
    rank3.result.returncode, killed.result.returncode = 1, -9
    assert recovery.restart_reason(attempt, rank3) == "--restart-policy group: replica group 1's restart 1 of 2"
    together = recovery.restarted_with(attempt, rank3)
    rank3.waiting = True
    attempt.ranks[2].result.returncode = -9   # stopped for the restart, its exit not handled yet either
    assert killed.restart_why == "its replica group 1 restarts (rank 3 failed)"
    assert recovery.still_ending(together)
    assert recovery.restart_reason(attempt, killed) == killed.restart_why   # part of the restart, not another
    recovery.restarted_with(attempt, killed)
    killed.waiting = True
    assert recovery.still_ending(together) and attempt.group_restarts == {1: 1}
    attempt.ranks[2].waiting = True
    assert not recovery.still_ending(together)


def test_a_store_ended_after_its_groups_ranks_harms_nothing(tmp_path):
    attempt = running(tmp_path)
    for rank in attempt.ranks[2:]:
        rank.result.returncode = 0   # group 1 finished its training
    late = store(attempt, 1)
    late.result.returncode = -9
    assert recovery.restart_reason(attempt, late) is None and not recovery.serves_running(attempt, late)
    lighthouse = attempt.services[0]
    assert recovery.serves_running(attempt, lighthouse)   # group 0 still runs: the lighthouse serves it
    for rank in attempt.ranks[:2]:
        rank.result.returncode = 0
    assert not recovery.serves_running(attempt, lighthouse)


def test_a_store_past_its_groups_restarts_or_the_lighthouse_stops_the_job(tmp_path):
    attempt = running(tmp_path, max_restarts=1)
    attempt.group_restarts[1] = 1
    killed = store(attempt, 1)
    killed.result.returncode = -9
    assert recovery.restart_reason(attempt, killed) is None and recovery.serves_running(attempt, killed)
    assert recovery.service_ended(killed).startswith("TorchFT's store ended (died of SIGKILL (exit 137))")
    lighthouse = attempt.services[0]
    lighthouse.result.returncode = -9
    assert recovery.restart_reason(attempt, lighthouse) is None and recovery.serves_running(attempt, lighthouse)
    plain = running(tmp_path, policy="job")
    store(plain, 0).result.returncode = -9
    assert recovery.restart_reason(plain, store(plain, 0)) is None   # --restart-policy job: the job's failure
