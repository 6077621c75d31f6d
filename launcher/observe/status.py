"""``dlaunch status``: each rank of a run, live or finished, from any terminal.

Everything comes from the run directory (``rundir.read``), never from the launcher itself; live
processes are looked at by ``observe.processes``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass

from launcher.base.console import printable
from launcher.base.steps import UserPattern
from launcher.base.stragglers import straggler_line
from launcher.contract import Role
from launcher.errors import UsageError
from launcher.execute.results import how_it_ended, roster_line, who
from launcher.observe.memory import status_line
from launcher.observe.processes import Observer
from launcher.observe.torchft import quorum_line
from launcher.rundir.read import run_directory


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f}s" if value < 10 else f"{value:.0f}s"
    if value < 3600:
        return f"{int(value // 60)}m{int(value % 60):02d}s"
    return f"{int(value // 3600)}h{int(value % 3600 // 60):02d}m"


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return "-"


def headline(snap: dict) -> list[str]:
    count = sum(1 for row in snap["ranks"] if row.get("role", Role.RANK) == Role.RANK)
    hosts = len(snap["hosts"])
    line = f"run {snap['run_id']} ({snap['run_dir']}): {snap['status']}"
    if snap["finished"] and snap["exit_code"] is not None:
        line += f", exit code {snap['exit_code']}"
    missing = snap.get("missing_hosts") or []
    if missing:
        total = count + sum(h["count"] for h in missing)
        line += f"; {count} of {total} rank(s) on {hosts} of {hosts + len(missing)} host(s)"
    elif not count and any(row.get("role") == Role.SCHEDULER for row in snap["ranks"]):
        line += "; the MindSpore scheduler only (an operator's scheduler pod: the job's ranks run in other pods)"
    else:
        line += f"; {count} rank(s) on {hosts} host(s)"
    lines = [line]
    if snap.get("torchft"):
        lines.append(quorum_line(snap["torchft"]))
    if snap.get("roster"):
        lines.append(roster_line(snap["roster"]))
    memory = status_line(snap.get("memory"))
    if memory:
        lines.append(memory)
    steps = straggler_line(snap.get("steps"))
    if steps:
        lines.append(steps)
    if missing:
        names = ", ".join(f"{h['host']} (ranks {h['ranks']})" for h in missing)
        lines.append(f"never reported: {names}: no plan or summary of theirs in this run directory")
    for unfit in snap.get("unfit") or []:
        lines.append(f"health gate: host {unfit.get('host')} unfit, its ranks not started:")
        lines += [f"  {printable(str(finding))}" for finding in unfit.get("findings") or []]
        if unfit.get("output"):
            lines.append(f"  every check and its tool's answer: {unfit['output']}")
    for cause in snap["root_causes"]:
        if cause.get("hung"):
            where = (f"the MindSpore scheduler, host {cause.get('host')}" if cause.get("role") == Role.SCHEDULER else
                     f"host {cause.get('host')}, device {cause.get('device_id')}")
            lines.append(f"root cause ({where}): "
                         + (cause.get("reason") or f"rank {cause.get('rank')} hung"))
            if cause.get("stack_file"):
                lines.append(f"stacks: {cause['stack_file']}")
            lines += hang_lines(snap.get("hang"))
            continue
        how = how_it_ended(cause)
        lines.append(f"root cause: {who(cause)} {how}")
    return lines


def hang_lines(view: dict | None) -> list[str]:
    """``stopped first: ...`` and every rank's last step (``*``: its stack is in no collective)."""
    if not view:
        return []
    marks = {False: "*", True: "", None: "?"}
    steps = ", ".join(f"{row['rank']}: {'-' if row['last_step'] is None else row['last_step']}"
                      f"{marks[row['in_collective']]}" for row in view["ranks"])
    lines = [view["stopped_first"], f"last steps: {steps} (*: in no collective, ?: no stack)"]
    aged = [row for row in view["ranks"] if row.get("step_age_s") is not None and row["last_step"] is not None]
    if aged:
        lines.append("step ages: " + ", ".join(f"{row['rank']}: {row['step_age_s']:.1f} s" for row in aged)
                     + " (how long before the rank's last sign of life its last step was reported: a heartbeat "
                       "says its step at most once a second, so its log may be further)")
    return lines


