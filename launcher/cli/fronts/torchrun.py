"""``dlaunch torchrun``: torch 2.13's torchrun command line, carried out by ``dlaunch run`` or ``dlaunch cluster``.

torchrun (``torch/distributed/run.py``) starts ``--nproc-per-node`` workers per node with RANK, LOCAL_RANK,
WORLD_SIZE, GROUP_RANK, ROLE_*, MASTER_ADDR/PORT and TORCHELASTIC_*: the variables every dlaunch rank gets.
So a torchrun line works by putting ``dlaunch`` in front, and gets dlaunch's guarantees on top (a run
directory, the failing rank's exit code, no process left behind).

Every option also comes from ``PET_<OPTION>`` as its default, the command line winning (torch's
``argparse_util.env``/``check_env``).  The values are filled in after parsing (``with_env_defaults``), so
a malformed ``PET_*`` value is a one-line error of this command, never a traceback of every command.

``translate`` is pure: torchrun's flags in, the dlaunch command line out (and, for several nodes, the job's
rank table: node K runs ranks K*nproc.., as msrun's multi-node path does: the request's ``JobShape``).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from typing import Any

from launcher.base.signals import STOP_SIGNAL_NAMES
from launcher.cli.fronts.msrun import Translation
from launcher.errors import UsageError
from launcher.settings.argtypes import port, whole
from launcher.settings.request import JobShape, LaunchRequest

FLAG, VALUE = "flag", "value"
# (flags, dest, torchrun 2.13's default, kind): get_args_parser() in torch/distributed/run.py
TORCHRUN_OPTIONS: list[tuple[tuple[str, ...], str, object, str]] = [
    (("--nnodes",), "nnodes", "1:1", VALUE),
    (("--nproc-per-node", "--nproc_per_node"), "nproc_per_node", "1", VALUE),
    (("--rdzv-backend", "--rdzv_backend"), "rdzv_backend", "static", VALUE),
    (("--rdzv-endpoint", "--rdzv_endpoint"), "rdzv_endpoint", "", VALUE),
    (("--rdzv-id", "--rdzv_id"), "rdzv_id", "none", VALUE),
    (("--rdzv-conf", "--rdzv_conf"), "rdzv_conf", "", VALUE),
    (("--standalone",), "standalone", False, FLAG),
    (("--max-restarts", "--max_restarts"), "max_restarts", "0", VALUE),
    (("--monitor-interval", "--monitor_interval"), "monitor_interval", "0.1", VALUE),
    (("--start-method", "--start_method"), "start_method", "spawn", VALUE),
    (("--event-log-handler", "--event_log_handler"), "event_log_handler", "null", VALUE),
    (("--role",), "role", "default", VALUE),
    (("-m", "--module"), "module", False, FLAG),
    (("--no-python", "--no_python"), "no_python", False, FLAG),
    (("--run-path", "--run_path"), "run_path", False, FLAG),
    (("--log-dir", "--log_dir"), "log_dir", "", VALUE),
    (("-r", "--redirects"), "redirects", "0", VALUE),
    (("-t", "--tee"), "tee", "0", VALUE),
    (("--local-ranks-filter", "--local_ranks_filter"), "local_ranks_filter", "", VALUE),
    (("--duplicate-stdout-filters", "--duplicate_stdout_filters"), "duplicate_stdout_filters", "", VALUE),
    (("--duplicate-stderr-filters", "--duplicate_stderr_filters"), "duplicate_stderr_filters", "", VALUE),
    (("--node-rank", "--node_rank"), "node_rank", None, VALUE),
    (("--master-addr", "--master_addr"), "master_addr", "127.0.0.1", VALUE),
    (("--master-port", "--master_port"), "master_port", None, VALUE),
    (("--local-addr", "--local_addr"), "local_addr", None, VALUE),
    (("--logs-specs", "--logs_specs"), "logs_specs", None, VALUE),
    (("--numa-binding", "--numa_binding"), "numa_binding", None, VALUE),
    (("--signals-to-handle", "--signals_to_handle"), "signals_to_handle", STOP_SIGNAL_NAMES, VALUE),
    (("--shutdown-timeout", "--shutdown_timeout"), "shutdown_timeout", None, VALUE),
    (("--virtual-local-rank", "--virtual_local_rank"), "virtual_local_rank", False, FLAG),
]
NO_PET = {"logs_specs", "numa_binding"}   # torchrun reads these two from the command line only
TORCHRUN_DEFAULT_PORT = 29500             # torchrun's --master-port default for several nodes
DLAUNCH_ONLY = {"dlaunch_run_id", "dry_run"}

FLAG_TABLE = """\
torchrun flag                  dlaunch
--nproc-per-node N|auto|cpu|gpu|npu   --ranks N (auto: one per GPU/NPU, else per usable CPU; cpu: per usable CPU)
--nnodes N (or N:N)            N nodes: dlaunch cluster, node K runs ranks K*nproc.. (needs --node-rank)
--nnodes MIN:MAX               elastic: cluster --nnodes MIN:MAX, node ranks given on arrival without --node-rank
--node-rank K                  cluster --rank-start K*nproc; GROUP_RANK=K
--master-addr A --master-port P   --master-addr A --master-port P (several nodes: default port 29500;
                               0 on one node: a free port)
