"""``LaunchRequest``: ``run``'s or ``cluster``'s command line once it is settled, as one frozen, typed value.

The argparse Namespace never leaves ``launcher.cli``: ``cli.request`` settles the flags with the
``DLAUNCH_*`` and YAML layers (``settings.layers.apply_layers``) and builds this request; ``dlaunch
msrun`` and ``dlaunch torchrun`` build the same request from their own flags, without an argv to re-parse.
Everything below the CLI (``plan``, ``execute.ssh``) reads typed fields, never probes attributes; this
module imports nothing of dlaunch, so every layer may name the type.

One field per declared launch option (``settings.launch._DECLARED``; a test keeps them in step), then what no flag
says: where the request came from (the sources, for ``config show`` and generated scripts) and what the
host's launcher learns from a head, an operator's pod or a front (the table's text, the head's variables).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class JobShape:
    """A job without a rank table, as torchrun and msrun name one: ``nodes`` hosts, each running ranks on
    ``devices`` (node K runs ranks K*len(devices)..). ``plan.share`` makes its table."""

    nodes: int
    devices: tuple[int, ...]
    min_nodes: int | None = None   # --nnodes MIN:MAX: elastic, the job forms with MIN to ``nodes`` hosts


@dataclass(frozen=True)
class LaunchRequest:
    """Every setting of one ``dlaunch run`` or ``cluster``, settled (flags > DLAUNCH_* > YAML > defaults)."""

    command: str                       # "run" or "cluster"
    script: str
    script_args: tuple[str, ...]
    # the declared options (settings.launch._DECLARED), by dest; those of the other command keep their declared default
    config: tuple[str, ...]
    module: bool
    no_python: bool
    rank_table: str | None
    profile: str
    output_dir: str
    run_id: str | None
    cwd: str
    console: str
    grace_period: float
    survivor_window: float
    notice_signal: tuple[int, ...] | None
    memory_ckpt: bool
    memory_budget: int | None
    memory_persist_every: int
    memory_root: str
    signal_grace: float | None
    forward_signals: tuple[int, ...] | None
    termination_log: str | None
    max_restarts: int
    fault_tolerant: bool
    spares: int
    last_call: float
    exclude_cooldown: float
    restart_policy: str | None
    replica_groups: int | None
    restart_delay: float | None
    warm_restarts: str | None
    reset_config: str | None
    reset_hold: float | None
    restarts_without_progress: int
    max_failures_per_hour: int | None
    device_release_timeout: float
    hang_timeout: float | None
    hang_learn: bool
    straggler_report: float
    metrics_port: int | None
    step_pattern: str | None
    hccn_conf: str
    health_gate: bool
    health_check: str | None
    waiting_notice: float
    ms_scheduler: bool
    ms_topo_timeout: float
    env: tuple[str, ...]
    env_file: str | None
    dry_run: bool
    master_addr: str | None
    master_port: int | None
    ranks: int | str
    devices: str | None
    resume: str | None
    server_id: str | None
    rank_start: int | None
    nnodes: tuple[int, int] | None   # (MIN, MAX); N is (N, N)
    node_rank: int | None
    nproc_per_node: str | None
    check_network: bool
    hccn_tool: str | None
    health_timeout: float
    job_port: int | None
    host_timeout: float
    join_timeout: float
    ssh: bool
    ssh_config: str | None
    trust_new_hosts: bool
    remote_python: str | None
    connect_timeout: float
    # what no flag says
    sources: Mapping[str, str] = field(default_factory=dict)   # dest -> "command line", "$DLAUNCH_X", a file, "default"
    rank_table_text: str | None = None     # the table itself (from a head or an operator's pod), not a file to read
    job: JobShape | None = None            # a job without a table (a front, --nnodes, a pod): its shape
    head_env: Mapping[str, str] = field(default_factory=dict)   # the head's variables for every rank (--ssh)
    ms_scheduler_elsewhere: bool = False   # MindSpore's scheduler runs in a pod of its own (an operator's job)
    ms_scheduler_pod: bool = False         # this pod is that scheduler: one process, no device
    job_addr: str | None = None            # the job's coordinator when the master address is not rank 0's
    unlinked: str | None = None            # why this host's dlaunch cannot reach the job's others (no link)
    run_id_fresh: bool = False             # the run id names the job, not one launch (torchrun's --rdzv-id):
                                           # each launch gets a directory of its own (rundir.paths.fresh_run_id)

    def source(self, dest: str) -> str:
        """Where option ``dest`` came from ("default" when no layer gave it)."""
        return self.sources.get(dest, "default")


_LATER = {"command", "script", "script_args", "sources", "rank_table_text", "job", "head_env", "ms_scheduler_elsewhere",
          "ms_scheduler_pod", "job_addr", "run_id_fresh", "unlinked"}
OPTION_FIELDS = frozenset(f.name for f in fields(LaunchRequest)) - _LATER   # one per declared option's dest


@dataclass(frozen=True)
class ScriptRequest:
    """``dlaunch script``'s command line, settled: the template, the launch the script runs (every run and
    cluster option, layered as theirs are: a ``LaunchRequest``) and the options of the script file and of
    Slurm's #SBATCH lines (``scripts.render.SCRIPT_OPTIONS``; a test keeps the two in step)."""

    template: str
    request: LaunchRequest         # the launch; its ``sources`` say where every setting came from
    output: str | None             # -o
    force: bool
    template_dir: str | None
    launch: str | None             # --launch: run or cluster, for the user's own templates
    nodes: int | None
    time: str | None
    partition: str | None
    account: str | None
    job_name: str | None
    shared: bool
    signal: str | None
    requeue: bool
    sbatch: tuple[str, ...]


SCRIPT_FIELDS = frozenset(f.name for f in fields(ScriptRequest)) - {"template", "request"}   # the script's own
