"""What one host's launch (``execute/attempts.py``) asks of the job its hosts form: the link, each
attempt's settlement, the verdict in the summary.

Kept apart so that ``attempts.py`` reads the same for one host and for many: it opens the link (or gets
None), settles each attempt with the job, and adds the verdict to its summary.
"""

from __future__ import annotations

import os

from launcher.base.console import say
from launcher.contract import ExitCode
from launcher.execute.job.link import JobLink, describe
from launcher.execute.job.restarts import complete_steps, host_resume_point

STACK_TEXT_LIMIT = 256 << 10   # of one rank's stack sent to the master host (py-spy's are a few KiB)


def open_link(plan, opts, table, control, environ, roster=None) -> JobLink | None:
    """A job of several hosts started per host (by hand, Slurm, an operator) talks over the master address;
    under ``cluster --ssh`` the head already ties the hosts together, except for restarts, which the hosts
    agree on among themselves. With spares (``roster``) every server of the pool is on the link."""
    if (plan.server_count < 2 and roster is None) or (control is not None and not opts.policy.max_restarts):
        return None
    link = JobLink.for_plan(plan, opts, table, environ, roster=roster)
    link.start()
    return link


def settle(link: JobLink, plan, result, signal_fd: int, roster=None) -> dict:
    """Report the attempt to the job and wait for its verdict; on the master host, write the stacks of a hang
    that every host sent. A spare reports the steps it sees of every active host's ranks."""
    slots = None
    if plan.standby and roster is not None:
        from launcher.execute.job.spares import pull_from_buddies, slot_steps

        if plan.policy.memory_ckpt and result.extra.get("lost_hosts"):
            pull_from_buddies(link, roster, plan.run_dir, result.extra["lost_hosts"], signal_fd)
        slots = slot_steps(roster, plan.run_dir)
    verdict = link.finish(result, signal_fd, steps=complete_steps(plan), stacks=_stack_texts(result), slots=slots)
    if link.stacks:
        _write_job_stacks(plan, link.stacks)
        link.stacks = {}
    return verdict


def cause_line(verdict: dict) -> str:
    cause = verdict.get("root_cause")
    return describe(cause) if cause else f"the job {verdict.get('status')}"


def resume_point(plan, verdict: dict):
    """This host's files of the step the job agreed to resume from, if any."""
    label = verdict.get("resume_step")
    return host_resume_point(plan, label) if label else None


def add_verdict(summary: dict, verdict: dict) -> None:
    """Every host's summary carries the job's verdict, the same on each; a host whose own ranks succeeded
    in a job that failed elsewhere exits with the code that says so (``job.protocol``)."""
    job = {key: verdict.get(key) for key in ("status", "exit_code", "root_cause", "host_exit_codes", "lost_hosts",
                                             "absent_hosts")}
    if verdict.get("roster"):   # --spares: who ran the job's last attempt, who stood by, who was replaced
        job["roster"] = verdict["roster"]
    summary["job"] = job
    if verdict.get("no_restart"):   # the job stopped restarting: every host says "do not requeue"
        summary.update(exit_code=ExitCode.NO_PROGRESS, no_restart=verdict["no_restart"])
        return
    if summary["exit_code"] == 0 and job["status"] != "succeeded":
        cause = job.get("root_cause") or {}
        code = ExitCode.HOST_LOST if cause.get("kind") == "lost" else ExitCode.STOPPED_BY_PEER
        summary.update(status="failed", exit_code=code,
                       stopped_by={"why": cause_line(verdict), "exit_code": code, "cause": cause})


def _stack_texts(result) -> dict[str, str]:
    """This host's ranks' stacks of the attempt (after a hang), for the master host's run directory."""
    texts = {}
    for rank in result.ranks:
        if rank.stack_file:
            try:
                with open(rank.stack_file, encoding="utf-8", errors="replace") as fh:
                    texts[str(rank.rank)] = fh.read(STACK_TEXT_LIMIT)
            except OSError as exc:
                texts[str(rank.rank)] = f"dlaunch could not read {rank.stack_file}: {exc.strerror}"
    return texts


def _write_job_stacks(plan, stacks: dict) -> None:
    """Every host's ranks' stacks in one place: ``job_stacks/`` of the master host's run directory."""
    from launcher.rundir.create import describe_os_error
    from launcher.rundir.paths import attempt_file

    directory = os.path.join(plan.run_dir, "job_stacks")
    try:
        os.makedirs(directory, exist_ok=True)
        for rank, entry in sorted(stacks.items(), key=lambda item: int(item[0])):
            path = attempt_file(directory, f"rank_{int(rank):03d}", "txt", plan.attempt)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(f"# rank {rank} on host {entry['host']}\n{entry['text']}")
        blame = _blame(stacks)
        with open(attempt_file(directory, "stopped_first", "txt", plan.attempt), "w", encoding="utf-8") as fh:
            fh.write("\n".join(blame) + "\n")
    except OSError as exc:
        say(f"cannot gather the job's stacks into {directory}: {describe_os_error(exc)}")
        return
    say(blame[0])
    say(f"every rank's stack, from every host: {directory} (stopped_first.txt: every rank's last step)")


def _blame(stacks: dict) -> list[str]:
    """Which rank of the whole job stopped first (``execute.blame``), then a line per rank: its host, last step,
    how long before the newest rank's its last sign of life was, and whether it waits in a collective."""
    from launcher.execute.blame import blame_line, read_state, stopped_first

    states = [read_state(int(rank), entry["host"], entry["text"]) for rank, entry in stacks.items()]
    states.sort(key=lambda state: state.rank)
    newest = max((state.last_sign for state in states if state.last_sign is not None), default=None)
    lines = [blame_line(stopped_first(states), hosts=len({state.host for state in states}))]
    for state in states:
        behind = "-" if state.last_sign is None or newest is None else f"{newest - state.last_sign:.2f} s"
        where = {True: "in a collective", False: "in no collective", None: "no stack"}[state.in_collective]
        lines.append(f"rank {state.rank} on host {state.host}: last step "
                     f"{'-' if state.last_step is None else state.last_step}, last sign of life {behind} before "
                     f"the newest, {where}")
    return lines
