"""The launch plan: everything dlaunch will do on this host, as plain data.

``make_plan`` is pure: from a validated rank table, the index of this host's
server and the options it computes one ``RankSpec`` per local rank (argv,
working directory, environment, log file, checkpoint directory) without
touching a process, a file or a socket.  The plan can be printed
(``--dry-run``), written to the run directory and tested on its own; the
executor in ``execute/local/workers.py`` only carries it out (tests/unit/test_pure_layers.py tests it without one).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from launcher.base import numlists
from launcher.base.border import is_number
from launcher.base.signals import signal_names
from launcher.checkpoint.resume import ResumePoint
from launcher.contract import (
    CKPT_DIR,
    MODULES_ENV,
    MODULES_FILE,
    NOTICE_FILE,
    NOTICE_FILE_ENV,
    NOTICE_SIGNAL_ENV,
    RESUME_FROM_ENV,
    RESUME_STEP_ENV,
    SCHEDULER_DIR,
    Role,
)
from launcher.errors import UsageError
from launcher.host.devices import DeviceView
from launcher.plan.environment import (
    hooked_python_path,
    masked,
    masked_argv,
    memory_area,
    memory_environment,
    mindio_environment,
    mindspore_recovery_environment,
    mindspore_scheduler_environment,
    mindspore_worker_environment,
    rank_environment,
)
from launcher.plan.replicas import SERVICES_DIR, ReplicaGroups
from launcher.rundir.paths import attempt_file, attempt_name, host_suffix, rank_dir_name
from launcher.table.model import RankTable

CWD_LAUNCH = "launch"  # every rank runs where dlaunch was started, as torchrun and msrun do (the default)
CWD_RANK = "rank"      # each rank runs in its own rank directory, as the seeds' run.sh does


@dataclass(frozen=True)
class Command:
    """What each rank runs: a Python script (default), a module (-m) or an executable (--no-python)."""

    target: str
    args: tuple[str, ...] = ()
    module: bool = False
    no_python: bool = False

    def argv(self, python: str) -> list[str]:
        if self.no_python:
            return [self.target, *self.args]
        if self.module:
            return [python, "-m", self.target, *self.args]
        return [python, self.target, *self.args]


def check_command(command: Command) -> None:
    """The script or executable must exist: before any rank starts, a dry run prints its plan or ``dlaunch
    script`` writes a launcher for it. A module (-m) is left to Python (finding it could import its packages)."""
    import shutil

    if command.no_python:
        found = shutil.which(command.target, path=None if os.sep not in command.target else "")
        if not (found or (os.sep in command.target and os.access(command.target, os.X_OK))):
            raise UsageError(f"executable not found: {command.target}")
    elif command.module or os.path.isfile(command.target):
        return
    elif os.path.isdir(command.target):   # Python runs a directory only through its __main__.py
        if not os.path.isfile(os.path.join(command.target, "__main__.py")):
            raise UsageError(f"{command.target} is a directory (with no __main__.py), not a script: give the "
                             f"training script in it")
    else:
        raise UsageError(f"script not found: {command.target}")


@dataclass(frozen=True)
class Policy:
    """How this host's launch behaves once started: where ranks run, how they are stopped, restarted,
    watched and shown.  Decided once with the ``Options`` and held as is by every ``LaunchPlan`` made from
    them (``plan.json`` writes its fields beside the plan's own, as before)."""

    cwd_mode: str = CWD_LAUNCH
    grace_period: float = 10.0
    survivor_window: float = 0.0   # after a failure: survivors are told and may save for this long
    notice_signal: tuple[int, ...] = ()   # sent to each survivor with the notice
    signal_grace: float = 10.0     # after a signal to dlaunch (preemption): SIGTERM, this long, SIGKILL
    max_restarts: int = 0
    restart_policy: str = "job"    # "rank", "group": only the failed rank, its replica group (local/recovery.py)
    restart_delay: float = 0.0     # rank, group: a failed one starts again only after this long
    ms_recovery: bool = False      # MindSpore's recovery (MS_ENABLE_RECOVERY=1): a dead scheduler starts again too
    warm_restarts: str | None = None   # modules a standby interpreter per rank imports ahead (local/warm.py)
    reset_config: str | None = None   # MindCluster's reset.json, followed while the attempt runs
    reset_hold: float = 0.0   # a failed rank waits this long for the reset file's order, the others running on
    restarts_without_progress: int = 3   # failed attempts in a row with no new complete step, then exit 93
    max_failures_per_hour: int | None = None   # a crash loop: failure N+1 within an hour, then exit 93
    health_gate: bool = False   # check this host before every start (host/health.py)
    health_check: str | None = None   # and run this external checker
    unfit_exit_code: int = 92   # an unfit host's exit: 192 in an operator's pod, which reschedules it elsewhere
    device_release_timeout: float = 15.0   # before a restart: wait for device memory to be released
    waiting_notice: float = 30.0  # silent ranks and missing peers this long: say so (0: never)
    hang_timeout: float | None = None   # stop the job (exit 124) after this long without a sign of life
    hang_learn: bool = False      # --hang-learn: the budget learned from the job's silences, hang_timeout its bound
    straggler_report: float = 60.0   # judge the step times this often; a line for a rank under 0.75 (0: never)
    metrics_port: int | None = None  # --metrics-port: Prometheus's metrics served here (execute/local/metrics.py)
    metrics_addr: str = "127.0.0.1"  # ... bound on the job's address: loopback for run, this host's for cluster
    step_pattern: str | None = None  # a user's step line (base.steps.UserPattern), besides the frameworks'
    prefix_host: bool = False     # console lines carry the host as well as the rank (cluster)
    fault_tolerance: str = ""     # --fault-tolerant: what it turned on, left off and why (plan/faults.py)
    memory_ckpt: bool = False     # --memory-ckpt: the memory tier (execute/local/memkeeper.py)
    memory_budget: int | None = None   # bytes per rank (settled: auto made a number)
    memory_persist_every: int = 10
    memory_root: str = "/dev/shm"


@dataclass(frozen=True)
class Options:
    """The launch settings that shape the plan (flags, after defaults are applied)."""

    command: Command
    run_id: str
    output_dir: str
    launch_dir: str
    python: str
    policy: Policy = Policy()
    console: str = "0"           # "all", "none" or a comma list of global ranks
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    host_files_suffix: str = ""   # "" for a one-host run; ".<server_id>" when hosts share a run directory
    devices: DeviceView = DeviceView()   # what this host allows or shows: maps plan devices to the ranks' ids
    extra_env: dict = field(default_factory=dict)   # --env-file, --env (and the head's, over SSH): every rank
    ms_scheduler: bool = False    # MindSpore's dynamic cluster (msrun's contract): a scheduler beside rank 0
    ms_scheduler_elsewhere: bool = False   # the same contract for the ranks, the scheduler in its own pod
    ms_scheduler_pod: bool = False   # this is that pod: its one process is the scheduler (no table, no device)
    ms_topo_timeout: float = 600.0
    termination_log: str | None = None   # --termination-log: a failed run's root cause (containers)
    forward_signals: tuple = ()   # --forward-signals: passed to every rank beside SIGUSR1/2, the job goes on
    shared_run_dir: bool = False  # other hosts (or an earlier launch) may create the run directory too
    run_id_shared: bool = False   # the run id came from the user or the scheduler, the same on every host
    job_name: str | None = None   # what the hosts of one job call it when its run id is this launch's own
    unlinked: str | None = None   # why this host runs without the job's link (a pod that cannot reach the others)
    fixed_port: bool = False      # restarts keep master_port (hosts agree on it); otherwise a fresh free one
    resume_from: str | None = None   # an earlier run directory to resume from (--resume)
    resume_note: str = ""            # why, when no --resume asked for it (a Slurm requeue): said with the step
    job_port: int | None = None      # cluster: the job's coordinator port on the master address (MASTER_PORT + 1)
    job_addr: str | None = None      # cluster: the coordinator's address when the master address is not rank 0's
    host_timeout: float = 15.0       # cluster: a host silent this long is lost (heartbeats every fifth of it)
    join_timeout: float = 180.0      # cluster: every host must have joined the job within this long
    host_argv: tuple[str, ...] = ()   # cluster --ssh's head: every host launcher's arguments (options.host_argv)
    replicas: ReplicaGroups | None = None   # --replica-groups: TorchFT's groups, their stores and lighthouse
    spares: int = 0                  # cluster --spares: the rank table's last K servers stand by (table/spares.py)
    exclude_cooldown: float = 600.0  # a host replaced by a spare may stand by again only after this long
    last_call: float = 30.0          # --nnodes MIN:MAX: with MIN hosts joined, wait this long for more


@dataclass(frozen=True)
class RankSpec:
    """One process of the plan: a rank, or (``role`` "scheduler") MindSpore's scheduler, which has no rank."""

    rank: int | None
    local_rank: int | None
    device_id: int | None
    server_id: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    rank_dir: str
    log_file: str
    env_log: str
    ckpt_dir: str | None
    error_file: str | None
    console: bool
    role: Role = Role.RANK
    replica_group: int | None = None   # --replica-groups: the TorchFT group it belongs to (a rank or its store)


@dataclass(frozen=True)
class LaunchPlan:
    run_id: str
    run_dir: str
    output_dir: str
    server_id: str
    server_index: int
    server_count: int
    world_size: int
    master_addr: str
    master_port: int
    rank_table_file: str
    policy: Policy
    attempt: int
    host_files_suffix: str
    ranks: list[RankSpec] = field(default_factory=list)
    resume: ResumePoint | None = None
    peers: list[dict] = field(default_factory=list)   # the other servers: server_id, suffix, ranks ("8-15")
    is_master: bool = True                            # this host runs rank 0
    scheduler: RankSpec | None = None                 # MindSpore's scheduler, on the master host only
    services: list[RankSpec] = field(default_factory=list)   # TorchFT: this host's group stores, the lighthouse
    standby: bool = False                             # --spares: this host stands by (no rank) this attempt

    def host_file(self, name: str, ext: str) -> str:
        """This host's own file in the run directory (plan, summary): distinct per host on a shared filesystem."""
        return os.path.join(self.run_dir, f"{name}{self.host_files_suffix}.{ext}")

    def to_dict(self) -> dict:
        """JSON-ready, with secret-looking env values and arguments masked.  Shallow, unlike ``asdict``: the
        plan is only read from here on, and a deep copy of every rank's environment grows with the job."""
        data = _fields(self)
        data.update(_fields(data.pop("policy")))   # plan.json's keys as they always were: one flat object
        data["ranks"] = [_fields(spec) for spec in self.ranks]
        data["scheduler"] = _fields(self.scheduler) if self.scheduler else None
        data["services"] = [_fields(spec) for spec in self.services]
        data["resume"] = _fields(self.resume) if self.resume else None
        shown_argv: dict[tuple[str, ...], list[str]] = {}   # one command line for every rank: masked once
        for spec in data["ranks"] + data["services"] + ([data["scheduler"]] if data["scheduler"] else []):
            argv = tuple(spec["argv"])
            if argv not in shown_argv:
                shown_argv[argv] = masked_argv(argv)
            spec["env"], spec["argv"] = masked(spec["env"]), shown_argv[argv]
        return data

    def processes(self) -> list[RankSpec]:
        """Everything this host starts: the scheduler and the services first (the ranks reach them), then the
        ranks."""
        return ([self.scheduler] if self.scheduler else []) + list(self.services) + list(self.ranks)


def _fields(obj) -> dict:
    """A dataclass's fields as a new dict: its ``__dict__``, which holds exactly them (no slots, nothing cached
    on these frozen objects; tests/unit/test_pure_layers.py checks the keys), at a fraction of the cost of
    ``dataclasses.fields`` per rank."""
    return dict(vars(obj))


def console_ranks(spec: str, world_size: int) -> set[int]:
    """Global ranks whose output goes to the console: "all", "none" or "0,3"; checked by the caller."""
    spec = spec.strip().lower()
    if spec == "all":
        return set(range(world_size))
    if spec in ("none", ""):
        return set()
    return set(numlists.parse(spec, "--console"))


def make_plan(table: RankTable, server_index: int, opts: Options, rank_table_file: str, inherited: dict,
              attempt: int = 0, resume: ResumePoint | None = None) -> LaunchPlan:
    """One RankSpec per device of ``table.servers[server_index]``, ranks and devices as the table says.

    With ``resume``, each rank also gets ``DLAUNCH_RESUME_FROM`` (its own checkpoint file) and
    ``DLAUNCH_RESUME_STEP`` ("EPOCH_STEP").
    """
    server = table.servers[server_index]
    inherited = {**inherited, **opts.extra_env}   # what a rank inherits, as the defaults below must see it
    world_size = _operator_world_size(inherited) if opts.ms_scheduler_pod else table.device_count
    run_dir = os.path.join(opts.output_dir, opts.run_id)
    shown = console_ranks(opts.console, world_size)
    # in rank order, ranks and device ids as numbers (the table was validated); none in the scheduler's pod
    devices = [] if opts.ms_scheduler_pod else server.placed()
    local_devices = [dev.device for dev in devices]
    argv = opts.command.argv(opts.python)
    specs = []
    cuda_visible = opts.devices.cuda_visible(local_devices, inherited)   # once: the same for every rank here
    # a rank's paths by f-string, not os.path.join (five a rank): run_dir ends with the run id, never a slash
    error_name, log_name, env_name = (attempt_name(stem, ext, attempt)
                                      for stem, ext in (("error", "json"), ("output", "log"), ("env", "log")))
    policy = opts.policy
    record_modules = bool(policy.warm_restarts and policy.restart_policy == "job" and attempt < policy.max_restarts
                          and not opts.command.no_python)
    modules_name = attempt_name(*MODULES_FILE, attempt)
    ms_recovery = mindspore_recovery_environment(run_dir, inherited) if opts.policy.ms_recovery else {}
    mindio = mindio_environment(opts.master_addr, opts.master_port, inherited)
    area = memory_area(opts.policy.memory_root, opts.run_id) if opts.policy.memory_ckpt else None
    for local_rank, dev in enumerate(devices):
        rank = dev.rank
        rank_dir = f"{run_dir}/{rank_dir_name(rank, world_size)}"
        ckpt_dir = f"{rank_dir}/{CKPT_DIR}"
        error_file = f"{rank_dir}/{error_name}"
        env = rank_environment(
            rank=rank, local_rank=local_rank, world_size=world_size, local_world_size=len(devices),
            group_rank=server_index, group_world_size=len(table.servers),
            device_id=opts.devices.device_id(dev.device),
            cuda_visible=cuda_visible, rank_table_file=rank_table_file,
            master_addr=opts.master_addr,
            master_port=opts.master_port, run_id=opts.run_id, run_dir=run_dir, rank_dir=rank_dir,
            ckpt_dir=ckpt_dir, error_file=error_file, restart_count=attempt, max_restarts=opts.policy.max_restarts,
            inherited=inherited, job_name=opts.job_name)
        if opts.ms_scheduler or opts.ms_scheduler_elsewhere:
            env.pop("RANK_TABLE_FILE")   # with it, MindSpore's init() takes the rank-table path, not the scheduler
            env.update(mindspore_worker_environment(rank=rank, world_size=world_size, master_addr=opts.master_addr,
                                                    master_port=opts.master_port, topo_timeout=opts.ms_topo_timeout),
                       **mindio)
        env.update(ms_recovery)   # {} without MindSpore's recovery
        env = {**opts.extra_env, **env}   # dlaunch's contract wins: --env RANK=5 cannot break the job
        # its uncaught exception heard when raised (execute/local/raised.py); with --no-python too: the hook speaks
        # only in a Python that dlaunch started itself (``sh -c 'exec python ...'``, ``numactl ... python``), never
        # in a child Python of a shell rank
        env["PYTHONPATH"] = hooked_python_path(inherited.get("PYTHONPATH"))
        if opts.replicas is not None:
            env.update(opts.replicas.rank_environment(rank))
        if record_modules:   # what it imported, for the next attempt's standbys (execute/local/warm.py)
            env[MODULES_ENV] = f"{rank_dir}/{modules_name}"
        if opts.policy.survivor_window:
            env[NOTICE_FILE_ENV] = f"{rank_dir}/{NOTICE_FILE}"
            if opts.policy.notice_signal:
                env[NOTICE_SIGNAL_ENV] = signal_names(opts.policy.notice_signal)
        if area is not None:
            env.update(memory_environment(area, rank, devices[0].rank, opts.policy.memory_budget,
                                          opts.policy.memory_persist_every))
        if resume is not None:
            env[RESUME_FROM_ENV] = resume.files[rank]
            env[RESUME_STEP_ENV] = f"{resume.epoch}_{resume.step}"
        specs.append(RankSpec(
            rank=rank, local_rank=local_rank, device_id=dev.device, server_id=str(server.server_id), argv=argv,
            cwd=rank_dir if opts.policy.cwd_mode == CWD_RANK else opts.launch_dir, env=env, rank_dir=rank_dir,
            log_file=f"{rank_dir}/{log_name}", env_log=f"{rank_dir}/{env_name}", ckpt_dir=ckpt_dir,
            error_file=error_file, console=rank in shown,
            replica_group=opts.replicas.group_of(rank) if opts.replicas is not None else None))
    is_master = any(d.rank == 0 for d in server.devices)
    scheduler = None
    if (opts.ms_scheduler and not opts.ms_scheduler_elsewhere and is_master) or opts.ms_scheduler_pod:
        sched_dir = os.path.join(run_dir, SCHEDULER_DIR)
        env = mindspore_scheduler_environment(world_size=world_size, master_addr=opts.master_addr,
                                              master_port=opts.master_port, topo_timeout=opts.ms_topo_timeout,
                                              run_id=opts.run_id, run_dir=run_dir, scheduler_dir=sched_dir,
                                              inherited=inherited)
        if opts.policy.ms_recovery:   # as MindSpore's recovery guide starts it; restarted under the same id
            env.update(ms_recovery, MS_NODE_ID="sched")
        scheduler = RankSpec(
            rank=None, local_rank=None, device_id=None, server_id=str(server.server_id), argv=argv,
            cwd=sched_dir if opts.policy.cwd_mode == CWD_RANK else opts.launch_dir, env={**opts.extra_env, **env},
            rank_dir=sched_dir, log_file=attempt_file(sched_dir, "output", "log", attempt),
            env_log=attempt_file(sched_dir, "env", "log", attempt), ckpt_dir=None, error_file=None,
            console=opts.ms_scheduler_pod and 0 in shown,   # the pod's log is its output, as rank 0's elsewhere
            role=Role.SCHEDULER)
    return LaunchPlan(
        run_id=opts.run_id, run_dir=run_dir, output_dir=opts.output_dir, server_id=str(server.server_id),
        server_index=server_index, server_count=len(table.servers), world_size=world_size,
        master_addr=opts.master_addr, master_port=opts.master_port, rank_table_file=rank_table_file,
        policy=opts.policy, attempt=attempt,
        host_files_suffix=opts.host_files_suffix, ranks=specs, resume=resume,
        peers=[{"server_id": str(other.server_id), "suffix": host_suffix(other.server_id),
                "ranks": numlists.format_ranges(d.rank for d in other.devices if d.rank is not None)}
               for index, other in enumerate(table.servers) if index != server_index],
        is_master=is_master, scheduler=scheduler,
        services=_services(opts, run_dir, str(server.server_id), {spec.replica_group for spec in specs}, attempt))


def _operator_world_size(inherited: dict) -> int:
    """The job's size in the operator's scheduler pod, which has no rank table: its ``MS_WORKER_NUM`` (checked
    by ``host/pods.py``, which made this a scheduler pod), the number the worker pods' ranks register as."""
    text = inherited.get("MS_WORKER_NUM", "").strip()
    if not is_number(text) or int(text) < 1:
        raise UsageError(f"MS_WORKER_NUM={text[:40]!r}: MindSpore's scheduler pod needs the job's number of "
                         f"ranks (a whole number of at least 1)")
    return int(text)


def _services(opts: Options, run_dir: str, server_id: str, groups: set, attempt: int) -> list[RankSpec]:
    """TorchFT's processes beside the ranks (``plan/replicas.py``): this host's groups' stores, and the
    lighthouse when dlaunch starts it (on the master host). Their files are in the run's ``torchft`` folder."""
    replicas = opts.replicas
    if replicas is None:
        return []
    where = os.path.join(run_dir, SERVICES_DIR)
    named = [(f"store-group{group}", replicas.store_argv(opts.python, group), Role.STORE, group)
             for group in sorted(groups)]
    if replicas.lighthouse_port is not None:
        named.insert(0, ("lighthouse", replicas.lighthouse_argv(), Role.LIGHTHOUSE, None))
    env = {"RUST_BACKTRACE": "1", "PYTHONUNBUFFERED": "1"}
    return [RankSpec(rank=None, local_rank=None, device_id=None, server_id=server_id, argv=argv,
                     cwd=opts.launch_dir, env={**opts.extra_env, **env}, rank_dir=where,
                     log_file=attempt_file(where, name, "log", attempt),
                     env_log=attempt_file(where, f"{name}.env", "log", attempt), ckpt_dir=None, error_file=None,
                     console=False, role=role, replica_group=group)
            for name, argv, role, group in named]
