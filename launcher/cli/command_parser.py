"""What every command's parser shares: the parser classes, --profile without layers, the message for
arguments a command does not know.  The command modules import this, never ``cli.parsers`` (which imports
them all)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import replace

from launcher.settings.launch import LAUNCH_COMMANDS, PROFILE

SCRIPT_ARG_COMMANDS = (*LAUNCH_COMMANDS, "script")  # everything after -- is the training script's


def profile_arg(parser: argparse.ArgumentParser) -> None:
    """--profile on a command that takes it without the DLAUNCH_*/YAML layers (the rank-table commands)."""
    replace(PROFILE, layered=False).add_to(parser)


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    """The long flags a parser takes, read from its help's option lines ("  -m, --module", "  --x VALUE")."""
    import re

    found = set()
    for line in parser.format_help().splitlines():
        invocation = re.match(r"^ {2,6}(-\S.*?)(?: {2,}|$)", line)
        if invocation:
            found.update(re.findall(r"(?:^|, )(--[\w-]+)", invocation.group(1)))
    return sorted(found)


def unrecognized(sub: argparse.ArgumentParser, command: str, extras: list[str]) -> str:
    """The message for arguments the command does not know: what, the option meant, where script arguments go."""
    if command in LAUNCH_COMMANDS:
        from launcher.cli.fronts.torchrun import run_hint

        hint = run_hint(extras)
        if hint:
            return hint
    shown = " ".join(extra if len(extra) <= 40 else extra[:40] + "..." for extra in extras[:8])
    message = f"unrecognized arguments: {shown}{' ...' if len(extras) > 8 else ''}"
    known = _flags(sub)
    meant = [close for extra in extras if extra.startswith("--") for close in [_meant(extra, known)] if close]
    if meant:
        message += "; did you mean " + " and ".join(meant) + "?"
    if command in SCRIPT_ARG_COMMANDS:   # a flag not exactly dlaunch's may be the script's (--device, not --devices)
        whose = " If they are the script's, a" if meant else "; a"
        message += (f"{whose}rguments for the training script go after --, e.g. dlaunch {command} train.py --ranks 4 "
                    f"-- {shown}")
    return message


def _meant(extra: str, known: list[str]) -> str | None:
    """The one flag ``extra`` abbreviates (flags are taken only whole), else the nearest, else None."""
    import difflib

    flag = extra.split("=", 1)[0]
    longer = [option for option in known if option.startswith(flag)]
    if len(longer) == 1:
        return longer[0]
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
    return close[0] if close else None


class CommandParser(argparse.ArgumentParser):
    """A command's parser. With ``intermixed`` set, positionals may come before, between or after options
    (``dlaunch script slurm -o job.sh train.py``): plain argparse binds all positionals in the first run of
    bare words, so a positional after an option would be "unrecognized"; ``parse_known_intermixed_args``
    reads the options first and the positionals after.

    No abbreviations: argparse would take a script's ``--device=cpu`` for dlaunch's ``--devices``; a flag
    that is not exactly dlaunch's is refused with the hint that script arguments go after --. The fronts
    (torchrun, msrun) say ``allow_abbrev=True``, as the launchers they stand for parse."""

    intermixed = False
    _intermixing = False

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        if not self.intermixed or self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


class DlaunchParser(argparse.ArgumentParser):
    """The top-level parser, which also knows each command's own parser (usage errors show the command's)."""

    subcommands: Mapping[str, argparse.ArgumentParser]
