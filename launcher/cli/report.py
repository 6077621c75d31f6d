"""``dlaunch report``: a run's self-contained HTML page (``launcher.observe.report`` does the work)."""

from __future__ import annotations

import argparse

from launcher.cli.observe_args import add_run_dir
from launcher.cli.request import typed


def _run(args: argparse.Namespace) -> int:
    from launcher.observe.report import ReportRequest, cmd_report

    return cmd_report(typed(ReportRequest, args))


def add_parser(sub) -> None:
    """Register ``report``: its parser, and a handler that runs it with a typed request."""
    p = sub.add_parser("report", help="write a self-contained HTML page: command, timeline, loss and accuracy",
                       description="Write one HTML file that needs no network to view: the command and settings "
                                   "the ranks ran with, a timeline of every rank's attempts (start, end, how it "
                                   "ended, the root cause marked) and, per metric, a chart with a line per rank "
                                   "over steps (losses on a log scale). Metrics are read from the ranks' logs: "
                                   "lines like 'epoch: 1 step: 20, loss is 2.29' (the seeds' LossMonitor), "
                                   "'accuracy is 0.91', 'acc: 0.91', {'accuracy': 0.91}, or JSON lines like "
                                   '{"dlaunch": "metric", "step": 20, "loss": 2.29}. Step times (Megatron, '
                                   "MindFormers, MindSpore TimeMonitor lines, HF Trainer's and Lightning's progress "
                                   "bars) get a chart with a line per rank and a table of the slowest ranks and "
                                   "hosts with their straggler scores, as dlaunch status reads them.")
    add_run_dir(p)
    p.add_argument("-o", "--output", metavar="FILE",
                   help="the HTML file to write, - for stdout (default ./report-RUN_ID.html; the run "
                        "directory itself is left as the run left it)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--step-pattern", metavar="REGEX",
                   help="a step line of yours, as for dlaunch status: a regex with a named group ms (or s, "
                        "seconds), e.g. 'took (?P<ms>[0-9.]+) ms'")
    p.set_defaults(handler=_run)
