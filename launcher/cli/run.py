"""``dlaunch run``: one host's ranks, from a settled ``LaunchRequest`` (``cli.request`` builds it)."""

from __future__ import annotations

import argparse
import os

from launcher.plan.settle import launch_options
from launcher.plan.share import launch_table
from launcher.settings.launch import add_launch_arguments, options_for
from launcher.settings.request import LaunchRequest


def cmd_run(args: LaunchRequest) -> int:
    from launcher.cli.cluster import rescued
    from launcher.execute.attempts import launch

    table, server_index, _, view = launch_table(args, os.environ)
    opts = launch_options(args, table, server_index, os.environ, view=view)
    rescued(opts, args.dry_run)   # --memory-ckpt: a SIGKILLed dlaunch's area, on disk before the resume point is read
    return launch(table, server_index, opts, dry_run=args.dry_run, environ=os.environ)


def add_parser(sub) -> argparse.ArgumentParser:
    """Register ``run``."""
    p = sub.add_parser("run", help="start one process per device on this host",
                       usage="dlaunch run SCRIPT [options] [-- script arguments]",
                       description="Start one process per device on this host with the environment MindSpore "
                                   "(DEVICE_ID, RANK_ID, RANK_SIZE, RANK_TABLE_FILE) and PyTorch (RANK, LOCAL_RANK, "
                                   "WORLD_SIZE, MASTER_ADDR, ... as torchrun) expect. Every run gets its own "
                                   "directory with per-rank logs and checkpoint directories. One rank failing "
                                   "stops all; the exit code is the failing rank's.",
                       epilog="examples: dlaunch run train.py --ranks 8 -- --epochs 3;  "
                              "dlaunch run --devices 4,5 train.py;  dlaunch run train.py --rank-table rt.json")
    add_launch_arguments(p, options_for("run"))
    p.set_defaults(handler=cmd_run)
    return p
