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

from launcher import __version__
from launcher.argtypes import port, positive_seconds, seconds, whole
from launcher.config import apply_layers, layerable
from launcher.console import printable, say, settle_streams, silence
from launcher.errors import UsageError

EXIT_INVALID = 1
EXIT_BROKEN_PIPE = 141   # 128 + SIGPIPE, what a shell reports for a command whose reader went away
AUTO = "auto"
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


def _load_waiting(path: str, wait: float):
    """Load a table; with --wait, poll until its status says "completed" or the time is up."""
    from launcher.table.model import RankTableError, load

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
    from launcher.table.model import RankTableError
    from launcher.table.rules import errors, summary, validate

    results, worst = [], 0
    for path in args.files:
        try:
            table = _load_waiting(path, args.wait)
        except RankTableError as exc:
            results.append({"file": path, "valid": False, "readable": False, "error": str(exc)})
            worst = max(worst, UsageError.exit_code)
            if not args.json:
                print(printable(f"{path}: unreadable: {exc}"), file=sys.stderr)
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
            print(printable(f"{path}: INVALID: {len(bad)} error(s), {warnings} warning(s) "
                            f"({_describe(table)}; profile {args.profile})"))
        else:
            print(printable(f"{path}: valid ({_describe(table)}; profile {args.profile})"
                            + (f", {warnings} warning(s)" if warnings else "")))
            if not args.quiet:
                print("\n".join(_server_lines(table)))
        for problem in problems:
            print(f"  {problem}")
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
    from launcher.table.build import parse_devices, primary_address, read_hccn_conf, single_server_table
    from launcher.table.rules import require_valid

    devices = parse_devices(args.devices)
    table = single_server_table(devices, args.server_id or primary_address(), read_hccn_conf(args.hccn_conf))
    require_valid(table, args.profile, f"device set {args.devices}")
    _write_table(table, args.output, args.force)
    if args.output and args.output != "-":
        print(f"wrote {args.output} ({_describe(table)})", file=sys.stderr)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from launcher.table.build import merge_tables
    from launcher.table.model import RankTableError, load
    from launcher.table.rules import require_valid

    tables = []
    for path in args.files:
        try:
            tables.append((path, load(path)))
        except RankTableError as exc:
            raise UsageError(f"{path}: {exc}") from None
    merged = merge_tables(tables)
    require_valid(merged, args.profile, "the merged table")
    _write_table(merged, args.output, args.force)
    print(f"wrote {args.output} ({_describe(merged)})", file=sys.stderr)
    return 0


def _load_table(path: str):
    from launcher.table.model import RankTableError, load

    try:
        return load(path)
    except RankTableError as exc:
        raise UsageError(f"rank table {path}: {exc}") from None


def _launch_table(args: argparse.Namespace):
    """(table, this host's server index, table source, device view) from --ranks, --devices or --rank-table.

    The device view is what this host allows (CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES) or shows;
    every device this host runs must be inside what it allows.
    """
    from launcher import host as visible
    from launcher.table.build import parse_devices, read_hccn_conf, single_server_table
    from launcher.table.share import select_server
    from launcher.table.rules import require_valid

    from_table = getattr(args, "rank_table_text", None) is not None or bool(args.rank_table)
    auto = not from_table and args.devices is None and args.ranks == AUTO
    view = visible.discover(probe_hardware=auto)
    if from_table:
        if getattr(args, "rank_table_text", None) is not None:
            from launcher.table.model import RankTableError, loads

            try:
                table = loads(args.rank_table_text)
            except RankTableError as exc:
                raise UsageError(f"rank table from the head: {exc}") from None
            what = "the rank table from the head"
        else:
            table, what = _load_table(args.rank_table), f"rank table {args.rank_table}"
        require_valid(table, args.profile, what)
        if args.command == "run" and len(table.servers) > 1:
            raise UsageError(_multi_host_hint(table, args.rank_table or "rt.json", args.script or "train.py"))
        index = select_server(table, getattr(args, "server_id", None), getattr(args, "rank_start", None))
        server = table.servers[index]
        view.check([dev.device for dev in server.devices], f"{what} (server {server.server_id})")
        return table, index, what, view
    if args.devices is not None:
        devices, what = parse_devices(args.devices), f"--devices {args.devices}"
        view.check(devices, what)
    elif auto:
        devices = visible.auto_count(view)
        what = f"--ranks auto ({len(devices)} device(s) from {view.source})"
    else:
        if args.ranks < 1:
            raise UsageError(f"--ranks must be at least 1, not {args.ranks}")
        devices, what = view.first(args.ranks), f"--ranks {args.ranks}"
    table = single_server_table(devices, "127.0.0.1", read_hccn_conf(args.hccn_conf))
    require_valid(table, args.profile, what)
    return table, 0, what, view


