"""A standby rank interpreter for warm restarts: run as a script by the rank's own Python, never imported.

It is started with what the next attempt's environment is known to be (execute/local/warm.py), so Python's
``site`` (``sitecustomize``, ``.pth`` files) ran under it. It then reads messages from the file descriptor
``DLAUNCH_STANDBY_FD`` names, a Unix socket to its dlaunch:

- ``{"modules": [...]}``: names to import ahead (the user's ``--warm-restarts`` list comes on the command line,
  what the running attempt's rank imported comes in messages, more as that rank imports more). They are
  imported in a thread at the lowest CPU priority (nice is per thread on Linux: the main thread, which runs
  the user's script, keeps its own; a thread an import started is set back to the main thread's nice where the
  system allows it). A name that does not import is skipped and said once, in the rank's log;
- the next attempt's environment, argv and working directory, with the file descriptor of that rank's log (or
  console pipe): the standby becomes the rank. Output to that descriptor, the environment replaced, the rank
  hook's module list started (``DLAUNCH_MODULES_FILE``), and the script (or ``-m`` module) run as
  ``__main__`` (``runpy``), so the interpreter's start and the imports are already paid;
- nothing (the socket closed): no restart came, the standby exits 0.

It imports nothing of dlaunch.
"""

import json
import os
import runpy
import socket
import sys
import threading

NICE = 19   # the lowest priority: the imports ahead take what the running attempt's ranks leave
HOOK_NAME = "_dlaunch_rankhook"   # the rank hook (rankhook/sitecustomize.py) leaves itself here in a standby
MODULES_ENV = "DLAUNCH_MODULES_FILE"
SAID_NAMES = 5   # names a line about skipped imports shows


def ahead(names, skipped: dict, unrestored: set) -> None:
    """``names`` imported (those not imported yet) in a thread at nice ``NICE``; the failures into ``skipped``."""
    todo = [name for name in names if name not in sys.modules and name not in skipped]
    if not todo:
        return
    before = set(os.listdir("/proc/self/task"))

    def run() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        except OSError:
            pass   # then at the priority it has
        for name in todo:
            if name in sys.modules:
                continue
            try:
                __import__(name)
            except (Exception, SystemExit) as exc:   # noqa: BLE001 - the script's own import says what is wrong
                skipped[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200] if str(exc) else \
                    type(exc).__name__

    worker = threading.Thread(target=run, name="dlaunch-standby-imports")
    worker.start()
    worker.join()
    main = os.getpriority(os.PRIO_PROCESS, os.getpid())   # on Linux: the main thread's own
    for tid in set(os.listdir("/proc/self/task")) - before:   # threads the imports started inherited NICE
        try:
            if os.getpriority(os.PRIO_PROCESS, int(tid)) != main:   # Linux: a thread id names the thread
                os.setpriority(os.PRIO_PROCESS, int(tid), main)
        except (OSError, ValueError):   # gone, or no right to raise a priority (an unprivileged user)
            unrestored.add(tid)


def said(skipped: dict, unrestored: set) -> str:
    """The standby's one line in the rank's log, or ''."""
    parts = []
    if skipped:
        shown = ", ".join(f"{name} ({why})" for name, why in list(skipped.items())[:SAID_NAMES])
        more = f" and {len(skipped) - SAID_NAMES} more" if len(skipped) > SAID_NAMES else ""
        parts.append(f"skipped {len(skipped)} module(s) it could not import ahead: {shown}{more}")
    alive = [tid for tid in unrestored if os.path.exists(f"/proc/self/task/{tid}")]
    if alive:
        parts.append(f"{len(alive)} thread(s) its imports started keep nice {NICE} (raising a priority back "
                     f"needs CAP_SYS_NICE or RLIMIT_NICE)")
    return f"dlaunch standby: {'; '.join(parts)}\n" if parts else ""


def main() -> None:
    skipped: dict = {}
    unrestored: set = set()
    ahead(list(filter(None, (sys.argv[1] if len(sys.argv) > 1 else "").split(","))), skipped, unrestored)
    channel = socket.socket(fileno=int(os.environ["DLAUNCH_STANDBY_FD"]))
    while True:
        message, fds, _, _ = socket.recv_fds(channel, 1 << 22, 1)
        if not message:
            sys.exit(0)   # dlaunch did not need this standby
        request = json.loads(message)   # dlaunch's own message over its own socket pair: no outside text
        if "modules" not in request:
            break
        ahead(request["modules"], skipped, unrestored)
    channel.close()
    if not fds:
        sys.exit(0)
    os.dup2(fds[0], 1)
    os.dup2(fds[0], 2)
    os.close(fds[0])
    line = said(skipped, unrestored)
    if line:
        sys.stderr.write(line)
        sys.stderr.flush()
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    hook, modules = sys.modules.pop(HOOK_NAME, None), os.environ.pop(MODULES_ENV, "")
    if hook is not None and modules:
        hook.record_modules(modules)   # what this attempt imports, for the next one's standbys
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
