"""Restarting only what failed: one rank's process started again in place, while the others keep running.

Two reasons to, both for the cheapest recovery there is (no other rank, no other host touched):

- ``--restart-policy rank``: a rank that exits non-zero is started again with the same environment and
  ids (its log goes on in the same file), up to ``--max-restarts`` times for each rank; past that, the
  job stops as always. The ranks that kept running must cope with a peer that came back (MindSpore's and
  TorchFT's recovery, MindIO's process-level restart); a plain torch job does not, so ``job`` (stop all,
  restart all) stays the default.
- MindCluster's reset file in an AscendJob pod (``host/mindcluster.py``): ranks of this node marked
  ``fault`` with ``RestartFaultProcess`` are killed and started again (not on node 0, which hosts the
  controller); a fault without it, or on node 0, stops this node with exit 1 so the operator reschedules
  the pod; ``GracefulExit`` stops every rank with the grace period (exit 143, as a SIGTERM would);
  nothing is done while ``FaultFlushing`` is true; a rank ``unrecovered`` anywhere (its pod is being
  rescheduled) stops every rank, and the next attempt starts once the rank table's ``version`` file moved
  on and every rank is recovered (``execute/attempts.py``, with the rewritten table).
"""

from __future__ import annotations

from launcher.contract import Role
from launcher.host.mindcluster import ResetOrders

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from launcher.execute.local.processes import AttemptProcesses, RankProcess

GRACEFUL_EXIT_CODE = 143   # 128 + SIGTERM: what a pod stopped by its controller reports


def restart_reason(attempt: AttemptProcesses, process: RankProcess) -> str | None:
    """Why ``process``, which just exited, is started again alone; None when its exit stops the attempt."""
    policy = attempt.plan.policy
    if process.restart_asked:
        return "MindCluster marked it faulty (reset.json RestartFaultProcess)"
    done = len(process.result.restarts)
    if policy.restart_policy == "rank" and process.spec.role == Role.RANK and done < policy.max_restarts:
        return f"--restart-policy rank: restart {done + 1} of {policy.max_restarts}"
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
    live = {p.spec.rank: p for p in attempt.ranks if p.alive}
    faulty = orders.local_faults(live)
    if not faulty:
        return [], None
    if orders.restart_fault_process and not node0:
        return [live[rank] for rank in faulty], None
    why = ("on node 0, which hosts the controller" if orders.restart_fault_process else "without RestartFaultProcess")
    return [], {"why": f"MindCluster marked rank(s) {', '.join(map(str, faulty))} faulty {why}: this node stops so "
                       f"that its pod is rescheduled", "exit_code": 1,
                "cause": {"kind": "mindcluster", "order": "fault", "ranks": faulty}}
