"""Restarting only what failed: one rank's process started again in place, while the others keep running.

Three reasons to, each the cheapest recovery there is (no other host touched, nothing else stopped):

- ``--restart-policy rank``: a rank that exits non-zero is started again with the same ids (its log goes
  on in the same file), its own restart count and its own newest checkpoint to resume from
  (``restart_spec``), up to ``--max-restarts`` times for each rank; past that, the job stops as always.
  The ranks that kept running must cope with a peer that came back (MindSpore's recovery, MindIO's
  process-level restart); a plain torch job does not, so ``job`` (stop all, restart all) stays the
  default, and under ``rank`` a torch job's failed rank waits until every other rank here has ended
  (``plan/notes.py``): the old rank 0, which hosts the store, is gone before any rank starts again.
- ``--restart-policy group`` (TorchFT's replica groups, ``plan/replicas.py``): a rank that fails, or the
  group's store, stops the rest of its group (its store included) and, once all have ended, the group
  starts again, store first, up to ``--max-restarts`` times per group; the other groups step on and heal
  it. The lighthouse's end stays the job's failure: every group's quorum is lost with it.
- MindCluster's reset file in an AscendJob pod (``host/mindcluster.py``): ranks of this node marked
  ``fault`` with ``RestartFaultProcess`` are killed and started again (not on node 0, which hosts the
  controller); a fault without it, or on node 0, stops this node with exit 1 so the operator reschedules
  the pod; ``GracefulExit`` stops every rank with the grace period (exit 143, as a SIGTERM would);
  nothing is done while ``FaultFlushing`` is true; a rank ``unrecovered`` anywhere (its pod is being
  rescheduled) stops every rank, and the next attempt starts once the rank table's ``version`` file moved
  on and every rank is recovered (``execute/attempts.py``, with the rewritten table).
"""

from __future__ import annotations

import time

from launcher.base.console import say
from launcher.contract import Role
from launcher.execute.results import how_it_ended
from launcher.host.mindcluster import ResetOrders
from launcher.plan.notes import torch_rank_restarts

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from launcher.execute.local.processes import AttemptProcesses, RankProcess
    from launcher.plan.make import RankSpec

GRACEFUL_EXIT_CODE = 143   # 128 + SIGTERM: what a pod stopped by its controller reports


def restart_reason(attempt: AttemptProcesses, process: RankProcess) -> str | None:
    """Why ``process``, which just exited, is started again in place; None when its exit stops the attempt."""
    policy = attempt.plan.policy
    if process.restart_why:
        return process.restart_why
    # (not the scheduler stopped once the ranks ended; one alone in its pod ended by itself)
    if process.spec.role == Role.SCHEDULER and policy.ms_recovery and (not attempt.ranks or not attempt.ranks_done()):
        return _within(len(process.result.restarts), policy.max_restarts,
                       "MindSpore's recovery (MS_ENABLE_RECOVERY=1): ")
    if process.spec.role == Role.STORE:   # its group's failure (as the OOM killer's SIGKILL would be)
        return _group_within(attempt, process) if serves_running(attempt, process) else None
    if process.spec.role != Role.RANK:
        return None
    if policy.restart_policy == "rank":
        return _within(len(process.result.restarts), policy.max_restarts, "--restart-policy rank: ")
    return _group_within(attempt, process)


def _group_within(attempt: AttemptProcesses, process: RankProcess) -> str | None:
    """Under ``--restart-policy group``, the restart of ``process``'s replica group while it has some left."""
    policy, group = attempt.plan.policy, process.spec.replica_group
    if policy.restart_policy == "group" and group is not None:
        return _within(attempt.group_restarts.get(group, 0), policy.max_restarts,
                       f"--restart-policy group: replica group {group}'s ")
    return None


def serves_running(attempt: AttemptProcesses, process: RankProcess) -> bool:
    """Whether a TorchFT service still serves a running rank: a group's store its group's ranks, the
    lighthouse every rank. One that ended after them (stopped with them, or killed then) harms nothing."""
    if process.spec.role == Role.STORE:
        return any(p.running for p in attempt.ranks if p.spec.replica_group == process.spec.replica_group)
    return not attempt.ranks_done()


