"""``dlaunch prune``: old run directories removed, the newest kept (``launcher.observe.prune`` does the work)."""

from __future__ import annotations

import argparse
import os

from launcher.cli.observe_args import add_output_dir
from launcher.cli.request import typed
from launcher.settings.argtypes import whole


def _run(args: argparse.Namespace) -> int:
    from launcher.observe.prune import PruneRequest, cmd_prune

    return cmd_prune(typed(PruneRequest, args))


def add_parser(sub) -> None:
    """Register ``prune``: its parser, and a handler that runs it with a typed request."""
    p = sub.add_parser("prune", help="remove old run directories, keeping the newest N",
                       description="Free the memory areas of --memory-ckpt runs whose dlaunch is gone (SIGKILLed), "
                                   "after persisting what they hold; remove old run directories from "
                                   "--output-dir, keeping the newest --keep N (by "
                                   "start time). A run that may still be running (a host with a plan and no "
                                   "summary whose launcher is not known to be gone) is never removed.")
    p.add_argument("--keep", type=whole(0, 10**6), metavar="N",
                   help="how many of the newest runs to keep (without it, only memory areas are freed)")
    p.add_argument("--memory-root", default=os.environ.get("DLAUNCH_MEMORY_ROOT") or "/dev/shm", metavar="DIR",
                   help="where --memory-ckpt's areas live (default $DLAUNCH_MEMORY_ROOT, else /dev/shm): those whose "
                        "dlaunch is gone are persisted into their runs' checkpoint directories, then freed")
    add_output_dir(p)
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.set_defaults(handler=_run)
