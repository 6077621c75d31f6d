"""``dlaunch cluster``: this host's share of a multi-host job, every host's over SSH (``--ssh``), or, started by
a head (``--from-head``), the share its request names."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

from launcher.contract import JOB_SECRET_ENV
from launcher.errors import UsageError
from launcher.plan.settle import launch_options
from launcher.plan.share import TableSource, adopt_pod, head_launch, launch_table, nodes_share
from launcher.settings.launch import CLUSTER_DEFAULT_PORT, add_launch_arguments, options_for
from launcher.settings.request import LaunchRequest


def cmd_cluster(args: LaunchRequest, control=None, on_started=None, environ=None) -> int:
    """``environ``: this process's environment, plus what a head sent for this host's launcher itself."""
    from launcher.execute.attempts import launch

    environ = os.environ if environ is None else environ
    checking = args.check_network and not args.dry_run
    if checking:
        from launcher.cli.checknet import check_before_launch
    if args.ssh:
        from launcher.execute.ssh.head import launch_over_ssh

        text, head_table, opts = head_launch(args, environ)
        if checking:
            check_before_launch(args, text, head_table, None)
        return launch_over_ssh(args, text, head_table, opts, environ)
    shared = nodes_share(args, environ)
    if shared is None and not args.rank_table and args.rank_table_text is None and args.job is None:
        from launcher.base.signals import Stopped, StopsRaise

        try:
            with StopsRaise():   # the wait for an operator's table: before the launch's own handlers exist
                shared = adopt_pod(args, environ)
        except Stopped as stop:
            return stopped_before_launch(args, environ, stop.signum)
        if shared is None:
            raise UsageError("dlaunch cluster needs --rank-table FILE: on each host, dlaunch cluster SCRIPT "
                             "--rank-table FILE --rank-start K; or from one head node, dlaunch cluster SCRIPT "
                             "--rank-table FILE --ssh")
    args = shared or args
    if args.job is not None and args.job.min_nodes and args.rank_start is None and args.server_id is None:
        args = arrival(args, environ)
    table, server_index, _, view = launch_table(args, environ)
    if checking:
        check_before_launch(args, "", table, server_index)
    if args.spares or elastic_nodes(args):   # the table is the pool; the job runs its active servers
        roster = spare_roster(args, table, server_index)
        job = roster.table()
        opts = launch_options(args, table, server_index, environ, view=view, world=job.device_count)
        rescued(opts, args.dry_run)
        return launch(job, roster.slot, opts, dry_run=args.dry_run, environ=environ, on_started=on_started,
                      control=control, roster=roster)
    opts = launch_options(args, table, server_index, environ, view=view)
    rescued(opts, args.dry_run)
    reread = replace(TableSource.of(args), text=None) if args.rank_table else None   # the file, read again
    return launch(table, server_index, opts,
                  dry_run=args.dry_run, environ=environ, on_started=on_started, control=control, reread=reread)


def rescued(opts, dry_run: bool) -> None:
    """--memory-ckpt: an area a SIGKILLed dlaunch of this run left, on disk before the resume point is read (the
    keeper imported only then: a launch without the tier pays nothing for it)."""
    if not dry_run and opts.policy.memory_ckpt:
        from launcher.execute.memory.keeper import rescue_before

        rescue_before(opts)


def arrival(args: LaunchRequest, environ) -> LaunchRequest:
    """--nnodes MIN:MAX with no node rank: this host's, given on arrival (``execute.job.claim``)."""
    from launcher.base.console import say
    from launcher.execute.job.claim import node_index
    from launcher.execute.job.link import rendezvous

    assert args.job is not None and args.job.min_nodes
    first = replace(args, rank_start=0)   # the job's table and settings, which do not depend on the node
    table, index, _, view = launch_table(first, environ)
    opts = launch_options(first, table, index, environ, view=view)
    address, port, secret, job_id = rendezvous(opts, table, environ)
    node = node_index(address, port, secret, job_id, opts.join_timeout)
    say(f"--nnodes {args.job.min_nodes}:{args.job.nodes}: this host is node {node}"
        + (" (it listens for the job: its coordinator runs here)" if node == 0 else ""))
    return replace(args, rank_start=node * len(args.job.devices))


