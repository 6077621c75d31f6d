"""dlaunch's argument parsers: every command, its options, defaults and help.

Built-in commands' handlers live in ``cli.commands`` (looked up by command name); commands in modules of
their own register their parser and handler through ``add_parser(sub, launch_args)``. Nothing heavy is
imported here: ``dlaunch --help`` starts in milliseconds.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from launcher import __version__
from launcher.argtypes import port, positive_seconds, seconds, whole
from launcher.config import layerable
from launcher.options import AUTO, CLUSTER_DEFAULT_PORT

MAX_LOCAL_RANKS = 4096  # devices.MAX_DEVICES (not imported here: start-up time)
LAUNCH_COMMANDS = ("run", "cluster")
SCRIPT_ARG_COMMANDS = (*LAUNCH_COMMANDS, "script")  # everything after -- is the training script's


def rank_count(text) -> int | str:
    """``--ranks``: a positive count, or "auto" (one rank per visible device)."""
    word = str(text).strip().lower()
    if word == AUTO:
        return AUTO
    if not word.isascii() or not word.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of ranks or 'auto', not {str(text)[:40]!r}")
    if len(word) > 5 or int(word) > MAX_LOCAL_RANKS:
        raise argparse.ArgumentTypeError(f"{word[:20]}{'...' if len(word) > 20 else ''} is more ranks than one "
                                         f"host runs (at most {MAX_LOCAL_RANKS})")
    return int(word)


def _profile_arg(parser: argparse.ArgumentParser) -> None:
    from launcher.table.rules import DEFAULT_PROFILE, PROFILE_HELP

    parser.add_argument("--profile", choices=sorted(PROFILE_HELP), default=DEFAULT_PROFILE,
                        help="rule set: " + "; ".join(f"{k}: {v}" for k, v in PROFILE_HELP.items()))


def unrecognized(sub: argparse.ArgumentParser, command: str, extras: list[str]) -> str:
    """The message for arguments the command does not know: what, the option meant, where script arguments go."""
    import difflib

    shown = " ".join(extra if len(extra) <= 40 else extra[:40] + "..." for extra in extras[:8])
    message = f"unrecognized arguments: {shown}{' ...' if len(extras) > 8 else ''}"
    known = [flag for action in sub._actions for flag in action.option_strings]
    meant = [close[0] for extra in extras if extra.startswith("--")
             for close in [difflib.get_close_matches(extra.split("=", 1)[0], known, n=1, cutoff=0.75)] if close]
    if meant:
        return message + "; did you mean " + " and ".join(meant) + "?"
    if command in SCRIPT_ARG_COMMANDS:
        message += (f"; arguments for the training script go after --, e.g. dlaunch {command} train.py --ranks 4 "
                    f"-- {shown}")
    return message


def _launch_args(p: argparse.ArgumentParser) -> None:
    """Options shared by run and cluster: what to run, where its files go, how to fail."""
    cwd_rank, cwd_launch = "rank", "launch"  # plan.CWD_RANK, plan.CWD_LAUNCH (not imported: start-up time)

    p.add_argument("script", metavar="SCRIPT", nargs="?",
                   help="training script (a module name with -m, an executable with --no-python); its arguments "
                        "go after --")
    p.add_argument("--config", action="append", metavar="FILE",
                   help="YAML file of options (repeatable, later files win); flags > DLAUNCH_<OPTION> "
                        "environment variables > files > defaults")
    what = p.add_mutually_exclusive_group()
    what.add_argument("-m", "--module", action="store_true", help="SCRIPT is a Python module, run as python -m")
    what.add_argument("--no-python", action="store_true", help="SCRIPT is an executable, run without python")
    p.add_argument("--rank-table", metavar="FILE", help="HCCL rank table; this host runs its own server's devices")
    _profile_arg(p)
    p.add_argument("--output-dir", default="dlaunch_runs", metavar="DIR",
                   help="where run directories go (default ./dlaunch_runs)")
    p.add_argument("--run-id", help="name of the run directory (default: time and a random suffix; for "
                                    "cluster under Slurm, slurm-$SLURM_JOB_ID); hosts of one job share it")
    p.add_argument("--cwd", choices=(cwd_launch, cwd_rank), default=cwd_launch,
                   help="where ranks run: 'launch' (default) all where dlaunch was started, as torchrun and msrun; "
                        "'rank' each in its own rank directory, as the seeds' run.sh (logs and checkpoints "
                        "go to the rank directories either way)")
    p.add_argument("--console", default="0", metavar="WHICH",
                   help="ranks whose output is shown: all, none, or a list such as 0,3 (default 0); "
                        "every rank's output always goes to its log")
    p.add_argument("--grace-period", type=seconds, default=10.0, metavar="SECONDS",
                   help="after SIGTERM, how long ranks may take to exit (e.g. to save) before SIGKILL (default 10)")
    p.add_argument("--max-restarts", type=whole(0, 1000), default=0, metavar="K",
                   help="restart all ranks up to K times after a failure (default 0)")
    p.add_argument("--hang-timeout", type=positive_seconds, metavar="SECONDS",
                   help="stop the job as failed (exit 124) when a rank shows no sign of life (output, "
                        "launcher.heartbeat.beat(), a checkpoint) for this long; every rank's stack is "
                        "saved first (py-spy)")
    p.add_argument("--hccn-conf", default="/etc/hccn.conf", metavar="FILE",
                   help="device NIC addresses for generated rank tables (default /etc/hccn.conf)")
    p.add_argument("--waiting-notice", type=seconds, default=30.0, metavar="SECONDS",
                   help="when every rank here has been silent this long and other hosts of the job have not "
                        "started, say so, and again every minute (default 30; 0: never)")
    p.add_argument("--ms-scheduler", action="store_true",
                   help="MindSpore's dynamic cluster, as msrun starts it: a scheduler process (the same script, "
                        "MS_ROLE=MS_SCHED) beside rank 0, and MS_ROLE/MS_NODE_ID/MS_WORKER_NUM/MS_SCHED_HOST/"
                        "MS_SCHED_PORT for every rank, so mindspore.communication.init() needs no rank table")
    p.add_argument("--ms-topo-timeout", type=positive_seconds, default=600.0, metavar="SECONDS",
                   help="MS_TOPO_TIMEOUT: how long MindSpore waits for the cluster to form (default 600, as "
                        "msrun's --cluster_time_out)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="set a variable for every rank (repeatable)")
    p.add_argument("--env-file", metavar="FILE", help="KEY=VALUE lines to set for every rank")
    p.add_argument("--dry-run", action="store_true", help="print the plan (commands, env, logs) and start nothing")


class DlaunchParser(argparse.ArgumentParser):
    """The top-level parser, which also knows each command's own parser (usage errors show the command's)."""

    subcommands: Mapping[str, argparse.ArgumentParser]


def build_parser() -> DlaunchParser:
    parser = DlaunchParser(
        prog="dlaunch",
        description="Launch distributed training on Ascend NPUs and GPUs: one process per device, "
                    "validated HCCL rank tables, per-rank logs and checkpoints, fail-fast, no orphans.",
        epilog="Run 'dlaunch COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"dlaunch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
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
                                   "hccn.conf (address_N=IP lines); without it device_ip stays empty (CPU/GPU).")
    p.add_argument("--devices", default="0-7", help="device ids: 0-7 or 0,1,2,3 (default 0-7)")
    p.add_argument("--server-id", help="this host's address (default: its primary IPv4 address)")
    p.add_argument("--hccn-conf", default="/etc/hccn.conf", metavar="FILE", help="default /etc/hccn.conf")
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
    _launch_args(p)
    p.add_argument("--master-addr", help="MASTER_ADDR (default 127.0.0.1)")
    p.add_argument("--master-port", type=port, help="MASTER_PORT (default: a free port)")
    devices = p.add_mutually_exclusive_group()
    devices.add_argument("--ranks", type=rank_count, default=AUTO, metavar="N|auto",
                         help="one rank per device for the first N devices this host allows (CUDA_VISIBLE_DEVICES "
                              "or ASCEND_RT_VISIBLE_DEVICES when set, else 0..N-1); auto (default): one per "
                              "visible device")
    devices.add_argument("--devices", metavar="LIST", help="use these devices, e.g. 4,5 or 0-3")
    p.add_argument("--resume", nargs="?", const="", metavar="RUN_DIR",
                   help="resume from the newest checkpoint step every rank completed in RUN_DIR (default: the "
                        "latest run in --output-dir); ranks get DLAUNCH_RESUME_FROM and DLAUNCH_RESUME_STEP")
    p.set_defaults(script_args=[])
    layerable(p)
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
    _launch_args(p)
    p.add_argument("--server-id", help="this host's server_id in the rank table")
    p.add_argument("--rank-start", type=whole(0, 10**9 - 1), metavar="K",
                   help="this host is the server whose first rank is K")
    p.add_argument("--master-addr", help="MASTER_ADDR (default: the server_id of rank 0's server)")
    p.add_argument("--master-port", type=port,
                   help=f"MASTER_PORT (default {CLUSTER_DEFAULT_PORT}, the same on every host)")
    ssh = p.add_argument_group("from a head node over SSH")
    ssh.add_argument("--ssh", action="store_true", help="start every server of the table over SSH from here")
    ssh.add_argument("--ssh-config", metavar="FILE", help="OpenSSH client config (default ~/.ssh/config)")
    ssh.add_argument("--trust-new-hosts", action="store_true",
                     help="accept host keys not yet in known_hosts (and record them); changed keys are "
                          "always refused")
    ssh.add_argument("--remote-python", metavar="PATH",
                     help="Python with dlaunch on the hosts (default: this Python's path)")
    ssh.add_argument("--connect-timeout", type=positive_seconds, default=10.0, metavar="SECONDS",
                     help="SSH connect and preflight timeout per host (default 10)")
    p.set_defaults(script_args=[])
    layerable(p)
    launch_parsers["cluster"] = p

    p = sub.add_parser("config", help="show the effective launch settings and where each came from",
                       usage="dlaunch config show [--config FILE ...] [--for run|cluster] [--json] "
                             "[launch flags ...]",
                       description="Show the settings dlaunch run (or cluster) would use, each with its source: "
                                   "command line > DLAUNCH_<OPTION> environment variable > YAML file > default. "
                                   "Launch flags given here count as the command line.")
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
    # Commands in modules of their own register here: each module's add_parser(sub, launch_args) adds its
    # subparser with set_defaults(handler=...), importing nothing heavy at module level.
    from launcher.scriptgen import add_parser as add_script_parser
    add_script_parser(sub, _launch_args)
    from launcher.observe.status import add_parser as add_status_parser
    add_status_parser(sub, _launch_args)
    from launcher.observe.logs import add_parser as add_logs_parser
    add_logs_parser(sub, _launch_args)
    from launcher.observe.report import add_parser as add_report_parser
    add_report_parser(sub, _launch_args)
    from launcher.observe.prune import add_parser as add_prune_parser
    add_prune_parser(sub)
    parser.set_defaults(_launch_parsers=launch_parsers)
    parser.subcommands = sub.choices   # command name -> its parser: errors show the usage of the command used
    return parser