--rdzv-backend static|c10d --rdzv-endpoint A:P   the same as --master-addr A --master-port P
--rdzv-id ID                   --run-id ID: the run directory's name and TORCHELASTIC_RUN_ID (characters other
                               than letters, digits, '.', '_', '-' become '_': job:7 is job_7)
--standalone                   one node, a free port on 127.0.0.1
--max-restarts K               --max-restarts K
-m, --no-python, --run-path    -m, --no-python, python SCRIPT
--log-dir D                    --output-dir D: run directories go there
-r/--redirects, -t/--tee, --local-ranks-filter   --console: which ranks' output the console shows (local
                               ranks the node does not have show nothing, as under torchrun)
--logs-specs default           torchrun's own: each rank's output in rank_NNN/output.log
--shutdown-timeout S           --grace-period S
--rdzv-conf last_call_timeout=S,join_timeout=S   --last-call S, --join-timeout S
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE   the console's prefix of each rank's lines (${role_name} ${rank} ${local_rank})
accepted, no effect: --monitor-interval, --start-method, other --rdzv-conf keys, --local-addr, --event-log-handler null
refused (exit 2): --rdzv-backend other than static/c10d, --nnodes N of several nodes without --node-rank,
--role other than default, --logs-specs other than default, --master-port 0 on several nodes, --numa-binding,
--duplicate-std*-filters, --virtual-local-rank, --signals-to-handle other than the default."""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "torchrun", allow_abbrev=True,  # as torchrun's own parser: abbreviations taken
        help="run a torchrun command line (PyTorch's launcher) under dlaunch",
        usage="dlaunch torchrun [--nproc-per-node N] [--nnodes N] [--node-rank K] [--master-addr A] "
              "[--master-port P] [--standalone] [torchrun options] training_script [script arguments ...]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run torchrun's command line unchanged but for the program name: the same flags, PET_<OPTION>\n"
                    "defaults and worker environment (torch 2.13), carried out as dlaunch run (one node) or\n"
                    "dlaunch cluster (several nodes, one dlaunch torchrun per node), so you also get a run\n"
                    "directory per run, the failing rank's exit code, 128+N on signal N and no orphans.",
        epilog=FLAG_TABLE + "\n\nexample: dlaunch torchrun --standalone --nproc-per-node 4 train.py --epochs 3")
    for flags, dest, _, kind in TORCHRUN_OPTIONS:
        if kind == FLAG:
            p.add_argument(*flags, dest=dest, action="store_const", const=True, default=None)
        else:
            p.add_argument(*flags, dest=dest, default=None)
    own = p.add_argument_group("dlaunch's own (torchrun has none of these)")
    own.add_argument("--run-id", dest="dlaunch_run_id", help="name of the run directory; give every node the same one")
    own.add_argument("--dry-run", action="store_true", help="print the plan and start nothing")
    p.add_argument("training_script", help="the training script (a module with -m, a program with --no-python)")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER, help="the script's arguments")
    p.set_defaults(handler=cmd_torchrun)


def with_env_defaults(ns: argparse.Namespace, environ: Mapping[str, str]) -> argparse.Namespace:
    """Fill every option not given from ``PET_<DEST>``, else torchrun's default (as argparse_util does)."""
    for _, dest, default, kind in TORCHRUN_OPTIONS:
        if getattr(ns, dest) is not None:
            continue
        text = None if dest in NO_PET else environ.get(f"PET_{dest.upper()}")
        if text is None:
            setattr(ns, dest, default)
        elif kind == FLAG:
            if text.strip() not in ("0", "1"):
                raise UsageError(f"PET_{dest.upper()}={text[:40]!r}: expected 0 or 1")
            setattr(ns, dest, text.strip() == "1")
        else:
            setattr(ns, dest, text)
    return ns