def elastic_nodes(args: LaunchRequest) -> int | None:
    """MIN of --nnodes MIN:MAX (MIN < MAX), of a job without a table or over a rank table's servers."""
    if args.job is not None:
        return args.job.min_nodes
    if args.nnodes is not None and args.nnodes[0] < args.nnodes[1]:
        return args.nnodes[0]
    return None


def stopped_before_launch(args: LaunchRequest, environ, signum: int) -> int:
    """A stop signal while waiting for the job's table: no rank started; said, and in the termination message
    (as PID 1 the container's last state), with the signal's exit code."""
    import signal

    from launcher.base.console import say
    from launcher.execute.termination import termination_log_path, write_termination_text

    said = f"interrupted by {signal.Signals(signum).name} while waiting for the job's rank table; no rank was started"
    say(said)
    warning = write_termination_text(termination_log_path(args.termination_log, environ), said)
    if warning:
        say(warning)
    return 128 + signum


def spare_roster(args: LaunchRequest, pool, own: int):
    """--spares K: the table's last K servers stand by, and the job's table (the others') must keep the rules;
    --nnodes MIN:MAX: every server may run the job, which forms with the hosts that joined."""
    from launcher.table.rules import require_valid
    from launcher.table.spares import Roster

    elastic = elastic_nodes(args)
    what = "--nnodes MIN:MAX" if elastic else "--spares"
    if elastic and args.nnodes and args.nnodes[1] != len(pool.servers):
        raise UsageError(f"--nnodes {args.nnodes[0]}:{args.nnodes[1]} with a rank table of {len(pool.servers)} "
                         f"servers: MAX is the table's servers, every one a host that may run the job")
    if args.replica_groups or (args.restart_policy or "job") != "job" or (elastic and args.spares):
        raise UsageError(f"{what} restarts the whole job on the hosts there: not with --replica-groups, "
                         f"--restart-policy rank/group" + (" or --spares" if elastic else ""))
    if elastic:
        return Roster.elastic(pool, elastic, own, args.profile)
    roster = Roster.first(pool, args.spares, own, args.profile)
    require_valid(roster.table(), args.profile, f"the rank table without its {args.spares} spare(s)")
    return roster


def cmd_from_head(announce: bool = False) -> int:
    """``cluster --from-head``: this host's launcher, its request read from the SSH channel (ssh.protocol);
    with ``--announce``, first its version and the preflight's ready mark (one Python start per host)."""
    from launcher.cli.request import settled_request
    from launcher.execute.ssh import protocol

    if announce:
        from launcher.execute.ssh.plan import CHECK_MARK

        protocol.announce(CHECK_MARK + "ready")
    request, pending = protocol.read_request(0)
    parser = argparse.ArgumentParser(prog="dlaunch cluster", allow_abbrev=False)
    add_launch_arguments(parser, options_for("cluster"))
    args = parser.parse_args(list(map(str, request["argv"])))
    # the head settled every value: this host's own environment and configs take no part
    script_args = [str(a) for a in request.get("script_args", [])]
    settled = settled_request("cluster", {**vars(args), "script_args": script_args},
                              True, environ={}, rank_table_text=request.get("rank_table"),
                              head_env={str(k): str(v) for k, v in (request.get("env") or {}).items()})

    def started(ranks):
        protocol.emit("started", ranks=len(ranks), at=min(r.start for r in ranks))

    # the job's secret the head made for its hosts' link (under --max-restarts): theirs, not only their ranks'
    secret = (request.get("env") or {}).get(JOB_SECRET_ENV)
    environ = {**os.environ, JOB_SECRET_ENV: str(secret)} if secret else None
    return cmd_cluster(settled, control=(0, pending), on_started=started, environ=environ)


def add_parser(sub) -> argparse.ArgumentParser:
    """Register ``cluster``."""
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
    add_launch_arguments(p, options_for("cluster"))
    p.set_defaults(handler=cmd_cluster)
    return p
