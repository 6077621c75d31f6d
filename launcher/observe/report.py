"""What ``dlaunch report`` does: one self-contained HTML page about a run.

The page needs nothing but a browser: inline CSS, and SVG drawn by ``observe.charts`` (a timeline of
every rank's attempts with the root cause marked, one chart per metric with a line per rank, from
``observe.metrics``, and the ranks' step times with the slowest ranks and hosts, from
``observe.stepchart``). jinja2 lays out the page (``templates/report.html.j2``) and is imported only here.

The page also shows what ran (argv, settings and ``--env`` variables from the hosts' ``plan*.json``,
masked) and links every log by a ``file://`` URL.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from launcher.base.console import say
from launcher.base.steps import UserPattern
from launcher.base.userfiles import write_output
from launcher.contract import RESUME_FROM_ENV, RESUME_STEP_ENV, Role
from launcher.errors import UsageError
from launcher.execute.results import job_verdict, restarted_how, roster_line
from launcher.observe import tell_problems
from launcher.observe.charts import OUTCOME_COLOURS, chart_svg, format_number, legend_html, rank_colour, timeline_svg
from launcher.observe.hangview import hang_view
from launcher.observe.metrics import RankStory, collect, span_outcome
from launcher.observe.stepchart import step_section
from launcher.rundir.model import RankSpecFile
from launcher.rundir.read import Run, load_run, log_attempts, log_path, run_directory, summary_entry


def _when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "-"


def file_url(path: str | None) -> str | None:
    """A file:// link to a log or directory (on a shared filesystem, the same path on every host)."""
    if not path:
        return None
    from pathlib import Path

    return Path(os.path.abspath(path)).as_uri()


def _contract_names() -> set[str]:
    """The variables dlaunch itself sets for a rank (every optional one included)."""
    from launcher.plan.environment import rank_environment

    names = rank_environment(rank=0, local_rank=0, world_size=1, local_world_size=2, group_rank=0,
                             group_world_size=1, device_id=0, cuda_visible="0", rank_table_file="", master_addr="",
                             master_port=0, run_id="", run_dir="", rank_dir="", ckpt_dir="", error_file="",
                             restart_count=0, max_restarts=0, inherited={})
    return set(names) | {RESUME_FROM_ENV, RESUME_STEP_ENV}


def command_context(run: Run) -> dict:
    """What the ranks ran and with which settings, from the hosts' plans (env values masked again)."""
    import shlex

    from launcher.base import numlists
    from launcher.plan.environment import masked, masked_argv

    specs = [spec for _, plan in sorted(run.plans.items()) for spec in plan.get("ranks", [])
             if spec.get("rank") is not None]
    by_command: dict[str, list[RankSpecFile]] = {}
    for spec in specs:
        by_command.setdefault(shlex.join(masked_argv(spec.get("argv", []))), []).append(spec)
    commands = []
    for line, group in by_command.items():
        cwds = {str(spec.get("cwd", "")) for spec in group}
        commands.append({"line": line, "cwd": cwds.pop() if len(cwds) == 1 else "its own rank directory",
                         "ranks": numlists.format_ranges(sorted(spec["rank"] for spec in group))})
    plan = next((p for _, p in sorted(run.plans.items())), None)
    settings = []
    if plan:
        settings = [
            ("rank table", plan.get("rank_table_file"), file_url(plan.get("rank_table_file"))),
            ("master", f"{plan.get('master_addr')}:{plan.get('master_port')}"
             + (" (a restart may pick another free port)" if plan.get("max_restarts") else ""), None),
            ("on failure", f"SIGTERM, {plan.get('grace_period', 0):g} s grace, then SIGKILL", None),
            ("restarts allowed", str(plan.get("max_restarts", 0)), None),
            ("hang check", f"stop after {plan['hang_timeout']:g} s without a sign of life" if plan.get("hang_timeout")
             else "off", None),
            ("hosts in the job", str(plan.get("server_count", 1)), None),
            ("silent ranks", f"said after {plan.get('waiting_notice', 0):g} s" if plan.get("waiting_notice")
             else "never said", None)]
    contract = _contract_names()
    first = masked({str(k): str(v) for k, v in (specs[0].get("env") or {}).items()}) if specs else {}
    mine = {k: v for k, v in sorted(first.items()) if k not in contract}
    differs = {k for spec in specs for k, v in masked(spec.get("env") or {}).items() if first.get(k) != v}
    return {"commands": commands, "settings": settings,
            "user_env": [(k, v, k in differs) for k, v in mine.items()],
            "dlaunch_env": [(k, v, k in differs) for k, v in sorted(first.items()) if k in contract]}


