"""What ``dlaunch report`` does: one self-contained HTML page about a run.

The page needs nothing but a browser: inline CSS, and SVG drawn here in Python
(a timeline of every rank's attempts with the root cause marked, and one chart
per metric with a line per rank).  jinja2 lays out the page
(``templates/report.html.j2``) and is imported only here.

Metrics come from each rank's output logs, in either form:

- the seeds' (MindSpore ``LossMonitor``, ``examples/train_cifar.py``):
  ``epoch: 2 step: 40, loss is 1.234``; the step counts within its epoch, so the
  x value is ``(epoch - 1) * S + step`` where S is the largest step the log shows
  for any epoch (the steps per epoch when the last step of an epoch is logged);
- one JSON object per line, tagged ``"dlaunch": "metric"``:
  ``{"dlaunch": "metric", "step": 120, "loss": 0.52, "lr": 0.1}``; ``step`` is the
  x value as given, every other number (but ``epoch`` and ``time``) is a metric
  of that name.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field

from .errors import UsageError
from .watch import RankRef, Run, load_run, log_attempts, log_path, run_directory

SEEDS_LOSS = re.compile(r"epoch:\s*(\d+)\s*,?\s*step:\s*(\d+)\s*,?\s*loss is\b(.*)")
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?<!\w)[-+]?(?:nan|inf)\b",
                    re.IGNORECASE)  # the first number that is not part of a name (Float32)
METRIC_TAG = "metric"          # {"dlaunch": "metric", ...}
NOT_METRICS = {"dlaunch", "step", "epoch", "time", "rank"}
MAX_POINTS = 2000              # per line drawn: longer series are thinned evenly (the last point kept)

# Series colours (a line per rank), in rank order, then again; the timeline's colours are none of these.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#637939", "#8c6d31"]
OUTCOME_COLOURS = {
    "ok": ("#59a14f", "exited 0"),
    "root": ("#d7263d", "root cause"),
    "failed": ("#f28e2b", "failed too"),
    "stopped": ("#b4b4b4", "stopped by dlaunch"),
    "running": ("#4e79a7", "running / no summary"),
}
ROOT_COLOUR = OUTCOME_COLOURS["root"][0]


# --------------------------------------------------------------------------
# what happened
# --------------------------------------------------------------------------


@dataclass
class Span:
    """One attempt of one rank on the timeline."""

    attempt: int
    start: float | None
    end: float | None
    outcome: str                    # a key of OUTCOME_COLOURS
    label: str                      # "exited 3", "SIGTERM", "hung", "running"
    detail: str = ""


@dataclass
class RankStory:
    ref: RankRef
    spans: list[Span] = field(default_factory=list)
    metrics: dict[str, dict[int, list[tuple[float, float]]]] = field(default_factory=dict)  # name -> attempt -> pts


def parse_metrics(lines) -> dict[str, list[tuple[float, float]]]:
    """Metric name -> [(step, value)] from a log's lines, in the seeds' form or dlaunch's JSON lines."""
    seeds: list[tuple[int, int, float]] = []
    found: dict[str, list[tuple[float, float]]] = {}
    for line in lines:
        text = line.strip()
        if text.startswith("{") and '"dlaunch"' in text:
            try:
                record = json.loads(text)
            except ValueError:
                continue
            step = record.get("step") if isinstance(record, dict) else None
            if record.get("dlaunch") != METRIC_TAG or not _is_number(step):
                continue
            for name, value in record.items():
                if name not in NOT_METRICS and _is_number(value):
                    found.setdefault(str(name), []).append((float(step), float(value)))
            continue
        match = SEEDS_LOSS.search(text)
        if match:
            number = NUMBER.search(match.group(3))
            if number:
                seeds.append((int(match.group(1)), int(match.group(2)), float(number.group(0))))
    if seeds:
        per_epoch = max(step for _, step, _ in seeds)
        found.setdefault("loss", []).extend(((epoch - 1) * per_epoch + step, value) for epoch, step, value in seeds)
    return found


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _read_lines(path: str):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            yield from fh
    except OSError:
        return


