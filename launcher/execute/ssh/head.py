"""``dlaunch cluster --ssh`` from the head node: every server's share of a rank table, started and watched.

As everywhere in dlaunch, a plan first, then a thin executor, one module a stage:
``ssh.plan`` decides everything without the network (``--dry-run`` prints it); ``ssh.preflight``
connects to every host at once and checks it, so that either every host is ready or nothing starts
anywhere; ``ssh.session`` sends each host its request and runs one selector loop over the channels and
the head's signals (the first failure stops all hosts); ``ssh.outcome`` turns the hosts' reports into the
head summary and the exit code. ``ssh.protocol`` is the wire format, both ways.
paramiko is imported inside functions only, so the CLI starts fast.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from launcher.base.console import say
from launcher.errors import UsageError
from launcher.execute.ssh.outcome import head_summary, report
from launcher.execute.ssh.plan import SshPlan, describe_plan, make_ssh_plan
from launcher.execute.ssh.preflight import Probe, preflight, record_new_keys
from launcher.execute.ssh.session import HostRun, Session, start_hosts
from launcher.rundir.paths import HEAD_SUMMARY
from launcher.settings.request import LaunchRequest

# ---------------------------------------------------------------- entry point


def launch_over_ssh(args: LaunchRequest, text: str, table, opts, environ: Mapping[str, str]) -> int:
    """``dlaunch cluster --ssh``: plan, preflight every host, start all, watch until the end; the exit code.

    ``text``, ``table`` and ``opts`` are what ``plan.share.head_launch`` decided on the head."""
    plan = make_ssh_plan(args, text, table, opts, environ)
    if args.dry_run:
        print(describe_plan(plan))
        return 0
    summary_path = os.path.join(plan.run_dir, HEAD_SUMMARY)
    if os.path.lexists(summary_path):
        raise UsageError(f"run {plan.run_id} already has {summary_path}; choose another --run-id")
    probes = preflight(plan)
    record_new_keys(probes)
    failed = [p for p in probes if p.problem]
    if failed:
        for probe in failed:
            say(f"error: host {probe.host.target.server_id} ({probe.host.target}): {probe.problem}")
        say(f"error: preflight failed on {len(failed)} of {len(probes)} host(s); nothing was started")
        for probe in probes:
            probe.hang_up()
        return UsageError.exit_code
    return _execute(plan, probes, summary_path)


def _execute(plan: SshPlan, probes: list[Probe], summary_path: str) -> int:
    from launcher.execute.signals import SignalWatch
    from launcher.rundir.create import write_json

    started = time.time()
    runs = [HostRun(p.host, p.client, p.channel) for p in probes]
    signals = SignalWatch(forward=plan.forward_signals)  # from now on a Ctrl-C (or SIGUSR1) reaches every host
    session = Session(plan, runs, signals)
    try:
        start_hosts(runs)
        session.run()
    finally:
        signals.close()
        _close([run.client for run in runs])
    summary = head_summary(plan, runs, session.interrupted_by, started)
    os.makedirs(plan.run_dir, exist_ok=True)
    write_json(summary_path, summary)
    report(summary, summary_path)
    return summary["exit_code"]


def _close(clients) -> None:
    """Hang up: a remote launcher still running would take the closed channel as SIGHUP."""
    for client in clients:
        if client is not None:
            client.close()