def page_context(run: Run, stories: list[RankStory], step_pattern: UserPattern | None = None) -> dict:
    summaries = [s for _, s in sorted(run.summaries.items())]
    starts = [s.start for st in stories for s in st.spans if s.start]
    ends = [s.end for st in stories for s in st.spans if s.end]
    if run.finished:   # the launches' own times: a rank started again in place has spans of its last run only
        starts = [t for s in summaries if isinstance(t := s.get("started"), (int, float))] or starts
        ends = [t for s in summaries if isinstance(t := s.get("ended"), (int, float))] or ends
    if run.finished:
        verdict = job_verdict(summaries, run.head, run.missing_hosts)
        status, code = verdict["status"], verdict["exit_code"]
    else:
        status, code = "running or ended without a summary", None
    causes = []
    for summ in summaries:
        for attempt in summ.get("attempts") or [{"attempt": 0, "root_cause": summ.get("root_cause")}]:
            cause = attempt.get("root_cause")
            if cause:
                _, label, detail = span_outcome(cause, cause, cause.get("rank"))
                causes.append({"attempt": attempt.get("attempt", 0), "rank": cause.get("rank"),
                               "scheduler": cause.get("role") == Role.SCHEDULER,
                               "host": cause.get("host"), "device": cause.get("device_id"), "what": detail,
                               "log": cause.get("log"), "log_url": file_url(cause.get("log")),
                               "tail": cause.get("log_tail") or [],
                               "message": cause.get("error_file_message"), "stacks": cause.get("stack_file"),
                               "stacks_url": file_url(cause.get("stack_file")),
                               "final": attempt is (summ.get("attempts") or [attempt])[-1]})
    names = sorted({n for st in stories for n in st.metrics}, key=lambda n: (n != "loss", n != "accuracy", n))
    charts = [{"name": n, "svg": chart_svg(n, stories)} for n in names]
    rows = []
    for story in stories:
        last = story.spans[-1] if story.spans else None
        loss = story.metrics.get("loss") or {}
        newest = loss[max(loss)] if loss else []
        logs = [{"name": os.path.basename(log_path(story.ref, a)), "url": file_url(log_path(story.ref, a))}
                for a in log_attempts(story.ref.rank_dir)]
        scheduler = story.ref.role == Role.SCHEDULER
        outcome = (last.detail or last.label) if last else "not started"
        restarts = (summary_entry(run, story.ref) or {}).get("restarts") or []
        if restarts:   # started again in place in its attempt (--restart-policy rank or group, MindCluster)
            outcome += f"; restarted {restarted_how(restarts[-1])} {len(restarts)}x ({restarts[-1].get('why')})"
        rows.append({"rank": "sched" if scheduler else story.ref.rank, "host": story.ref.host,
                     "device": "-" if scheduler else story.ref.device_id,
                     "colour": rank_colour(story.ref.rank), "logs": logs,
                     "attempts": len(story.spans), "outcome": outcome,
                     "kind": last.outcome if last else "stopped",
                     "seconds": (f"{last.end - last.start:.1f}" if last and last.start and last.end else "-"),
                     "points": sum(getattr(p, "seen", len(p)) for m in story.metrics.values() for p in m.values()),
                     "loss": format_number(newest[-1][1]) if newest else "-"})
    resumed = next((s.get("resumed_from") for s in summaries if s.get("resumed_from")), None)
    return {"run_id": run.run_id, "run_dir": run.run_dir, "run_dir_url": file_url(run.run_dir), "status": status,
            "exit_code": code, "world_size": run.world_size or len(stories),
            "hosts": sorted({st.ref.host for st in stories}), "missing_hosts": run.missing_hosts,
            "started": _when(min(starts) if starts else None), "ended": _when(max(ends) if ends else None),
            "duration": f"{max(ends) - min(starts):.1f} s" if starts and ends else "-",
            "attempts": max((len(st.spans) for st in stories), default=0), "root_causes": causes,
            "resumed_from": resumed, "resumed_url": file_url(resumed.get("run_dir")) if resumed else None,
            "timeline": timeline_svg(stories), "legend": legend_html(stories), "charts": charts, "rows": rows,
            "steps": step_section([story.ref for story in stories], step_pattern), "step_pattern": step_pattern,
            "generated": _when(time.time()), "outcome_colours": OUTCOME_COLOURS, **command_context(run),
            "roster": _roster(run), "hang": _hang(run, summaries), "unfit": _unfit(summaries)}


