"""dlaunch's hook in a Python rank: the moment the rank raises an exception nobody catches, dlaunch hears it.

A torch rank that raised takes 1 to 8 s to end (its interpreter's and torch's teardown) while its peers see its
sockets close at once and die in their collective; a launcher that waits for the process to end tells the
survivors too late. dlaunch puts this directory first on a Python rank's PYTHONPATH, so Python's ``site`` runs
this file before the script. It:

- takes this directory off ``PYTHONPATH`` and ``sys.path`` again (the script and its children see the user's),
  and runs the next ``sitecustomize`` on the path, if there is one (a distribution's, coverage's);
- when dlaunch started this very process (its parent is the launcher named in ``DLAUNCH_RAISE_FD``), wraps
  ``sys.excepthook``: Python's own hook prints the traceback first, then one datagram ``raised PID`` goes to
  dlaunch over the descriptor it inherited. ``DLAUNCH_RAISE_FD`` is taken out of the environment, and the
  descriptor is not inherited, so a child process of the rank never speaks for it;
- says ``ending PID`` the same way when its program has ended (an ``atexit`` handler, registered before the
  script's own, so it runs after theirs): the interpreter's teardown that follows (torch's destructors, gloo's
  threads: seconds on a loaded machine) is the job finishing, not a silence a learned hang budget may judge.

A ``SystemExit`` is not reported (the script may catch it; its exit code is judged when the process ends), nor
is an exception a thread dies of. This file imports nothing of dlaunch: it runs in the rank, before its script.
"""

import os
import sys

RAISE_ENV = "DLAUNCH_RAISE_FD"   # launcher/contract.py names it too: "FD:LAUNCHER_PID"
HERE = os.path.dirname(os.path.abspath(__file__))


def _off_the_path() -> None:
    """This directory out of PYTHONPATH and sys.path: it was put there for this file alone."""
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if entries and entries[0] == HERE:
        rest = os.pathsep.join(entries[1:])
        if rest:
            os.environ["PYTHONPATH"] = rest
        else:
            del os.environ["PYTHONPATH"]
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != HERE]


def _chain() -> None:
    """The next sitecustomize on the path runs, as it would have without dlaunch's."""
    this = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401 - the next one: this directory is off the path now
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise   # the other sitecustomize's own failure: site says "Error in sitecustomize", as without dlaunch
        if this is not None:
            sys.modules["sitecustomize"] = this


def _report_raises() -> None:
    spec = os.environ.pop(RAISE_ENV, "")
    fd_text, _, launcher = spec.partition(":")
    if not (spec.isascii() and fd_text.isdigit() and launcher.isdigit()) or os.getppid() != int(launcher):
        return   # not started by dlaunch itself: a child of the rank, or a Python the user ran by hand
    fd = int(fd_text)
    try:
        os.set_inheritable(fd, False)
    except OSError:
        return   # no such descriptor: this interpreter was not spawned with it
    previous = sys.excepthook

    def excepthook(kind, value, traceback):
        try:
            previous(kind, value, traceback)   # the traceback first: the log keeps it even if the stop is instant
        finally:
            try:
                os.write(fd, b"raised %d" % os.getpid())
            except OSError:
                sys.stderr.write("dlaunch: could not tell the launcher of this exception; it will see the exit\n")

    sys.excepthook = excepthook

    def ending():
        try:
            os.write(fd, b"ending %d" % os.getpid())
        except OSError:
            pass   # the launcher judges the exit then

    import atexit

    atexit.register(ending)


_off_the_path()
_chain()
_report_raises()   # last: it wraps whatever excepthook the chained sitecustomize set
