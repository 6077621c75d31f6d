"""``dlaunch gen-ranktable``: a one-server rank table for this host's devices."""

from __future__ import annotations

import argparse

from launcher.base.console import say
from launcher.cli.command_parser import profile_arg
from launcher.cli.tables import describe, write_table


def cmd_gen(args: argparse.Namespace) -> int:
    from launcher.table.build import parse_devices, primary_address, read_hccn_conf, read_hccn_tool, single_server_table
    from launcher.table.rules import require_valid

    devices = parse_devices(args.devices)
    addresses = read_hccn_conf(args.hccn_conf) or read_hccn_tool(devices, args.hccn_conf, args.hccn_tool)
    table = single_server_table(devices, args.server_id or primary_address(), addresses)
    require_valid(table, args.profile, f"device set {args.devices}")
    write_table(table, args.output, args.force)
    if args.output and args.output != "-":
        say(f"wrote {args.output} ({describe(table)})")
    return 0


def add_parser(sub) -> None:
    """Register ``gen-ranktable``."""
    p = sub.add_parser("gen-ranktable", help="write a one-server rank table (like hccl_tools.py)",
                       description="Write a one-server rank table for the given devices. Device IPs come from "
                                   "hccn.conf (address_N=IP lines); without it from hccn_tool -i N -ip -g where "
                                   "the driver's hccn_tool is present; else device_ip stays empty (CPU/GPU).")
    p.add_argument("--devices", default="0-7", help="device ids: 0-7 or 0,1,2,3 (default 0-7)")
    p.add_argument("--server-id", help="this host's address (default: its primary IPv4 address)")
    p.add_argument("--hccn-conf", default="/etc/hccn.conf", metavar="FILE", help="default /etc/hccn.conf")
    p.add_argument("--hccn-tool", metavar="PATH", help="without hccn.conf, read each device's address with this "
                                                      "hccn_tool (-ip -g); default: PATH or the driver's tools")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    profile_arg(p)
    p.set_defaults(handler=cmd_gen)