def _outcome(entry: dict, cause: dict | None, rank: int) -> tuple[str, str, str]:
    """(outcome, short label, detail) of one rank in one attempt's summary."""
    is_root = bool(cause) and cause.get("rank") == rank
    if entry.get("hung") or (is_root and cause.get("hung")):
        return ("root" if is_root else "failed"), "hung", entry.get("reason") or cause.get("reason") or "no progress"
    if entry.get("spawn_error"):
        return ("root" if is_root else "failed"), "failed to start", entry["spawn_error"]
    if entry.get("signal"):
        outcome = "root" if is_root else ("stopped" if cause or entry["signal"] in ("SIGTERM", "SIGKILL", "SIGINT",
                                                                                     "SIGHUP") else "failed")
        return outcome, entry["signal"], f"killed by {entry['signal']}"
    code = entry.get("exit_code")
    if code is None:
        return "stopped", "not started", ""
    if code == 0:
        return "ok", "exit 0", "exited 0"
    if is_root:
        return "root", f"exit {code}", f"exited {code}"
    stopped = bool(cause) and (entry.get("end") or 0) >= (cause.get("end") or float("inf"))  # ended as told to
    return ("stopped" if stopped else "failed"), f"exit {code}", f"exited {code}"


def _spans_from_logs(ref: RankRef, now: float) -> list[Span]:
    """A host without a summary yet (running, or its launcher died): attempts from the log files' times."""
    spans = []
    attempts = log_attempts(ref.rank_dir)
    for attempt in attempts:
        env_log = os.path.join(ref.rank_dir, "env.log" if attempt == 0 else f"env.{attempt}.log")
        try:
            start = os.stat(env_log).st_mtime    # written just before the rank started
        except OSError:
            start = None
        current = attempt == attempts[-1]
        try:
            end = now if current else os.stat(log_path(ref, attempt)).st_mtime
        except OSError:
            end = now
        spans.append(Span(attempt, start, end, "running" if current else "failed",
                          "no summary" if current else "restarted"))
    return spans


def collect(run: Run, now: float | None = None) -> list[RankStory]:
    """Every rank's attempts (from its host's summary, else its logs) and metrics (from its logs)."""
    now = time.time() if now is None else now
    stories = []
    for ref in run.ranks:
        story = RankStory(ref)
        summ = run.summaries.get(ref.suffix)
        if summ is not None:
            for attempt in summ.get("attempts") or [{"attempt": 0, "root_cause": summ.get("root_cause"),
                                                     "ranks": summ.get("ranks", [])}]:
                entry = next((r for r in attempt.get("ranks", []) if r.get("rank") == ref.rank), None)
                if entry is None:
                    continue
                outcome, label, detail = _outcome(entry, attempt.get("root_cause"), ref.rank)
                story.spans.append(Span(int(attempt.get("attempt", 0)), entry.get("start"), entry.get("end"),
                                        outcome, label, detail))
        else:
            story.spans = _spans_from_logs(ref, now)
        for attempt in log_attempts(ref.rank_dir):
            for name, points in parse_metrics(_read_lines(log_path(ref, attempt))).items():
                story.metrics.setdefault(name, {})[attempt] = points
        stories.append(story)
    return stories


# --------------------------------------------------------------------------
# drawing
# --------------------------------------------------------------------------


