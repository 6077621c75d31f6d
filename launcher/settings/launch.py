"""Every launch option, declared once: ``run``'s and ``cluster``'s flags.

``_DECLARED`` is the one declaration of the launch commands' options: the parsers (``launcher.cli.parsers``),
the ``DLAUNCH_*``/YAML layers (``settings.layers``), the flags of generated scripts (``launcher.scripts``) and
the settings a ``cluster --ssh`` head sends its hosts are all built from it.
"""

from __future__ import annotations

import argparse

from launcher.base.signals import signal_list, signal_names
from launcher.host.devices import MAX_DEVICES
from launcher.settings.argtypes import (
    node_span,
    port,
    positive_seconds,
    seconds,
    size,
    spell_size,
    spell_span,
    step_pattern,
    whole,
)
from launcher.settings.layers import FLAG, LIST, OPTIONAL, Option, add_options
from launcher.table.rules import DEFAULT_PROFILE, PROFILE_HELP

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from typing import Any



AUTO = "auto"                 # --ranks auto: one rank per visible device


CLUSTER_DEFAULT_PORT = 29500  # cluster hosts agree on MASTER_PORT without talking (torchrun's default too)


LAUNCH_COMMANDS = ("run", "cluster")


MAX_LOCAL_RANKS = MAX_DEVICES   # one rank per device


# The help's sections, in the order --help shows them; every launch option names its own (a test keeps it so).
WHAT = "what to run and where"
RANKS = "ranks and devices"
FAILURES = "failures and restarts"
FAULTS = "fault tolerance"
WATCH = "watching a job"
CHECKPOINTS = "checkpoints"
HOSTS = "several hosts"
SSH_GROUP = "several hosts, from a head node over SSH"
MINDSPORE = "MindSpore"
NPU = "NPU"
GROUPS = (WHAT, RANKS, FAILURES, FAULTS, WATCH, CHECKPOINTS, HOSTS, SSH_GROUP, MINDSPORE, NPU)


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
                 choices=tuple(sorted(PROFILE_HELP)), default=DEFAULT_PROFILE, to_hosts=True, group=RANKS)


OUTPUT_DIR = Option(("--output-dir",), "where run directories go (default ./dlaunch_runs)", default="dlaunch_runs",
                    metavar="DIR", to_hosts=True, group=WHAT)   # the commands reading runs take it too (observe_args)


# Options check-network takes too (cli/checknet.py adds them from here, from the command line only).
SERVER_ID = Option(("--server-id",), "this host's server_id in the rank table", group=HOSTS)
HCCN_TOOL = Option(("--hccn-tool",), "hccn_tool for --check-network (default: PATH, else the driver's tools directory)",
                   metavar="PATH", group=NPU)
HEALTH_TIMEOUT = Option(("--health-timeout",), "--check-network: how long a device's net health may take to turn "
                                               "Success (default 30)", type=positive_seconds, default=30.0,
                        metavar="SECONDS", group=NPU)
SSH = Option(("--ssh",), "start every server of the table over SSH from here", kind=FLAG, default=False,
             group=SSH_GROUP)
SSH_CONFIG = Option(("--ssh-config",), "OpenSSH client config (default ~/.ssh/config)", metavar="FILE", group=SSH_GROUP)
TRUST_NEW_HOSTS = Option(("--trust-new-hosts",), "accept host keys not yet in known_hosts (and record them); "
                                                 "changed keys are always refused", kind=FLAG, default=False,
                         group=SSH_GROUP)
REMOTE_PYTHON = Option(("--remote-python",), "Python with dlaunch on the hosts (default: this Python's path)",
                       metavar="PATH", group=SSH_GROUP)
CONNECT_TIMEOUT = Option(("--connect-timeout",), "SSH connect and preflight timeout per host (default 10)",
                         type=positive_seconds, default=10.0, metavar="SECONDS", group=SSH_GROUP)


