"""dlaunch's top-level parser, built from one module per command, and what the command parsers share.

Every command lives in a module of ``launcher.cli`` whose ``add_parser(sub)`` adds its parser and registers
its handler (``set_defaults(handler=...)``), and is named in ``COMMANDS``: one way to add a command. Nothing
heavy is imported here or there, and a command imports no other command's module: ``dlaunch --help`` starts
in milliseconds.
"""

from __future__ import annotations

import importlib

from launcher import __version__
from launcher.cli.command_parser import (  # noqa: F401  (SCRIPT_ARG_COMMANDS, unrecognized: the CLI's names)
    SCRIPT_ARG_COMMANDS,
    CommandParser,
    DlaunchParser,
    unrecognized,
)

# One module per command (as pip): each module's add_parser(sub) adds its parser and registers its handler
# (set_defaults(handler=...)), importing nothing heavy at module level. A new command is a new module, listed
# here (command name -> module of launcher.cli) in the order help shows it.
COMMANDS = {"validate-ranktable": "validate", "gen-ranktable": "gen", "merge-ranktable": "merge", "run": "run",
            "cluster": "cluster", "config": "config_show", "ckpt": "ckpt", "script": "script", "status": "status",
            "logs": "logs", "report": "report", "prune": "prune", "msrun": "fronts.msrun",
            "torchrun": "fronts.torchrun", "check-network": "checknet"}


def build_parser(command: str | None = None) -> DlaunchParser:
    """The top-level parser.  Given the ``command`` being run, only that command's module is imported and its
    parser built: the others would cost every launch their imports and parsers for nothing;
    without one (help, an unknown word), every command's."""
    wanted = [command] if command in COMMANDS else list(COMMANDS)
    parser = DlaunchParser(
        prog="dlaunch",
        description="Launch distributed training on Ascend NPUs and GPUs: one process per device, "
                    "validated HCCL rank tables, per-rank logs and checkpoints, fail-fast, no orphans.",
        epilog="Run 'dlaunch COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"dlaunch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for name in wanted:
        importlib.import_module(f"launcher.cli.{COMMANDS[name]}").add_parser(sub)
    parser.subcommands = sub.choices   # command name -> its parser: errors show the usage of the command used
    return parser