def _esc(text) -> str:
    """Text for SVG markup (html.escape's rules, without importing html's entity tables)."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;"))


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 2.5 or 5 times a power of ten apart)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0]
    if high <= low:  # one value: centre it
        pad = abs(low) / 2 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks, value = [], first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 12))
    return ticks


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10000 or abs(value) < 0.001:
        return f"{value:.3g}"
    return f"{value:.6g}"


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_POINTS:
        return points
    stride = len(points) / MAX_POINTS
    kept = [points[int(i * stride)] for i in range(MAX_POINTS - 1)]
    return kept + [points[-1]]


def _seconds(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:.2g} h" if value % 3600 else f"{value / 3600:.0f} h"
    if value >= 120:
        return f"{value / 60:g} min"
    return f"{_fmt(value)} s"


def timeline_svg(stories: list[RankStory], width: int = 1080) -> str:
    """Every rank a row, every attempt a bar from start to end coloured by how it ended; root causes marked."""
    starts = [s.start for st in stories for s in st.spans if s.start is not None]
    ends = [s.end for st in stories for s in st.spans if s.end is not None]
    if not starts:
        return '<p class="empty">No rank has started.</p>'
    t0 = min(starts)
    span = max(max(ends, default=t0), max(starts)) - t0 or 1.0
    hosts = len({st.ref.host for st in stories})
    row = max(4, min(22, 640 // max(1, len(stories))))
    bar = max(3, row - 6)
    left, right, top = (150 if hosts > 1 else 96), 150, 30
    plot_w = width - left - right
    height = top + row * len(stories) + 46
    ticks = [t for t in nice_ticks(0, span, 8) if t <= span * 1.0001]
    x = lambda t: left + (t - t0) / span * plot_w  # noqa: E731
    out = [f'<svg class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="timeline of every rank">']
    out.append(f'<rect x="{left}" y="{top - 4}" width="{plot_w}" height="{row * len(stories) + 8}" '
               f'fill="#fbfbfd" stroke="#d8dae0"/>')
    for tick in ticks:
        tx = left + tick / span * plot_w
        out.append(f'<line x1="{tx:.1f}" y1="{top - 4}" x2="{tx:.1f}" y2="{top + row * len(stories) + 4}" '
                   f'stroke="#e6e8ee"/>')
        out.append(f'<text x="{tx:.1f}" y="{top + row * len(stories) + 20}" class="tick" '
                   f'text-anchor="middle">{_esc(_seconds(tick))}</text>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" class="axis" text-anchor="middle">'
               f'seconds since the first rank started</text>')
    restarts: dict[int, float] = {}
    for story in stories:
        for s in story.spans:
            if s.attempt and s.start is not None:
                restarts[s.attempt] = min(restarts.get(s.attempt, s.start), s.start)
    for attempt, when in sorted(restarts.items()):
        rx = x(when)
        out.append(f'<line x1="{rx:.1f}" y1="{top - 10}" x2="{rx:.1f}" y2="{top + row * len(stories) + 4}" '
                   f'stroke="#555" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{rx + 3:.1f}" y="{top - 12}" class="tick">restart {attempt}</text>')
    labels = []
    for i, story in enumerate(stories):
        y = top + i * row + (row - bar) / 2
        ref = story.ref
        name = f"{ref.host} · rank {ref.rank}" if hosts > 1 else f"rank {ref.rank} · dev {ref.device_id}"
        if row >= 10:
            out.append(f'<text x="{left - 8}" y="{y + bar / 2 + 4:.1f}" class="label" text-anchor="end">'
                       f'{_esc(name)}</text>')
        for s in story.spans:
            if s.start is None:
                continue
            x0, x1 = x(s.start), x(s.end if s.end is not None else s.start)
            colour = OUTCOME_COLOURS[s.outcome][0]
            tip = f"rank {ref.rank}, attempt {s.attempt}: {s.detail or s.label}, " \
                  f"{_seconds(s.start - t0)} to {_seconds((s.end or s.start) - t0)}"
            out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(2.0, x1 - x0):.1f}" height="{bar}" rx="2" '
                       f'fill="{colour}"><title>{_esc(tip)}</title></rect>')
            if s.outcome == "root":
                cy, r = y + bar / 2, max(4.0, bar / 2 + 2)
                out.append(f'<path d="M{x1:.1f} {cy - r:.1f} L{x1 + r:.1f} {cy:.1f} L{x1:.1f} {cy + r:.1f} '
                           f'L{x1 - r:.1f} {cy:.1f} Z" fill="{ROOT_COLOUR}" stroke="#fff" stroke-width="1.5">'
                           f'<title>{_esc("root cause: " + tip)}</title></path>')
                labels.append((x1 + r + 4, cy + 4, f"root cause: {s.label}"))
            elif row >= 14 and s.outcome != "running" and x1 - x0 > 60:
                out.append(f'<text x="{x1 - 4:.1f}" y="{y + bar - 3:.1f}" class="inbar" text-anchor="end">'
                           f'{_esc(s.label)}</text>')
    for lx, ly, text in labels:
        out.append(f'<text x="{lx:.1f}" y="{ly:.1f}" class="root">{_esc(text)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def legend_html(stories: list[RankStory]) -> str:
    """The timeline's colour keys, those it uses."""
    used = {s.outcome for st in stories for s in st.spans}
    return "".join(f'<span class="key"><i style="background:{colour}"></i>{_esc(text)}</span>'
                   for outcome, (colour, text) in OUTCOME_COLOURS.items() if outcome in used)


