"""``dlaunch check-network RANK_TABLE``, and ``cluster --check-network``'s refusal to start on a bad network.

Without --ssh this host checks its own server's devices (which server: --server-id, or the table's
server_id that is one of this host's addresses, as ``cluster`` finds it); with --ssh every server checks
its own at once (``netcheck.remote``). Exit 0 only when every check of every device passed, 1 when one
failed or a host could not be checked, 2 for bad input (a table, a flag, no hccn_tool here).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace

from launcher.errors import DlaunchError, LaunchError, UsageError
from launcher.settings.argtypes import positive_seconds, whole
from launcher.settings.launch import (
    CONNECT_TIMEOUT,
    HCCN_TOOL,
    HEALTH_TIMEOUT,
    PROFILE,
    REMOTE_PYTHON,
    SERVER_ID,
    SSH,
    SSH_CONFIG,
    SSH_GROUP,
    TRUST_NEW_HOSTS,
)
from launcher.settings.layers import Option
from launcher.settings.request import LaunchRequest

STDIN = "-"
TOOL_TIMEOUT = 10.0   # seconds one hccn_tool call may take (cluster --check-network has no flag for it)


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
    _here(SERVER_ID, "this host's server_id in the table (default: found from its addresses)").add_to(p)
    p.add_argument("--rank-start", type=whole(0, 10**9 - 1), metavar="K",
                   help="this host is the server whose first rank is K (as cluster --rank-start)")
    add_check_options(p)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    # the checks need a table whose devices can be named, not one that follows a product's topology rules
    replace(PROFILE, layered=False, default="structure").add_to(p)
    ssh = p.add_argument_group(SSH_GROUP)
    _here(SSH, "check every server of the table over SSH from here").add_to(ssh)
    for option in (SSH_CONFIG, TRUST_NEW_HOSTS, REMOTE_PYTHON, CONNECT_TIMEOUT):
        _here(option).add_to(ssh)
    p.set_defaults(handler=cmd_check_network)


def _here(option: Option, help: str | None = None) -> Option:
    """A launch option (``settings.launch``) as this command takes it: from the command line only."""
    return replace(option, layered=False, help=help or option.help)


def add_check_options(p: argparse.ArgumentParser) -> None:
    """The options check-network shares with ``gen-ranktable`` (--hccn-tool) and the timeouts."""
    _here(HCCN_TOOL, "hccn_tool to run (default: PATH, else /usr/local/Ascend/driver/tools/hccn_tool)").add_to(p)
    p.add_argument("--tool-timeout", type=positive_seconds, default=TOOL_TIMEOUT, metavar="SECONDS",
                   help=f"how long one hccn_tool call may take before it is killed (default {TOOL_TIMEOUT:g})")
    _here(HEALTH_TIMEOUT, "how long a device's net health may take to turn Success (default 30)").add_to(p)


def _stdin_table() -> str:
    """A rank table's text from standard input (``-``), bounded as a file would be."""
    from launcher.table.model import MAX_TABLE_BYTES

    data = sys.stdin.buffer.read(MAX_TABLE_BYTES + 1)
    if len(data) > MAX_TABLE_BYTES:
        raise UsageError(f"rank table on stdin: more than the {MAX_TABLE_BYTES >> 20} MiB dlaunch reads")
    return data.decode("utf-8", "replace")


def _settings(args: argparse.Namespace | LaunchRequest, tool_path: str):
    from launcher.netcheck.device import Settings

    return Settings(hccn_tool=tool_path, timeout=args.tool_timeout if isinstance(args, argparse.Namespace)
                    else TOOL_TIMEOUT, health_timeout=args.health_timeout)


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
    try:
        return _check_network(args)
    except DlaunchError as exc:
        if args.json:   # a reader of --json gets JSON whatever happened; the line on stderr as ever
            json.dump({"passed": False, "error": str(exc), "exit_code": exc.exit_code}, sys.stdout, indent=2)
            print()
        raise


def _check_network(args: argparse.Namespace) -> int:
    from launcher.netcheck import report
    from launcher.plan.share import TableSource, host_share

    if args.ssh and (args.server_id or args.rank_start is not None):
        raise UsageError(f"{'--server-id' if args.server_id else '--rank-start'} chooses one host; with --ssh "
                         f"every server of the table is checked")
    stdin = args.rank_table == STDIN
    what = "the rank table on stdin" if stdin else f"rank table {args.rank_table}"
    share = host_share(TableSource(path=None if stdin else args.rank_table, text=_stdin_table() if stdin else None,
                                   profile=args.profile, server_id=args.server_id, rank_start=args.rank_start,
                                   what=what), os.environ, every_host=args.ssh)
    text, table = share.text, share.table
    require_checkable(table, what)
    hosts = run_checks(args, text, table, share.index)
    if args.json:
        json.dump(report.as_json(hosts), sys.stdout, indent=2)
        print()
    else:
        print(report.text(hosts, args.hccn_tool, [str(server.server_id) for server in table.servers]))
    return report.exit_code(hosts)


def require_checkable(table, what: str) -> None:
    """A table whose servers repeat or whose devices share an address would have devices detect themselves:
    refused before any check, whatever --profile (``table.rules.NETWORK_RULES``)."""
    from launcher.table.rules import NETWORK_RULES, errors, validate

    bad = errors(validate(table, "structure", NETWORK_RULES))
    if bad:
        more = f" (and {len(bad) - 1} more error(s))" if len(bad) > 1 else ""
        raise UsageError(f"{what} cannot be checked: rule {bad[0].rule}: {bad[0].path}: "
                         f"{bad[0].message.rstrip('.')}{more}")


def check_before_launch(args: LaunchRequest, text: str, table, server_index: int | None) -> None:
    """``cluster --check-network``: the checks first; a failure stops the launch before any rank starts."""
    from launcher.netcheck import report

    require_checkable(table, "the rank table")
    hosts = run_checks(args, text, table, server_index)
    if not report.passed(hosts):
        print(report.text(hosts, args.hccn_tool, [str(server.server_id) for server in table.servers]), file=sys.stderr)
        raise LaunchError(f"--check-network: {report.first_failures(hosts)}; no rank was started")
