"""argparse wiring only: parse, call, print, exit code.

Every command's module is imported inside its handler, so ``dlaunch --help`` and
``dlaunch validate-ranktable`` never pay for paramiko, jinja2 or torch.
Input errors surface as ``UsageError``: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import __version__
from .errors import UsageError

EXIT_INVALID = 1


def _profile_arg(parser: argparse.ArgumentParser) -> None:
    from .topology import DEFAULT_PROFILE, PROFILE_HELP

    parser.add_argument("--profile", choices=sorted(PROFILE_HELP), default=DEFAULT_PROFILE,
                        help="rule set: " + "; ".join(f"{k}: {v}" for k, v in PROFILE_HELP.items()))


def _describe(table) -> str:
    from .topology import summary

    info = summary(table)
    return f"version {info['version']}, {info['servers']} server(s), {info['devices']} device(s)"


def _server_lines(table, limit: int = 8) -> list[str]:
    from .topology import summary

    lines = []
    servers = summary(table)["server_list"]
    for server in servers[:limit]:
        ranks = "-".join(map(str, server["ranks"])) or "?"
        lines.append(f"  server {server['server_id']}: devices {server['devices']}, ranks {ranks}")
    if len(servers) > limit:
        lines.append(f"  ... and {len(servers) - limit} more server(s)")
    return lines


def _load_waiting(path: str, wait: float):
    """Load a table; with --wait, poll until its status says "completed" or the time is up."""
    from .ranktable import RankTableError, load

    deadline = time.monotonic() + wait
    while True:
        try:
            table = load(path)
            if table.status == "completed" or time.monotonic() >= deadline:
                return table
        except RankTableError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def cmd_validate(args: argparse.Namespace) -> int:
    from .ranktable import RankTableError
    from .topology import errors, summary, validate

    results, worst = [], 0
    for path in args.files:
        try:
            table = _load_waiting(path, args.wait)
        except RankTableError as exc:
            results.append({"file": path, "valid": False, "readable": False, "error": str(exc)})
            worst = max(worst, UsageError.exit_code)
            if not args.json:
                print(f"{path}: unreadable: {exc}", file=sys.stderr)
            continue
        problems = validate(table, args.profile)
        bad = errors(problems)
        worst = max(worst, EXIT_INVALID if bad else 0)
        results.append({"file": path, "valid": not bad, "readable": True, "profile": args.profile,
                        "summary": summary(table), "problems": [p.as_dict() for p in problems]})
        if args.json:
            continue
        warnings = len(problems) - len(bad)
        if bad:
            print(f"{path}: INVALID: {len(bad)} error(s), {warnings} warning(s) "
                  f"({_describe(table)}; profile {args.profile})")
        else:
            print(f"{path}: valid ({_describe(table)}; profile {args.profile})"
                  + (f", {warnings} warning(s)" if warnings else ""))
            if not args.quiet:
                print("\n".join(_server_lines(table)))
        for problem in problems:
            print(f"  {problem}")
    if args.json:
        json.dump(results[0] if len(results) == 1 else results, sys.stdout, indent=2, default=str)
        print()
    return worst


def _write_table(table, output: str | None) -> None:
    from .ranktable import dump, dumps

    if output and output != "-":
        try:
            dump(table, output)
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror}") from None
    else:
        sys.stdout.write(dumps(table))


def _refuse_invalid(table, profile: str, what: str) -> None:
    from .topology import errors, validate

    bad = errors(validate(table, profile))
    if bad:
        more = f" (and {len(bad) - 1} more error(s))" if len(bad) > 1 else ""
        raise UsageError(f"{what} breaks rule {bad[0].rule} of profile {profile}: {bad[0].path}: "
                         f"{bad[0].message}{more}; --profile a2 or structure relaxes the rules")


def cmd_gen(args: argparse.Namespace) -> int:
    from .hccn import parse_devices, primary_address, read_hccn_conf, single_server_table

    devices = parse_devices(args.devices)
    table = single_server_table(devices, args.server_id or primary_address(), read_hccn_conf(args.hccn_conf))
    _refuse_invalid(table, args.profile, f"device set {args.devices}")
    _write_table(table, args.output)
    if args.output and args.output != "-":
        print(f"wrote {args.output} ({_describe(table)})", file=sys.stderr)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from .hccn import merge_tables
    from .ranktable import RankTableError, load

    tables = []
    for path in args.files:
        try:
            tables.append((path, load(path)))
        except RankTableError as exc:
            raise UsageError(f"{path}: {exc}") from None
    merged = merge_tables(tables)
    _refuse_invalid(merged, args.profile, "the merged table")
    _write_table(merged, args.output)
    print(f"wrote {args.output} ({_describe(merged)})", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlaunch",
        description="Launch distributed training on Ascend NPUs and GPUs: one process per device, "
                    "validated HCCL rank tables, per-rank logs and checkpoints, fail-fast, no orphans.",
        epilog="Run 'dlaunch COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"dlaunch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("validate-ranktable", help="check HCCL rank tables against the topology rules",
                       description="Check rank-table JSON files against HCCL's topology rules and report every "
                                   "problem with its JSON path, the offending value and how to fix it. "
                                   "Exit 0 valid (warnings allowed), 1 invalid, 2 unreadable.")
    p.add_argument("files", nargs="+", metavar="FILE", help="rank-table JSON file(s)")
    _profile_arg(p)
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help='poll until the table\'s status is "completed" (an operator may still be writing it)')
    p.add_argument("-q", "--quiet", action="store_true", help="do not list the servers of a valid table")
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("gen-ranktable", help="write a one-server rank table (like hccl_tools.py)",
                       description="Write a one-server rank table for the given devices. Device IPs come from "
                                   "hccn.conf (address_N=IP lines); without it device_ip stays empty (CPU/GPU).")
    p.add_argument("--devices", default="0-7", help="device ids: 0-7 or 0,1,2,3 (default 0-7)")
    p.add_argument("--server-id", help="this host's address (default: its primary IPv4 address)")
    p.add_argument("--hccn-conf", default="/etc/hccn.conf", metavar="FILE", help="default /etc/hccn.conf")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    _profile_arg(p)
    p.set_defaults(handler=cmd_gen)

    p = sub.add_parser("merge-ranktable", help="merge per-host rank tables into one",
                       description="Merge per-host tables in server_id string order (the order HCCL requires, "
                                   "not shell glob order), renumber ranks, validate the result.")
    p.add_argument("files", nargs="+", metavar="FILE", help="per-host rank tables")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="merged table to write")
    _profile_arg(p)
    p.set_defaults(handler=cmd_merge)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return UsageError.exit_code
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"dlaunch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
