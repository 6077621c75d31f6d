"""What a plan's restart policy will and will not do, in words: said once as a launch starts and by ``--dry-run``,
so that no flag is silently ignored and no policy promises what the job's framework cannot keep.
"""

from __future__ import annotations

from launcher.plan.make import LaunchPlan

TORCH_RANK_LINE = ("--restart-policy rank: torch's process groups cannot take a peer back (TorchFT's --replica-groups, "
                   "MindSpore's recovery and MindCluster's process recovery can): a failed rank starts again only once "
                   "every other rank here has ended (rank 0 hosts the store at MASTER_PORT), and the ranks that fail "
                   "as the group breaks start again with it")


def torch_rank_restarts(plan: LaunchPlan) -> bool:
    """``--restart-policy rank`` with ranks that cannot take a peer back: a torch job (no TorchFT group, no
    MindSpore's scheduler or recovery, no MindCluster reset file whose process recovery the ranks follow)."""
    policy = plan.policy
    return (policy.restart_policy == "rank" and not policy.ms_recovery and not policy.reset_config
            and plan.scheduler is None and not any("MS_ROLE" in spec.env for spec in plan.ranks[:1]))


def refusal(plan: LaunchPlan) -> str | None:
    """Why the plan cannot run as asked (one line, exit 2), or None: a torch job's rank restarted on one host
    could start while the old rank 0 on another still hosts the store, which no host can see end."""
    if torch_rank_restarts(plan) and plan.server_count > 1:
        return (f"--restart-policy rank across {plan.server_count} hosts with a torch job: a rank started again "
                f"here could join the old rank 0's store on another host before that rank ended (torch's process "
                f"groups cannot take a peer back); use --restart-policy job (the default), or TorchFT's "
                f"--replica-groups")
    return None


def policy_lines(plan: LaunchPlan) -> list[str]:
    """One line for each thing the restart policy does differently from what its flags suggest."""
    policy, lines = plan.policy, []
    if torch_rank_restarts(plan) and policy.max_restarts:
        lines.append(TORCH_RANK_LINE)
    if policy.warm_restarts and policy.restart_policy != "job":
        lines.append(f"--warm-restarts {policy.warm_restarts} is not used under --restart-policy "
                     f"{policy.restart_policy}: standbys serve the restarts of every rank (--restart-policy job); "
                     f"a rank started again alone starts cold")
    return lines
