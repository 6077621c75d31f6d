"""``check-network --ssh``: every server of the table checks its own devices at once; one report here.

The same SSH client as ``cluster --ssh`` (``execute.ssh``): targets from the OpenSSH config, host keys
verified against known_hosts (new ones only with --trust-new-hosts, changed ones never), one thread per
host. Each host runs ``PYTHON -m launcher check-network - --server-id ID --json`` with the table's text on
its stdin (nothing but paths on the command line) and answers with its results as JSON.
"""

from __future__ import annotations

import shlex
import sys
import time
from types import SimpleNamespace

from launcher.base.border import parse_json
from launcher.base.console import printable
from launcher.netcheck.device import Settings

MAX_ANSWER = 8 << 20       # bytes of a host's JSON answer
MAX_STDERR = 64 << 10
SLACK = 10.0               # beyond the checks' own bound, for a host's Python to start and answer


def remote_argv(python: str, server_id: str, settings: Settings, tool_given: str | None) -> list[str]:
    """What one host runs: its own check of its server, the table from stdin, JSON back."""
    return [python, "-m", "launcher", "check-network", "-", "--server-id", server_id, "--json",
            "--tool-timeout", repr(settings.timeout), "--health-timeout", repr(settings.health_timeout),
            *(["--hccn-tool", tool_given] if tool_given else [])]


def check_hosts(text: str, table, settings: Settings, *, tool_given: str | None, ssh_config: str | None,
                trust_new_hosts: bool, connect_timeout: float, python: str | None = None) -> list[dict]:
    """Every server's results (``netcheck.host.check_host``'s shape); a host that could not be checked, with its
    problem."""
    import logging

    import paramiko  # noqa: F401  (imported before the worker threads need it)

    from launcher.execute.ssh.plan import HostLaunch, _server_ids, load_ssh_config, resolve_target
    from launcher.execute.ssh.preflight import Probe, _parallel, record_new_keys

    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    config = load_ssh_config(ssh_config)
    server_ids = _server_ids(table)
    targets = [resolve_target(config, sid) for sid in server_ids]
    python = python or sys.executable
    # one host: connect; per device (all at once) six calls besides the health polls, the last poll's call,
    # then npu-smi; each call bounded by the tool timeout
    budget = connect_timeout + settings.health_timeout + 8 * settings.timeout + SLACK
    job = SimpleNamespace(connect_timeout=connect_timeout)

    def one(target):
        return _check_one(target, text, remote_argv(python, target.server_id, settings, tool_given),
                          trust_new_hosts, job, budget)

    outcomes = _parallel(one, targets, budget + 1.0)
    hosts, probes = [], []
    for target, (result, exc, finished) in zip(targets, outcomes):
        if not finished:
            result = {"problem": f"no answer within {budget:g} s"}
        elif exc is not None:
            result = {"problem": f"{type(exc).__name__}: {exc}"}
        if result.get("new_key"):
            probes.append(Probe(HostLaunch(target, (), {}), new_key=result.pop("new_key")))
        result.pop("new_key", None)
        hosts.append({"host": target.server_id, "problem": None, "devices": [], **result})
    record_new_keys(probes)
    return hosts


def _check_one(target, text: str, argv: list[str], trust_new: bool, job, budget: float) -> dict:
    """One host's answer: its ``check_host`` result, or ``{"problem": ...}``; never raises for its faults."""
    from launcher.execute.ssh.preflight import _connect, _connect_problem

    if target.unsupported:
        return {"problem": target.unsupported}
    start = time.monotonic()
    client = None
    try:
        client, new_key = _connect(target, trust_new, start + job.connect_timeout)
    except Exception as exc:  # a host's failure is a line in the report, whatever paramiko raised
        timed_out = time.monotonic() >= start + job.connect_timeout - 0.05
        return {"problem": _connect_problem(target, exc, job, timed_out=timed_out)}
    try:
        return {**_run_check(client, shlex.join(argv), text, max(1.0, start + budget - time.monotonic())),
                "new_key": new_key}
    except Exception as exc:  # the session broke or ran out of time: that host's line
        return {"problem": f"the check there did not finish: {type(exc).__name__}: {exc}", "new_key": new_key}
    finally:
        client.close()


def _is_row(row) -> bool:
    """A device row as ``device.new_row`` makes them, failures and all (a host's answer is checked, not trusted)."""
    from launcher.netcheck.device import Target, new_row

    keys = set(new_row(Target("", 0, "", None, None)))
    return (isinstance(row, dict) and set(row) == keys and isinstance(row["failures"], list)
            and all(isinstance(f, dict) and isinstance(f.get("check"), str) and isinstance(f.get("detail"), str)
                    for f in row["failures"]))


def _run_check(client, command: str, text: str, timeout: float) -> dict:
    stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
    stdin.write(text)
    stdin.channel.shutdown_write()
    answer = stdout.read(MAX_ANSWER)
    said = stderr.read(MAX_STDERR).decode("utf-8", "replace")
    status = stdout.channel.recv_exit_status()
    try:
        host = parse_json(answer, "the check's answer")["hosts"][0]
        if not all(_is_row(row) for row in host["devices"]):
            return {"problem": "it answered in a format this dlaunch does not know (another dlaunch version there?)"}
        return {"devices": host["devices"], "problem": host.get("problem")}
    except (ValueError, KeyError, IndexError, TypeError):
        lines = [line.strip() for line in said.splitlines() if line.strip()]
        last = lines[-1] if lines else "no output"
        return {"problem": printable(f"the check there failed (exit {status}): {last[:300]}")}
