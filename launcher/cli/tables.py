"""What the rank-table commands (validate-ranktable, gen-ranktable, merge-ranktable) say and write alike."""

from __future__ import annotations

from launcher.base.console import printable


def describe(table) -> str:
    from launcher.table.rules import summary

    info = summary(table)
    return f"version {info['version']}, {info['servers']} server(s), {info['devices']} device(s)"


def server_lines(table, limit: int = 8) -> list[str]:
    from launcher.table.rules import summary

    lines = []
    servers = summary(table)["server_list"]
    for server in servers[:limit]:
        ranks = "-".join(map(str, server["ranks"])) or "?"
        lines.append(printable(f"  server {server['server_id']}: devices {server['devices']}, ranks {ranks}"))
    if len(servers) > limit:
        lines.append(f"  ... and {len(servers) - limit} more server(s)")
    return lines


def write_table(table, output: str | None, force: bool) -> None:
    from launcher.base.userfiles import write_output
    from launcher.table.model import dumps

    text = dumps(table)
    write_output(output or "-", lambda fh: fh.write(text), force=force)
