"""``dlaunch check-network RANK_TABLE``, and ``cluster --check-network``'s refusal to start on a bad network.

Without --ssh this host checks its own server's devices (which server: --server-id, or the table's
server_id that is one of this host's addresses, as ``cluster`` finds it); with --ssh every server checks
its own at once (``netcheck.remote``). Exit 0 only when every check of every device passed, 1 when one
failed or a host could not be checked, 2 for bad input (a table, a flag, no hccn_tool here).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from launcher.errors import LaunchError, UsageError
from launcher.settings.argtypes import positive_seconds
from launcher.settings.launch import PROFILE, SSH_GROUP
from launcher.settings.request import LaunchRequest

STDIN = "-"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "check-network", help="check the devices' addresses, links and net health against a rank table",
        description="Check each device of a rank table as the seeds' multi-host chapter does by hand with "
                    "hccn_tool: its address (-ip -g) is the table's device_ip, its link (-link -g) is UP, and its "
                    "net health (-netdetect -s address PEER, then -net_health -g) towards the same device on the "
                    "next server reaches Success; TLS switches must agree across the job, and npu-smi's Health "
                    "must be OK where npu-smi is present. Checks this host's devices, or with --ssh every "
                    "host's at once. Exit 0 all passed, 1 a check failed, 2 bad input.")
    p.add_argument("rank_table", metavar="RANK_TABLE", help="the job's rank table (- reads it from stdin)")
    p.add_argument("--server-id", help="this host's server_id in the table (default: found from its addresses)")
    add_check_options(p)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    # the checks need a table whose devices can be named, not one that follows a product's topology rules
    replace(PROFILE, layered=False, default="structure").add_to(p)
    ssh = p.add_argument_group(SSH_GROUP)
    ssh.add_argument("--ssh", action="store_true", help="check every server of the table over SSH from here")
    ssh.add_argument("--ssh-config", metavar="FILE", help="OpenSSH client config (default ~/.ssh/config)")
    ssh.add_argument("--trust-new-hosts", action="store_true",
                     help="accept host keys not yet in known_hosts (and record them); changed keys are always refused")
    ssh.add_argument("--remote-python", metavar="PATH", help="Python with dlaunch on the hosts (default: this one)")
    ssh.add_argument("--connect-timeout", type=positive_seconds, default=10.0, metavar="SECONDS",
                     help="SSH connect timeout per host (default 10)")
    p.set_defaults(handler=cmd_check_network)


def add_check_options(p: argparse.ArgumentParser) -> None:
    """The options check-network shares with ``gen-ranktable`` (--hccn-tool) and the timeouts."""
    p.add_argument("--hccn-tool", metavar="PATH",
                   help="hccn_tool to run (default: PATH, else /usr/local/Ascend/driver/tools/hccn_tool)")
    p.add_argument("--tool-timeout", type=positive_seconds, default=10.0, metavar="SECONDS",
                   help="how long one hccn_tool call may take before it is killed (default 10)")
    p.add_argument("--health-timeout", type=positive_seconds, default=30.0, metavar="SECONDS",
                   help="how long a device's net health may take to turn Success (default 30)")


def _stdin_table() -> str:
    """A rank table's text from standard input (``-``), bounded as a file would be."""
    from launcher.table.model import MAX_TABLE_BYTES

    data = sys.stdin.buffer.read(MAX_TABLE_BYTES + 1)
    if len(data) > MAX_TABLE_BYTES:
        raise UsageError(f"rank table on stdin: more than the {MAX_TABLE_BYTES >> 20} MiB dlaunch reads")
    return data.decode("utf-8", "replace")


def _settings(args: argparse.Namespace | LaunchRequest, tool_path: str):
    from launcher.netcheck.device import Settings

    return Settings(hccn_tool=tool_path, timeout=getattr(args, "tool_timeout", 10.0),   # cluster has no --tool-timeout
                    health_timeout=args.health_timeout)


def run_checks(args: argparse.Namespace | LaunchRequest, text: str, table, server_index: int | None) -> list[dict]:
    """Every host's results: all servers over SSH when ``args.ssh``, else this host's server ``server_index``."""
    from launcher.netcheck.report import compare_tls

    if args.ssh:
        from launcher.netcheck import remote

        # the hosts find their own tool; only a path given here is passed on
        hosts = remote.check_hosts(text, table, _settings(args, args.hccn_tool or ""), tool_given=args.hccn_tool,
                                   ssh_config=args.ssh_config, trust_new_hosts=args.trust_new_hosts,
                                   connect_timeout=args.connect_timeout, python=args.remote_python)
    else:
        from launcher.host.hccn import find_tool
        from launcher.netcheck.host import check_host

        assert server_index is not None
        hosts = [check_host(table, server_index, _settings(args, find_tool(args.hccn_tool)))]
    compare_tls(hosts)
    return hosts


def cmd_check_network(args: argparse.Namespace) -> int:
    from launcher.netcheck import report
    from launcher.plan.share import TableSource, host_share

    if args.ssh and args.server_id:
        raise UsageError("--server-id chooses one host; with --ssh every server of the table is checked")
    stdin = args.rank_table == STDIN
    share = host_share(TableSource(path=None if stdin else args.rank_table, text=_stdin_table() if stdin else None,
                                   profile=args.profile, server_id=args.server_id,
                                   what="the rank table on stdin" if stdin else f"rank table {args.rank_table}"),
                       every_host=args.ssh)
    text, table = share.text, share.table
    hosts = run_checks(args, text, table, share.index)
    if args.json:
        json.dump(report.as_json(hosts), sys.stdout, indent=2)
        print()
    else:
        print(report.text(hosts, args.hccn_tool, [str(server.server_id) for server in table.servers]))
    return report.exit_code(hosts)


def check_before_launch(args: LaunchRequest, text: str, table, server_index: int | None) -> None:
    """``cluster --check-network``: the checks first; a failure stops the launch before any rank starts."""
    from launcher.netcheck import report

    hosts = run_checks(args, text, table, server_index)
    if not report.passed(hosts):
        print(report.text(hosts, args.hccn_tool, [str(server.server_id) for server in table.servers]), file=sys.stderr)
        raise LaunchError(f"--check-network: {report.first_failures(hosts)}; no rank was started")
