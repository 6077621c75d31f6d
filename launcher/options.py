"""Every launch option, declared once; and settled arguments -> the rank table, this host's share, ``Options``.

``LAUNCH_OPTIONS`` is the one declaration of ``run``'s and ``cluster``'s options: the parsers
(``launcher.cli.parsers``), the ``DLAUNCH_*``/YAML layers (``launcher.config``) and the flags of
generated scripts (``launcher.scriptgen``) are built from it. Between the parsers and the plan, every
launch setting ends up in one ``plan.Options`` here, so ``--dry-run`` and ``plan.json`` show it.
``cluster --ssh``'s head, the host launchers and ``dlaunch script`` use the same functions, and nothing
here imports the CLI: the functions below take the settled ``request.LaunchRequest``, never a Namespace.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from launcher.argtypes import port, positive_seconds, seconds, whole
from launcher.config import FLAG, LIST, OPTIONAL, Option, add_options
from launcher.errors import UsageError
from launcher.execute.forwarding import signal_list, signal_names
from launcher.host import MAX_DEVICES
from launcher.table.rules import DEFAULT_PROFILE, PROFILE_HELP

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from typing import Any

    from launcher.request import LaunchRequest

AUTO = "auto"                 # --ranks auto: one rank per visible device
CLUSTER_DEFAULT_PORT = 29500  # cluster hosts agree on MASTER_PORT without talking (torchrun's default too)
LAUNCH_COMMANDS = ("run", "cluster")
MAX_LOCAL_RANKS = MAX_DEVICES   # one rank per device
SSH_GROUP = "from a head node over SSH"


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


PROFILE = Option(("--profile",), "rule set: " + "; ".join(f"{k}: {v}" for k, v in PROFILE_HELP.items()),
                 choices=tuple(sorted(PROFILE_HELP)), default=DEFAULT_PROFILE, to_hosts=True)


def _shared(*flags: str, **declared) -> tuple[Option, tuple[str, ...]]:
    return Option(flags, **declared), LAUNCH_COMMANDS


# (option, the commands that take it). Help texts name defaults from the declared values.
_DECLARED: list[tuple[Option, tuple[str, ...]]] = [
    _shared("--config", kind=LIST, layered=False, metavar="FILE",
            help="YAML file of options (repeatable, later files win); flags > DLAUNCH_<OPTION> environment "
                 "variables > files > defaults"),
    _shared("-m", "--module", kind=FLAG, exclusive="what", default=False,
            help="SCRIPT is a Python module, run as python -m", to_hosts=True),
    _shared("--no-python", kind=FLAG, exclusive="what", default=False,
            help="SCRIPT is an executable, run without python", to_hosts=True),
    _shared("--rank-table", metavar="FILE", rivals="devices",   # a table, or --ranks/--devices (run)
            help="HCCL rank table; this host runs its own server's devices"),
    (PROFILE, LAUNCH_COMMANDS),
    _shared("--output-dir", default="dlaunch_runs", metavar="DIR",
            help="where run directories go (default ./dlaunch_runs)", to_hosts=True),
    _shared("--run-id", from_env=False,   # DLAUNCH_RUN_ID is the rank contract's: a parent job's id, not ours
            help="name of the run directory (default: time and a random suffix; for cluster under Slurm, "
                 "slurm-$SLURM_JOB_ID); hosts of one job share it", to_hosts=True),
    _shared("--cwd", choices=("launch", "rank"), default="launch",   # plan.CWD_LAUNCH, plan.CWD_RANK
            help="where ranks run: 'launch' (default) all where dlaunch was started, as torchrun and msrun; "
                 "'rank' each in its own rank directory, as the seeds' run.sh (logs and checkpoints go to the "
                 "rank directories either way)", to_hosts=True),
    _shared("--console", default="0", metavar="WHICH",
            help="ranks whose output is shown: all, none, or a list such as 0,3 (default 0); every rank's "
                 "output always goes to its log", to_hosts=True),
    _shared("--grace-period", type=seconds, default=10.0, metavar="SECONDS",
            help="after SIGTERM, how long ranks may take to exit (e.g. to save) before SIGKILL (default 10)",
            to_hosts=True),
    _shared("--forward-signals", type=signal_list, spell=signal_names, metavar="SIG,...",
            help="signals forwarded to every rank without stopping the job, besides SIGUSR1 and SIGUSR2 "
                 "(e.g. WINCH,URG); SIGINT/SIGTERM/SIGHUP/SIGQUIT always stop it", to_hosts=True),
    _shared("--termination-log", metavar="FILE",
            help="write a failed run's root cause here (a container's termination message); default: "
                 "/dev/termination-log when dlaunch is PID 1 and it is writable"),
    _shared("--max-restarts", type=whole(0, 1000), default=0, metavar="K",
            help="restart all ranks up to K times after a failure (default 0)", to_hosts=True),
    _shared("--hang-timeout", type=positive_seconds, metavar="SECONDS",
            help="stop the job as failed (exit 124) when a rank shows no sign of life (output, "
                 "launcher.heartbeat.beat(), a checkpoint) for this long; every rank's stack is saved first "
                 "(py-spy)", to_hosts=True),
    _shared("--hccn-conf", default="/etc/hccn.conf", metavar="FILE",
            help="device NIC addresses for generated rank tables (default /etc/hccn.conf)"),
    _shared("--waiting-notice", type=seconds, default=30.0, metavar="SECONDS",
            help="when every rank here has been silent this long and other hosts of the job have not started, "
                 "say so, and again every minute (default 30; 0: never)", to_hosts=True),
    _shared("--ms-scheduler", kind=FLAG, default=False,
            help="MindSpore's dynamic cluster, as msrun starts it: a scheduler process (the same script, "
                 "MS_ROLE=MS_SCHED) beside rank 0, and MS_ROLE/MS_NODE_ID/MS_WORKER_NUM/MS_SCHED_HOST/"
                 "MS_SCHED_PORT for every rank, so mindspore.communication.init() needs no rank table", to_hosts=True),
    _shared("--ms-topo-timeout", type=positive_seconds, default=600.0, metavar="SECONDS",
            help="MS_TOPO_TIMEOUT: how long MindSpore waits for the cluster to form (default 600, as msrun's "
                 "--cluster_time_out)", to_hosts=True),
    _shared("--env", kind=LIST, default=[], metavar="KEY=VALUE", help="set a variable for every rank (repeatable)"),
    _shared("--env-file", metavar="FILE", help="KEY=VALUE lines to set for every rank"),
    _shared("--dry-run", kind=FLAG, layered=False, default=False,
            help="print the plan (commands, env, logs) and start nothing"),
    # run only
    (Option(("--master-addr",), "MASTER_ADDR (default 127.0.0.1)"), ("run",)),
    (Option(("--master-port",), "MASTER_PORT (default: a free port)", type=port), ("run",)),
    (Option(("--ranks",), "one rank per device for the first N devices this host allows (CUDA_VISIBLE_DEVICES "
                          "or ASCEND_RT_VISIBLE_DEVICES when set, else 0..N-1); auto (default): one per visible "
                          "device", type=rank_count, default=AUTO, metavar="N|auto", exclusive="devices"),
     ("run",)),
    (Option(("--devices",), "use these devices, e.g. 4,5 or 0-3", metavar="LIST", exclusive="devices"), ("run",)),
    (Option(("--resume",), "resume from the newest checkpoint step every rank completed in RUN_DIR (default: the "
                           "latest run in --output-dir); ranks get DLAUNCH_RESUME_FROM and DLAUNCH_RESUME_STEP",
            kind=OPTIONAL, const="", metavar="RUN_DIR"), ("run",)),
    # cluster only
    (Option(("--server-id",), "this host's server_id in the rank table"), ("cluster",)),
    (Option(("--rank-start",), "this host is the server whose first rank is K", type=whole(0, 10**9 - 1),
            metavar="K"), ("cluster",)),
    (Option(("--nnodes",), "without a rank table: the job's number of hosts, node K running ranks K*N.. "
                           "(with --node-rank K on each, as torchrun's --nnodes)", type=whole(1, 10**6),
            metavar="N"), ("cluster",)),
    (Option(("--node_rank", "--node-rank"), "with --nnodes: this host's index, 0 to N-1",
            type=whole(0, 10**6 - 1), metavar="K"), ("cluster",)),
    (Option(("--nproc_per_node", "--nproc-per-node"),
            "with --nnodes: ranks per host, a number or auto (one per visible GPU or NPU, else one per CPU, as "
            "torchrun; default auto)", metavar="N|auto"), ("cluster",)),
    (Option(("--master-addr",), "MASTER_ADDR (default: the server_id of rank 0's server)", to_hosts=True),
     ("cluster",)),
    (Option(("--master-port",), f"MASTER_PORT (default {CLUSTER_DEFAULT_PORT}, the same on every host)",
            type=port, to_hosts=True), ("cluster",)),
    (Option(("--check-network",), "before starting ranks, run dlaunch check-network on the table (every host with "
                                  "--ssh) and refuse to start when a device fails; costs a few hccn_tool calls "
                                  "and up to --health-timeout seconds", kind=FLAG, default=False), ("cluster",)),
    (Option(("--hccn-tool",), "hccn_tool for --check-network (default: PATH, else the driver's tools directory)",
            metavar="PATH"), ("cluster",)),
    (Option(("--health-timeout",), "--check-network: how long a device's net health may take to turn Success "
                                   "(default 30)", type=positive_seconds, default=30.0, metavar="SECONDS"),
     ("cluster",)),
    (Option(("--job-port",), "the port on the master address where the master host's dlaunch coordinates the "
                             "job's hosts (default: MASTER_PORT + 1)", type=port, metavar="PORT", to_hosts=True),
     ("cluster",)),
    (Option(("--host-timeout",), "a host of the job that sends nothing for this long is lost and the job stops "
                                 "(default 15; heartbeats every fifth of it)", type=positive_seconds, default=15.0,
            metavar="SECONDS", to_hosts=True), ("cluster",)),
    (Option(("--join-timeout",), "every host of the job must have joined within this long, else the job stops "
                                 "(default 180)", type=positive_seconds, default=180.0, metavar="SECONDS",
            to_hosts=True),
     ("cluster",)),
    (Option(("--ssh",), "start every server of the table over SSH from here", kind=FLAG, default=False,
            group=SSH_GROUP), ("cluster",)),
    (Option(("--ssh-config",), "OpenSSH client config (default ~/.ssh/config)", metavar="FILE", group=SSH_GROUP),
     ("cluster",)),
    (Option(("--trust-new-hosts",), "accept host keys not yet in known_hosts (and record them); changed keys are "
                                    "always refused", kind=FLAG, default=False, group=SSH_GROUP), ("cluster",)),
    (Option(("--remote-python",), "Python with dlaunch on the hosts (default: this Python's path)",
            metavar="PATH", group=SSH_GROUP), ("cluster",)),
    (Option(("--connect-timeout",), "SSH connect and preflight timeout per host (default 10)",
            type=positive_seconds, default=10.0, metavar="SECONDS", group=SSH_GROUP), ("cluster",)),
]


def options_for(command: str) -> list[Option]:
    """The options ``dlaunch COMMAND`` takes (run or cluster), in help order."""
    return [option for option, commands in _DECLARED if command in commands]


def add_launch_arguments(parser: argparse.ArgumentParser, declared) -> None:
    """SCRIPT and the declared options, on the parser of a command that launches (or writes a launcher)."""
    parser.add_argument("script", metavar="SCRIPT", nargs="?",
                        help="training script (a module name with -m, an executable with --no-python); its "
                             "arguments go after --")
    add_options(parser, declared)
    parser.set_defaults(script_args=[])


def launch_option_names() -> dict[str, set[str]]:
    """dest -> the launch commands that take it."""
    names: dict[str, set[str]] = {}
    for option, commands in _DECLARED:
        names.setdefault(option.dest, set()).update(commands)
    return names


def declared_defaults() -> dict[str, Any]:
    """dest -> declared default of every launch option (the first declaration of a dest shared by run and
    cluster: their defaults agree)."""
    defaults: dict[str, Any] = {}
    for option, _ in _DECLARED:
        defaults.setdefault(option.dest, list(option.default) if isinstance(option.default, list) else option.default)
    return defaults


def launch_table(args: LaunchRequest):
    """(table, this host's server index, table source, device view) from --ranks, --devices or --rank-table.

    The device view is what this host allows (CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES) or shows;
    every device this host runs must be inside what it allows.
    """
    from launcher import host as visible
    from launcher.table.build import parse_devices, read_hccn_conf, single_server_table
    from launcher.table.rules import require_valid
    from launcher.table.share import read_table, select_server

    from_table = args.rank_table_text is not None or bool(args.rank_table)
    auto = not from_table and args.devices is None and args.ranks == AUTO
    view = visible.discover(probe_hardware=auto)
    if from_table:
        if args.rank_table_text is not None:
            from launcher.table.model import RankTableError, loads

            try:
                table = loads(args.rank_table_text)
            except RankTableError as exc:
                raise UsageError(f"rank table from the head: {exc}") from None
            what = "the rank table from the head"
        else:
            assert args.rank_table   # from a table, and not the head's text: --rank-table named it
            table, what = read_table(args.rank_table)[1], f"rank table {args.rank_table}"
        require_valid(table, args.profile, what)
        if args.command == "run" and len(table.servers) > 1:
            raise UsageError(multi_host_hint(table, args.rank_table or "rt.json", args.script or "train.py",
                                             ["--profile", args.profile] if args.profile != PROFILE.default else []))
        index = select_server(table, args.server_id, args.rank_start)
        server = table.servers[index]
        view.check([dev.device for dev in server.placed()], f"{what} (server {server.server_id})")
        return table, index, what, view
    if args.devices is not None:
        devices, what = parse_devices(args.devices), f"--devices {args.devices}"
        view.check(devices, what)
    elif auto:
        devices = visible.auto_count(view)
        what = f"--ranks auto ({len(devices)} device(s) from {view.source})"
    else:
        count = args.ranks
        assert isinstance(count, int)   # not auto here, and rank_count gives a number or auto
        if count < 1:
            raise UsageError(f"--ranks must be at least 1, not {count}")
        devices, what = view.first(count), f"--ranks {count}"
    table = single_server_table(devices, "127.0.0.1", read_hccn_conf(args.hccn_conf))
    require_valid(table, args.profile, what)
    return table, 0, what, view


def adopt_pod(args: LaunchRequest, environ) -> LaunchRequest | None:
    """``cluster`` with no --rank-table inside a scheduler's pod (``launcher.pods``): the job's rank table the
    operator wrote (RANK_TABLE_FILE or ascend-operator's mount, waited for while it says "initializing"),
    else a table of the job's size the operator gave (node K runs ranks K*nproc.., as dlaunch torchrun
    does), and the operator's master address and port.  Flags given win.  The request with all that, or None
    when nothing says where this host belongs (the caller then asks for --rank-table)."""
    from launcher.console import say
    from launcher.pods import detect, rank_table_path
    from launcher.table.share import load_completed, rank_zero_address

    pod = detect(environ)
    path = pod.rank_table if pod is not None else rank_table_path(environ)
    if pod is None and path is None:
        return None
    if pod is not None:
        say(f"{pod.operator}: {pod.said}")
        args = replace(args, master_addr=args.master_addr or pod.master_addr,
                       master_port=args.master_port or pod.master_port)
        if pod.ms_role == "MS_SCHED":   # the job's MindSpore scheduler: the script once, with the pod's MS_*
            from launcher.table.build import single_server_table
            from launcher.table.model import dumps

            say("this pod is the job's MindSpore scheduler (MS_ROLE=MS_SCHED): running the script once as the "
                "scheduler, which the worker pods' ranks register with")
            return replace(args, rank_table_text=dumps(single_server_table([0], "scheduler")),
                           ms_scheduler_pod=True)
    if path is not None:
        args = replace(args, rank_table=path)
        table = load_completed(path, args.join_timeout,
                               lambda status: say(f"waiting up to {args.join_timeout:g} s (--join-timeout) for rank "
                                                  f"table {path} to be completed by the job's operator (status: "
                                                  f"{status})"))
        if pod is not None and pod.ms_role == "MS_WORKER":
            # MindSpore's scheduler runs in its own pod at MS_SCHED_HOST: the ranks register with it, and the
            # pods of the job meet at the pod of rank 0 instead
            return replace(args, ms_scheduler_elsewhere=True, job_addr=rank_zero_address(table))
        return args
    assert pod is not None   # no pod and no path returned above
    if pod.nnodes is None or pod.node_rank is None:
        raise UsageError(f"{pod.operator} did not say how many pods the job has and which this one is "
                         f"({pod.said or 'no variable set'}): pass --rank-table FILE")
    if pod.node_rank >= pod.nnodes:
        raise UsageError(f"{pod.operator}: pod index {pod.node_rank} but the job has {pod.nnodes} pod(s) "
                         f"({pod.said})")
    return take_job_share(args, pod.nnodes, pod.node_rank, pod.nproc, environ, pod.operator)


def take_job_share(args: LaunchRequest, nnodes: int, node_rank: int, nproc_text: str | None, environ,
                   who: str) -> LaunchRequest:
    """A job without a rank table, as torchrun runs one: ``nnodes`` hosts of ``nproc`` ranks, host K running
    ranks K*nproc..; the table dlaunch makes of it (``table.build.job_table``) and this host's share of it.
    The pods of an operator and ``cluster --nnodes`` both come here."""
    from launcher.console import say
    from launcher.host import discover, ranks_per_node
    from launcher.table.build import job_table

    nproc, chosen = ranks_per_node(nproc_text or "auto", environ)
    if chosen:
        say(f"{who}: {chosen}")
    return replace(args, rank_table_text=job_table(nnodes, discover(environ).first(nproc, "ranks per node")),
                   rank_start=node_rank * nproc if args.server_id is None and args.rank_start is None
                   else args.rank_start,
                   # a job of any size, as torchrun's: no Ascend topology rules
                   profile="structure" if args.source("profile") == "default" else args.profile)


def nodes_share(args: LaunchRequest, environ) -> LaunchRequest | None:
    """``cluster --nnodes N --node-rank K [--nproc-per-node P]``: torchrun's way of naming a job without a
    rank table; this host's share, or None when --nnodes is not given."""
    given = [flag for flag, value in (("--node-rank", args.node_rank), ("--nproc-per-node", args.nproc_per_node))
             if value is not None]
    if args.nnodes is None:
        if given:
            raise UsageError(f"{given[0]} goes with --nnodes N (the job's number of hosts)")
        return None
    if args.rank_table or args.ssh:
        raise UsageError("--nnodes names a job without a rank table: give either --rank-table FILE or --nnodes N "
                         "--node-rank K, not both" if args.rank_table else
                         "--nnodes has no hosts to reach over --ssh: --ssh starts the servers of a --rank-table")
    if args.node_rank is None:
        raise UsageError(f"--nnodes {args.nnodes} needs --node-rank K on each host (0 to {args.nnodes - 1})")
    if args.node_rank >= args.nnodes:
        raise UsageError(f"--node-rank {args.node_rank} but --nnodes is {args.nnodes}: use 0 to {args.nnodes - 1}")
    if args.master_addr is None and args.nnodes > 1:
        raise UsageError(f"--nnodes {args.nnodes} needs --master-addr A on every host: the address of node 0")
    return take_job_share(args, args.nnodes, args.node_rank, args.nproc_per_node, environ, "--nnodes")


def multi_host_hint(table, path: str, script: str, extra: list[str] | None = None) -> str:
    """Why ``run`` refuses a table that spans hosts, and the exact commands that run it (with ``extra``: the
    options given that the commands need too, such as --profile)."""
    import shlex

    starts = [min((d.rank for d in s.devices if d.rank is not None), default=0) for s in table.servers]
    first = shlex.join(["dlaunch", "cluster", script, "--rank-table", path, *(extra or []), "--rank-start",
                        str(starts[0]), "--run-id", "JOB"])
    ssh = shlex.join(["dlaunch", "cluster", script, "--rank-table", path, *(extra or []), "--ssh"])
    shown = ", ".join(f"{s.server_id} (--rank-start {k})" for s, k in list(zip(table.servers, starts))[:4])
    more = f" and {len(table.servers) - 4} more" if len(table.servers) > 4 else ""
    return (f"{path} spans {len(table.servers)} hosts ({shown}{more}); dlaunch run starts one host. Run "
            f"'{first}' on each host with its own --rank-start and the same --run-id, or '{ssh}' from one "
            f"head node")


def extra_env(args: LaunchRequest) -> dict[str, str]:
    """What every rank gets on top of dlaunch's own variables: the head's request (``--ssh``), then
    --env-file, then --env KEY=VALUE.  It goes into the plan, so --dry-run and plan.json show it (masked)."""
    from launcher.envfiles import parse_assignment, read_env_file

    env = dict(args.head_env)
    env.update(read_env_file(args.env_file) if args.env_file else [])
    env.update(parse_assignment(text, "--env") for text in args.env)
    return env


def launch_options(args: LaunchRequest, table, server_index: int, view=None, head: bool = False):
    """Every setting of this host's launch, as the plan takes it.

    ``run`` picks a free master port unless one was given and shares a run directory only when --run-id
    names one; ``cluster`` hosts agree on port 29500 and one run directory, and prefix their console lines
    with the host. ``head`` is ``cluster --ssh``'s head node, which starts no rank itself. A job Slurm
    requeued resumes without --resume (``resume.slurm_requeue``).
    """
    from launcher.host import DeviceView, free_port
    from launcher.plan import Command, Options, Policy, console_ranks
    from launcher.rundir import check_run_id, host_suffix, new_run_id, resolve
    from launcher.table.share import master_address

    cluster = args.command == "cluster"
    held = next((a for a in [args.script, *args.script_args] if "\0" in a), None)
    if held is not None:   # no command line can hold it: refused before a run directory exists
        raise UsageError(f"the script or one of its arguments holds a NUL byte, which no command line can hold: "
                         f"{held[:60]!r}")
    command = Command(target=args.script if args.module or args.no_python else os.path.abspath(args.script),
                      args=tuple(args.script_args), module=args.module, no_python=args.no_python)
    console = args.console.strip().lower()
    world = table.device_count   # counted once: it walks every server (once per rank was quadratic)
    beyond = [r for r in console_ranks(console, world) if r >= world]
    if beyond:
        raise UsageError(f"--console names rank {beyond[0]} but the job has {world} ranks")
    master_addr = args.master_addr or master_address(table)
    run_id = args.run_id or (scheduler_run_id() if cluster else None)
    output_dir = os.path.abspath(args.output_dir)
    resume_from, resume_note = None, ""
    if args.resume is not None:
        resume_from = resolve(args.resume or output_dir)
        if not os.path.isdir(resume_from):
            raise UsageError(f"--resume: no run directory at {args.resume or args.output_dir}")
    elif not head:   # a job Slurm requeued resumes by itself, in a run directory of its own
        from launcher.checkpoint.resume import slurm_requeue

        run_id, resume_from, resume_note = slurm_requeue(run_id, output_dir, world, os.environ) or (
            run_id, None, "")
    opts = Options(command=command, run_id=check_run_id(run_id) if run_id else new_run_id(),
                   output_dir=output_dir, launch_dir=os.getcwd(), python=sys.executable,
                   policy=Policy(cwd_mode=args.cwd, grace_period=args.grace_period, max_restarts=args.max_restarts,
                                 waiting_notice=args.waiting_notice, hang_timeout=args.hang_timeout,
                                 prefix_host=cluster),
                   console=console, master_addr=master_addr,
                   master_port=args.master_port or (CLUSTER_DEFAULT_PORT if cluster else free_port(master_addr)),
                   host_files_suffix=host_suffix(table.servers[server_index].server_id) if cluster and not head
                   else "",
                   extra_env=extra_env(args),
                   ms_scheduler=args.ms_scheduler, ms_topo_timeout=args.ms_topo_timeout,
                   ms_scheduler_elsewhere=args.ms_scheduler_elsewhere, ms_scheduler_pod=args.ms_scheduler_pod,
                   forward_signals=args.forward_signals or (),
                   termination_log=args.termination_log,
                   shared_run_dir=cluster or bool(args.run_id), run_id_shared=bool(run_id),
                   fixed_port=cluster or args.master_port is not None, resume_from=resume_from,
                   resume_note=resume_note, job_port=args.job_port, job_addr=args.job_addr,   # run: None
                   host_timeout=args.host_timeout, join_timeout=args.join_timeout,   # run: the defaults
                   devices=view if view is not None else DeviceView())
    return replace(opts, host_argv=tuple(host_argv(args, opts))) if head else opts


def host_argv(args: LaunchRequest, opts) -> list[str]:
    """``cluster --ssh``: the ``cluster`` arguments of every host's launcher (each adds its ``--server-id``).

    Every option declared ``to_hosts``, with the value the head settled (flags, configs, DLAUNCH_* variables;
    what the head resolved, such as the run id and the master address, from its ``Options``), defaults
    included: a host settles its arguments without its own environment or configs, and its dlaunch's defaults
    need not be the head's.
    """
    resolved = {"run_id": opts.run_id, "master_addr": opts.master_addr, "master_port": opts.master_port,
                "output_dir": opts.output_dir, "console": opts.console, "module": opts.command.module,
                "no_python": opts.command.no_python}
    words = [opts.command.target]
    for option in options_for("cluster"):
        if option.to_hosts:
            words += option.words(resolved[option.dest] if option.dest in resolved else getattr(args, option.dest))
    return words


def head_launch(args: LaunchRequest):
    """``cluster --ssh`` on the head node: (the table's text, the table, the head's Options).

    The head starts no rank itself; every host gets the text as is and settles its own share.
    """
    from launcher.table.rules import require_valid
    from launcher.table.share import read_table

    if not args.rank_table:
        raise UsageError("dlaunch cluster --ssh needs --rank-table FILE: its servers are the hosts to start")
    if args.server_id is not None or args.rank_start is not None:
        raise UsageError("--server-id and --rank-start choose one host's share; with --ssh every server of the "
                         "table is started")
    text, table = read_table(args.rank_table)
    require_valid(table, args.profile, f"rank table {args.rank_table}")
    return text, table, launch_options(args, table, 0, head=True)


def scheduler_run_id() -> str | None:
    """The run id every host of one scheduled job agrees on without being told: the job's id (Slurm)."""
    import re

    job = os.environ.get("SLURM_JOB_ID", "")
    return f"slurm-{job}" if re.fullmatch(r"[0-9]{1,20}", job) else None