def _multi_host_hint(table, path: str, script: str) -> str:
    """Why ``run`` refuses a table that spans hosts, and the exact commands that run it."""
    import shlex

    starts = [min((d.rank for d in s.devices if d.rank is not None), default=0) for s in table.servers]
    first = shlex.join(["dlaunch", "cluster", script, "--rank-table", path, "--rank-start", str(starts[0]),
                        "--run-id", "JOB"])
    ssh = shlex.join(["dlaunch", "cluster", script, "--rank-table", path, "--ssh"])
    shown = ", ".join(f"{s.server_id} (--rank-start {k})" for s, k in list(zip(table.servers, starts))[:4])
    more = f" and {len(table.servers) - 4} more" if len(table.servers) > 4 else ""
    return (f"{path} spans {len(table.servers)} hosts ({shown}{more}); dlaunch run starts one host. Run "
            f"'{first}' on each host with its own --rank-start and the same --run-id, or '{ssh}' from one "
            f"head node")


def _extra_env(args: argparse.Namespace) -> dict[str, str]:
    """What every rank gets on top of dlaunch's own variables: the head's request (``--ssh``), then
    --env-file, then --env KEY=VALUE.  It goes into the plan, so --dry-run and plan.json show it (masked)."""
    from launcher.envfiles import parse_assignment, read_env_file

    env = dict(getattr(args, "head_env", None) or {})
    env.update(read_env_file(args.env_file) if args.env_file else [])
    env.update(parse_assignment(text, "--env") for text in args.env)
    return env


def launch_options(args: argparse.Namespace, table, server_index: int, host_suffix: str = "",
                   default_port: int | None = None, view=None):
    import os

    from launcher.plan import Command, Options, console_ranks
    from launcher.rundir import check_run_id, new_run_id
    from launcher.execute.attempts import free_port
    from launcher.table.share import master_address

    command = Command(target=args.script if args.module or args.no_python else os.path.abspath(args.script),
                      args=tuple(args.script_args), module=args.module, no_python=args.no_python)
    console = args.console.strip().lower()
    beyond = [r for r in console_ranks(console, table.device_count) if r >= table.device_count]
    if beyond:
        raise UsageError(f"--console names rank {beyond[0]} but the job has {table.device_count} ranks")
    master_addr = args.master_addr or master_address(table)
    run_id = args.run_id or (_scheduler_run_id() if args.command == "cluster" else None)
    return Options(command=command, run_id=check_run_id(run_id) if run_id else new_run_id(),
                   output_dir=os.path.abspath(args.output_dir), launch_dir=os.getcwd(), python=sys.executable,
                   cwd_mode=args.cwd, console=console, grace_period=args.grace_period,
                   max_restarts=args.max_restarts, master_addr=master_addr,
                   master_port=args.master_port or default_port or free_port(master_addr),
                   host_files_suffix=host_suffix, extra_env=_extra_env(args), waiting_notice=args.waiting_notice,
                   ms_scheduler=args.ms_scheduler, ms_topo_timeout=args.ms_topo_timeout,
                   **({"devices": view} if view is not None else {}))


def _scheduler_run_id() -> str | None:
    """The run id every host of one scheduled job agrees on without being told: the job's id (Slurm)."""
    import os
    import re

    job = os.environ.get("SLURM_JOB_ID", "")
    return f"slurm-{job}" if re.fullmatch(r"[0-9]{1,20}", job) else None


def hang_timeout(args: argparse.Namespace) -> float | None:
    return args.hang_timeout   # checked by its type (argtypes.positive_seconds) in every layer


def cmd_run(args: argparse.Namespace) -> int:
    import os

    from launcher.execute.attempts import launch

    table, server_index, _, view = _launch_table(args)
    opts = launch_options(args, table, server_index, view=view)
    resume_from = None
    if args.resume is not None:
        from launcher.rundir import resolve

        resume_from = resolve(args.resume or opts.output_dir)
        if not os.path.isdir(resume_from):
            raise UsageError(f"--resume: no run directory at {args.resume or opts.output_dir}")
    return launch(table, server_index, opts, dry_run=args.dry_run, shared_run_dir=bool(args.run_id),
                  fixed_port=args.master_port is not None, resume_from=resume_from,
                  hang_timeout=hang_timeout(args))


