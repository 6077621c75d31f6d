"""closes: a file closed after writing anywhere under the roots is told at once, new directories included."""

import os

from launcher.base.waiting import ready_fds
from launcher.execute.memory.closes import watch


def told(closes, seconds=10.0):
    import time

    return bool(ready_fds([closes.fd], time.monotonic() + seconds)) and closes.drain()


def test_a_write_closed_under_the_root_or_a_directory_made_later_is_told(tmp_path):
    root = tmp_path / "files"
    root.mkdir()
    closes = watch([str(root)])
    assert closes is not None   # Linux: inotify is there
    try:
        assert not closes.drain()   # nothing yet
        with open(root / "ckpt.pt", "wb") as fh:
            fh.write(b"x")
        assert told(closes)
        (root / "checkpoint-50").mkdir()    # HF's directory per checkpoint
        assert told(closes)                 # its creation: watched from now on
        with open(root / "checkpoint-50" / "model.safetensors", "wb") as fh:
            fh.write(b"y")
        assert told(closes)
        with open(root / "ckpt.pt", "rb") as fh:   # read, not written: nothing to tell
            fh.read()
        assert not closes.drain()
        (tmp_path / "elsewhere.tmp").write_bytes(b"z")
        os.rename(tmp_path / "elsewhere.tmp", root / "renamed.pt")   # an atomic save renames in
        assert told(closes)
    finally:
        closes.close()


def test_no_roots_no_watch():
    assert watch([]) is None
