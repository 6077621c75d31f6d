"""The built-in commands' handlers: each takes settled arguments, calls one stage, prints, returns the exit code.

Every stage's module is imported inside its handler, so ``dlaunch --help`` and ``dlaunch
validate-ranktable`` never pay for paramiko, jinja2 or torch. Input errors surface as ``UsageError``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from launcher.cli.parsers import build_parser, unrecognized
from launcher.config import apply_layers
from launcher.console import printable, say
from launcher.contract import ExitCode
from launcher.errors import UsageError
from launcher.options import (
    LAUNCH_COMMANDS,
    adopt_pod,
    head_launch,
    launch_options,
    launch_table,
    nodes_share,
    options_for,
)
from launcher.request import LaunchRequest


def _describe(table) -> str:
    from launcher.table.rules import summary

    info = summary(table)
    return f"version {info['version']}, {info['servers']} server(s), {info['devices']} device(s)"


def _server_lines(table, limit: int = 8) -> list[str]:
    from launcher.table.rules import summary

    lines = []
    servers = summary(table)["server_list"]
    for server in servers[:limit]:
        ranks = "-".join(map(str, server["ranks"])) or "?"
        lines.append(printable(f"  server {server['server_id']}: devices {server['devices']}, ranks {ranks}"))
    if len(servers) > limit:
        lines.append(f"  ... and {len(servers) - limit} more server(s)")
    return lines


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
                            f"({_describe(table)}; profile {args.profile})"))
        else:
            print(printable(f"{path}: valid ({_describe(table)}; profile {args.profile})"
                            + (f", {warnings} warning(s)" if warnings else "")))
            if not args.quiet:
                print("\n".join(_server_lines(table)))
        for problem, count in grouped(problems):   # --json keeps every problem; people read one line a mistake
            print(f"  {problem}" + (f" ({count} places)" if count > 1 else ""))
    if args.json:
        json.dump(results[0] if len(results) == 1 else results, sys.stdout, indent=2, default=str)
        print()
    return worst


def _write_table(table, output: str | None, force: bool) -> None:
    from launcher.table.model import dumps
    from launcher.userfiles import write_output

    text = dumps(table)
    write_output(output or "-", lambda fh: fh.write(text), force=force)


def cmd_gen(args: argparse.Namespace) -> int:
    from launcher.table.build import parse_devices, primary_address, read_hccn_conf, read_hccn_tool, single_server_table
    from launcher.table.rules import require_valid

    devices = parse_devices(args.devices)
    addresses = read_hccn_conf(args.hccn_conf) or read_hccn_tool(devices, args.hccn_conf, args.hccn_tool)
    table = single_server_table(devices, args.server_id or primary_address(), addresses)
    require_valid(table, args.profile, f"device set {args.devices}")
    _write_table(table, args.output, args.force)
    if args.output and args.output != "-":
        say(f"wrote {args.output} ({_describe(table)})")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from launcher.table.build import merge_tables
    from launcher.table.rules import require_valid
    from launcher.table.share import read_table

    tables = [(path, read_table(path)[1]) for path in args.files]
    merged = merge_tables(tables)
    require_valid(merged, args.profile, "the merged table")
    _write_table(merged, args.output, args.force)
    say(f"wrote {args.output} ({_describe(merged)})")
    return 0


def cmd_run(args: LaunchRequest) -> int:
    from launcher.execute.attempts import launch

    table, server_index, _, view = launch_table(args)
    return launch(table, server_index, launch_options(args, table, server_index, view=view), dry_run=args.dry_run)


def cmd_cluster(args: LaunchRequest, control=None, on_started=None) -> int:
    from launcher.execute.attempts import launch

    checking = args.check_network and not args.dry_run
    if checking:
        from launcher.cli.checknet import check_before_launch
    if args.ssh:
        from launcher.execute.ssh.head import launch_over_ssh

        text, head_table, opts = head_launch(args)
        if checking:
            check_before_launch(args, text, head_table, None)
        return launch_over_ssh(args, text, head_table, opts)
    shared = nodes_share(args, os.environ)
    if shared is None and not args.rank_table and args.rank_table_text is None:
        shared = adopt_pod(args, os.environ)
        if shared is None:
                raise UsageError("dlaunch cluster needs --rank-table FILE: on each host, dlaunch cluster SCRIPT "
                             "--rank-table FILE --rank-start K; or from one head node, dlaunch cluster SCRIPT "
                             "--rank-table FILE --ssh")
    args = shared or args
    table, server_index, _, view = launch_table(args)
    if checking:
        check_before_launch(args, "", table, server_index)
    reread = (args.rank_table, args.profile, args.server_id, args.rank_start) if args.rank_table else None
    return launch(table, server_index, launch_options(args, table, server_index, view=view), dry_run=args.dry_run,
                  on_started=on_started, control=control, reread=reread)


def cmd_ckpt(args: argparse.Namespace) -> int:
    import os

    from launcher.observe import ckpt as ckpttool
    from launcher.rundir import resolve

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
    say(f"resharded for {args.ranks} rank(s) -> {args.output}: " + json.dumps(done, default=str))
    return 0


def _settings_for(args: argparse.Namespace, environ) -> tuple[str, dict, dict]:
    """(command, settled options, sources) for ``config show``: --for (or a leading ``run``/``cluster``
    word), else run unless the flags or configs set options only ``cluster`` has."""
    flags = list(args.launch_flags)
    chosen = args.for_command
    if flags and flags[0] in LAUNCH_COMMANDS:   # "config show cluster x.py ...": the command named first
        if chosen and chosen != flags[0]:
            raise UsageError(f"config show: --for {chosen} and {flags[0]} name different commands; give one")
        chosen = flags.pop(0)
    tried = [chosen] if chosen else list(LAUNCH_COMMANDS)
    failure: Exception | None = None
    launch_parsers = build_parser().launch_parsers
    unknown: dict[str, list[str]] = {}
    for command in tried:
        sub = launch_parsers[command]
        layered, extras = sub.parse_known_args(flags)
        if extras:
            unknown[command] = extras
            failure = failure or UsageError(unrecognized(sub, "config", extras), usage=sub.format_usage())
            continue
        layered.config = (args.config or []) + (layered.config or [])
        try:
            return (command, *apply_layers(vars(layered), options_for(command), environ))
        except UsageError as exc:
            failure = failure or exc
    clash = _clash(unknown, launch_parsers) if len(unknown) == len(tried) else None
    if clash:
        raise UsageError(clash, usage=build_parser().subcommands["config"].format_usage())
    assert failure is not None   # no command returned: each one tried failed and the first failure was kept
    raise failure


def _clash(unknown: dict[str, list[str]], launch_parsers: dict[str, argparse.ArgumentParser]) -> str | None:
    """Which command takes each flag the tried commands refused, when every refused flag is another launch
    command's: "--rank-start is an option of dlaunch cluster, not run" (None when some flag is nobody's)."""
    def owner(flag: str, refused_by: str) -> str | None:
        name = flag.split("=", 1)[0]
        return next((command for command, sub in launch_parsers.items()
                     if command != refused_by and name in sub._option_string_actions), None)

    said = []
    for command, extras in unknown.items():
        flags = [extra for extra in extras if extra.startswith("-")]
        owners = {flag.split("=", 1)[0]: owner(flag, command) for flag in flags}
        if not flags or None in owners.values():
            return None
        for flag, other in owners.items():
            said.append(f"{printable(flag)} is an option of dlaunch {other}, not {command}")
    if len(unknown) > 1:
        return "config show: " + "; ".join(said) + ": no one command takes them all (drop one side)"
    return f"config show --for {next(iter(unknown))}: " + "; ".join(said)


def cmd_config(args: argparse.Namespace) -> int:
    import os

    from launcher.environment import mask_value

    command, values, sources = _settings_for(args, os.environ)

    def safe(value):   # secrets inside --env KEY=VALUE items (and any other KEY=VALUE text) are masked
        if isinstance(value, list):
            return [safe(item) for item in value]
        return mask_value("", value) if isinstance(value, str) else value

    shown = {dest: {"value": safe(values[dest]), "source": src} for dest, src in sources.items()}
    if args.json:
        json.dump(shown, sys.stdout, indent=2, default=str)
        print()
        return 0
    if args.for_command is None:
        print(f"settings of dlaunch {command}" + (" (the config or flags set options only cluster has)"
                                                  if command == "cluster" else ""))
    width = max(map(len, shown))
    for dest, item in shown.items():
        print(f"{dest.replace('_', '-'):{width}}  {printable(_plain(item['value'])):30}  {item['source']}")
    return 0


def _plain(value) -> str:
    """A setting as a person writes it (atlas910, not 'atlas910'; - for unset; true; a list as words)."""
    import shlex

    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(shlex.quote(str(item)) for item in value) or "(none)"
    return str(value) if value != "" else "''"


def cmd_msrun(args: argparse.Namespace) -> int:
    """An msrun command line, carried out as the dlaunch run or cluster it translates to (``cli.msrun``)."""
    from launcher.cli.msrun import link_msrun_logs, settled_launch

    command, request = settled_launch(args)
    if not request.dry_run:
        try:
            link_msrun_logs(args, request.output_dir)
        except OSError as exc:   # msrun's names are a convenience: the run goes on without them
            say(f"msrun's log names (worker_N.log) not made in {request.output_dir}: {exc.strerror}")
    return LAUNCHERS[command](request)


def cmd_torchrun(args: argparse.Namespace) -> int:
    """A torchrun command line, carried out as the dlaunch run or cluster it translates to (``cli.torchrun``)."""
    from launcher.cli.torchrun import settled_launch

    command, request = settled_launch(args)
    return LAUNCHERS[command](request)


LAUNCHERS: dict[str, Callable[..., int]] = {"run": cmd_run, "cluster": cmd_cluster}   # take a LaunchRequest
HANDLERS: dict[str, Callable[..., int]] = {
    "validate-ranktable": cmd_validate, "gen-ranktable": cmd_gen, "merge-ranktable": cmd_merge, **LAUNCHERS,
    "config": cmd_config, "ckpt": cmd_ckpt, "msrun": cmd_msrun, "torchrun": cmd_torchrun}
