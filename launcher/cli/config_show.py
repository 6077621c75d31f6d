"""``dlaunch config show``: the settings run or cluster would use, each with its source."""

from __future__ import annotations

import argparse
import functools
import json
import sys

from launcher.base.console import printable
from launcher.errors import UsageError
from launcher.settings.launch import LAUNCH_COMMANDS, launch_flags, options_for
from launcher.settings.layers import apply_layers


def _launch_parsers() -> dict[str, argparse.ArgumentParser]:
    """run's and cluster's own parsers, as ``dlaunch run``/``cluster`` parse: config show judges flags with them."""
    from launcher.cli import cluster, run
    from launcher.cli.command_parser import CommandParser

    sub = argparse.ArgumentParser(prog="dlaunch").add_subparsers(parser_class=CommandParser)
    return {"run": run.add_parser(sub), "cluster": cluster.add_parser(sub)}


def _settings_for(args: argparse.Namespace, environ, usage: str) -> tuple[str, dict, dict]:
    """(command, settled options, sources) for ``config show``: --for (or a leading ``run``/``cluster``
    word), else run unless the flags or configs set options only ``cluster`` has."""
    from launcher.cli.command_parser import unrecognized

    flags = list(args.launch_flags)
    chosen = args.for_command
    if flags and flags[0] in LAUNCH_COMMANDS:   # "config show cluster x.py ...": the command named first
        if chosen and chosen != flags[0]:
            raise UsageError(f"config show: --for {chosen} and {flags[0]} name different commands; give one")
        chosen = flags.pop(0)
    tried = [chosen] if chosen else list(LAUNCH_COMMANDS)
    failure: Exception | None = None
    launch_parsers = _launch_parsers()
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
        raise UsageError(clash, usage=usage)
    assert failure is not None   # no command returned: each one tried failed and the first failure was kept
    raise failure


def _clash(unknown: dict[str, list[str]], launch_parsers: dict[str, argparse.ArgumentParser]) -> str | None:
    """Which command takes each flag the tried commands refused, when every refused flag is another launch
    command's: "--rank-start is an option of dlaunch cluster, not run" (None when some flag is nobody's)."""
    def owner(flag: str, refused_by: str) -> str | None:
        name = flag.split("=", 1)[0]
        return next((command for command in launch_parsers
                     if command != refused_by and name in launch_flags(command)), None)

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


def cmd_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import os

    from launcher.plan.environment import mask_value

    command, values, sources = _settings_for(args, os.environ, parser.format_usage())

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


def add_parser(sub) -> None:
    """Register ``config``."""
    p = sub.add_parser("config", help="show the effective launch settings and where each came from",
                       usage="dlaunch config show [--config FILE ...] [--for run|cluster] [--json] "
                             "[launch flags ...]",
                       description="Show the settings dlaunch run (or cluster) would use, each with its source: "
                                   "command line > DLAUNCH_<OPTION> environment variable > YAML file > default. "
                                   "Launch flags given here count as the command line; a leading run or cluster "
                                   "word picks the command, as --for does.")
    p.add_argument("action", choices=["show"])
    p.add_argument("--config", action="append", metavar="FILE", help="YAML config file(s), as for run")
    p.add_argument("--for", dest="for_command", choices=LAUNCH_COMMANDS,
                   help="whose settings (default: run, or cluster when the configs or flags set cluster options)")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(handler=functools.partial(cmd_config, parser=p))
