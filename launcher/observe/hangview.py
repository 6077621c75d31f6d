"""After a hang: every rank's last step, last sign of life and stack in one place, and the rank that stopped
first, for ``dlaunch status`` and the report.

Each host's summary names the stack file of every rank it stopped (``stack_file``), and each stack file starts
with the line dlaunch wrote before py-spy's dump (``execute.blame.header``); on a job of several hosts the
master host also holds every host's stacks in ``job_stacks/`` (``rank_NNN[.K].txt``), which covers hosts whose
run directories are not shared.  ``execute.blame`` reads them the same way the launch did.
"""

from __future__ import annotations

import os
import re

from launcher.execute.blame import RankState, blame_line, read_state, stopped_first
from launcher.rundir.read import Run

STACK_READ = 1 << 20   # characters of one stack file read (py-spy's are a few KiB)
JOB_STACK = re.compile(r"^rank_([0-9]+)(?:\.([0-9]+))?\.txt$")
JOB_STACK_HEAD = re.compile(r"^# rank [0-9]+ on host (\S+)\n")


def _text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(STACK_READ)
    except OSError:
        return None


def _from_summaries(run: Run) -> dict[int, tuple[RankState, str]]:
    found: dict[int, tuple[RankState, str]] = {}
    for summary in run.summaries.values():
        attempts = summary.get("attempts") or []
        entries = attempts[-1].get("ranks", []) if attempts else summary.get("ranks", [])
        for entry in entries:
            rank, path = entry.get("rank"), entry.get("stack_file")
            text = _text(path) if isinstance(rank, int) and path else None
            if rank is not None and text is not None:
                found[rank] = (read_state(rank, str(entry.get("host", "")), text), str(path))
    return found


def _from_job_stacks(run: Run) -> dict[int, tuple[RankState, str]]:
    """The master host's ``job_stacks/``, newest attempt's file of each rank."""
    directory = os.path.join(run.run_dir, "job_stacks")
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    newest: dict[int, tuple[int, str]] = {}
    for name in names:
        match = JOB_STACK.match(name)
        if match:
            rank, attempt = int(match.group(1)), int(match.group(2) or 0)
            if attempt >= newest.get(rank, (-1, ""))[0]:
                newest[rank] = (attempt, name)
    found = {}
    for rank, (_, name) in newest.items():
        path = os.path.join(directory, name)
        text = _text(path)
        if text is None:
            continue
        head = JOB_STACK_HEAD.match(text)
        found[rank] = (read_state(rank, head.group(1) if head else "", text[head.end():] if head else text), path)
    return found


def hang_view(run: Run) -> dict | None:
    """``{"stopped_first": line, "rank": that rank or None, "ranks": [{"rank", "host", "last_step", "behind_s",
    "in_collective", "stack", "step_age_s"}]}`` of the run's last hang, or None when no rank's stack was taken.
    ``step_age_s``: how long before the rank's last sign of life its last step was reported (a heartbeat says
    its step at most once a second, so the logs may be a step or two further)."""
    found = {**_from_job_stacks(run), **_from_summaries(run)}
    if not found:
        return None
    states = [state for state, _ in found.values()]
    newest = max((s.last_sign for s in states if s.last_sign is not None), default=None)
    rows = [{"rank": state.rank, "host": state.host, "last_step": state.last_step,
             "behind_s": None if state.last_sign is None or newest is None else round(newest - state.last_sign, 2),
             "in_collective": state.in_collective, "stack": path,
             "step_age_s": None if state.step_at is None or state.last_sign is None
             else round(max(0.0, state.last_sign - state.step_at), 2)}
            for state, path in sorted(found.values(), key=lambda pair: pair[0].rank)]
    first = stopped_first(states)
    return {"stopped_first": blame_line(first, hosts=len({s.host for s in states})),
            "rank": first[0].rank if first else None, "ranks": rows}
