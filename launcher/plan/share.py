"""This host's share of the job: from what the user said (a rank table, --ranks, --devices, --nnodes, a pod)
to the validated table and the index of this host's server in it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from launcher.base.border import is_number
from launcher.errors import UsageError
from launcher.plan.settle import launch_options
from launcher.settings.argtypes import spell_span
from launcher.settings.launch import AUTO, PROFILE
from launcher.settings.request import JobShape
from launcher.table.rules import DEFAULT_PROFILE

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from launcher.settings.request import LaunchRequest
    from launcher.table.model import RankTable


@dataclass(frozen=True)
class TableSource:
    """Where a job's rank table comes from, and how this host finds its server in it: enough to read it again
    before a restart (an operator may have rewritten the file meanwhile)."""

    path: str | None = None         # a file (--rank-table, an operator's mount)
    text: str | None = None         # the table itself (a head's, a pod's): no file to read
    job: JobShape | None = None     # a job without a table (a front, --nnodes, a pod): its table is made here
    profile: str = DEFAULT_PROFILE
    server_id: str | None = None    # --server-id
    rank_start: int | None = None   # --rank-start
    what: str = ""                  # how errors name it

    @classmethod
    def of(cls, args: LaunchRequest) -> TableSource:
        """The table a launch request names (its text before its file)."""
        if args.job is not None:
            what = f"the job's rank table ({args.job.nodes} nodes of {len(args.job.devices)} ranks)"
        elif args.rank_table_text is not None:
            what = "the rank table from the head"
        else:
            what = f"rank table {args.rank_table}"
        return cls(path=args.rank_table, text=args.rank_table_text, job=args.job, profile=args.profile,
                   server_id=args.server_id, rank_start=args.rank_start, what=what)


@dataclass(frozen=True)
class HostShare:
    text: str                 # the table as read (hosts over SSH get it as is, unknown fields and all)
    table: RankTable
    index: int | None         # this host's server in table.servers; None for every server (an --ssh head)


def host_share(source: TableSource, environ: Mapping[str, str], *, every_host: bool = False,
               one_host: Callable[[RankTable], str] | None = None) -> HostShare:
    """THE way to say which part of a job this host runs: the table read, checked against its profile's rules,
    and this host's server found in it (``table.share.select_server``; ``environ`` is the process's, for a
    scheduler's node index or a pod's address), or every server (``every_host``).
    ``one_host`` refuses a table of several servers with the message it makes (``dlaunch run``)."""
    from launcher.table.rules import require_valid
    from launcher.table.share import read_table, select_server

    if source.job is not None:
        from launcher.table.build import job_table
        from launcher.table.model import dumps

        table = job_table(source.job.nodes, list(source.job.devices))
        text = dumps(table)
    elif source.text is not None:
        from launcher.table.model import RankTableError, loads

        try:
            text, table = source.text, loads(source.text)
        except RankTableError as exc:
            raise UsageError(f"{source.what}: {exc}") from None
    else:
        assert source.path   # a source is a text or a file
        text, table = read_table(source.path)
    require_valid(table, source.profile, source.what)
    if one_host is not None and len(table.servers) > 1:
        raise UsageError(one_host(table))
    index = None if every_host else select_server(table, source.server_id, source.rank_start, environ=environ)
    return HostShare(text, table, index)


def launch_table(args: LaunchRequest, environ: Mapping[str, str]):
    """(table, this host's server index, table source, device view) from --ranks, --devices or --rank-table.

    The device view is what this host allows (CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES) or shows;
    every device this host runs must be inside what it allows.
    """
    from launcher.host import devices as visible
    from launcher.table.build import parse_devices, read_hccn_conf, single_server_table
    from launcher.table.rules import require_valid

    from_table = args.rank_table_text is not None or bool(args.rank_table) or args.job is not None
    auto = not from_table and args.devices is None and args.ranks == AUTO
    view = visible.discover(environ, probe_hardware=auto)
    if from_table:
        source = TableSource.of(args)

        def hint(table: RankTable) -> str:
            profile = ["--profile", args.profile] if args.profile != PROFILE.default else []
            return multi_host_hint(table, args.rank_table or "rt.json", args.script or "train.py", profile)

        share = host_share(source, environ, one_host=hint if args.command == "run" else None)
        assert share.index is not None   # one host's share
        server = share.table.servers[share.index]
        view.check([dev.device for dev in server.placed()], f"{source.what} (server {server.server_id})")
        return share.table, share.index, source.what, view
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
    require_valid(table, device_rules(args, view.ascend, table, what), what)
    return table, 0, what, view


def device_rules(args: LaunchRequest, npu: bool, table: RankTable, what: str) -> str:
    """The profile a table dlaunch made for this host is checked against: the one asked for, or by default
    HCCL's rules on an NPU host (ASCEND_RT_VISIBLE_DEVICES, /dev/davinci*) and only the table's structure for
    CPU and GPU ranks, which HCCL's topology never constrains (torchrun runs any number); said once where the
    default profile would have refused the job."""
    from launcher.table.rules import errors, validate

    if npu or args.source("profile") != "default":
        return args.profile
    if errors(validate(table, args.profile)):
        from launcher.base.console import say

        say(f"{what}: a CPU or GPU job, so HCCL's device-count rules (--profile {args.profile}) do not apply; "
            f"checking the job's structure only (--profile structure)")
    return "structure"


def adopt_pod(args: LaunchRequest, environ) -> LaunchRequest | None:
    """``cluster`` with no --rank-table inside a scheduler's pod (``launcher.host.pods``): the job's rank table the
    operator wrote (RANK_TABLE_FILE or ascend-operator's mount, waited for while it says "initializing"),
    else a table of the job's size the operator gave (node K runs ranks K*nproc.., as dlaunch torchrun
    does), and the operator's master address and port.  Flags given win.  The request with all that, or None
    when nothing says where this host belongs (the caller then asks for --rank-table)."""
    from launcher.base.console import say
    from launcher.host.pods import detect, rank_table_path
    from launcher.table.model import RankTableError
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
        try:
            table = load_completed(path, args.join_timeout,
                                   lambda status: say(f"waiting up to {args.join_timeout:g} s (--join-timeout) for "
                                                      f"rank table {path} to be completed by the job's operator "
                                                      f"(status: {status})"))
        except RankTableError as exc:   # not there after the wait, a directory, content that is no table
            said = str(exc) if str(exc).startswith("cannot read") else f"rank table {path}: {exc}"
            raise UsageError(f"{said} (the job's rank table, as {'the pod' if pod else 'RANK_TABLE_FILE'} names "
                             f"it)") from None
        if pod is not None and pod.ms_role == "MS_WORKER":
            # MindSpore's scheduler runs in its own pod at MS_SCHED_HOST: the ranks register with it, and the
            # pods of the job meet at the pod of rank 0 instead, when the table says where that is
            meeting = rank_zero_address(table)
            return replace(args, ms_scheduler_elsewhere=True, job_addr=meeting,
                           unlinked=None if meeting else "the job's rank table (version 2.0) names no pod's address, "
                           "so this pod cannot reach the others' dlaunch: its ranks stop on their own failures, and "
                           "MindSpore's scheduler tells the job's ranks of a lost one")
        return args
    assert pod is not None   # no pod and no path returned above
    if pod.nnodes is None or pod.node_rank is None:
        raise UsageError(f"{pod.operator} did not say how many pods the job has and which this one is "
                         f"({pod.said or 'no variable set'}): pass --rank-table FILE")
    if pod.node_rank >= pod.nnodes:
        raise UsageError(f"{pod.operator}: pod index {pod.node_rank} but the job has {pod.nnodes} pod(s) "
                         f"({pod.said})")
    return take_job_share(args, pod.nnodes, pod.node_rank, pod.nproc, environ, pod.operator)


def take_job_share(args: LaunchRequest, nnodes: int, node_rank: int | None, nproc_text: str | None, environ,
                   who: str, min_nodes: int | None = None) -> LaunchRequest:
    """A job without a rank table, as torchrun runs one: ``nnodes`` hosts of ``nproc`` ranks, host K running
    ranks K*nproc..; the job's shape (``host_share`` makes its table) and this host's share of it.
    The pods of an operator and ``cluster --nnodes`` both come here."""
    from launcher.base.console import say
    from launcher.host.devices import discover, ranks_per_node
    nproc, chosen = ranks_per_node(nproc_text or "auto", environ)
    if chosen:
        say(f"{who}: {chosen}")
    return replace(args, job=JobShape(nnodes, tuple(discover(environ).first(nproc, "ranks per node")), min_nodes),
                   rank_start=node_rank * nproc if node_rank is not None and args.server_id is None
                   and args.rank_start is None else args.rank_start,
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
    low, nnodes = args.nnodes
    if args.rank_table and low < nnodes and args.node_rank is None:
        return None   # elastic over the table's servers (cluster.spare_roster): this host's server as always
    if args.rank_table or args.ssh:
        raise UsageError("--nnodes names a job without a rank table: give either --rank-table FILE or --nnodes N "
                         "--node-rank K, not both" if args.rank_table else
                         "--nnodes has no hosts to reach over --ssh: --ssh starts the servers of a --rank-table")
    span = spell_span(args.nnodes)
    node_rank = args.node_rank if args.node_rank is not None else slurm_node(environ, nnodes)   # srun's node
    if node_rank is None and low == nnodes:
        raise UsageError(f"--nnodes {span} needs --node-rank K on each host (0 to {nnodes - 1}); with --nnodes "
                         f"MIN:MAX node ranks are given on arrival")
    if node_rank is not None and node_rank >= nnodes:
        raise UsageError(f"--node-rank {node_rank} but --nnodes is {span}: use 0 to {nnodes - 1}")
    if args.master_addr is None and nnodes > 1:
        raise UsageError(f"--nnodes {span} needs --master-addr A on every host: the address of node 0")
    return take_job_share(args, nnodes, node_rank, args.nproc_per_node, environ, "--nnodes",
                          min_nodes=low if low < nnodes else None)   # no node rank: rank_start None, see claim.py


def slurm_node(environ, nnodes: int) -> int | None:
    """This node's index in a Slurm job step of ``nnodes`` nodes (SLURM_NODEID, as srun sets it on each node),
    or None outside one, or in a step of another size."""
    node = environ.get("SLURM_NODEID", "")
    count = environ.get("SLURM_NNODES") or environ.get("SLURM_JOB_NUM_NODES", "")
    if is_number(node) and is_number(count) and int(count) == nnodes and int(node) < nnodes:
        return int(node)
    return None


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


def head_launch(args: LaunchRequest, environ: Mapping[str, str]):
    """``cluster --ssh`` on the head node: (the table's text, the table, the head's Options).

    The head starts no rank itself; every host gets the text as is and settles its own share.
    """
    if not args.rank_table:
        raise UsageError("dlaunch cluster --ssh needs --rank-table FILE: its servers are the hosts to start")
    if args.server_id is not None or args.rank_start is not None:
        raise UsageError("--server-id and --rank-start choose one host's share; with --ssh every server of the "
                         "table is started")
    share = host_share(TableSource.of(args), environ, every_host=True)
    return share.text, share.table, launch_options(args, share.table, 0, environ, head=True)
