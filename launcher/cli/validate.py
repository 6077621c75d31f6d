"""``dlaunch validate-ranktable``: rank tables checked against a profile's rules, every problem reported."""

from __future__ import annotations

import argparse
import json
import sys

from launcher.base.console import printable, say
from launcher.cli.command_parser import profile_arg
from launcher.cli.tables import describe, server_lines
from launcher.contract import ExitCode
from launcher.errors import UsageError
from launcher.settings.argtypes import seconds


def cmd_validate(args: argparse.Namespace) -> int:
    from launcher.table.model import RankTableError
    from launcher.table.rules import errors, grouped, summary, validate
    from launcher.table.share import load_completed

    results, worst = [], 0
    for path in args.files:
        try:
            table = load_completed(path, args.wait)
        except RankTableError as exc:
            results.append({"file": path, "valid": False, "readable": False, "error": str(exc)})
            worst = max(worst, UsageError.exit_code)
            if not args.json:
                say(printable(f"{path}: unreadable: {exc}"))
            continue
        problems = validate(table, args.profile)
        bad = errors(problems)
        worst = max(worst, ExitCode.FAILED if bad else 0)
        results.append({"file": path, "valid": not bad, "readable": True, "profile": args.profile,
                        "summary": summary(table), "problems": [p.as_dict() for p in problems]})
        if args.json:
            continue
        warnings = len(problems) - len(bad)
        if bad:
            print(printable(f"{path}: INVALID: {len(bad)} error(s), {warnings} warning(s) "
                            f"({describe(table)}; profile {args.profile})"))
        else:
            print(printable(f"{path}: valid ({describe(table)}; profile {args.profile})"
                            + (f", {warnings} warning(s)" if warnings else "")))
            if not args.quiet:
                print("\n".join(server_lines(table)))
        for problem, count in grouped(problems):   # --json keeps every problem; people read one line a mistake
            print(f"  {problem}" + (f" ({count} places)" if count > 1 else ""))
    if args.json:
        json.dump(results[0] if len(results) == 1 else results, sys.stdout, indent=2, default=str)
        print()
    return worst


def add_parser(sub) -> None:
    """Register ``validate-ranktable``."""
    p = sub.add_parser("validate-ranktable", help="check HCCL rank tables against the topology rules",
                       description="Check rank-table JSON files against HCCL's topology rules and report every "
                                   "problem with its JSON path, the offending value and how to fix it. "
                                   "Exit 0 valid (warnings allowed), 1 invalid, 2 unreadable.")
    p.add_argument("files", nargs="+", metavar="FILE", help="rank-table JSON file(s)")
    profile_arg(p)
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--wait", type=seconds, default=0.0, metavar="SECONDS",
                   help='poll until the table\'s status is "completed" (an operator may still be writing it)')
    p.add_argument("-q", "--quiet", action="store_true", help="do not list the servers of a valid table")
    p.set_defaults(handler=cmd_validate)