def finished_code(snap: dict) -> int:
    """What ``status --watch`` and ``logs --follow`` exit with once the run is over: 0 when it succeeded,
    else the run's own exit code (1 when it ended without one: its launcher was killed)."""
    if snap["status"] == "succeeded":
        return 0
    code = snap.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1


def verdict_line(snap: dict) -> str:
    """``run finished: failed, exit code 7``, the closing line of a watch."""
    code = f", exit code {snap['exit_code']}" if snap.get("exit_code") is not None else ""
    return f"run {snap['run_id']} finished: {snap['status']}{code}"


def format_status(snap: dict, width: int | None = 120) -> str:
    """The status table; the last column is cut at ``width`` (the terminal's), or not at all when None."""
    header = ["RANK", "HOST", "DEV", "PID", "STATE", "CPU%", "RSS", "IDLE", "LAST LINE"]
    table = []
    for row in snap["ranks"]:
        state = row["state"] + (f" (attempt {row['attempt']})" if row["attempt"] else "")
        scheduler = row.get("role") == Role.SCHEDULER
        table.append(["sched" if scheduler else str(row["rank"]), row["host"],
                      "-" if scheduler else str(row["device_id"]),
                      str(row["pid"]) if row["pid"] else "-", state,
                      "-" if row["cpu_percent"] is None else f"{row['cpu_percent']:.0f}",
                      _bytes(row["rss_bytes"]), _seconds(row["idle_seconds"]), row["last_line"]])
    widths = [max([len(header[i])] + [len(r[i]) for r in table]) for i in range(len(header) - 1)]
    right = {0, 2, 3, 5, 6, 7}

    def line(cells):
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        text = "  ".join(parts) + "  "
        whole = text + cells[-1]
        return (whole if width is None else whole[:max(width, len(text) + 10)]).rstrip()

    return "\n".join(printable(text) for text in headline(snap) + [line(header)] + [line(r) for r in table])


@dataclass(frozen=True)
class StatusRequest:
    """``dlaunch status``'s settings (``cli.status`` builds it)."""

    run_dir: str | None
    output_dir: str
    rank: list[str] | None
    watch: bool
    interval: float
    json: bool
    hang_after: float | None
    step_pattern: str | None = None


def cmd_status(args: StatusRequest) -> int:
    import shutil

    try:
        pattern = UserPattern.parse(args.step_pattern) if args.step_pattern else None
    except ValueError as exc:
        raise UsageError(f"--step-pattern: {exc}") from None
    run_dir = run_directory(args.run_dir, args.output_dir)
    observer = Observer(run_dir, hang_after=args.hang_after, step_pattern=pattern)
    out = sys.stdout
    try:
        while True:
            snap = observer.snapshot(args.rank)
            if args.json:
                text = json.dumps(snap, indent=None if args.watch else 2, default=str)
                out.write(text + "\n")
            else:
                terminal = out.isatty()
                text = format_status(snap, shutil.get_terminal_size((120, 40)).columns if terminal else None)
                closing = printable(verdict_line(snap)) + "\n" if snap["finished"] else ""
                if args.watch and not terminal:   # a file or pipe gets plain snapshots, no escape codes
                    text = f"{time.strftime('%H:%M:%S')}\n{text}\n" + closing
                elif args.watch:  # home, each line cleared to its end, then the rest of the screen
                    stamp = time.strftime("%H:%M:%S")
                    text = ("\x1b[H" + "\x1b[K\n".join([f"{stamp}  every {args.interval:g} s, Ctrl-C to stop",
                                                        *text.split("\n")]) + "\x1b[K\n\x1b[J")
                    text += closing
                out.write(text if args.watch else text + "\n")
            out.flush()
            if not args.watch:
                return 0
            if snap["finished"]:
                return finished_code(snap)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
