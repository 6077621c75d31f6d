"""Settled arguments -> what the plan needs: the rank table, this host's share, ``Options``.

Between the parsers (``launcher.cli``) and the plan: every launch setting a flag, a
``DLAUNCH_*`` variable or a config gives ends up in one ``plan.Options`` here, so
``--dry-run`` and ``plan.json`` show it. ``cluster --ssh``'s head, the host agents and
``dlaunch script`` use the same functions, and nothing here imports the CLI.
"""

from __future__ import annotations

import argparse
import os
import sys

from launcher.config import apply_layers
from launcher.errors import UsageError

AUTO = "auto"                 # --ranks auto: one rank per visible device
CLUSTER_DEFAULT_PORT = 29500  # cluster hosts agree on MASTER_PORT without talking (torchrun's default too)


def launch_table(args: argparse.Namespace):
    """(table, this host's server index, table source, device view) from --ranks, --devices or --rank-table.

    The device view is what this host allows (CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES) or shows;
    every device this host runs must be inside what it allows.
    """
    from launcher import host as visible
    from launcher.table.build import parse_devices, read_hccn_conf, single_server_table
    from launcher.table.rules import require_valid
    from launcher.table.share import read_table, select_server

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
            table, what = read_table(args.rank_table)[1], f"rank table {args.rank_table}"
        require_valid(table, args.profile, what)
        if args.command == "run" and len(table.servers) > 1:
            raise UsageError(multi_host_hint(table, args.rank_table or "rt.json", args.script or "train.py"))
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


def multi_host_hint(table, path: str, script: str) -> str:
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


def extra_env(args: argparse.Namespace) -> dict[str, str]:
    """What every rank gets on top of dlaunch's own variables: the head's request (``--ssh``), then
    --env-file, then --env KEY=VALUE.  It goes into the plan, so --dry-run and plan.json show it (masked)."""
    from launcher.envfiles import parse_assignment, read_env_file

    env = dict(getattr(args, "head_env", None) or {})
    env.update(read_env_file(args.env_file) if args.env_file else [])
    env.update(parse_assignment(text, "--env") for text in args.env)
    return env


def launch_options(args: argparse.Namespace, table, server_index: int, view=None, head: bool = False):
    """Every setting of this host's launch, as the plan takes it.

    ``run`` picks a free master port unless one was given and shares a run directory only when --run-id
    names one; ``cluster`` hosts agree on port 29500 and one run directory, and prefix their console lines
    with the host. ``head`` is ``cluster --ssh``'s head node, which starts no rank itself.
    """
    from launcher.host import free_port
    from launcher.plan import Command, Options, console_ranks
    from launcher.rundir import check_run_id, host_suffix, new_run_id, resolve
    from launcher.table.share import master_address

    cluster = args.command == "cluster"
    command = Command(target=args.script if args.module or args.no_python else os.path.abspath(args.script),
                      args=tuple(args.script_args), module=args.module, no_python=args.no_python)
    console = args.console.strip().lower()
    beyond = [r for r in console_ranks(console, table.device_count) if r >= table.device_count]
    if beyond:
        raise UsageError(f"--console names rank {beyond[0]} but the job has {table.device_count} ranks")
    master_addr = args.master_addr or master_address(table)
    run_id = args.run_id or (scheduler_run_id() if cluster else None)
    output_dir = os.path.abspath(args.output_dir)
    resume_from = None
    if getattr(args, "resume", None) is not None:
        resume_from = resolve(args.resume or output_dir)
        if not os.path.isdir(resume_from):
            raise UsageError(f"--resume: no run directory at {args.resume or args.output_dir}")
    return Options(command=command, run_id=check_run_id(run_id) if run_id else new_run_id(),
                   output_dir=output_dir, launch_dir=os.getcwd(), python=sys.executable,
                   cwd_mode=args.cwd, console=console, grace_period=args.grace_period,
                   max_restarts=args.max_restarts, master_addr=master_addr,
                   master_port=args.master_port or (CLUSTER_DEFAULT_PORT if cluster else free_port(master_addr)),
                   host_files_suffix=host_suffix(table.servers[server_index].server_id) if cluster and not head
                   else "",
                   extra_env=extra_env(args), waiting_notice=args.waiting_notice,
                   ms_scheduler=args.ms_scheduler, ms_topo_timeout=args.ms_topo_timeout,
                   hang_timeout=args.hang_timeout, prefix_host=cluster, shared_run_dir=cluster or bool(args.run_id),
                   fixed_port=cluster or args.master_port is not None, resume_from=resume_from,
                   **({"devices": view} if view is not None else {}))


def head_launch(args: argparse.Namespace):
    """``cluster --ssh`` on the head node: (the table's text, the table, the head's Options).

    The head starts no rank itself; every host gets the text as is and settles its own share.
    """
    from launcher.table.rules import require_valid
    from launcher.table.share import read_table

    if not args.rank_table:
        raise UsageError("dlaunch cluster --ssh needs --rank-table FILE: its servers are the hosts to start")
    if args.max_restarts > 0:
        raise UsageError("--max-restarts is not supported with --ssh yet (restarts would need every host to "
                         "agree on each attempt); run without it")
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


def settle(args: argparse.Namespace, sub: argparse.ArgumentParser, script_args_given: bool,
           environ=None) -> argparse.Namespace:
    """Fill options from the environment, config files and defaults; a script is required by then."""
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
