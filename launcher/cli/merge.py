"""``dlaunch merge-ranktable``: per-host rank tables merged in HCCL's order and renumbered."""

from __future__ import annotations

import argparse

from launcher.base.console import say
from launcher.cli.command_parser import profile_arg
from launcher.cli.tables import describe, write_table


def cmd_merge(args: argparse.Namespace) -> int:
    from launcher.table.build import merge_tables
    from launcher.table.rules import require_valid
    from launcher.table.share import read_table

    tables = [(path, read_table(path)[1]) for path in args.files]
    merged = merge_tables(tables)
    require_valid(merged, args.profile, "the merged table")
    write_table(merged, args.output, args.force)
    say(f"wrote {args.output} ({describe(merged)})")
    return 0


def add_parser(sub) -> None:
    """Register ``merge-ranktable``."""
    p = sub.add_parser("merge-ranktable", help="merge per-host rank tables into one",
                       description="Merge per-host tables in server_id string order (the order HCCL requires, "
                                   "not shell glob order), renumber ranks, validate the result.")
    p.add_argument("files", nargs="+", metavar="FILE", help="per-host rank tables")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="merged table to write")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    profile_arg(p)
    p.set_defaults(handler=cmd_merge)