def _shared(*flags: str, **declared) -> tuple[Option, tuple[str, ...]]:
    return Option(flags, **declared), LAUNCH_COMMANDS


# (option, the commands that take it). Help texts name defaults from the declared values.
_DECLARED: list[tuple[Option, tuple[str, ...]]] = [
    _shared("--config", group=WHAT, kind=LIST, layered=False, metavar="FILE",
            help="YAML file of options (repeatable, later files win); flags > DLAUNCH_<OPTION> environment "
                 "variables > files > defaults"),
    _shared("-m", "--module", group=WHAT, kind=FLAG, exclusive="what", default=False,
            help="SCRIPT is a Python module, run as python -m", to_hosts=True),
    _shared("--no-python", group=WHAT, kind=FLAG, exclusive="what", default=False,
            help="SCRIPT is an executable, run without python", to_hosts=True),
    _shared("--rank-table", group=RANKS, metavar="FILE", rivals="devices",   # a table, or --ranks/--devices (run)
            help="HCCL rank table; this host runs its own server's devices"),
    (PROFILE, LAUNCH_COMMANDS),
    (OUTPUT_DIR, LAUNCH_COMMANDS),
    _shared("--run-id", group=WHAT, from_env=False,   # DLAUNCH_RUN_ID is the rank contract's: a parent job's id
            help="name of the run directory (default: time and a random suffix; for cluster under Slurm, "
                 "slurm-$SLURM_JOB_ID); hosts of one job share it", to_hosts=True),
    _shared("--cwd", group=WHAT, choices=("launch", "rank"), default="launch",   # plan.CWD_LAUNCH, plan.CWD_RANK
            help="where ranks run: 'launch' (default) all where dlaunch was started, as torchrun and msrun; "
                 "'rank' each in its own rank directory, as the seeds' run.sh (logs and checkpoints go to the "
                 "rank directories either way)", to_hosts=True),
    _shared("--console", group=WATCH, default="0", metavar="WHICH",
            help="ranks whose output is shown: all, none, or a list such as 0,3 (default 0); every rank's "
                 "output always goes to its log", to_hosts=True),
    _shared("--grace-period", group=FAILURES, type=seconds, default=10.0, metavar="SECONDS",
            help="after SIGTERM, how long ranks may take to exit (e.g. to save) before SIGKILL (default 10)",
            to_hosts=True),
    _shared("--survivor-window", group=CHECKPOINTS, type=seconds, default=0.0, metavar="SECONDS",
            help="after a rank fails, tell every surviving rank (its notice file, --notice-signal) and give them "
                 "this long to save before they are stopped; it ends early once each has saved or exited "
                 "(default 0: stop at once)", to_hosts=True),
    _shared("--notice-signal", group=CHECKPOINTS, type=signal_list, spell=signal_names, metavar="SIG",
            help="a signal sent to each surviving rank with the notice (e.g. USR1); default none: the notice "
                 "file only", to_hosts=True),
    _shared("--memory-ckpt", group=CHECKPOINTS, kind=FLAG, default=False, negatable=True,
            help="a memory tier this host's dlaunch owns: every rank gets DLAUNCH_MEMORY_DIR (a directory in "
                 "memory for its own torch.save files, mirrored to rank_NNN/ckpt/memory/) and DLAUNCH_MEMORY_SLOTS "
                 "(checkpoint.save(..., memory=True)); dlaunch persists them in the background and after every "
                 "attempt, before a restart (docs/checkpoints.md)", to_hosts=True),
    _shared("--memory-budget", group=CHECKPOINTS, type=size, spell=spell_size, metavar="SIZE",
            help="--memory-ckpt: bytes of memory each rank may hold there, e.g. 4G (default auto: the memory "
                 "root's free space and MemAvailable, shared by this host's ranks)", to_hosts=True),
    _shared("--memory-persist-every", group=CHECKPOINTS, type=whole(1, 10**6), default=10, metavar="N",
            help="--memory-ckpt: every Nth memory save of a rank is also persisted to its checkpoint directory "
                 "(default 10)", to_hosts=True),
    _shared("--memory-root", group=CHECKPOINTS, default="/dev/shm", metavar="DIR",
            help="--memory-ckpt: the file system in memory that holds the tier (default /dev/shm)", to_hosts=True),
    _shared("--signal-grace", group=FAILURES, type=seconds, metavar="SECONDS",
            help="after a signal to dlaunch (preemption, Ctrl-C), how long ranks may take to exit before SIGKILL "
                 "(default: --grace-period)", to_hosts=True),
    _shared("--forward-signals", group=FAILURES, type=signal_list, spell=signal_names, metavar="SIG,...",
            help="signals forwarded to every rank without stopping the job, besides SIGUSR1 and SIGUSR2 "
                 "(e.g. WINCH,URG); SIGINT/SIGTERM/SIGHUP/SIGQUIT always stop it", to_hosts=True),
    _shared("--termination-log", group=FAILURES, metavar="FILE",
            help="write a failed run's root cause here (a container's termination message); default: "
                 "/dev/termination-log when dlaunch is PID 1 and it is writable"),
    _shared("--max-restarts", group=FAILURES, type=whole(0, 1000), default=0, metavar="K",
            help="restart all ranks up to K times after a failure (default 0)", to_hosts=True),
    _shared("--restart-policy", group=FAILURES, choices=("job", "rank", "group"),
            help="after a rank fails: 'job' stops every rank and restarts them all (default, as torchrun); 'rank' "
                 "starts only the failed rank again, same ids, its own TORCHELASTIC_RESTART_COUNT and newest "
                 "checkpoint, up to --max-restarts times per rank, the others running on (MindSpore's and MindIO's "
                 "recovery; a torch job's rank waits until the others ended); 'group' starts its TorchFT "
                 "replica group again (the default with --replica-groups)", to_hosts=True),
    _shared("--restart-delay", group=FAILURES, type=seconds, metavar="SECONDS",
            help="--restart-policy rank or group: start a failed rank (its group) again only after this long "
                 "(default 0)", to_hosts=True),
    _shared("--fault-tolerant", group=FAULTS, kind=FLAG, default=False, negatable=True,
            help="what a job of many devices should have, each unless its own flag, variable or config key says "
                 "otherwise: --max-restarts 10 (exit 93 after --restarts-without-progress failed attempts without "
                 "a new checkpoint), --survivor-window 10 for the ranks that ask for a notice (checkpoint.notice()), "
                 "ending once each saved or exited, --memory-ckpt, --hang-learn "
                 "(bounded by --hang-timeout, default 1800), --warm-restarts torch where the ranks' Python can "
                 "import torch, --health-gate where npu-smi, nvidia-smi or hccn_tool is present; the run's first "
                 "lines and --dry-run say what it turned on (docs/restarts.md)", to_hosts=True),
    _shared("--replica-groups", group=FAULTS, type=whole(1, 100000), metavar="N",
            help="TorchFT: split the ranks into N replica groups, each with its own store and numbering "
                 "(REPLICA_GROUP_ID, NUM_REPLICA_GROUPS), all reaching one lighthouse (TORCHFT_LIGHTHOUSE if set, "
                 "else one dlaunch starts); a failed group restarts alone", to_hosts=True),
    _shared("--reset-config", group=FAULTS, metavar="FILE",
            help="MindCluster's reset file to follow (RestartFaultProcess, GracefulExit, FaultFlushing; default "
                 "in an AscendJob pod, MINDX_TASK_ID set: /user/restore/reset/config/reset.json)", to_hosts=True),
    _shared("--reset-hold", group=FAULTS, type=seconds, metavar="SECONDS",
            help="with MindCluster's reset file: a rank that fails is held this long, the others running on, for "
                 "the file's order (restart it alone, or stop); default 60 when the operator enabled process "
                 "recovery (PROCESS_RECOVER=on, ENABLE_RESTART_FAULT_PROCESS=on), else 0: stop at once",
            to_hosts=True),
    _shared("--warm-restarts", group=FAULTS, metavar="MODULES",
            help="keep a standby interpreter per rank that has imported these modules (e.g. torch) for the next "
                 "attempt to run in, instead of a new process importing them again (default: cold restarts; "
                 "none: cold, also under --fault-tolerant)",
            to_hosts=True),
    _shared("--restarts-without-progress", group=FAILURES, type=whole(0, 1000), default=3, metavar="K",
            help="stop restarting (exit 93: do not requeue) after K failed attempts in a row that completed no new "
                 "checkpoint step (default 3, as NVIDIA's ft_launcher; 0: no limit)", to_hosts=True),
    _shared("--device-release-timeout", group=FAILURES, type=seconds, default=15.0, metavar="SECONDS",
            help="before a restart, wait this long at most for the last attempt's device memory to be released "
                 "(npu-smi, nvidia-smi; default 15, as MindCluster; 0: do not wait)", to_hosts=True),
    _shared("--max-failures-per-hour", group=FAILURES, type=whole(1, 100000), metavar="N",
            help="stop restarting (exit 93: do not requeue) on failure N+1 within an hour: a crash loop (default: "
                 "no limit)", to_hosts=True),
    _shared("--hang-timeout", group=WATCH, type=positive_seconds, metavar="SECONDS",
            help="stop the job as failed (exit 124) when a rank shows no sign of life (output, "
                 "launcher.heartbeat.beat(), a checkpoint) for this long; every rank's stack is saved first "
                 "(py-spy)", to_hosts=True),
    _shared("--hang-learn", group=WATCH, kind=FLAG, default=False, negatable=True,
            help="learn the hang timeout from the job: after its first 5 steps, 5 x the longest silence of a rank "
                 "between signs of life (at least 1 s), with a budget of its own for a checkpoint save or a "
                 "heartbeat.phase(); --hang-timeout (default 1800) stays the upper bound; kept in the run "
                 "directory for restarts", to_hosts=True),
    _shared("--straggler-report", group=WATCH, type=seconds, default=60.0, metavar="SECONDS",
            help="judge the ranks' step times this often and say when a rank falls under 0.75 of the fastest "
                 "(relative) or of its own best (individual) (default 60; 0: never)", to_hosts=True),
    _shared("--metrics-port", group=WATCH, type=port, metavar="PORT",
            help="serve Prometheus metrics of this host's ranks on http://ADDRESS:PORT/metrics, ADDRESS the job's "
                 "(127.0.0.1 for run, this host's own for cluster): ranks by state, restarts, checkpoints, step "
                 "times, straggler scores (default: off)", to_hosts=True),
    _shared("--step-pattern", group=WATCH, type=step_pattern, metavar="REGEX",
            help="a step line of the script's own, besides Megatron's, MindFormers', MindSpore's and tqdm's: a "
                 "regular expression with a group (?P<ms>...) or (?P<s>...), optionally (?P<step>...)",
            to_hosts=True),
    _shared("--health-gate", group=FAULTS, kind=FLAG, default=False, negatable=True,
            help="before the first start and every restart, check this host: storage (the run directory "
                 "writable), npu-smi's device health, nvidia-smi, hccn_tool's link and net health (each where the "
                 "tool is), --health-check; an unfit host does not start (exit 92)", to_hosts=True),
    _shared("--health-check", group=FAULTS, metavar="COMMAND",
            help="an external health checker run by the gate (implies --health-gate): its output's "
                 "{\"fail_count\": N}, N > 0 or a failure, makes the host unfit", to_hosts=True),
    _shared("--hccn-conf", group=NPU, default="/etc/hccn.conf", metavar="FILE",
            help="device NIC addresses for generated rank tables (default /etc/hccn.conf)"),
    _shared("--waiting-notice", group=HOSTS, type=seconds, default=30.0, metavar="SECONDS",
            help="when every rank here has been silent this long and other hosts of the job have not started, "
                 "say so, and again every minute (default 30; 0: never)", to_hosts=True),
    _shared("--ms-scheduler", group=MINDSPORE, kind=FLAG, default=False,
            help="MindSpore's dynamic cluster, as msrun starts it: a scheduler process (the same script, "
                 "MS_ROLE=MS_SCHED) beside rank 0, and MS_ROLE/MS_NODE_ID/MS_WORKER_NUM/MS_SCHED_HOST/"
                 "MS_SCHED_PORT for every rank, so mindspore.communication.init() needs no rank table", to_hosts=True),
    _shared("--ms-topo-timeout", group=MINDSPORE, type=positive_seconds, default=600.0, metavar="SECONDS",
            help="MS_TOPO_TIMEOUT: how long MindSpore waits for the cluster to form (default 600, as msrun's "
                 "--cluster_time_out)", to_hosts=True),
    _shared("--env", group=WHAT, kind=LIST, default=[], metavar="KEY=VALUE",
            help="set a variable for every rank (repeatable)"),
    _shared("--env-file", group=WHAT, metavar="FILE", help="KEY=VALUE lines to set for every rank"),
    _shared("--dry-run", group=WHAT, kind=FLAG, layered=False, default=False,
            help="print the plan (commands, env, logs) and start nothing"),
    # run only
    (Option(("--master-addr",), "MASTER_ADDR (default 127.0.0.1)", group=RANKS), ("run",)),
    (Option(("--master-port",), "MASTER_PORT (default: a free port)", type=port, group=RANKS), ("run",)),
    (Option(("--ranks",), "one rank per device for the first N devices this host allows (CUDA_VISIBLE_DEVICES "
                          "or ASCEND_RT_VISIBLE_DEVICES when set, else 0..N-1); auto (default): one per visible "
                          "device", type=rank_count, default=AUTO, metavar="N|auto", exclusive="devices", group=RANKS),
     ("run",)),
    (Option(("--devices",), "use these devices, e.g. 4,5 or 0-3", metavar="LIST", exclusive="devices",
            group=RANKS), ("run",)),
    (Option(("--resume",), "resume from the newest checkpoint step every rank completed in RUN_DIR (default: the "
                           "latest run in --output-dir); ranks get DLAUNCH_RESUME_FROM and DLAUNCH_RESUME_STEP",
            kind=OPTIONAL, const="", metavar="RUN_DIR", group=CHECKPOINTS), ("run",)),
    # cluster only
    (SERVER_ID, ("cluster",)),
    (Option(("--rank-start",), "this host is the server whose first rank is K", type=whole(0, 10**9 - 1),
            metavar="K", group=HOSTS), ("cluster",)),
    (Option(("--nnodes",), "without a rank table: the job's number of hosts, node K running ranks K*N.. "
                           "(with --node-rank K on each, as torchrun's --nnodes); MIN:MAX: elastic, the job starts "
                           "once MIN hosts joined (MAX at once, else --last-call after MIN), and each restart "
                           "forms it again with the hosts there, up to MAX", type=node_span, spell=spell_span,
            metavar="N|MIN:MAX", group=HOSTS), ("cluster",)),
    (Option(("--last-call",), "with --nnodes MIN:MAX: once MIN hosts joined, wait this long for more before the "
                              "job starts (default 30, torchrun's last_call_timeout)", type=seconds, default=30.0,
            metavar="SECONDS", to_hosts=True, group=HOSTS), ("cluster",)),
    (Option(("--node_rank", "--node-rank"),
            "with --nnodes: this host's index, 0 to N-1 (in a Slurm step of N nodes: SLURM_NODEID)",
            type=whole(0, 10**6 - 1), metavar="K", group=HOSTS),
     ("cluster",)),
    (Option(("--nproc_per_node", "--nproc-per-node"),
            "with --nnodes: ranks per host, a number or auto (one per visible GPU or NPU, else one per CPU, as "
            "torchrun; default auto)", metavar="N|auto", group=HOSTS),
     ("cluster",)),
    (Option(("--master-addr",), "MASTER_ADDR (default: the server_id of rank 0's server)", to_hosts=True,
            group=HOSTS),
     ("cluster",)),
    (Option(("--master-port",), f"MASTER_PORT (default {CLUSTER_DEFAULT_PORT}, the same on every host)",
            type=port, to_hosts=True, group=HOSTS), ("cluster",)),
    (Option(("--check-network",), "before starting ranks, run dlaunch check-network on the table (every host with "
                                  "--ssh) and refuse to start when a device fails; costs a few hccn_tool calls "
                                  "and up to --health-timeout seconds", kind=FLAG, default=False, group=NPU),
     ("cluster",)),
    (HCCN_TOOL, ("cluster",)),
    (HEALTH_TIMEOUT, ("cluster",)),
    (Option(("--job-port",), "the port on the master address where the master host's dlaunch coordinates the "
                             "job's hosts (default: MASTER_PORT + 1)", type=port, metavar="PORT", to_hosts=True,
            group=HOSTS),
     ("cluster",)),
    (Option(("--host-timeout",), "a host of the job that sends nothing for this long is lost and the job stops "
                                 "(default 15; heartbeats every fifth of it)", type=positive_seconds, default=15.0,
            metavar="SECONDS", to_hosts=True, group=HOSTS), ("cluster",)),
    (Option(("--join-timeout",), "every host of the job must have joined within this long, else the job stops "
                                 "(default 180)", type=positive_seconds, default=180.0, metavar="SECONDS",
            to_hosts=True, group=HOSTS),
     ("cluster",)),
    (Option(("--spares",), "the last K servers of the rank table stand by: when a host of the job is lost or its "
                           "health gate finds it unfit, a spare takes its place (its slot and ranks) in a rewritten "
                           "table and the job restarts from its newest complete step (default 0; implies "
                           "--max-restarts K unless given)", type=whole(0, 10**5), default=0, metavar="K",
            to_hosts=True, group=HOSTS), ("cluster",)),
    (Option(("--exclude-cooldown",), "with --spares: a host replaced for being lost or unfit may join again as a "
                                     "spare only after this long (default 600)", type=seconds, default=600.0,
            metavar="SECONDS", to_hosts=True, group=HOSTS), ("cluster",)),
    (SSH, ("cluster",)),
    (SSH_CONFIG, ("cluster",)),
    (TRUST_NEW_HOSTS, ("cluster",)),
    (REMOTE_PYTHON, ("cluster",)),
    (CONNECT_TIMEOUT, ("cluster",)),
]


def options_for(command: str) -> list[Option]:
    """The options ``dlaunch COMMAND`` takes (run or cluster), in help order."""
    return [option for option, commands in _DECLARED if command in commands]


def launch_flags(command: str) -> set[str]:
    """Every flag ``dlaunch COMMAND`` takes (run or cluster), as typed on a command line."""
    return {flag for option in options_for(command) for flag in option.flags}


def add_launch_arguments(parser: argparse.ArgumentParser, declared) -> None:
    """SCRIPT and the declared options, on the parser of a command that launches (or writes a launcher)."""
    parser.add_argument("script", metavar="SCRIPT", nargs="?",
                        help="training script (a module name with -m, an executable with --no-python); its "
                             "arguments go after --")
    used = {option.group for option in declared}
    add_options(parser, declared, {title: parser.add_argument_group(title) for title in GROUPS if title in used})
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
