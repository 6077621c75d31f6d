"""A standby rank interpreter for warm restarts: run as a script by the rank's own Python, never imported.

It imports the modules it is given (``torch``: the seconds a cold restart spends), then waits on the file
descriptor ``DLAUNCH_STANDBY_FD`` names, a Unix socket to its dlaunch, for one message: the next attempt's
environment, argv and working directory, with the file descriptor of that rank's log (or console pipe).
It then becomes the rank: output to that descriptor, the environment replaced, and the script (or ``-m``
module) run as ``__main__`` (``runpy``), so the interpreter's start and the imports are already paid. The
socket closing without a message (no restart came) ends it. It imports nothing of dlaunch.
"""

import json
import os
import runpy
import socket
import sys


def main() -> None:
    for name in filter(None, (sys.argv[1] if len(sys.argv) > 1 else "").split(",")):
        try:
            __import__(name)
        except Exception as exc:   # noqa: BLE001 - the script's own import will say what is wrong, in its log
            print(f"dlaunch standby: could not import {name} ahead: {type(exc).__name__}: {exc}", file=sys.stderr)
    channel = socket.socket(fileno=int(os.environ["DLAUNCH_STANDBY_FD"]))
    message, fds, _, _ = socket.recv_fds(channel, 1 << 22, 1)
    channel.close()
    if not message or not fds:
        sys.exit(0)   # dlaunch did not need this standby
    request = json.loads(message)   # dlaunch's own message over its own socket pair: no outside text
    os.dup2(fds[0], 1)
    os.dup2(fds[0], 2)
    os.close(fds[0])
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    argv = request["argv"][1:]   # after the interpreter
    del sys.argv[:]
    if argv[0] == "-m":
        sys.argv.extend(argv[1:])
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv.extend(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


main()
