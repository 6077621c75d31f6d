"""``dlaunch status``: each rank of a run, live or finished (``launcher.observe.status`` does the work)."""

from __future__ import annotations

import argparse

from launcher.cli.observe_args import add_run_arguments
from launcher.cli.request import typed
from launcher.settings.argtypes import positive_seconds


def _run(args: argparse.Namespace) -> int:
    from launcher.observe.status import StatusRequest, cmd_status

    return cmd_status(typed(StatusRequest, args))


def add_parser(sub) -> None:
    """Register ``status``: its parser, and a handler that runs it with a typed request."""
    p = sub.add_parser("status", help="each rank of a run, live or finished: state, CPU, memory, last output",
                       description="One row per rank: host, device, pid, state (starting, running, exited N, "
                                   "died of SIG, hung, ended, remote), CPU % and resident memory of its "
                                   "processes, seconds since its last output and its last line. Works from any "
                                   "terminal while the job runs (live processes, pids*.json) and after it "
                                   "(summary*.json).",
                       epilog="states: ended = gone but its launcher has not written the summary yet; "
                              "remote = on another host, whose processes cannot be seen from here")
    add_run_arguments(p)
    p.add_argument("--watch", action="store_true",
                   help="refresh in place until the run finishes, then exit with its exit code (Ctrl-C stops)")
    p.add_argument("--interval", type=positive_seconds, default=2.0, metavar="SECONDS",
                   help="--watch refresh (default 2)")
    p.add_argument("--json", action="store_true", help="print JSON (with --watch: one object a line)")
    p.add_argument("--hang-after", type=positive_seconds, metavar="SECONDS",
                   help="call a running rank hung when it has printed nothing for this long")
    p.add_argument("--step-pattern", metavar="REGEX",
                   help="a step line of yours: a regex with a named group ms (or s, seconds), e.g. "
                        "'took (?P<ms>[0-9.]+) ms'; Megatron, MindFormers, TimeMonitor lines and HF Trainer's and "
                        "Lightning's progress bars are known already; default: the launch's own --step-pattern")
    p.set_defaults(handler=_run)