def with_pod_defaults(ns: argparse.Namespace, environ: Mapping[str, str]) -> list[str]:
    """In a scheduler's pod (``launcher.host.pods``), what torchrun would need typed: the job's size, this pod's
    index and the master address from the operator's variables, for every option neither the command line
    nor ``PET_*`` gave (Volcano sets no ``PET_*``; training-operator v1 sets ``PET_NNODES`` but only
    ``MASTER_ADDR``).  The notes say what was taken."""
    from launcher.host.pods import detect

    pod = detect(environ)
    if pod is None or ns.standalone or pod.nnodes is None:
        return []
    taken = []
    for dest, value in (("nnodes", pod.nnodes), ("node_rank", pod.node_rank), ("master_addr", pod.master_addr),
                        ("master_port", pod.master_port), ("nproc_per_node", pod.nproc)):
        if value is not None and getattr(ns, dest) is None and f"PET_{dest.upper()}" not in environ:
            setattr(ns, dest, str(value))
            taken.append(f"--{dest.replace('_', '-')} {value}")
    return [f"{pod.operator} ({pod.said}): {' '.join(taken)}"] if taken else []


def _number(flag: str, text, low: int, high: int) -> int:
    try:
        return whole(low, high)(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def node_count(text: str) -> tuple[int, int]:
    """``--nnodes N``, ``N:N`` or ``MIN:MAX`` (elastic membership: ``cluster --nnodes MIN:MAX``) as (MIN, MAX)."""
    from launcher.settings.argtypes import node_span

    try:
        return node_span(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--nnodes: {exc}") from None


def rendezvous_conf(text: str, flags: dict, notes: list[str]) -> None:
    """``--rdzv-conf``: ``last_call_timeout=S`` is ``--last-call S``, ``join_timeout=S`` is ``--join-timeout S``;
    the rest has no effect (no rendezvous store to tune), said once. Quotes around the value are dropped (PyTorch's
    own test_launch_elastic passes them)."""
    ignored = []
    for item in filter(None, (part.strip().strip("'\"") for part in text.split(","))):
        key, _, value = item.partition("=")
        if key.strip() in ("last_call_timeout", "join_timeout"):
            flags[key.strip().replace("_timeout", "").replace("join", "join_timeout")] = value.strip()
        else:
            ignored.append(item)
    if ignored:
        notes.append(f"--rdzv-conf {','.join(ignored)[:60]} has no effect: dlaunch has no rendezvous store to tune")


def endpoint(text: str) -> tuple[str, int | None]:
    """``--rdzv-endpoint HOST[:PORT]`` (``[v6]:PORT`` too) as (address, port or None)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, (_port("--rdzv-endpoint", rest[1:]) if rest.startswith(":") else None)
    host, colon, rest = text.rpartition(":")
    if not colon or ":" in host:
        return text, None
    return host, _port("--rdzv-endpoint", rest)


def _port(flag: str, text) -> int:
    try:
        return port(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _refusals(ns: argparse.Namespace) -> list[str]:
    """What dlaunch cannot honour, one message each."""
    refused = []
    if ns.rdzv_backend not in ("static", "c10d"):
        refused.append(f"--rdzv-backend {ns.rdzv_backend[:40]}: dlaunch has no rendezvous service; give "
                       f"--rdzv-backend static or c10d with --rdzv-endpoint A:P and --node-rank K on each node")
    if str(ns.role) != "default":
        refused.append(f"--role {str(ns.role)[:40]}: dlaunch names every rank's role 'default' (ROLE_NAME)")
    for dest in ("logs_specs", "numa_binding"):
        if getattr(ns, dest) and not (dest == "logs_specs" and ns.logs_specs == "default"):   # torchrun's own
            refused.append(f"--{dest.replace('_', '-')} is not supported: each rank's output goes to "
                           f"rank_NNN/output.log in the run directory, and dlaunch does not pin ranks to NUMA nodes")
    for dest in ("duplicate_stdout_filters", "duplicate_stderr_filters"):
        if getattr(ns, dest):
            refused.append(f"--{dest.replace('_', '-')} is not supported: every rank's output is in its own "
                           f"log; dlaunch logs RUN_DIR shows them together")
    if ns.virtual_local_rank:
        refused.append("--virtual-local-rank is not supported: each rank's LOCAL_RANK is its own, with "
                       "CUDA_VISIBLE_DEVICES listing this node's devices")
    if ns.signals_to_handle.replace(" ", "") != STOP_SIGNAL_NAMES:
        refused.append(f"--signals-to-handle {ns.signals_to_handle[:40]}: dlaunch forwards "
                       f"{STOP_SIGNAL_NAMES.replace(',', ', ')} to every rank, and only those")
    if ns.event_log_handler != "null":
        refused.append(f"--event-log-handler {ns.event_log_handler[:40]}: dlaunch records events in the run "
                       f"directory (summary.json), only 'null' is accepted")
    if ns.module and ns.no_python:
        refused.append("-m and --no-python exclude each other (as in torchrun)")
    return refused


def _console(ns: argparse.Namespace, node_rank: int, nproc: int, notes: list[str]) -> str:
    """--console for torchrun's -r/-t/--local-ranks-filter: torchrun shows every worker's output by default."""
    shown = set(range(nproc))
    if ns.local_ranks_filter.strip():
        named = {_number("--local-ranks-filter", part, 0, 10**6)
                 for part in ns.local_ranks_filter.split(",") if part.strip()}
        shown = named & set(range(nproc))   # torchrun shows nothing of a local rank the node does not have
        if named - shown:
            notes.append(f"--local-ranks-filter {ns.local_ranks_filter}: this node has local ranks 0 to "
                         f"{nproc - 1}; {','.join(map(str, sorted(named - shown)))} show nothing")
    for flag, text in (("--redirects", ns.redirects), ("--tee", ns.tee)):
        if str(text).strip() not in ("0", ""):
            notes.append(f"{flag} {text}: every rank's output always goes to rank_NNN/output.log in the run "
                         f"directory; the console shows the ranks --local-ranks-filter names (default all)")
    if str(ns.redirects).strip() == "3" and str(ns.tee).strip() in ("0", "") and not ns.local_ranks_filter.strip():
        shown = set()   # -r 3: stdout and stderr of every worker to files only (with -t, to the console as well)
    if shown == set(range(nproc)):
        return "all"
    if not shown:
        return "none"
    return ",".join(str(node_rank * nproc + local) for local in sorted(shown))


def translate(ns: argparse.Namespace, nproc: int, devices: list[int]) -> Translation:
    """The dlaunch run/cluster options for torchrun flags ``ns`` (filled by ``with_env_defaults``).

    ``nproc`` is --nproc-per-node as a number (``host.devices.ranks_per_node``); ``devices`` this host's first
    ``nproc`` device ids.  A UsageError for what dlaunch cannot do.
    """
    refused = _refusals(ns)
    if refused:
        raise UsageError(refused[0])
    least, nodes = node_count(ns.nnodes)
    notes: list[str] = []
    addr, port_number = ns.master_addr, None
    free_port = str(ns.master_port).strip() == "0"   # torchrun runs one node on it; dlaunch picks a free port
    if ns.master_port not in (None, "") and not free_port:
        port_number = _port("--master-port", ns.master_port)
    if ns.rdzv_endpoint.strip() and not ns.standalone:
        addr, given = endpoint(ns.rdzv_endpoint)
        port_number = given if given is not None else port_number
    if ns.standalone:
        if nodes > 1:
            raise UsageError(f"--standalone runs one node, but --nnodes is {ns.nnodes}: leave out --standalone "
                             f"and give --master-addr A --node-rank K on each node")
        addr, port_number = "127.0.0.1", None
    what = {"module": True} if ns.module else {"no_python": True} if ns.no_python else {}
    restarts = _number("--max-restarts", ns.max_restarts, 0, 1000)
    flags: dict[str, Any] = {**what, "profile": "structure", "max_restarts": restarts}   # no Ascend topology rules
    if ns.log_dir:
        flags["output_dir"] = ns.log_dir
    fresh = ns.rdzv_id not in ("", "none")   # it names the job: each launch of the line its own directory
    if fresh:
        flags["run_id"] = re.sub(r"[^A-Za-z0-9._-]", "_", ns.rdzv_id)
        if flags["run_id"] != ns.rdzv_id:
            notes.append(f"--rdzv-id {ns.rdzv_id[:60]}: run id {flags['run_id'][:60]} (a run directory's name)")
    if ns.dlaunch_run_id:   # dlaunch's own --run-id names the directory itself
        flags["run_id"], fresh = ns.dlaunch_run_id, False
    if ns.shutdown_timeout not in (None, ""):
        flags["grace_period"] = ns.shutdown_timeout
    if ns.dry_run:
        flags["dry_run"] = True
    rendezvous_conf(ns.rdzv_conf, flags, notes)
    script, script_args = ns.training_script, list(ns.training_script_args)
    if nodes == 1:
        flags.pop("last_call", None)   # one node: nothing to wait for
        if ns.node_rank not in (None, "0", 0):
            notes.append(f"one node, so --node-rank {ns.node_rank} is ignored")
        flags.update(console=_console(ns, 0, nproc, notes), master_addr=addr, ranks=nproc)
        if port_number is not None:
            flags["master_port"] = port_number
        return Translation("run", script, flags, script_args, notes=notes, fresh_run_id=fresh)
    if free_port and port_number is None:
        raise UsageError(f"--master-port 0 picks a free port, which the other nodes cannot know: give every node "
                         f"the same --master-port P (--nnodes {nodes})")
    flags.update(master_addr=addr, master_port=TORCHRUN_DEFAULT_PORT if port_number is None else port_number)
    if ns.node_rank in (None, "") and least < nodes:   # elastic: node ranks given on arrival (execute/job/claim.py)
        console = _console(ns, 0, nproc, notes)
        if console not in ("all", "none"):
            notes.append("--local-ranks-filter with node ranks given on arrival: every rank is shown")
        flags["console"] = console if console in ("all", "none") else "all"
    elif ns.node_rank in (None, ""):
        raise UsageError(f"--nnodes {nodes} needs --node-rank K (or PET_NODE_RANK) on each node: dlaunch numbers "
                         f"ranks by node (node K runs ranks K*{nproc}..); with --nnodes MIN:MAX node ranks are "
                         f"given on arrival")
    else:
        node_rank = _number("--node-rank", ns.node_rank, 0, nodes - 1)
        flags.update(console=_console(ns, node_rank, nproc, notes), rank_start=node_rank * nproc)
    return Translation("cluster", script, flags, script_args,
                       job=JobShape(nodes, tuple(devices[:nproc]), least if least < nodes else None), notes=notes,
                       fresh_run_id=fresh)


def settled_launch(args: argparse.Namespace) -> tuple[str, LaunchRequest]:
    """("run" or "cluster", its request) for a torchrun command line: its options checked by their declared
    types and layered like a typed command line (``cmd_torchrun`` then runs it)."""
    from launcher.base.console import say
    from launcher.host import devices as host
    from launcher.host.devices import ranks_per_node

    for note in with_pod_defaults(args, os.environ):
        say(f"torchrun: {note}")
    args = with_env_defaults(args, os.environ)
    nproc, chosen = ranks_per_node(args.nproc_per_node, os.environ)
    if chosen:
        say(f"torchrun: {chosen}")
    done = translate(args, nproc, host.discover(os.environ).first(nproc, "--nproc-per-node")
                     if node_count(args.nnodes)[1] > 1 else [])
    for note in done.notes:
        say(f"torchrun: {note}")
    return done.command, done.request("torchrun")


def cmd_torchrun(args: argparse.Namespace) -> int:
    """A torchrun command line, carried out as the dlaunch run or cluster it translates to (``cli.fronts.torchrun``)."""
    from launcher.cli.launch import launch

    return launch(settled_launch(args)[1])


# torchrun's flags that dlaunch run does not take, and what to type instead (``parsers.unrecognized``)
RUN_HINTS = {
    "--nproc-per-node": "--ranks N", "--nproc_per_node": "--ranks N",
    "--nnodes": "dlaunch cluster --nnodes N --node-rank K (or dlaunch torchrun --nnodes)",
    "--node-rank": "dlaunch cluster --nnodes N --node-rank K (or dlaunch torchrun --node-rank)",
    "--node_rank": "dlaunch cluster --nnodes N --node_rank K (or dlaunch torchrun --node_rank)",
    "--log-dir": "--output-dir DIR", "--log_dir": "--output-dir DIR", "--redirects": "--console",
    "--tee": "--console", "--local-ranks-filter": "--console RANKS", "--local_ranks_filter": "--console RANKS",
    "--standalone": "nothing (dlaunch run is standalone)", "--max_restarts": "--max-restarts",
}


def run_hint(extras: list[str]) -> str | None:
    """A one-line hint when ``dlaunch run``/``cluster`` got a torchrun flag, else None."""
    for extra in extras:
        flag = extra.split("=", 1)[0]
        if flag in RUN_HINTS or flag.startswith(("--rdzv-", "--rdzv_")):
            instead = RUN_HINTS.get(flag, "dlaunch torchrun, which takes torchrun's rendezvous flags")
            return (f"{flag} is torchrun's flag, not dlaunch's: use {instead}, or put dlaunch in front of the "
                    f"whole torchrun line: dlaunch torchrun ... SCRIPT")
    return None
