"""dlaunch's argument parsers: every command, its options, defaults and help.

Built-in commands' handlers live in ``cli.commands`` (looked up by command name); commands in modules of
their own register their parser (and handler) through ``add_parser(sub)``. Nothing heavy is
imported here: ``dlaunch --help`` starts in milliseconds.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import replace

from launcher import __version__
from launcher.argtypes import seconds, whole
from launcher.options import CLUSTER_DEFAULT_PORT, LAUNCH_COMMANDS, PROFILE, add_launch_arguments, options_for

SCRIPT_ARG_COMMANDS = (*LAUNCH_COMMANDS, "script")  # everything after -- is the training script's


def _profile_arg(parser: argparse.ArgumentParser) -> None:
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
    import difflib

    if command in LAUNCH_COMMANDS:
        from launcher.cli.torchrun import run_hint

        hint = run_hint(extras)
        if hint:
            return hint
    shown = " ".join(extra if len(extra) <= 40 else extra[:40] + "..." for extra in extras[:8])
    message = f"unrecognized arguments: {shown}{' ...' if len(extras) > 8 else ''}"
    known = _flags(sub)
    meant = [close[0] for extra in extras if extra.startswith("--")
             for close in [difflib.get_close_matches(extra.split("=", 1)[0], known, n=1, cutoff=0.75)] if close]
    if meant:
        return message + "; did you mean " + " and ".join(meant) + "?"
    if command in SCRIPT_ARG_COMMANDS:
        message += (f"; arguments for the training script go after --, e.g. dlaunch {command} train.py --ranks 4 "
                    f"-- {shown}")
    return message


class CommandParser(argparse.ArgumentParser):
    """A command's parser. With ``intermixed`` set, positionals may come before, between or after options
    (``dlaunch script slurm -o job.sh train.py``): plain argparse binds all positionals in the first run of
    bare words, so a positional after an option would be "unrecognized"; ``parse_known_intermixed_args``
    reads the options first and the positionals after."""

    intermixed = False
    _intermixing = False

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
    launch_parsers: dict[str, argparse.ArgumentParser]   # run's and cluster's: config show parses with them


def build_parser() -> DlaunchParser:
    parser = DlaunchParser(
        prog="dlaunch",
        description="Launch distributed training on Ascend NPUs and GPUs: one process per device, "
                    "validated HCCL rank tables, per-rank logs and checkpoints, fail-fast, no orphans.",
        epilog="Run 'dlaunch COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"dlaunch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    launch_parsers: dict[str, argparse.ArgumentParser] = {}

    p = sub.add_parser("validate-ranktable", help="check HCCL rank tables against the topology rules",
                       description="Check rank-table JSON files against HCCL's topology rules and report every "
                                   "problem with its JSON path, the offending value and how to fix it. "
                                   "Exit 0 valid (warnings allowed), 1 invalid, 2 unreadable.")
    p.add_argument("files", nargs="+", metavar="FILE", help="rank-table JSON file(s)")
    _profile_arg(p)
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--wait", type=seconds, default=0.0, metavar="SECONDS",
                   help='poll until the table\'s status is "completed" (an operator may still be writing it)')
    p.add_argument("-q", "--quiet", action="store_true", help="do not list the servers of a valid table")

    p = sub.add_parser("gen-ranktable", help="write a one-server rank table (like hccl_tools.py)",
                       description="Write a one-server rank table for the given devices. Device IPs come from "
                                   "hccn.conf (address_N=IP lines); without it from hccn_tool -i N -ip -g where "
                                   "the driver's hccn_tool is present; else device_ip stays empty (CPU/GPU).")
    p.add_argument("--devices", default="0-7", help="device ids: 0-7 or 0,1,2,3 (default 0-7)")
    p.add_argument("--server-id", help="this host's address (default: its primary IPv4 address)")
    p.add_argument("--hccn-conf", default="/etc/hccn.conf", metavar="FILE", help="default /etc/hccn.conf")
    p.add_argument("--hccn-tool", metavar="PATH", help="without hccn.conf, read each device's address with this "
                                                      "hccn_tool (-ip -g); default: PATH or the driver's tools")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    _profile_arg(p)

    p = sub.add_parser("merge-ranktable", help="merge per-host rank tables into one",
                       description="Merge per-host tables in server_id string order (the order HCCL requires, "
                                   "not shell glob order), renumber ranks, validate the result.")
    p.add_argument("files", nargs="+", metavar="FILE", help="per-host rank tables")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="merged table to write")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    _profile_arg(p)

    p = sub.add_parser("run", help="start one process per device on this host",
                       usage="dlaunch run SCRIPT [options] [-- script arguments]",
                       description="Start one process per device on this host with the environment MindSpore "
                                   "(DEVICE_ID, RANK_ID, RANK_SIZE, RANK_TABLE_FILE) and PyTorch (RANK, LOCAL_RANK, "
                                   "WORLD_SIZE, MASTER_ADDR, ... as torchrun) expect. Every run gets its own "
                                   "directory with per-rank logs and checkpoint directories. One rank failing "
                                   "stops all; the exit code is the failing rank's.",
                       epilog="examples: dlaunch run train.py --ranks 8 -- --epochs 3;  "
                              "dlaunch run --devices 4,5 train.py;  dlaunch run train.py --rank-table rt.json")
    add_launch_arguments(p, options_for("run"))
    launch_parsers["run"] = p

    p = sub.add_parser("cluster", help="run this host's share of a multi-host job, or every host's over SSH",
                       usage="dlaunch cluster SCRIPT --rank-table FILE [options] [-- script arguments]",
                       description="Run this host's share of a multi-host rank table (the seeds' run_cluster.sh): "
                                   "everything dlaunch run does, with ranks, devices and GROUP_RANK from the "
                                   "table, MASTER_ADDR = rank 0's server, and MASTER_PORT fixed "
                                   f"(default {CLUSTER_DEFAULT_PORT}) so every host agrees without talking. "
                                   "This host's server: --rank-start, --server-id, a server_id that is one of "
                                   "this host's addresses, or SLURM_NODEID. With --ssh, start every server's "
                                   "share from this head node over SSH.",
                       epilog="examples: dlaunch cluster train.py --rank-table rt16.json --rank-start 8 "
                              "--run-id job42;  dlaunch cluster train.py --rank-table rt16.json --ssh")
    add_launch_arguments(p, options_for("cluster"))
    launch_parsers["cluster"] = p

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
    p = sub.add_parser("ckpt", help="list, merge and reshard a run's checkpoints",
                       description="Look at the checkpoints of a run directory (each rank's rank_NNN/ckpt/, "
                                   "integrated ones in integrated/), join per-rank slices into one full "
                                   "checkpoint by their strategy files, or re-slice them for another rank count.")
    actions = p.add_subparsers(dest="ckpt_action", metavar="ACTION", required=True)
    for name, text in (("list", "every step found: which ranks have it, sizes, complete or not"),
                       ("merge", "join per-rank slices of one step into one full checkpoint"),
                       ("reshard", "re-slice a checkpoint saved by N ranks for M ranks")):
        a = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        a.add_argument("run_dir", metavar="RUN_DIR", nargs="?",
                       help="run directory (default: the latest run in --output-dir)")
        a.add_argument("--output-dir", default="dlaunch_runs", metavar="DIR", help="default ./dlaunch_runs")
        if name != "list":
            a.add_argument("--step", help="which step, e.g. ckpt-3_156 or 3_156 (default: the newest complete)")
        if name == "merge":
            a.add_argument("-o", "--output", required=True, metavar="FILE", help="the full checkpoint to write")
            a.add_argument("--force", action="store_true", help="replace FILE if it exists")
        if name == "reshard":
            a.add_argument("--ranks", type=whole(1, 65536), required=True, metavar="M", help="the new number of ranks")
            a.add_argument("-o", "--output", required=True, metavar="DIR",
                           help="a new run directory for the resliced checkpoint")
        if name == "list":
            a.add_argument("--json", action="store_true", help="print JSON")
    # Commands in modules of their own register here: each module's add_parser(sub) adds its subparser with
    # set_defaults(handler=...), importing nothing heavy at module level.
    from launcher.cli import checknet, logs, msrun, prune, report, script, status, torchrun
    for module in (script, status, logs, report, prune, msrun, torchrun, checknet):
        module.add_parser(sub)
    parser.launch_parsers = launch_parsers
    parser.subcommands = sub.choices   # command name -> its parser: errors show the usage of the command used
    return parser
