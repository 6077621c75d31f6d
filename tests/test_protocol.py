"""The head <-> host wire of ``cluster --ssh``, both directions, without sshd: pipes stand in for the channel."""

import os
import signal
import subprocess
import sys

import pytest

from launcher.errors import UsageError
from launcher.execute.ssh.protocol import (
    decode_signals,
    emit,
    encode_event,
    encode_request,
    encode_signal,
    parse_event,
    read_request,
)
from launcher.lines import LineBuffer
from tests.launching import RANK_PROGRAM, ROOT, write_rank_table


def through_a_pipe(data: bytes):
    read_fd, write_fd = os.pipe()
    os.write(write_fd, data)
    os.close(write_fd)
    try:
        return read_request(read_fd)
    finally:
        os.close(read_fd)


def test_a_request_and_early_signals_arrive_whole():
    request = {"argv": ["train.py", "--rank-start", "8"], "env": {"A": "x\ny $(z)"}, "rank_table": "{}"}
    got, pending = through_a_pipe(encode_request(request) + encode_signal("SIGTERM") + b"SIGQUIT\nrubbish\nSIG")
    assert got == request
    buffer = LineBuffer()
    buffer.pending = pending
    assert decode_signals(buffer.lines(b"KILL\n")) == [signal.SIGTERM, signal.SIGQUIT, signal.SIGKILL]


@pytest.mark.parametrize("data, message", [(b"", "closed the channel before"), (b"not json\n", "malformed"),
                                           (b'{"argv": "x"}\n', "malformed"), (b"[1]\n", "malformed")])
def test_a_bad_request_is_a_clear_error(data, message):
    with pytest.raises(UsageError, match=message):
        through_a_pipe(data)


def test_the_head_sends_only_signals_a_host_acts_on():
    with pytest.raises(ValueError):
        encode_signal("SIGUSR1")
    with pytest.raises(ValueError):
        encode_signal("SIGWINCH", (signal.SIGUSR1, signal.SIGUSR2))
    assert encode_signal("SIGUSR1", (signal.SIGUSR1, signal.SIGUSR2)) == b"SIGUSR1\n"
    # a host takes a passed-on signal only when it passes it on itself: never read as a stop
    assert decode_signals([b"SIGUSR1", b"SIGWINCH", b"SIGTERM"], (signal.SIGUSR1,)) == [signal.SIGUSR1,
                                                                                        signal.SIGTERM]


def test_events_reach_the_head_and_other_lines_are_not_events(capsys):
    emit("started", ranks=2, at=1.5)
    line = capsys.readouterr().err
    assert parse_event(line.rstrip("\n")) == {"event": "started", "ranks": 2, "at": 1.5}
    assert parse_event("Traceback (most recent call last):") is None
    assert parse_event(encode_event("x")[:-3]) is None   # a torn event is not an event


def test_a_host_launcher_driven_over_its_channel(tmp_path):
    """What the head sends (ssh.plan's request) starts a real host launcher; its events come back; a SIGTERM
    line stops it like a signal would, with the exit code of one."""
    from launcher.cli.parsers import build_parser
    from launcher.cli.request import request_from_args
    from launcher.execute.ssh.plan import make_ssh_plan
    from launcher.options import head_launch

    table = write_rank_table(tmp_path / "rt.json", devices_per_host=1)
    argv = ["cluster", RANK_PROGRAM, "--rank-table", str(table), "--ssh", "--profile", "a2",
            "--output-dir", str(tmp_path / "runs"), "--run-id", "wire", "--grace-period", "5"]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        args = build_parser().parse_args(argv)
        args.script_args = ["--sleep", "60"]
        request = request_from_args(args, True, environ={})
        plan = make_ssh_plan(request, *head_launch(request), environ={})
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
