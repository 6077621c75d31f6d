"""What every command's parser shares: the parser classes, --profile without layers, the message for
arguments a command does not know.  The command modules import this, never ``cli.parsers`` (which imports
them all)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
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


def unrecognized(sub: argparse.ArgumentParser, command: str, extras: list[str], *, argv: list[str] | None = None,
                 script: str | None = None, script_args: Sequence[str] = ()) -> str:
    """The message for arguments the command does not know: what, the option meant, where script arguments go.
    Given the command line (``argv``, command first, without -- and ``script_args``) and the ``script`` it
    named, the fix is that line itself, dlaunch's own flags kept before --."""
    if command in LAUNCH_COMMANDS:
        from launcher.cli.fronts.torchrun import run_hint

        hint = run_hint(extras)
        if hint:
            return hint
    shown = " ".join(short(extra) for extra in extras[:8])
    message = f"unrecognized arguments: {shown}{' ...' if len(extras) > 8 else ''}"
    if command in SCRIPT_ARG_COMMANDS and argv and script and _is_python(script):   # dlaunch run python train.py
        return f"{message}; dlaunch starts the script with Python itself: drop {short(script)}, e.g. " + \
            _without_python(argv, script, extras, script_args)
    known = _flags(sub)
    meant = [close for extra in extras if extra.startswith("--") for close in [_meant(extra, known)] if close]
    if meant:
        message += "; did you mean " + " and ".join(meant) + "?"
    if command in SCRIPT_ARG_COMMANDS:   # a flag not exactly dlaunch's may be the script's (--device, not --devices)
        fixed = (separated(argv, extras, script_args) if argv else
                 command_line([command, "train.py", "--ranks", "4"], extras))
        whose = " If they are the script's, a" if meant else "; a"
        message += f"{whose}rguments for the training script go after --, e.g. {fixed}"
    return message


def _without_python(argv: list[str], script: str, extras: list[str], script_args: Sequence[str]) -> str:
    """``dlaunch run python [-u] train.py ARGS`` as ``dlaunch run train.py -- ARGS``."""
    at = next((i for i, word in enumerate(extras) if not word.startswith("-")), len(extras))
    own = list(argv)
    for word in [script, *extras[:at]]:   # python, then its own flags (-u, -X dev)
        if word in own:
            own.remove(word)
    return separated(own, extras[at + 1:], script_args)


def _is_python(script: str) -> bool:
    import os
    import re

    return re.fullmatch(r"python[\d.]*", os.path.basename(script)) is not None


def short(word: str) -> str:
    """A word of the user's command line as a hint quotes it: a 5,000-digit value is not repeated whole."""
    return word if len(word) <= 40 else word[:40] + "..."


def command_line(own: list[str], script_args: Sequence[str]) -> str:
    """``dlaunch OWN -- SCRIPT_ARGS`` as a user would type it (quoted, long words and lines cut)."""
    import shlex

    words = ["dlaunch", *own, *(["--"] if script_args else []), *script_args]
    return " ".join(shlex.quote(short(word)) for word in words[:24]) + (" ..." if len(words) > 24 else "")


def separated(argv: list[str], late: list[str], script_args: Sequence[str] = ()) -> str:
    """The command line ``argv`` (command first) with the words ``late`` moved after --, ahead of the
    ``script_args`` already there: the fix for script arguments given among dlaunch's own."""
    own, bound = list(argv), len(argv)
    for word in reversed(late):   # the rightmost occurrence: script arguments come late on a line
        at = next((i for i in range(bound - 1, 0, -1) if own[i] == word), None)
        if at is not None:
            del own[at]
            bound = at
    return command_line(own, [*late, *script_args])


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