def _within(done: int, allowed: int, policy: str) -> str | None:
    """``<policy>restart N of M`` while restarts are left (``done`` so far), else None."""
    return f"{policy}restart {done + 1} of {allowed}" if done < allowed else None


def restarted_with(attempt: AttemptProcesses, process: RankProcess) -> list[RankProcess]:
    """What starts again with ``process``: itself, or under ``--restart-policy group`` its whole TorchFT
    replica group (ranks and store), whose live members the caller stops. Counts the group's restart once,
    when its first member (the one that failed: a rank, or the group's store) asks."""
    group = process.spec.replica_group
    if attempt.plan.policy.restart_policy != "group" or group is None:
        return [process]
    members = [p for p in attempt.services + attempt.ranks if p.spec.replica_group == group]
    if process.restart_why is None:   # the failure, not a member stopped for it
        attempt.group_restarts[group] = attempt.group_restarts.get(group, 0) + 1
        failed = "its store failed" if process.spec.role == Role.STORE else f"rank {process.spec.rank} failed"
        for member in members:   # alive, or ended too with its exit not handled yet (the same wake-up's events)
            if member is not process and (member.alive or not member.waiting and member.result.returncode):
                member.restart_why = f"its replica group {group} restarts ({failed})"
    return members


def still_ending(members: list[RankProcess]) -> bool:
    """Whether a member of a restart has yet to end: alive, or ended with its exit not handled yet (stopped
    for the restart, ``restart_why``, but not ``waiting``). The group starts again once none is."""
    return any(member.alive or (member.restart_why is not None and not member.waiting) for member in members)


def hold_for_orders(attempt: AttemptProcesses, process: RankProcess) -> bool:
    """Whether ``process``, a rank that just failed, waits for MindCluster's order (``--reset-hold``, on by
    default where the operator enabled process recovery) instead of stopping the attempt; it is then held
    (``waiting``) from now on."""
    policy = attempt.plan.policy
    if attempt.reset is None or policy.reset_hold <= 0 or process.spec.role != Role.RANK:
        return False
    process.waiting = True
    attempt.held[process] = time.monotonic() + policy.reset_hold
    say(f"rank {process.spec.rank} {how_it_ended(process.result.to_dict())}; held up to {policy.reset_hold:g} s "
        f"(--reset-hold) for MindCluster's order in {policy.reset_config}, the other ranks running on")
    return True


def service_ended(process: RankProcess) -> str:
    """Why the attempt stops when a TorchFT service (a group's store, the lighthouse) ended by itself."""
    return (f"TorchFT's {process.spec.role} ended ({how_it_ended(process.result.to_dict())}); "
            f"its log: {process.spec.log_file}")


def overdue(attempt: AttemptProcesses, now: float) -> RankProcess | None:
    """A held rank whose hold ran out with no order for it, if any."""
    for process, until in attempt.held.items():
        if process.waiting and now >= until:
            return process
    return None


def reset_actions(orders: ResetOrders, attempt: AttemptProcesses, node0: bool) -> tuple[list, dict | None]:
    """What MindCluster's orders mean here: the live ranks to kill and start again, or why this node stops
    (a ``stopped_by`` entry: its exit code and the reason every summary and the console give)."""
    if orders.flushing:
        return [], None
    if orders.graceful_exit:
        return [], {"why": "MindCluster asked every training process to exit (reset.json GracefulExit=1)",
                    "exit_code": GRACEFUL_EXIT_CODE, "cause": {"kind": "mindcluster", "order": "GracefulExit"}}
    unrecovered = sorted(rank for rank, status in orders.faults.items() if status == "unrecovered")
    if unrecovered:   # a pod is being rescheduled: every rank stops, all start again once it is back
        return [], {"why": f"MindCluster marked rank(s) {', '.join(map(str, unrecovered))} unrecovered: every rank "
                           f"stops and starts again once the rank table's version moves on and all are recovered",
                    "exit_code": 1, "cause": {"kind": "mindcluster", "order": "unrecovered", "ranks": unrecovered}}
    live = {p.spec.rank: p for p in attempt.ranks if p.running}   # a held rank's order is acted on too
    faulty = orders.local_faults(live)
    if not faulty:
        return [], None
    if orders.restart_fault_process and not node0:
        return [live[rank] for rank in faulty], None
    why = ("on node 0, which hosts the controller" if orders.restart_fault_process else "without RestartFaultProcess")
    return [], {"why": f"MindCluster marked rank(s) {', '.join(map(str, faulty))} faulty {why}: this node stops so "
                       f"that its pod is rescheduled", "exit_code": 1,
                "cause": {"kind": "mindcluster", "order": "fault", "ranks": faulty}}


