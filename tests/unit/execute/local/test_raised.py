"""The ranks' datagrams: ``raised PID`` and ``ending PID`` read back as what they say, anything else as nothing."""

import os

from launcher.execute.local.raised import RaiseChannel


def test_the_channel_reads_raises_and_program_ends_and_drops_the_rest():
    channel = RaiseChannel()
    try:
        for data in (b"raised 12", b"ending 34", b"raised x", b"ended 5", b"ending \xff", b"ending 1" + b"9" * 40):
            os.write(channel.rank_fd, data)
        assert channel.read() == [("raised", 12), ("ending", 34)]
        assert channel.read() == []
    finally:
        channel.close()