def chart_svg(name: str, stories: list[RankStory], width: int = 1080, height: int = 360) -> str:
    """One metric: a polyline per rank and attempt (earlier attempts dashed), axes, ticks and a legend."""
    series = [(story, attempt, _thin(sorted(points)))
              for story in stories for attempt, points in sorted(story.metrics.get(name, {}).items()) if points]
    values = [v for _, _, pts in series for _, v in pts if math.isfinite(v)]
    steps = [s for _, _, pts in series for s, _ in pts]
    if not values:
        return ""
    left, right, top, bottom = 70, 130, 16, 46
    plot_w, plot_h = width - left - right, height - top - bottom
    xt, yt = nice_ticks(min(steps), max(steps), 8), nice_ticks(min(values), max(values), 6)
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]
    sx = lambda s: left + (s - x0) / ((x1 - x0) or 1) * plot_w  # noqa: E731
    sy = lambda v: top + plot_h - (v - y0) / ((y1 - y0) or 1) * plot_h  # noqa: E731
    out = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{_esc(name)} per rank over steps">',
           f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fbfbfd" stroke="#d8dae0"/>']
    for tick in xt:
        px = sx(tick)
        out.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{top + plot_h}" stroke="#e6e8ee"/>')
        out.append(f'<text x="{px:.1f}" y="{top + plot_h + 16}" class="tick" text-anchor="middle">'
                   f'{_esc(_fmt(tick))}</text>')
    for tick in yt:
        py = sy(tick)
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{left + plot_w}" y2="{py:.1f}" stroke="#e6e8ee"/>')
        out.append(f'<text x="{left - 6}" y="{py + 4:.1f}" class="tick" text-anchor="end">{_esc(_fmt(tick))}</text>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 8}" class="axis" text-anchor="middle">step</text>')
    out.append(f'<text transform="translate(16 {top + plot_h / 2:.1f}) rotate(-90)" class="axis" '
               f'text-anchor="middle">{_esc(name)}</text>')
    newest = {story.ref.rank: max(story.metrics.get(name, {}) or [0]) for story in stories}
    for story, attempt, pts in series:
        colour = PALETTE[story.ref.rank % len(PALETTE)]
        coords = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in pts if math.isfinite(v))
        style = 'stroke-width="2.5"' if attempt == newest[story.ref.rank] else \
            'stroke-width="1.5" stroke-dasharray="5 4" opacity="0.55"'
        tip = f"rank {story.ref.rank}, attempt {attempt}: {len(pts)} points, last {_fmt(pts[-1][1])}"
        out.append(f'<polyline fill="none" stroke="{colour}" {style} stroke-linejoin="round" '
                   f'points="{coords}"><title>{_esc(tip)}</title></polyline>')
        if len(pts) == 1:
            out.append(f'<circle cx="{sx(pts[0][0]):.1f}" cy="{sy(pts[0][1]):.1f}" r="3" fill="{colour}"/>')
    ranks = sorted({story.ref.rank for story, _, _ in series})
    shown = ranks[:max(1, (plot_h - 10) // 18)]
    for i, rank in enumerate(shown):
        ly = top + 10 + i * 18
        colour = PALETTE[rank % len(PALETTE)]
        out.append(f'<line x1="{left + plot_w + 14}" y1="{ly}" x2="{left + plot_w + 38}" y2="{ly}" '
                   f'stroke="{colour}" stroke-width="3"/>')
        out.append(f'<text x="{left + plot_w + 44}" y="{ly + 4}" class="label">rank {rank}</text>')
    if len(ranks) > len(shown):
        out.append(f'<text x="{left + plot_w + 14}" y="{top + 10 + len(shown) * 18 + 4}" class="tick">'
                   f'+{len(ranks) - len(shown)} more ranks</text>')
    if any(attempt != newest[story.ref.rank] for story, attempt, _ in series):
        ly = top + 14 + (len(shown) + 1) * 18
        out.append(f'<line x1="{left + plot_w + 14}" y1="{ly}" x2="{left + plot_w + 38}" y2="{ly}" '
                   f'stroke="#777" stroke-width="1.5" stroke-dasharray="5 4"/>')
        out.append(f'<text x="{left + plot_w + 44}" y="{ly + 4}" class="tick">earlier attempt</text>')
    out.append("</svg>")
    return "\n".join(out)


# --------------------------------------------------------------------------
# the page
# --------------------------------------------------------------------------


def _when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "-"


def page_context(run: Run, stories: list[RankStory]) -> dict:
    summaries = [s for _, s in sorted(run.summaries.items())]
    starts = [s.start for st in stories for s in st.spans if s.start]
    ends = [s.end for st in stories for s in st.spans if s.end]
    if run.finished:
        statuses = [s.get("status") for s in summaries]
        status = next((st for st in ("failed", "interrupted") if st in statuses), "succeeded")
        code = next((s.get("exit_code") for s in summaries if s.get("exit_code")), 0)
    else:
        status, code = "running or ended without a summary", None
    causes = []
    for summ in summaries:
        for attempt in summ.get("attempts") or [{"attempt": 0, "root_cause": summ.get("root_cause")}]:
            cause = attempt.get("root_cause")
            if cause:
                _, label, detail = _outcome(cause, cause, cause.get("rank"))
                causes.append({"attempt": attempt.get("attempt", 0), "rank": cause.get("rank"),
                               "host": cause.get("host"), "device": cause.get("device_id"), "what": detail,
                               "log": cause.get("log"), "tail": cause.get("log_tail") or [],
                               "message": cause.get("error_file_message"), "stacks": cause.get("stack_file"),
                               "final": attempt is (summ.get("attempts") or [attempt])[-1]})
    names = sorted({n for st in stories for n in st.metrics}, key=lambda n: (n != "loss", n))
    charts = [{"name": n, "svg": chart_svg(n, stories)} for n in names]
    rows = []
    for story in stories:
        last = story.spans[-1] if story.spans else None
        loss = story.metrics.get("loss") or {}
        newest = loss[max(loss)] if loss else []
        rows.append({"rank": story.ref.rank, "host": story.ref.host, "device": story.ref.device_id,
                     "attempts": len(story.spans), "outcome": (last.detail or last.label) if last else "not started",
                     "kind": last.outcome if last else "stopped",
                     "seconds": (f"{last.end - last.start:.1f}" if last and last.start and last.end else "-"),
                     "points": sum(len(p) for m in story.metrics.values() for p in m.values()),
                     "loss": _fmt(newest[-1][1]) if newest else "-"})
    return {"run_id": run.run_id, "run_dir": run.run_dir, "status": status, "exit_code": code,
            "world_size": run.world_size or len(stories), "hosts": sorted({st.ref.host for st in stories}),
            "started": _when(min(starts) if starts else None), "ended": _when(max(ends) if ends else None),
            "duration": f"{max(ends) - min(starts):.1f} s" if starts and ends else "-",
            "attempts": max((len(st.spans) for st in stories), default=0), "root_causes": causes,
            "resumed_from": next((s.get("resumed_from") for s in summaries if s.get("resumed_from")), None),
            "timeline": timeline_svg(stories), "legend": legend_html(stories), "charts": charts, "rows": rows,
            "generated": _when(time.time()), "outcome_colours": OUTCOME_COLOURS}


def render(run_dir: str) -> str:
    import jinja2

    run = load_run(run_dir)
    stories = collect(run)
    env = jinja2.Environment(loader=jinja2.PackageLoader("launcher", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.get_template("report.html.j2").render(**page_context(run, stories))


def cmd_report(args) -> int:
    run_dir = run_directory(args.run_dir, args.output_dir)
    page = render(run_dir)
    output = args.output or f"report-{os.path.basename(run_dir)}.html"
    if output == "-":
        sys.stdout.write(page)
        return 0
    try:
        tmp = f"{output}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(page)
        os.replace(tmp, output)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror}") from None
    print(f"dlaunch: report of {os.path.basename(run_dir)} written to {output}", file=sys.stderr)
    return 0


def add_parser(sub, launch_args) -> None:
    """Register ``report``; ``launch_args`` (run's options) is not needed here."""
    p = sub.add_parser("report", help="write a self-contained HTML page: timeline of every rank, loss curves",
                       description="Write one HTML file that needs no network to view: a timeline of every "
                                   "rank's attempts (start, end, how it ended, the root cause marked) and, per "
                                   "metric, a chart with a line per rank over steps. Metrics are read from the "
                                   "ranks' logs: lines like 'epoch: 1 step: 20, loss is 2.29' (the seeds' "
                                   "LossMonitor) or JSON lines like "
                                   '{"dlaunch": "metric", "step": 20, "loss": 2.29}.')
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?",
                   help="a run directory, or an output directory (its latest run); default: the latest run in "
                        "--output-dir")
    p.add_argument("--output-dir", default="dlaunch_runs", metavar="DIR",
                   help="where run directories are (default ./dlaunch_runs)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="the HTML file to write, - for stdout (default ./report-RUN_ID.html; the run "
                        "directory itself is left as the run left it)")
    p.set_defaults(handler=cmd_report)