def _unfit(summaries: list) -> list[dict]:
    """--health-gate: each host it found unfit, its findings and the file of its checks' answers."""
    causes = [(s.get("stopped_by") or {}).get("cause") or {} for s in summaries]
    return [{"host": c.get("host"), "findings": [str(f) for f in c.get("findings") or []], "output": c.get("output"),
             "url": file_url(c.get("output"))} for c in causes if c.get("kind") == "unhealthy"]


def _hang(run: Run, summaries: list) -> dict | None:
    """A hang's every rank: last step, how far its last sign of life lags, collective or not, stack (linked)."""
    hung = any((attempt.get("root_cause") or {}).get("hung") for summ in summaries
               for attempt in [*(summ.get("attempts") or [{"root_cause": summ.get("root_cause")}]),
                               summ.get("job") or {}])   # the job's verdict: another host may have called it
    view = hang_view(run) if hung else None
    if view is not None:
        for row in view["ranks"]:
            row["stack_url"] = file_url(row["stack"])
    return view


def _roster(run: Run) -> str | None:
    """--spares, --nnodes MIN:MAX: the job's hosts, as status says them."""
    roster = run.roster()
    return roster_line(roster).removeprefix("hosts: ") if roster else None


def render(run_dir: str, step_pattern: UserPattern | None = None) -> str:
    import jinja2

    run = load_run(run_dir)
    tell_problems(run)
    stories = collect(run)
    env = jinja2.Environment(loader=jinja2.PackageLoader("launcher.observe", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.get_template("report.html.j2").render(**page_context(run, stories, step_pattern))


@dataclass(frozen=True)
class ReportRequest:
    """``dlaunch report``'s settings (``cli.report`` builds it)."""

    run_dir: str | None
    output_dir: str
    output: str | None
    force: bool
    step_pattern: str | None = None


def cmd_report(args: ReportRequest) -> int:
    try:
        pattern = UserPattern.parse(args.step_pattern) if args.step_pattern else None
    except ValueError as exc:
        raise UsageError(f"--step-pattern: {exc}") from None
    run_dir = run_directory(args.run_dir, args.output_dir)
    # a lone surrogate (JSON's "\ud800", or a non-UTF-8 name read back) cannot be written as UTF-8: shown as "?"
    page = render(run_dir, pattern).encode("utf-8", "replace").decode("utf-8")
    output = args.output or f"report-{os.path.basename(run_dir)}.html"
    where = write_output(output, lambda fh: fh.write(page), force=args.force)
    if output != "-":
        say(f"report of {os.path.basename(run_dir)} written to {where}")
    return 0
