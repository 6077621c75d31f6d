"""``dlaunch logs``: ranks' logs, and --follow (``launcher.observe.logs`` does the work)."""

from __future__ import annotations

import argparse

from launcher.cli.observe_args import add_run_arguments
from launcher.cli.request import typed
from launcher.settings.argtypes import whole


def _run(args: argparse.Namespace) -> int:
    from launcher.observe.logs import LogsRequest, cmd_logs

    return cmd_logs(typed(LogsRequest, args))


def add_parser(sub) -> None:
    """Register ``logs``: its parser, and a handler that runs it with a typed request."""
    p = sub.add_parser("logs", help="print ranks' logs, each line prefixed [rankN]: ; --follow to stream",
                       description="Print ranks' output logs, each line prefixed [rankN]: . Lines carry no "
                                   "time, so what is already written is printed rank by rank, each in file "
                                   "order; with --follow, lines appended afterwards are printed as they "
                                   "appear (within 0.1 s), interleaved in the order they arrived, until the "
                                   "run is over. Default: every rank's newest attempt.")
    add_run_arguments(p)
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines until the run has finished, then exit with its exit code "
                        "(Ctrl-C stops); follows restarts")
    p.add_argument("-n", "--lines", type=whole(0, 10**7), metavar="N",
                   help="start with only the last N lines of each rank")
    p.add_argument("--attempt", metavar="K",
                   help="which attempt's log: 0 the first, 1 after the first restart, ..., or all "
                        "(default: each rank's newest)")
    p.set_defaults(handler=_run)
