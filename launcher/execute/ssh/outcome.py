"""How a ``cluster --ssh`` job ended, from its hosts' reports: the root cause, the head summary, its lines.
"""

from __future__ import annotations

import signal
import sys
import time

from launcher.execute.results import cluster_verdict, how_it_ended, roster_line
from launcher.execute.ssh.plan import SshPlan
from launcher.execute.ssh.session import HostRun

HCCL_CONNECT_TIMEOUT_DEFAULT = 120   # seconds HCCL waits for its peers unless told otherwise


# ---------------------------------------------------------------- outcome


def host_causes(runs: list[HostRun]) -> list[dict]:
    """Every host's own root cause (a rank), and every host that failed by itself (a lost connection, a
    launcher error); ``execute.results.cluster_verdict`` picks the one that came first."""
    causes = []
    for run in runs:
        summary = run.summary or {}
        cause = summary.get("root_cause")
        if cause:  # the host launcher's own exit code says how it judged the cause (124: a hang)
            causes.append({**cause, "host": run.server_id, "launcher_exit_code": summary.get("exit_code")})
        elif run.told is None and run.exit_code not in (0, None):
            reason = run.lost or f"its launcher exited with code {run.exit_code}"
            last = [line for line in run.stderr_tail if line.strip()]
            causes.append({"host": run.server_id, "rank": None, "exit_code": run.exit_code, "end": run.ended_at,
                           "reason": reason + (f": {last[-1].strip()}" if last and not run.lost else "")})
    return causes


def root_cause(runs: list[HostRun]) -> dict | None:
    """The failure that came first, across hosts."""
    return cluster_verdict(host_causes(runs), None, [])["root_cause"]


def _host_status(run: HostRun, cause: dict | None) -> str:
    if run.exit_code == 0:
        return "succeeded"
    if cause and cause["host"] == run.server_id:
        return "failed"
    if run.abandoned:
        return "did not stop in time"
    if run.lost:
        return "connection lost"
    if run.told is not None:
        return "stopped"
    return "failed"


def head_summary(plan: SshPlan, runs: list[HostRun], interrupted_by: int | None, started: float) -> dict:
    """summary.head.json: per host status, exit code and start; the root cause; the spread of host starts."""
    verdict = cluster_verdict(host_causes(runs), interrupted_by, [run.exit_code for run in runs])
    job = _job_verdict(plan, runs) if interrupted_by is None else None
    if job is not None:   # --spares: the job's own verdict, which knows a lost host's place was taken
        verdict = {"status": job.get("status"), "exit_code": job.get("exit_code"),
                   "root_cause": verdict["root_cause"] if job.get("status") != "succeeded" else None}
    cause, exit_code, status = verdict["root_cause"], verdict["exit_code"], verdict["status"]
    starts = [run.started_at for run in runs if run.started_at is not None]
    spread = max(starts) - min(starts) if len(starts) == len(runs) and starts else None
    return {
        "run_id": plan.run_id, "run_dir": plan.run_dir, "world_size": plan.world_size, "status": status,
        "exit_code": exit_code, "started": started, "ended": time.time(),
        "interrupted_by": signal.Signals(interrupted_by).name if interrupted_by else None,
        "root_cause": cause, "hosts_started_within_s": spread,
        **({"roster": job["roster"]} if job and job.get("roster") else {}),
        "hccl_connect_timeout_default_s": HCCL_CONNECT_TIMEOUT_DEFAULT,
        "hosts": [{"host": run.server_id, "target": str(run.host.target), "ranks": list(run.host.ranks),
                   "status": _host_status(run, cause), "exit_code": run.exit_code, "started_at": run.started_at,
                   "ended_at": run.ended_at, "told": signal.Signals(run.told).name if run.told else None,
                   "reason": run.lost, "summary": run.summary_path} for run in runs],
    }


def _job_verdict(plan: SshPlan, runs: list[HostRun]) -> dict | None:
    """With spares: the verdict the hosts' job link gave (in every host's summary that reported one)."""
    if not plan.spares:
        return None
    return next((run.summary["job"] for run in runs if run.summary and run.summary.get("job")), None)


def report(summary: dict, path: str, out=None) -> None:
    """The head's closing lines: how closely the hosts started, then success or the root cause."""
    out = out or sys.stderr
    hosts = summary["hosts"]
    started = [h for h in hosts if h["started_at"] is not None]
    if summary["hosts_started_within_s"] is not None:
        print(f"dlaunch: hosts started within {summary['hosts_started_within_s']:.2f} s of each other "
              f"(HCCL_CONNECT_TIMEOUT default {HCCL_CONNECT_TIMEOUT_DEFAULT} s)", file=out)
    elif started:
        print(f"dlaunch: only {len(started)} of {len(hosts)} host(s) started their ranks", file=out)
    cause, others = summary["root_cause"], len(hosts) - 1
    if summary.get("roster"):
        print(f"dlaunch: {roster_line(summary['roster'])}", file=out)
    if summary["status"] == "succeeded" and summary.get("roster"):
        print(f"dlaunch: the job succeeded in {summary['ended'] - summary['started']:.1f} s; summary {path}", file=out)
        return
    if summary["status"] == "succeeded":
        print(f"dlaunch: all {summary['world_size']} rank(s) on {len(hosts)} host(s) exited 0 in "
              f"{summary['ended'] - summary['started']:.1f} s; summary {path}", file=out)
        return
    if cause and cause.get("hung"):
        print(f"dlaunch: on host {cause['host']}: {cause['reason']}", file=out)
    if cause and cause.get("rank") is not None:
        how = how_it_ended(cause)
        print(f"dlaunch: rank {cause['rank']} on host {cause['host']} (device {cause.get('device_id')}) {how}; "
              f"log on that host: {cause.get('log')}", file=out)
        for line in cause.get("log_tail") or []:
            print(f"    | {line}", file=out)
    elif cause:
        print(f"dlaunch: host {cause['host']} failed: {cause['reason']}", file=out)
    else:
        print(f"dlaunch: interrupted by {summary['interrupted_by']}", file=out)
    stopped = (f"stopped the other {others} host(s); " if others else "") if cause else \
        f"stopped all {len(hosts)} host(s); "
    print(f"dlaunch: {stopped}exit code {summary['exit_code']}; summary {path}", file=out)
