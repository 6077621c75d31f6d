"""The head <-> host wire of ``cluster --ssh``, both directions, without sshd: pipes stand in for the channel."""

import os
import signal
import subprocess
import sys

from launcher.execute.ssh.protocol import (
    encode_request,
    encode_signal,
    parse_event,
)
from tests.launching import RANK_PROGRAM, ROOT, write_rank_table


def test_a_host_launcher_driven_over_its_channel(tmp_path):
    """What the head sends (ssh.plan's request) starts a real host launcher; its events come back; a SIGTERM
    line stops it like a signal would, with the exit code of one."""
    from launcher.cli.parsers import build_parser
    from launcher.cli.request import request_from_args
    from launcher.execute.ssh.plan import make_ssh_plan
    from launcher.plan.share import head_launch

    table = write_rank_table(tmp_path / "rt.json", devices_per_host=1)
    argv = ["cluster", RANK_PROGRAM, "--rank-table", str(table), "--ssh", "--profile", "a2",
            "--output-dir", str(tmp_path / "runs"), "--run-id", "wire", "--grace-period", "5"]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        args = build_parser().parse_args(argv)
        args.script_args = ["--sleep", "60"]
        request = request_from_args(args, True, environ={})
        plan = make_ssh_plan(request, *head_launch(request, {}), environ={})
    finally:
        os.chdir(cwd)
    host = plan.hosts[1]
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "cluster", "--from-head"], cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    proc.stdin.write(encode_request(host.request))
    proc.stdin.flush()
    events = []
    for raw in proc.stderr:
        event = parse_event(raw.decode().rstrip("\n"))
        if event:
            events.append(event)
            if event["event"] == "started":
                proc.stdin.write(encode_signal("SIGTERM"))
                proc.stdin.flush()
    proc.stdin.close()
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert [e["event"] for e in events] == ["started", "summary"]
    summary = events[1]["summary"]
    assert summary["status"] == "interrupted" and summary["interrupted_by"] == "SIGTERM"
    assert summary["host"] == "127.0.0.3" and [r["rank"] for r in summary["ranks"]] == [1]
    assert os.path.exists(events[1]["path"])
