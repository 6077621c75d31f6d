"""``dlaunch msrun``: MindSpore's msrun command line, carried out by ``dlaunch run`` or ``dlaunch cluster``.

msrun (``mindspore/parallel/cluster/run.py`` and ``process_entity/_api.py`` in MindSpore 2.10) starts
MindSpore's scheduler on the master host and ``--local_worker_num`` workers, each with ``MS_ROLE``,
``MS_WORKER_NUM``, ``MS_SCHED_HOST``/``PORT``, ``MS_TOPO_TIMEOUT``, ``MS_NODE_ID``, ``RANK_ID`` and ``DEVICE_ID``:
exactly what ``--ms-scheduler`` gives.  So a user's msrun line works by changing the program name, and gets
dlaunch's guarantees on top: a run directory, the failing rank's exit code (msrun exits 1 with a traceback),
128+N on signal N, and no process left behind.

``translate`` is pure: msrun's flags in, the dlaunch ``run``/``cluster`` options they mean (and, for several
nodes, the rank table of the job) out, so the mapping is tested without starting anything.  ``settled_launch``
does what needs the host (the master address resolved and checked, the devices this host offers), then
builds the ``LaunchRequest`` from those options, checked by their declared types and layered as a typed
command line would be (``cli.request.front_request``), and ``cmd_msrun`` runs it with the same handler
as if it had been typed.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher.base.border import is_number
from launcher.errors import UsageError
from launcher.settings.argtypes import MAX_SECONDS, port, whole
from launcher.settings.launch import MAX_LOCAL_RANKS
from launcher.settings.request import JobShape, LaunchRequest

# msrun 2.10's defaults (run.py get_args), kept so a line that relies on them means the same here
MSRUN_WORKER_NUM = 8
MSRUN_MASTER_ADDR = "127.0.0.1"
MSRUN_MASTER_PORT = 8118
MSRUN_CLUSTER_TIME_OUT = 600
MSRUN_ALL_WORKERS = "-1"          # --tail_worker_log's default: every worker's log on the console
MSRUN_MAX_WORKERS = 1 << 17       # 131,072 ranks: beyond the largest clusters; a typo of a digit is refused
PYTHONS = ("python", "python3")   # msrun runs these (and pytest) as given; anything else as "python SCRIPT"

FLAG_TABLE = """\
msrun flag              dlaunch
--worker_num N          --ranks N (one node), or the job's world size (several nodes)
--local_worker_num L    this host's ranks; L < N: dlaunch cluster, N/L nodes of L ranks each
--master_addr A         --master-addr A (a host name is resolved, as msrun does): MS_SCHED_HOST
--master_port P         --master-port P: MS_SCHED_PORT (default 8118, as msrun)
--node_rank K           cluster --rank-start K*L; node 0 runs the scheduler, so run it on --master_addr
--log_dir D             --output-dir D: run directories go there (default ./dlaunch_runs)
--join True|False       accepted; dlaunch always joins (it stays until every rank has ended)
--cluster_time_out S    --ms-topo-timeout S: MS_TOPO_TIMEOUT (a negative S waits forever, as in msrun)
--rank_table_file F     RANK_TABLE_FILE=F for every rank, as msrun exports it
--tail_worker_log R     --console R (default -1: every rank's output, as msrun)
task_script args ...    SCRIPT -- args (python/python3 SCRIPT, python -m MODULE: the same; pytest: --no-python)
not supported (exit 2): --bind_core/--bind_numa other than False, --sim_level, --sim_rank_id (or
MS_SIMULATION_LEVEL), --worker_log_name (logs are rank_NNN/output.log in the run directory)."""


@dataclass(frozen=True)
class Translation:
    """The dlaunch command a front's line means (msrun's here, torchrun's in ``cli.fronts.torchrun``): run or cluster,
    the script, the options it sets as their flags would give them (dest -> value), the script's arguments."""

    command: str
    script: str
    flags: Mapping[str, Any]
    script_args: list[str]
    job: JobShape | None = None               # several nodes: the job's shape (no table file to write or share)
    checked: Mapping[str, Any] = field(default_factory=dict)   # values the front's own rules checked (below)
    notes: list[str] = field(default_factory=list)
    fresh_run_id: bool = False   # its run id names the job (torchrun's --rdzv-id): each launch a directory of its own

    def request(self, front: str) -> LaunchRequest:
        """The request this line means, settled as if its options had been typed (``DLAUNCH_*`` layers too)."""
        from launcher.cli.request import front_request

        return front_request(front, self.command, self.script, self.script_args, self.flags,
                             checked=self.checked, job=self.job, run_id_fresh=self.fresh_run_id)


def _join(text: str) -> bool:
    """``--join``: msrun reads it with ast.literal_eval (True/False); the usual spellings of a flag too."""
    word = str(text).strip().lower()
    if word in ("true", "1", "yes"):
        return True
    if word in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, not {str(text)[:40]!r}")


def _integer(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {str(text)[:40]!r}") from None


def add_parser(sub) -> None:
    p = sub.add_parser(
        "msrun", allow_abbrev=True,  # as msrun's own parser: abbreviations taken
        help="run an msrun command line (MindSpore's launcher) under dlaunch",
        usage="dlaunch msrun [--worker_num N] [--local_worker_num L] [--master_addr A] [--master_port P] "
              "[--node_rank K] [--log_dir D] [--join B] [--cluster_time_out S] [msrun options] "
              "task_script [script arguments ...]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run MindSpore's msrun command line unchanged but for the program name: the same flags\n"
                    "and defaults (msrun 2.10), carried out as dlaunch run --ms-scheduler (one node) or dlaunch\n"
                    "cluster --ms-scheduler (several nodes, one dlaunch msrun per node), so you also get a run\n"
                    "directory per run, the failing rank's exit code, 128+N on signal N and no orphans.",
        epilog=FLAG_TABLE + "\n\nexample: dlaunch msrun --worker_num=8 --local_worker_num=8 --master_port=8118 "
                            "--log_dir=msrun_log --join=True train.py --epochs 3")
    p.add_argument("--worker_num", metavar="N", type=whole(1, MSRUN_MAX_WORKERS), default=MSRUN_WORKER_NUM,
                   help=f"ranks in the whole job (default {MSRUN_WORKER_NUM})")
    p.add_argument("--local_worker_num", metavar="L", type=whole(1, MAX_LOCAL_RANKS), default=MSRUN_WORKER_NUM,
                   help=f"ranks on this host (default {MSRUN_WORKER_NUM})")
    p.add_argument("--master_addr", metavar="A", default=MSRUN_MASTER_ADDR,
                   help=f"the scheduler's address (default {MSRUN_MASTER_ADDR})")
    p.add_argument("--master_port", metavar="P", type=port, default=MSRUN_MASTER_PORT,
                   help=f"the scheduler's port (default {MSRUN_MASTER_PORT})")
    p.add_argument("--node_rank", metavar="K", type=whole(-1, MSRUN_MAX_WORKERS), default=-1,
                   help="this host's index among the nodes (needed when --local_worker_num < --worker_num)")
    p.add_argument("--log_dir", metavar="DIR", default="", help="where run directories go (default ./dlaunch_runs)")
    p.add_argument("--join", metavar="True|False", type=_join, default=False,
                   help="accepted for msrun's sake: dlaunch always waits for every rank (default False)")
    p.add_argument("--cluster_time_out", metavar="SECONDS", type=_integer, default=MSRUN_CLUSTER_TIME_OUT,
                   help=f"seconds the cluster may take to form (default {MSRUN_CLUSTER_TIME_OUT}; negative: forever)")
    p.add_argument("--rank_table_file", metavar="FILE", default="", help="exported to every rank as RANK_TABLE_FILE")
    p.add_argument("--tail_worker_log", metavar="RANKS", default=MSRUN_ALL_WORKERS,
                   help="ranks whose output the console shows: -1 (default) all, or a list such as 0,3")
    p.add_argument("--bind_core", metavar="False", default="False", help="not supported: only False")
    p.add_argument("--bind_numa", metavar="False", default="False", help="not supported: only False")
    p.add_argument("--sim_level", metavar="-1", type=_integer, default=-1, help="not supported: only -1")
    p.add_argument("--sim_rank_id", metavar="-1", type=_integer, default=-1, help="not supported: only -1")
    p.add_argument("--worker_log_name", metavar="NAME", default="", help="not supported: logs are rank_NNN/output.log")
    own = p.add_argument_group("dlaunch's own (msrun has none of these)")
    own.add_argument("--run-id", help="name of the run directory; give every node the same one")
    own.add_argument("--dry-run", action="store_true", help="print the plan and start nothing")
    p.add_argument("task_script", metavar="task_script",
                   help="the training script (python/python3 SCRIPT, python -m MODULE and pytest work too)")
    p.add_argument("task_script_args", nargs=argparse.REMAINDER, help="the script's arguments")
    p.set_defaults(handler=cmd_msrun)


def _refusals(ns: argparse.Namespace, environ) -> list[str]:
    """What dlaunch cannot honour, one message each."""
    refused = []
    for flag in ("bind_core", "bind_numa"):
        if str(getattr(ns, flag)).strip().lower() != "false":
            refused.append(f"--{flag} is not supported: dlaunch does not pin ranks to CPU cores or NUMA nodes "
                           f"(run the ranks under taskset/numactl with a wrapper script instead)")
    if ns.sim_level != -1 or ns.sim_rank_id != -1 or environ.get("MS_SIMULATION_LEVEL"):
        refused.append("--sim_level/--sim_rank_id/MS_SIMULATION_LEVEL (MindSpore's dry-run simulation) is not "
                       "supported: run msrun itself for a simulation")
    if ns.worker_log_name:
        refused.append("--worker_log_name is not supported: each rank's log is rank_NNN/output.log in the run "
                       "directory")
    if ns.cluster_time_out == 0:
        refused.append("--cluster_time_out 0 gives the cluster no time to form: give seconds, or a negative "
                       "number to wait forever")
    if ns.cluster_time_out > MAX_SECONDS:
        refused.append(f"--cluster_time_out {ns.cluster_time_out} is out of range: at most {MAX_SECONDS:.0f} "
                       f"(30 days), or a negative number to wait forever")
    if ns.local_worker_num > ns.worker_num:
        refused.append(f"--local_worker_num {ns.local_worker_num} is more than --worker_num {ns.worker_num}")
    elif ns.local_worker_num < ns.worker_num:
        if ns.node_rank < 0:
            refused.append(f"--worker_num {ns.worker_num} over nodes of --local_worker_num {ns.local_worker_num} "
                           f"needs --node_rank: dlaunch numbers ranks by node (node K runs ranks "
                           f"K*{ns.local_worker_num}..), where msrun without it lets MindSpore number them as "
                           f"they arrive")
        elif ns.worker_num % ns.local_worker_num:
            refused.append(f"--worker_num {ns.worker_num} is not a multiple of --local_worker_num "
                           f"{ns.local_worker_num}: msrun numbers node K's ranks from K*{ns.local_worker_num}, "
                           f"so every node must run the same number")
        elif ns.node_rank >= ns.worker_num // ns.local_worker_num:
            refused.append(f"--node_rank {ns.node_rank} is beyond the {ns.worker_num // ns.local_worker_num} "
                           f"node(s) of {ns.worker_num} workers, {ns.local_worker_num} per node")
    tail = ns.tail_worker_log.strip()
    if tail != MSRUN_ALL_WORKERS and not all(is_number(part.strip()) for part in tail.split(",")):
        refused.append(f"--tail_worker_log {tail[:40]!r}: give -1 (all) or rank numbers such as 0,3")
    return refused


def _command(script: str, args: list[str]) -> tuple[str, dict[str, bool], list[str]]:
    """(SCRIPT, -m or --no-python, the script's arguments) for msrun's task_script and its arguments."""
    if script in PYTHONS and args and args[0] == "-m" and len(args) > 1:
        return args[1], {"module": True}, args[2:]
    if script in PYTHONS and args and not args[0].startswith("-"):
        return args[0], {}, args[1:]
    if script in (*PYTHONS, "pytest"):
        return script, {"no_python": True}, args   # an interpreter flag first (python -u x.py): run it as written
    return script, {}, args


def translate(ns: argparse.Namespace, master_ip: str, devices: list[int], environ=None) -> Translation:
    """The dlaunch run/cluster options for msrun flags ``ns`` (a UsageError for what dlaunch can't do).

    Pure but for making ``--rank_table_file`` absolute, as the ranks will see it from their working directory.
    ``master_ip`` is ``--master_addr`` as an address; ``devices`` this host's first ``--local_worker_num``
    device ids (what ``--ranks`` would take).
    """
    import os

    refused = _refusals(ns, os.environ if environ is None else environ)
    if refused:
        raise UsageError(refused[0])
    script, what, script_args = _command(ns.task_script, list(ns.task_script_args))
    tail = ns.tail_worker_log.strip()
    flags: dict[str, Any] = {**what, "ms_scheduler": True, "profile": "structure", "master_addr": master_ip,
                             "master_port": ns.master_port, "console": "all" if tail == MSRUN_ALL_WORKERS else tail}
    # msrun's "negative: wait forever", which MindSpore honours and --ms-topo-timeout refuses: msrun's own
    # rules (_refusals) checked it
    checked = {"ms_topo_timeout": float(ns.cluster_time_out)} if ns.cluster_time_out < 0 else {}
    if ns.cluster_time_out > 0:
        flags["ms_topo_timeout"] = ns.cluster_time_out
    if ns.log_dir:
        flags["output_dir"] = ns.log_dir
    if ns.rank_table_file:
        flags["env"] = [f"RANK_TABLE_FILE={os.path.abspath(ns.rank_table_file)}"]
    if ns.run_id:
        flags["run_id"] = ns.run_id
    if ns.dry_run:
        flags["dry_run"] = True
    notes = []
    if ns.local_worker_num == ns.worker_num:
        if ns.node_rank not in (-1, 0):
            notes.append(f"all {ns.worker_num} workers run on this node, so --node_rank {ns.node_rank} is "
                         f"ignored (as msrun does)")
        return Translation("run", script, {**flags, "ranks": ns.worker_num}, script_args, checked=checked,
                           notes=notes)
    per_node = ns.local_worker_num
    job = JobShape(ns.worker_num // per_node, tuple(devices[:per_node]))
    return Translation("cluster", script, {**flags, "rank_start": ns.node_rank * per_node}, script_args,
                       job=job, checked=checked, notes=notes)


def master_ip(addr: str) -> str:
    """``--master_addr`` as an IP address: a host name is resolved, as msrun does (_convert_addr_to_ip)."""
    import ipaddress
    import socket

    bare = addr.strip()[1:-1] if addr.strip().startswith("[") and addr.strip().endswith("]") else addr.strip()
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(bare, None, socket.AF_UNSPEC, socket.SOCK_STREAM)[0][4][0])
    except (OSError, UnicodeError, IndexError):
        raise UsageError(f"--master_addr {addr[:80]!r} does not resolve to an address") from None


def is_local_address(ip: str) -> bool:
    """Whether the scheduler could listen on ``ip`` here: a port can be bound there (loopback 127/8 included)."""
    from launcher.host.devices import free_port

    try:
        free_port(ip)
    except UsageError:
        return False
    return True


def settled_launch(args: argparse.Namespace) -> tuple[str, LaunchRequest]:
    """("run" or "cluster", its request) for an msrun command line: its options checked by their declared
    types and layered like a typed command line (``cmd_msrun`` then runs it)."""
    from launcher.base.console import say
    from launcher.host import devices as host

    ip = master_ip(args.master_addr)
    view = host.discover(os.environ)
    devices = view.first(args.local_worker_num, "--local_worker_num")
    done = translate(args, ip, devices)
    if done.command == "cluster" and args.node_rank == 0 and not is_local_address(ip):
        raise UsageError(f"node 0 runs MindSpore's scheduler, which listens on --master_addr "
                         f"{args.master_addr}, not an address of this host: run --node_rank 0 on that host")
    for note in done.notes:
        say(f"msrun: {note}")
    return done.command, done.request("msrun")


def cmd_msrun(args: argparse.Namespace) -> int:
    """An msrun command line, carried out as the dlaunch run or cluster it translates to (``cli.fronts.msrun``)."""
    from launcher.base.console import say
    from launcher.cli.launch import launch

    _, request = settled_launch(args)
    if not request.dry_run:
        try:
            link_msrun_logs(args, request.output_dir)
        except OSError as exc:   # msrun's names are a convenience: the run goes on without them
            say(f"msrun's log names (worker_N.log) not made in {request.output_dir}: {exc.strerror}")
    return launch(request)


def link_msrun_logs(ns: argparse.Namespace, output_dir: str) -> None:
    """msrun's log names, ``worker_N.log`` and (on node 0) ``scheduler.log`` in the log directory, as links to
    the newest run's logs (through its ``latest`` link): every MindSpore tutorial's "look at worker_0.log" works,
    and each run keeps its own directory. A file of that name that is not a link is never replaced."""
    import contextlib
    import os

    from launcher.contract import SCHEDULER_DIR
    from launcher.rundir.paths import LATEST, rank_dir_name

    first = max(ns.node_rank, 0) * ns.local_worker_num
    links = {f"worker_{rank}.log": os.path.join(LATEST, rank_dir_name(rank, ns.worker_num), "output.log")
             for rank in range(first, first + ns.local_worker_num)}
    if ns.node_rank <= 0:
        links["scheduler.log"] = os.path.join(LATEST, SCHEDULER_DIR, "output.log")
    os.makedirs(output_dir, exist_ok=True)
    for name, target in links.items():
        path = os.path.join(output_dir, name)
        if os.path.islink(path) and os.readlink(path) == target:
            continue
        if os.path.lexists(path) and not os.path.islink(path):
            continue   # the user's own file
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.symlink(target, path)