CLUSTER_DEFAULT_PORT = 29500


def cmd_cluster(args: argparse.Namespace, control=None, on_started=None) -> int:
    from launcher.plan import host_suffix
    from launcher.execute.attempts import launch

    if args.ssh:
        from launcher.execute.ssh.head import launch_over_ssh

        return launch_over_ssh(args)
    if not args.rank_table and getattr(args, "rank_table_text", None) is None:
        raise UsageError("dlaunch cluster needs --rank-table FILE: on each host, dlaunch cluster SCRIPT "
                         "--rank-table FILE --rank-start K; or from one head node, dlaunch cluster SCRIPT "
                         "--rank-table FILE --ssh")
    table, server_index, _, view = _launch_table(args)
    suffix = host_suffix(table.servers[server_index].server_id)
    opts = launch_options(args, table, server_index, host_suffix=suffix, default_port=CLUSTER_DEFAULT_PORT,
                          view=view)
    return launch(table, server_index, opts, dry_run=args.dry_run, shared_run_dir=True, fixed_port=True,
                  prefix_host=True, on_started=on_started, control=control, hang_timeout=hang_timeout(args))


def settle(args: argparse.Namespace, sub: argparse.ArgumentParser, script_args_given: bool,
           environ=None) -> argparse.Namespace:
    """Fill options from the environment, config files and defaults; a script is required by then."""
    import os

    args._sources = apply_layers(args, sub, os.environ if environ is None else environ, script_args_given)
    if not args.script:
        resume = getattr(args, "resume", None)
        if resume and (resume.endswith(".py") or os.path.isfile(resume)):
            raise UsageError(f"no SCRIPT given: --resume took {resume} as its run directory (its value is "
                             f"optional); put --resume after the script: dlaunch {args.command} {resume} ... --resume",
                             usage=sub.format_usage())
        raise UsageError(f"dlaunch {args.command}: no SCRIPT given (on the command line or as script: in a config)",
                         usage=sub.format_usage())
    return args


def _unrecognized(sub: argparse.ArgumentParser, command: str, extras: list[str]) -> str:
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
            print(f"{run_dir}:")
            print(ckpttool.format_list(rows))
        return 0
    if args.ckpt_action == "merge":
        done = ckpttool.merge(run_dir, args.output, args.step, force=args.force)
        print(f"merged {done['step']} of {done['ranks']} rank(s): {done['tensors']} tensor(s) ({done['sliced']} "
              f"sliced, {done['replicated']} replicated), {done['bytes']} bytes -> {done['output']}", file=sys.stderr)
        return 0
    done = ckpttool.reshard(run_dir, args.ranks, args.output, args.step)
    print(f"resharded for {args.ranks} rank(s) -> {args.output}: " + json.dumps(done, default=str), file=sys.stderr)
    return 0


def _settings_for(args: argparse.Namespace, environ) -> tuple[str, argparse.Namespace, dict]:
    """(command, settled options, sources) for ``config show``: --for, else run unless the flags or configs
    set options only ``cluster`` has."""
    tried = [args.for_command] if args.for_command else list(LAUNCH_COMMANDS)
    failure: Exception | None = None
    for command in tried:
        sub = args._launch_parsers[command]
        layered, extras = sub.parse_known_args(args.launch_flags)
        if extras:
            failure = failure or UsageError(_unrecognized(sub, "config", extras), usage=sub.format_usage())
            continue
        layered.config = (args.config or []) + (layered.config or [])
        try:
            return command, layered, apply_layers(layered, sub, environ)
        except UsageError as exc:
            failure = failure or exc
    raise failure


def cmd_config(args: argparse.Namespace) -> int:
    import os

    from launcher.environment import mask_value

    command, layered, sources = _settings_for(args, os.environ)

    def safe(value):   # secrets inside --env KEY=VALUE items (and any other KEY=VALUE text) are masked
        if isinstance(value, list):
            return [safe(item) for item in value]
        return mask_value("", value) if isinstance(value, str) else value

    shown = {dest: {"value": safe(getattr(layered, dest) if dest != "args" else layered.script_args),
                    "source": src} for dest, src in sources.items()}
    if args.json:
        json.dump(shown, sys.stdout, indent=2, default=str)
        print()
        return 0
    if args.for_command is None:
        print(f"settings of dlaunch {command}" + (" (the config or flags set options only cluster has)"
                                                  if command == "cluster" else ""))
    width = max(map(len, shown))
    for dest, item in shown.items():
        print(f"{dest.replace('_', '-'):{width}}  {item['value']!r:30}  {item['source']}")
    return 0


