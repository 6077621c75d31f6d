"""``python -m launcher.execute.ssh.hostentry``: a host's launcher, started by an SSH head in one Python start.

The head's remote command checks with shell builtins what needs no Python (the working directory, the
interpreter on PATH, the script), then execs this module.  It says what the preflight's separate
``python -m launcher --version`` used to say, the version line, then the ready mark, and becomes the host's
launcher (``dlaunch cluster --from-head``), which waits for the head's request: the same bytes on the wire as
before, one Python start per host instead of two (each about 50 ms of CPU, 64 hosts on one machine: seconds).
An older dlaunch lacks this module; its "No module named" tells the head which side is older.
"""

from __future__ import annotations

import os
import sys

from launcher import __version__
from launcher.execute.ssh.plan import CHECK_MARK


def main() -> None:
    os.write(1, f"dlaunch {__version__}\n{CHECK_MARK}ready\n".encode())   # unbuffered: the head waits for it
    sys.argv[1:] = ["cluster", "--from-head"]
    from launcher.cli import entry

    entry()


if __name__ == "__main__":
    main()
