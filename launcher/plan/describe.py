"""The plan as people read it: what ``--dry-run`` prints."""

from __future__ import annotations

from launcher.base.console import printable
from launcher.contract import Role
from launcher.plan.environment import (
    masked,
    masked_argv,
)
from launcher.plan.make import CWD_RANK, LaunchPlan, RankSpec
from launcher.plan.notes import policy_lines


def describe(plan: LaunchPlan, port_chosen_at_start: bool = False) -> str:
    """The plan as people read it: what --dry-run prints.

    The first rank's environment (and MindSpore's scheduler's) is shown in full, the other ranks' as
    differences from it (16 ranks were 560 lines). With ``port_chosen_at_start`` (no --master-port) the real
    run picks its own free port, so no number is shown for it.
    """
    import shlex

    port = "a free port, chosen at start" if port_chosen_at_start else str(plan.master_port)
    alone = not plan.ranks and plan.scheduler is not None   # an operator's scheduler pod (plan/make.py)
    head = (f"run {plan.run_id}: server {plan.server_id} stands by as a spare (--spares): no rank until it takes "
            f"the place of a host the job loses or finds unfit" if plan.standby else
            f"run {plan.run_id}: MindSpore's scheduler alone (the job's scheduler pod; its {plan.world_size} rank(s) "
            f"run in the worker pods)" if alone else
            f"run {plan.run_id}: {len(plan.ranks)} rank(s) on server {plan.server_id} "
            f"(server {plan.server_index + 1} of {plan.server_count}), world size {plan.world_size}")
    lines = [head, *([plan.policy.fault_tolerance] if plan.policy.fault_tolerance else []),
             f"run directory: {plan.run_dir}",
             f"rank table:    {plan.rank_table_file}",
             f"master:        {plan.master_addr}:{plan.master_port}" if not port_chosen_at_start else
             f"master:        {plan.master_addr}, port: {port}",
             "working dir:   " + ("each rank its own rank directory" if plan.policy.cwd_mode == CWD_RANK
                                  else "launch directory"),
             "on failure:    " + (f"survivors told and given {plan.policy.survivor_window:g} s to save "
                                  f"(--survivor-window), then " if plan.policy.survivor_window else "")
             + f"SIGTERM, {plan.policy.grace_period:g} s grace, SIGKILL; restarts allowed: "
             f"{plan.policy.max_restarts}" + (restart_limits(plan.policy) if plan.policy.max_restarts else "")
             + POLICY_WORDS.get(plan.policy.restart_policy, ""),
             f"on a signal:   forwarded, {plan.policy.signal_grace:g} s grace (--signal-grace), SIGKILL",
             "hang check:    " + (f"stop after {plan.policy.hang_timeout:g} s without a sign of life (exit 124)"
                                  if plan.policy.hang_timeout else "off (--hang-timeout)"),
             "health gate:   " + (health_gate_words(plan) if plan.policy.health_gate else "off (--health-gate)")]
    if plan.resume:
        lines.append(f"resume from:   {plan.resume.label} of {plan.resume.run_dir}")
    lines += [f"note:          {line}" for line in policy_lines(plan)]
    def shown_env(spec: RankSpec) -> dict[str, str]:
        return {k: f"<{port}>" if port_chosen_at_start and v == str(plan.master_port) else shlex.quote(v)
                for k, v in masked(spec.env).items()}

    base = plan.ranks[0] if plan.ranks else None
    base_env = shown_env(base) if base is not None else {}
    for spec in plan.processes():
        if spec.role == Role.SCHEDULER:
            lines.append("MindSpore scheduler (not a rank; " + ("the worker pods' ranks register with it)" if alone
                                                                else "started first, stopped with the ranks)"))
        elif spec.role == Role.STORE:
            lines.append(f"store of TorchFT replica group {spec.replica_group} (started first, again with its group)")
        elif spec.role == Role.LIGHTHOUSE:
            lines.append("TorchFT lighthouse (started first, stopped with the ranks)")
        else:
            lines.append(f"rank {spec.rank} (local {spec.local_rank}, device {spec.device_id})"
                         + ("  [console]" if spec.console else ""))
        lines += [f"  command: {shlex.join(masked_argv(spec.argv))}",
                  f"  cwd:     {spec.cwd}",
                  f"  log:     {spec.log_file}"]
        if spec.ckpt_dir:
            lines.append(f"  ckpt:    {spec.ckpt_dir}")
        env = shown_env(spec)
        if spec is base or base is None or spec.role != Role.RANK:   # the scheduler's, a service's: too different
            lines.append("  env:")
            lines += [f"    {k}={v}" for k, v in sorted(env.items())]
        else:
            changed = sorted((k, v) for k, v in env.items() if base_env.get(k) != v)
            gone = sorted(set(base_env) - set(env))
            lines.append(f"  env: as rank {base.rank}'s, but" if changed or gone else f"  env: as rank {base.rank}'s")
            lines += [f"    {k}={v}" for k, v in changed] + [f"    (no {k})" for k in gone]
    return "\n".join(printable(line) for line in lines)


POLICY_WORDS = {"rank": "; only the failed rank starts again (--restart-policy rank)",
                "group": "; only the failed rank's replica group starts again (--restart-policy group)"}


def health_gate_words(plan: LaunchPlan) -> str:
    """What ``--health-gate`` will check (host/health.py), as --dry-run says it."""
    external = repr(plan.policy.health_check) if plan.policy.health_check else "no --health-check"
    return (f"before every start: storage, npu (npu-smi), gpu (nvidia-smi), link and net_health (hccn_tool), nic "
            f"(InfiniBand), external ({external}), each skipped where its tool is absent; an unfit host starts no "
            f"rank (exit {plan.policy.unfit_exit_code}); answers kept in {plan.host_file('health', 'txt')}")


def restart_limits(policy) -> str:
    """What stops restarts before they run out (execute/budget.py), as --dry-run says it."""
    limits = [f"{policy.restarts_without_progress} failed in a row without a new checkpoint"
              if policy.restarts_without_progress else "",
              f"failure {policy.max_failures_per_hour + 1} within an hour" if policy.max_failures_per_hour else ""]
    shown = " or ".join(limit for limit in limits if limit)
    return f" (exit 93 after {shown})" if shown else ""
