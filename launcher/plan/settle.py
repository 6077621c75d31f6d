"""This host's launch settings: a settled ``LaunchRequest`` and its share of the table -> one ``plan.Options``.

Between the parsers and the plan, every launch setting ends up in one ``Options`` here, so ``--dry-run`` and
``plan.json`` show it. ``cluster --ssh``'s head, the host launchers and ``dlaunch script`` use the same functions,
and nothing here imports the CLI: they take the settled ``LaunchRequest``, never a Namespace.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from launcher.errors import UsageError
from launcher.settings.launch import CLUSTER_DEFAULT_PORT, options_for

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Mapping

    from launcher.settings.request import LaunchRequest


def memory_tier(args: LaunchRequest, local_ranks: int, head: bool) -> dict:
    """--memory-ckpt's policy fields: the root checked (a directory), ``auto`` made this host's bytes per rank."""
    if not args.memory_ckpt:
        return {}
    root = os.path.abspath(args.memory_root)
    if not head and not os.path.isdir(root):
        raise UsageError(f"--memory-root {args.memory_root}: no such directory (a file system in memory, such as "
                         f"/dev/shm)")
    budget = args.memory_budget
    if budget is None and not head:
        from launcher.host.memory import auto_budget

        budget = auto_budget(root, local_ranks)
    return {"memory_ckpt": True, "memory_budget": budget, "memory_persist_every": args.memory_persist_every,
            "memory_root": root}


def extra_env(args: LaunchRequest) -> dict[str, str]:
    """What every rank gets on top of dlaunch's own variables: the head's request (``--ssh``), then
    --env-file, then --env KEY=VALUE.  It goes into the plan, so --dry-run and plan.json show it (masked)."""
    from launcher.settings.envfiles import parse_assignment, read_env_file

    env = dict(args.head_env)
    env.update(read_env_file(args.env_file) if args.env_file else [])
    env.update(parse_assignment(text, "--env") for text in args.env)
    return env


def launch_options(args: LaunchRequest, table, server_index: int, environ: Mapping[str, str], view=None,
                   head: bool = False, world: int | None = None):
    """Every setting of this host's launch, as the plan takes it.

    ``run`` picks a free master port unless one was given and shares a run directory only when --run-id
    names one; ``cluster`` hosts agree on port 29500 and one run directory, and prefix their console lines
    with the host. ``head`` is ``cluster --ssh``'s head node, which starts no rank itself. A job Slurm
    requeued resumes without --resume (``resume.slurm_requeue``). ``world``: the job's ranks when ``table``
    holds spares too.
    """
    from launcher.host.devices import DeviceView, free_port
    from launcher.host.mindcluster import RESET_CONFIG
    from launcher.plan.faults import warm_modules
    from launcher.plan.make import Command, Options, Policy, console_ranks
    from launcher.rundir.paths import check_run_id, fresh_run_id, host_suffix, new_run_id, resolve
    from launcher.table.share import master_address

    cluster = args.command == "cluster"
    held = next((a for a in [args.script, *args.script_args] if "\0" in a), None)
    if held is not None:   # no command line can hold it: refused before a run directory exists
        raise UsageError(f"the script or one of its arguments holds a NUL byte, which no command line can hold: "
                         f"{held[:60]!r}")
    command = Command(target=args.script if args.module or args.no_python else os.path.abspath(args.script),
                      args=tuple(args.script_args), module=args.module, no_python=args.no_python)
    console = args.console.strip().lower()
    world = world or table.device_count   # the job's (with spares, fewer than the table's); counted once
    beyond = [r for r in console_ranks(console, world) if r >= world]
    if beyond:
        raise UsageError(f"--console names rank {beyond[0]} but the job has {world} ranks")
    master_addr = args.master_addr or master_address(table)
    master_port = args.master_port or (CLUSTER_DEFAULT_PORT if cluster else free_port(master_addr))
    if args.job_port is not None and args.job_port == master_port:
        raise UsageError(f"--job-port {args.job_port} is the master port, where rank 0's store listens: give "
                         f"another (by default the job port is MASTER_PORT + 1)")
    run_id = args.run_id or (scheduler_run_id(environ) if cluster else None)
    if run_id:   # the id as given, before a requeued attempt's is made from it
        check_run_id(run_id)
    output_dir = os.path.abspath(args.output_dir)
    resume_from, resume_note = None, ""
    if args.resume is not None:
        resume_from = resolve(args.resume or output_dir)
        if not os.path.isdir(resume_from):
            raise UsageError(f"--resume: no run directory at {args.resume or args.output_dir}")
    elif not head:   # a job Slurm requeued resumes by itself, in a run directory of its own
        from launcher.checkpoint.resume import slurm_requeue

        run_id, resume_from, resume_note = slurm_requeue(run_id, output_dir, world, environ) or (
            run_id, None, "")
    added = extra_env(args)
    ms_recovery = bool(args.ms_scheduler or args.ms_scheduler_elsewhere or args.ms_scheduler_pod) and \
        {**environ, **added}.get("MS_ENABLE_RECOVERY") == "1"
    reset_config = args.reset_config or (RESET_CONFIG if environ.get("MINDX_TASK_ID") else None)
    policy_name = restart_policy(args, ms_recovery)
    switch = fault_switch(args, policy_name, environ)
    request, args = args, replace(args, **switch.settled)   # what --fault-tolerant turned on, as if given
    opts = Options(command=command, run_id=check_run_id(run_id) if run_id else new_run_id(),
                   output_dir=output_dir, launch_dir=os.getcwd(), python=sys.executable,
                   policy=Policy(cwd_mode=args.cwd, grace_period=args.grace_period,
                                 survivor_window=args.survivor_window, notice_signal=tuple(args.notice_signal or ()),
                                 signal_grace=args.grace_period if args.signal_grace is None else args.signal_grace,
                                 max_restarts=max_restarts(args), restart_policy=policy_name,
                                 restart_delay=args.restart_delay or 0.0, ms_recovery=ms_recovery,
                                 warm_restarts=warm_modules(args.warm_restarts),
                                 reset_config=reset_config, reset_hold=reset_hold(args, reset_config, environ),
                                 restarts_without_progress=args.restarts_without_progress,
                                 max_failures_per_hour=args.max_failures_per_hour,
                                 device_release_timeout=args.device_release_timeout,
                                 health_gate=args.health_gate or bool(args.health_check),
                                 health_check=args.health_check, unfit_exit_code=unfit_exit_code(environ),
                                 waiting_notice=args.waiting_notice, hang_timeout=hang_bound(args),
                                 hang_learn=args.hang_learn, straggler_report=args.straggler_report,
                                 metrics_port=args.metrics_port,   # bound on the job's address: this host's own
                                 metrics_addr=table.servers[server_index].server_id if cluster and not head
                                 else "127.0.0.1",
                                 step_pattern=args.step_pattern, prefix_host=cluster,
                                 fault_tolerance=switch.line,
                                 **memory_tier(args, len(table.servers[server_index].devices), head)),
                   console=console, master_addr=master_addr,
                   master_port=master_port,
                   host_files_suffix=host_suffix(table.servers[server_index].server_id) if cluster and not head
                   else "",
                   extra_env=added,
                   ms_scheduler=args.ms_scheduler, ms_topo_timeout=args.ms_topo_timeout,
                   ms_scheduler_elsewhere=args.ms_scheduler_elsewhere, ms_scheduler_pod=args.ms_scheduler_pod,
                   forward_signals=args.forward_signals or (),
                   termination_log=args.termination_log,
                   shared_run_dir=cluster or bool(args.run_id), run_id_shared=bool(run_id),
                   fixed_port=cluster or args.master_port is not None, resume_from=resume_from,
                   resume_note=resume_note, job_port=args.job_port, job_addr=args.job_addr,   # run: None
                   host_timeout=args.host_timeout, join_timeout=args.join_timeout,   # run: the defaults
                   spares=args.spares, exclude_cooldown=args.exclude_cooldown, last_call=args.last_call,
                   unlinked=args.unlinked,
                   devices=view if view is not None else DeviceView())
    if args.replica_groups and not head:
        opts = replace(opts, replicas=replica_groups(args.replica_groups, table, server_index, opts, environ))
    if head:
        return replace(opts, host_argv=tuple(host_argv(request, opts)))   # each host settles the switch itself
    # an id that names the job rather than this launch: torchrun's --rdzv-id, an AscendJob's uid (a rescheduled
    # pod on storage the job shares finds its earlier plan there); Slurm's requeues are slurm_requeue's
    fresh = (args.run_id_fresh or (cluster and not args.run_id and bool(environ.get("MINDX_TASK_ID")))) \
        and bool(run_id) and resume_from is None
    if cluster and not run_id and table.servers[1:]:   # several hosts with nothing shared: the master says the job
        fresh, opts = True, replace(opts, run_id=master_run_id(master_addr, master_port), run_id_shared=True)
    if fresh:   # the id names the job, not this launch: a directory of this launch's own, the job's name kept
        opts = replace(opts, run_id=fresh_run_id(output_dir, opts.run_id, opts.host_files_suffix),
                       job_name=opts.run_id)
    return opts


def fault_switch(args: LaunchRequest, policy_name: str, environ: Mapping[str, str]):
    """``--fault-tolerant`` on this host (``plan.faults``): whether the ranks' Python finds torch, which device
    tools the health gate would ask here (on the ranks' PATH, as the gate looks)."""
    from launcher.plan.faults import FaultTolerance, fault_tolerance, torch_importable

    if not args.fault_tolerant:
        return FaultTolerance()
    from launcher.host.health import device_tools

    return fault_tolerance(args, restart_policy=policy_name, torch=not args.no_python and torch_importable(),
                           tools=device_tools(environ.get("PATH", os.defpath)), hang_bound=LEARNED_HANG_BOUND)


def max_restarts(args: LaunchRequest) -> int:
    """--max-restarts; with --spares K and no --max-restarts given, K: each spare taking a place is a restart."""
    if args.spares and args.source("max_restarts") == "default":
        return max(args.max_restarts, args.spares)
    return args.max_restarts


LEARNED_HANG_BOUND = 1800.0   # --hang-learn without --hang-timeout: torch's default collective timeout, 30 min


def hang_bound(args: LaunchRequest) -> float | None:
    """``--hang-timeout``; with ``--hang-learn`` and none given, the learned timeouts' bound is 30 minutes."""
    if args.hang_timeout is None and args.hang_learn:
        return LEARNED_HANG_BOUND
    return args.hang_timeout


def unfit_exit_code(environ: Mapping[str, str]) -> int:
    """What an unfit host exits with: 92, or in an operator's pod 192, so that its ExitCode restart policy
    deletes the pod and creates it again elsewhere (ascend-operator's checkPodStatus, kubeflow common)."""
    from launcher.contract import ExitCode
    from launcher.host.pods import detect

    in_pod = detect(environ) is not None or bool(environ.get("MINDX_TASK_ID"))
    return ExitCode.UNHEALTHY_RESCHEDULE if in_pod else ExitCode.UNHEALTHY


def reset_hold(args: LaunchRequest, reset_config: str | None, environ: Mapping[str, str]) -> float:
    """--reset-hold: by default 60 s where the AscendJob operator enabled process-level recovery (its
    PROCESS_RECOVER / ENABLE_RESTART_FAULT_PROCESS, ascend-operator env.go), so ClusterD has the time to
    order the failed rank restarted alone (or the survivors to save) before the pod would exit."""
    if args.reset_hold is not None:
        return args.reset_hold
    from launcher.host.mindcluster import process_recovery

    return 60.0 if reset_config and process_recovery(environ) else 0.0


def restart_policy(args: LaunchRequest, ms_recovery: bool) -> str:
    """--restart-policy, by default 'group' for TorchFT's replica groups, 'rank' for MindSpore's recovery (a dead
    worker is relaunched alone with its MS_NODE_ID, the survivors untouched) and 'job' (fail fast) otherwise."""
    if args.restart_policy == "group" and not args.replica_groups:
        raise UsageError("--restart-policy group restarts a TorchFT replica group: give --replica-groups N too")
    return args.restart_policy or ("group" if args.replica_groups else "rank" if ms_recovery else "job")


def replica_groups(count: int, table, server_index: int, opts, environ: Mapping[str, str]):
    """``--replica-groups``: this host's groups, a free port for each one's store, and the lighthouse (the one
    TORCHFT_LIGHTHOUSE names, else one the master host starts: on a free port for ``run``, on MASTER_PORT + 2
    for ``cluster``, where every host must know it without talking)."""
    from launcher.host.devices import free_port
    from launcher.plan.replicas import LIGHTHOUSE_ENV, ReplicaGroups, find_lighthouse, group_problem

    problem = group_problem(count, table.device_count, [len(server.devices) for server in table.servers])
    if problem:
        raise UsageError(problem)
    server = table.servers[server_index]
    size = table.device_count // count
    store_addr = opts.master_addr if len(table.servers) == 1 else str(server.server_id)
    groups = sorted({device.rank // size for device in server.placed()})
    ports: dict[int, int] = {}
    for group in groups:   # each free now; distinct from one another and from the master port
        port = free_port(store_addr)
        while port in ports.values() or port == opts.master_port:
            port = free_port(store_addr)
        ports[group] = port
    given = opts.extra_env.get(LIGHTHOUSE_ENV) or environ.get(LIGHTHOUSE_ENV)
    alone = len(table.servers) == 1   # every group's ranks here: the stores on the master address alone
    if given:
        return ReplicaGroups(count, size, store_addr, ports, lighthouse=given, stores_on_their_address=alone)
    port = opts.master_port + 2 if opts.fixed_port and len(table.servers) > 1 else free_port(opts.master_addr)
    host = f"[{opts.master_addr}]" if ":" in opts.master_addr else opts.master_addr
    master = any(device.rank == 0 for device in server.devices)
    return ReplicaGroups(count, size, store_addr, ports, lighthouse=f"http://{host}:{port}",
                         lighthouse_port=port if master else None,
                         lighthouse_binary=find_lighthouse(opts.python, environ.get("PATH", os.defpath)),
                         stores_on_their_address=alone)


def host_argv(args: LaunchRequest, opts) -> list[str]:
    """``cluster --ssh``: the ``cluster`` arguments of every host's launcher (each adds its ``--server-id``).

    Every option declared ``to_hosts``, with the value the head settled (flags, configs, DLAUNCH_* variables;
    what the head resolved, such as the run id and the master address, from its ``Options``), defaults
    included: a host settles its arguments without its own environment or configs, and its dlaunch's defaults
    need not be the head's. Under ``--fault-tolerant`` what the switch settles and no layer gave is left out,
    for each host to settle as it finds torch and its device tools; so is a ``--no-X`` flag no layer gave.
    """
    from launcher.plan.faults import SETTLED

    settled = {**vars(args), "run_id": opts.run_id, "master_addr": opts.master_addr, "master_port": opts.master_port,
               "output_dir": opts.output_dir, "console": opts.console, "module": opts.command.module,
               "no_python": opts.command.no_python, "max_restarts": opts.policy.max_restarts}
    words = [opts.command.target]
    for option in options_for("cluster"):
        if option.to_hosts:
            if args.source(option.dest) == "default" and (option.negatable or args.fault_tolerant and
                                                          option.dest in SETTLED):
                continue   # --fault-tolerant settles it on each host, as that host finds it
            words += option.words(settled[option.dest])
    return words


def scheduler_run_id(environ: Mapping[str, str]) -> str | None:
    """The run id every host of one scheduled job agrees on without being told: the job's id (Slurm's job id,
    an AscendJob's uid: ascend-operator's MINDX_TASK_ID, the same in every pod of the job and its rescheduled
    pods)."""
    import re

    job = environ.get("SLURM_JOB_ID", "")
    if re.fullmatch(r"[0-9]{1,20}", job):
        return f"slurm-{job}"
    task = environ.get("MINDX_TASK_ID", "")
    return f"ascendjob-{task}" if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]{0,99}", task) else None


def master_run_id(master_addr: str, master_port: int) -> str:
    """A job of several hosts started with no id in common (one dlaunch torchrun per node, an operator's pods):
    the address and port every host was given for rank 0 name it (``job-10.0.0.1-29500``)."""
    import re

    return "job-" + re.sub(r"[^A-Za-z0-9._-]", "_", f"{master_addr}-{master_port}")[:100]
