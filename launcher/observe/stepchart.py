"""The report's step times: every rank's step lines read as ``dlaunch status`` reads them
(``stragglers.log_steps``: the last MiB of the rank's newest log, with the CPU work per step its launch
measured, ``stragglers.with_work``), drawn by ``charts.chart_svg`` (the metric
charts' drawer, a line per rank in its own colour) and scored by ``stragglers.scores`` for the tables of
the slowest ranks and hosts.

The x axis is the n-th step line each rank printed, not the step the line names: MindFormers and Lightning
count steps within an epoch, so their numbers start again every epoch.
"""

from __future__ import annotations

from launcher.base.steps import UserPattern
from launcher.base.stragglers import RankSteps, log_steps, scores, with_work
from launcher.contract import Role
from launcher.observe.charts import chart_svg, rank_colour
from launcher.observe.metrics import Points, RankStory
from launcher.rundir.read import RankRef, current_attempt, log_path

NAME = "step time (ms)"     # the chart's value axis
SHOWN = 10                  # the slowest ranks (and hosts) listed; every flagged one too, up to MAX_SHOWN
MAX_SHOWN = 100


class StepLines(Points):
    """A rank's step times at x = 1, 2, ...: the order its log printed them."""

    axis = "step line"


def read_ranks(refs: list[RankRef], user: UserPattern | None = None) -> list[tuple[RankRef, int, RankSteps]]:
    """(rank, its newest attempt, its step times) of every rank (not MindSpore's scheduler), every host's."""
    found = []
    for ref in refs:
        if ref.role == Role.RANK:
            attempt = current_attempt(ref)
            steps = with_work(log_steps(log_path(ref, attempt), ref.rank, ref.host, user), ref.rank_dir)
            found.append((ref, attempt, steps))
    return found


def _slowest(rows: list[dict]) -> tuple[list[dict], int, int]:
    """(the rows listed, how many are not, how many of those are flagged): rows come slowest first."""
    flagged = sum(1 for row in rows if row["flagged"])
    shown = rows[:max(SHOWN, min(MAX_SHOWN, flagged))]
    return shown, len(rows) - len(shown), flagged - sum(1 for row in shown if row["flagged"])


def step_section(refs: list[RankRef], user: UserPattern | None = None) -> dict | None:
    """The report's step-time section, or None when no rank printed a step line (the page then has none)::

        {"svg", "threshold", "count" (ranks with step times), "flagged", "ranks": [scores' rows + "colour"],
         "hidden", "hidden_flagged", "hosts" (only when there are several), "hidden_hosts"}
    """
    read = read_ranks(refs, user)
    report = scores([steps for _, _, steps in read])
    if report is None:
        return None
    stories = []
    for ref, attempt, steps in read:
        if steps.times:
            points = StepLines()
            for index, ms in enumerate(steps.times, 1):
                points.add((index, ms))
            stories.append(RankStory(ref, metrics={NAME: {attempt: points.finish()}}))
    ranks, hidden, hidden_flagged = _slowest([{**row, "colour": rank_colour(row["rank"])} for row in report["ranks"]])
    hosts, hidden_hosts, _ = _slowest(report["hosts"]) if len(report["hosts"]) > 1 else ([], 0, 0)
    return {"svg": chart_svg(NAME, stories), "threshold": report["threshold"], "count": len(report["ranks"]),
            "flagged": sum(1 for row in report["ranks"] if row["flagged"]), "ranks": ranks, "hidden": hidden,
            "hidden_flagged": hidden_flagged, "hosts": hosts, "hidden_hosts": hidden_hosts}
