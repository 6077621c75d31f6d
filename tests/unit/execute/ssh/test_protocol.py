"""The head <-> host wire of ``cluster --ssh``, both directions, without sshd: pipes stand in for the channel."""

import os
import signal

import pytest

from launcher.base.lines import LineBuffer
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


