"""A standby rank interpreter for warm restarts: run as a script by the rank's own Python, never imported.

It is started with what the next attempt's environment is known to be (execute/local/warm.py), so Python's
``site`` (``sitecustomize``, ``.pth`` files) ran under it. It then reads messages from the file descriptor
``DLAUNCH_STANDBY_FD`` names, a Unix socket to its dlaunch:

- ``{"modules": [...]}``: names to import ahead (the user's ``--warm-restarts`` list comes on the command line,
  what the running attempt's rank imported comes in messages, more as that rank imports more). They are
  imported in a thread at the lowest CPU priority where that can be undone at the restart (root with
  CAP_SYS_NICE, or an RLIMIT_NICE that allows it: nice is per thread on Linux, and the main thread, which runs
  the user's script, keeps its own; and the session's autogroup, which is what counts beside the ranks where
  the kernel groups CPU time by session), otherwise at the main thread's. A name that does not import is skipped
  and said once, in the rank's log;
- the next attempt's environment, argv and working directory, with the file descriptor of that rank's log (or
  console pipe): what is left of the list is imported at the main thread's priority (the previous attempt
  imported all of it) and the threads the imports started are set back to it; the standby becomes the rank:
  output to that descriptor, the environment replaced, the rank hook's module list started
  (``DLAUNCH_MODULES_FILE``), and the script (or ``-m`` module) run as ``__main__`` (``runpy``), so the
  interpreter's start and the imports are already paid;
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


class Ahead:
    """One thread that imports the names it is given, in order, at nice ``NICE`` where that can be undone."""

    def __init__(self):
        self.main = os.getpriority(os.PRIO_PROCESS, os.getpid())   # on Linux: the main thread's own nice
        self.lower = _can_raise_back(self.main)
        self.group = _autogroup(NICE) if self.lower else None   # the session's own nice, before it was lowered
        self.skipped: dict = {}
        self.unrestored: set = set()
        self._pending: list = []
        self._wake = threading.Event()
        self._stop = False
        self._before = set(os.listdir("/proc/self/task"))
        self._worker = threading.Thread(target=self._run, name="dlaunch-standby-imports", daemon=True)
        self._worker.start()

    def add(self, names) -> None:
        self._pending.extend(names)
        self._wake.set()

    def _run(self) -> None:
        if self.lower:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        while True:
            if not self._pending:
                if self._stop:
                    return
                self._wake.wait()
                self._wake.clear()
                continue
            name = self._pending.pop(0)
            if name in sys.modules or name in self.skipped:
                continue
            try:
                __import__(name)
            except (Exception, SystemExit) as exc:   # noqa: BLE001 - the script's own import says what is wrong
                why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                self.skipped[name] = why.splitlines()[0][:200]

    def finish(self) -> None:
        """The rank's request came: what is left of the list is imported at the main thread's priority (the
        previous attempt imported all of it: the script would import it too), and every thread the imports
        started is set back to that priority."""
        self._stop = True
        self._wake.set()
        if self.lower:
            try:
                os.setpriority(os.PRIO_PROCESS, self._worker.native_id, self.main)
            except (OSError, TypeError):
                pass   # it just ended
        if self.group is not None:
            _autogroup(self.group)
        self._worker.join()
        for tid in set(os.listdir("/proc/self/task")) - self._before:   # they inherited NICE
            try:
                if os.getpriority(os.PRIO_PROCESS, int(tid)) != self.main:   # Linux: a thread id names the thread
                    os.setpriority(os.PRIO_PROCESS, int(tid), self.main)
            except (OSError, ValueError):   # gone, or (it cannot happen once the probe passed) no right
                self.unrestored.add(tid)


def _autogroup(nice):
    """This session's autogroup set to ``nice``; its nice before (as the kernel wrote it), or None where there is
    none to set.

    Where the kernel groups CPU time by session (``sched_autogroup_enabled``), a thread's nice orders it only
    within its session, and each rank and standby is a session of its own (dlaunch starts each with setsid):
    the standby's share beside the ranks is its autogroup's nice. The standby's session becomes the rank's."""
    try:
        with open("/proc/self/autogroup") as group:   # "/autogroup-123 nice 0"
            before = group.read().split()[-1]
        if not (before.isascii() and before.lstrip("-").isdigit()):
            return None
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(nice))
        return before
    except (OSError, IndexError):
        return None


def _can_raise_back(main: int) -> bool:
    """Whether a thread of this process may go back from nice ``NICE`` to ``main`` (root with CAP_SYS_NICE, or an
    RLIMIT_NICE that allows it): tried on a thread of its own. Otherwise the imports keep the main thread's."""
    done: list = []

    def probe() -> None:
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, NICE)
            os.setpriority(os.PRIO_PROCESS, tid, main)
            done.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return bool(done)


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
    imports = Ahead()
    imports.add(filter(None, (sys.argv[1] if len(sys.argv) > 1 else "").split(",")))
    channel = socket.socket(fileno=int(os.environ["DLAUNCH_STANDBY_FD"]))
    while True:
        message, fds, _, _ = socket.recv_fds(channel, 1 << 22, 1)
        if not message:
            sys.exit(0)   # dlaunch did not need this standby
        request = json.loads(message)   # dlaunch's own message over its own socket pair: no outside text
        if "modules" not in request:
            break
        imports.add(request["modules"])
    channel.close()
    if not fds:
        sys.exit(0)
    imports.finish()
    os.dup2(fds[0], 1)
    os.dup2(fds[0], 2)
    os.close(fds[0])
    line = said(imports.skipped, imports.unrestored)
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
