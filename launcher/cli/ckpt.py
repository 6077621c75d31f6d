"""``dlaunch ckpt``: a run's checkpoints listed, merged and resharded (``launcher.observe.ckpt`` does the work)."""

from __future__ import annotations

import argparse
import json
import sys

from launcher.base.console import printable, say
from launcher.cli.observe_args import add_run_dir
from launcher.errors import UsageError
from launcher.settings.argtypes import whole


def cmd_ckpt(args: argparse.Namespace) -> int:
    import os

    from launcher.observe import ckpt as ckpttool
    from launcher.rundir.paths import resolve

    run_dir = resolve(args.run_dir or args.output_dir)
    if not os.path.isdir(run_dir):
        raise UsageError(f"no run directory at {args.run_dir or args.output_dir}")
    if args.ckpt_action == "list":
        rows = ckpttool.list_run(run_dir)
        if args.json:
            json.dump(rows, sys.stdout, indent=2, default=str)
            print()
        else:
            print(f"{printable(run_dir)}:")
            print(ckpttool.format_list(rows))
        return 0
    if args.ckpt_action == "merge":
        done = ckpttool.merge(run_dir, args.output, args.step, force=args.force)
        say(f"merged {done['step']} of {done['ranks']} rank(s): {done['tensors']} tensor(s) ({done['sliced']} "
            f"sliced, {done['replicated']} replicated), {done['bytes']} bytes -> {done['output']}")
        return 0
    done = ckpttool.reshard(run_dir, args.ranks, args.output, args.step)
    if args.json:
        json.dump(done, sys.stdout, indent=2, default=str)
        print()
        return 0
    say(printable(f"resharded {done['step']} of {done['from_ranks']} rank(s) for {done['ranks']} rank(s): "
                  f"{done['sliced']} sliced tensor(s), {len(done['files'])} file(s), {done['bytes']} bytes -> "
                  f"{done['output_dir']} (resume with dlaunch run --ranks {done['ranks']} --resume "
                  f"{done['output_dir']})"))
    return 0


def add_parser(sub) -> None:
    """Register ``ckpt``."""
    p = sub.add_parser("ckpt", help="list, merge and reshard a run's checkpoints",
                       description="Look at the checkpoints of a run directory (each rank's rank_NNN/ckpt/, "
                                   "integrated ones in integrated/), join per-rank slices into one full "
                                   "checkpoint by their strategy files, or re-slice them for another rank count.")
    actions = p.add_subparsers(dest="ckpt_action", metavar="ACTION", required=True)
    for name, text in (("list", "every step found: which ranks have it, sizes, complete or not"),
                       ("merge", "join per-rank slices of one step into one full checkpoint"),
                       ("reshard", "re-slice a checkpoint saved by N ranks for M ranks")):
        a = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        add_run_dir(a, help="run directory (default: the latest run in --output-dir)")
        if name != "list":
            a.add_argument("--step", help="which step, e.g. ckpt-3_156 or 3_156 (default: the newest complete)")
        if name == "merge":
            a.add_argument("-o", "--output", required=True, metavar="FILE", help="the full checkpoint to write")
            a.add_argument("--force", action="store_true", help="replace FILE if it exists")
        if name == "reshard":
            a.add_argument("--ranks", type=whole(1, 65536), required=True, metavar="M", help="the new number of ranks")
            a.add_argument("-o", "--output", required=True, metavar="DIR",
                           help="a new run directory for the resliced checkpoint")
        if name in ("list", "reshard"):
            a.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_ckpt)