def cmd_from_head() -> int:
    """``cluster --from-head``: this host's launcher, its request read from the SSH channel (see hostagent)."""
    import os

    from launcher.execute.ssh import agent as hostagent

    request, pending = hostagent.read_request(0)
    args = build_parser().parse_args(["cluster", *map(str, request["argv"])])
    args.script_args = [str(a) for a in request.get("script_args", [])]
    settle(args, args._launch_parsers["cluster"], True, environ={})
    args.rank_table_text = request.get("rank_table")
    args.head_env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}

    def started(ranks):
        hostagent.emit("started", ranks=len(ranks), at=min(r.start for r in ranks))

    return cmd_cluster(args, control=(0, pending), on_started=started)


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("gen-ranktable", help="write a one-server rank table (like hccl_tools.py)",
                       description="Write a one-server rank table for the given devices. Device IPs come from "
                                   "hccn.conf (address_N=IP lines); without it device_ip stays empty (CPU/GPU).")
    p.add_argument("--devices", default="0-7", help="device ids: 0-7 or 0,1,2,3 (default 0-7)")
    p.add_argument("--server-id", help="this host's address (default: its primary IPv4 address)")
    p.add_argument("--hccn-conf", default="/etc/hccn.conf", metavar="FILE", help="default /etc/hccn.conf")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    _profile_arg(p)
    p.set_defaults(handler=cmd_gen)

    p = sub.add_parser("merge-ranktable", help="merge per-host rank tables into one",
                       description="Merge per-host tables in server_id string order (the order HCCL requires, "
                                   "not shell glob order), renumber ranks, validate the result.")
    p.add_argument("files", nargs="+", metavar="FILE", help="per-host rank tables")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="merged table to write")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    _profile_arg(p)
    p.set_defaults(handler=cmd_merge)

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
    p.set_defaults(handler=cmd_run, script_args=[])
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
    p.set_defaults(handler=cmd_cluster, script_args=[])
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
    p.set_defaults(handler=cmd_config)
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
    p.set_defaults(handler=cmd_ckpt)
    # Commands in modules of their own register here: each module's add_parser(sub, launch_args) adds its
    # subparser with set_defaults(handler=...), importing nothing heavy at module level.
    from launcher.scriptgen import add_parser as add_script_parser
    add_script_parser(sub, _launch_args)
    from launcher.observe.status import add_parser as add_watch_parser
    add_watch_parser(sub, _launch_args)
    from launcher.observe.report import add_parser as add_report_parser
    add_report_parser(sub, _launch_args)
    from launcher.observe.prune import add_parser as add_prune_parser
    add_prune_parser(sub)
    from launcher.cli.msrun import add_parser as add_msrun_parser
    add_msrun_parser(sub, _launch_args)
    parser.set_defaults(_launch_parsers=launch_parsers)
    parser.subcommands = sub.choices   # command name -> its parser: errors show the usage of the command used
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    cut_at = None
    if argv and argv[0] in SCRIPT_ARG_COMMANDS and "--" in argv:
        cut_at = argv.index("--")
        argv, script_args = argv[:cut_at], argv[cut_at + 1:]
    if argv == ["cluster", "--from-head"]:
        handler = cmd_from_head
    else:
        args, extras = parser.parse_known_args(argv)
        if not getattr(args, "handler", None):
            parser.print_help()
            return UsageError.exit_code
        if args.command == "config":
            args.launch_flags = extras   # launch flags, judged by run's or cluster's parser in cmd_config
        elif extras:
            sub = parser.subcommands[args.command]
            sub.error(_unrecognized(sub, args.command, extras))
        if args.command in SCRIPT_ARG_COMMANDS:
            args.script_args, args.script_args_given = script_args, cut_at is not None
        if args.command in LAUNCH_COMMANDS:
            sub = args._launch_parsers[args.command]
            handler = lambda: args.handler(settle(args, sub, cut_at is not None))  # noqa: E731
        else:
            handler = lambda: args.handler(args)  # noqa: E731
    try:
        return handler()
    except UsageError as exc:
        say(f"error: {printable(exc)}", usage=exc.usage)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:   # a command's own output (a report, a table) could not be delivered: as SIGPIPE would
        silence(sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    finally:
        settle_streams()