def restart_line(attempt: AttemptProcesses, process: RankProcess, together: list[RankProcess], why: str) -> str:
    """What is said when ``process`` is started again in place (once, for the failure itself)."""
    result, delay = process.result, attempt.plan.policy.restart_delay
    who = (f"rank {result.rank}" if result.rank is not None else "the MindSpore scheduler"
           if process.spec.role == Role.SCHEDULER else f"replica group {process.spec.replica_group}'s store")
    peers = awaits_peers(attempt) and any(p.alive for p in attempt.ranks)
    return (f"{who} {how_it_ended(result.to_dict())}; starting "
            + ("it again alone" if len(together) == 1 else "its replica group again")
            + (f" in {delay:g} s (--restart-delay)" if delay > 0 else "")
            + (f" once the other {attempt.describe_alive()} here have ended (torch's process group cannot take it "
               f"back)" if peers else "") + f" ({why})")


def awaits_peers(attempt: AttemptProcesses) -> bool:
    """A rank of this attempt starts again only once every other rank here has ended (``plan/notes.py``)."""
    return torch_rank_restarts(attempt.plan)


def next_due(attempt: AttemptProcesses, now: float) -> float | None:
    """Seconds until a process waiting to start again may (``--restart-delay``); None when none may before
    some rank ends (a torch job's rank waits for its peers: their exits wake the loop)."""
    if not attempt.due or (awaits_peers(attempt) and any(p.alive for p in attempt.ranks)):
        return None
    return max(0.0, min(attempt.due.values()) - now)


def due_now(attempt: AttemptProcesses, now: float) -> list[RankProcess]:
    """The processes to start again now, in plan order, taken off ``attempt.due``."""
    if next_due(attempt, now) is None:
        return []
    ready = [p for p, at in attempt.due.items() if at <= now]
    for process in ready:
        del attempt.due[process]
    order = {id(p): index for index, p in enumerate(attempt.processes)}
    return sorted(ready, key=lambda p: order[id(p)])


def restart_spec(attempt: AttemptProcesses, process: RankProcess) -> RankSpec:
    """What a rank started again in place runs with: the same ids, ``TORCHELASTIC_RESTART_COUNT`` counting its
    own restarts (on top of the attempt's), and ``DLAUNCH_RESUME_FROM``/``DLAUNCH_RESUME_STEP`` naming the
    newest checkpoint in its own checkpoint directory (else what it started with: ``--resume``'s, or none)."""
    from dataclasses import replace

    from launcher.checkpoint.resume import collect
    from launcher.contract import RESUME_FROM_ENV, RESUME_STEP_ENV

    spec, count = process.spec, len(process.result.restarts)
    if spec.role != Role.RANK or not count or spec.rank is None:
        return spec
    env = {**spec.env, "TORCHELASTIC_RESTART_COUNT": str(attempt.plan.attempt + count)}
    steps = collect({spec.rank: spec.ckpt_dir}) if spec.ckpt_dir else []
    if steps:
        env[RESUME_FROM_ENV], env[RESUME_STEP_ENV] = steps[-1].files[spec.rank], f"{steps[-1].epoch}_{steps[-1].step}"
    return replace(spec, env=env)
