"""dlaunch's top-level parser, built from one module per command, and what the command parsers share.

Every command lives in a module of ``launcher.cli`` whose ``add_parser(sub)`` adds its parser and registers
its handler (``set_defaults(handler=...)``): one way to add a command. Nothing heavy is imported here or
there: ``dlaunch --help`` starts in milliseconds.
"""

from __future__ import annotations

from launcher import __version__
from launcher.cli import (
    checknet,
    ckpt,
    cluster,
    config_show,
    gen,
    logs,
    merge,
    msrun,
    prune,
    report,
    run,
    script,
    status,
    torchrun,
    validate,
)
from launcher.cli.command_parser import (  # noqa: F401  (SCRIPT_ARG_COMMANDS, unrecognized: the CLI's names)
    SCRIPT_ARG_COMMANDS,
    CommandParser,
    DlaunchParser,
    unrecognized,
)

# One module per command (as pip): each module's add_parser(sub) adds its parser and registers its handler
# (set_defaults(handler=...)), importing nothing heavy at module level. A new command is a new module, listed
# here in the order help shows it.
COMMANDS = (validate, gen, merge, run, cluster, config_show, ckpt, script, status, logs, report, prune, msrun,
            torchrun, checknet)

def build_parser() -> DlaunchParser:
    parser = DlaunchParser(
        prog="dlaunch",
        description="Launch distributed training on Ascend NPUs and GPUs: one process per device, "
                    "validated HCCL rank tables, per-rank logs and checkpoints, fail-fast, no orphans.",
        epilog="Run 'dlaunch COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"dlaunch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for module in COMMANDS:
        module.add_parser(sub)
    parser.subcommands = sub.choices   # command name -> its parser: errors show the usage of the command used
    return parser
