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
is an exception a thread dies of.

With ``--warm-restarts``, ``DLAUNCH_MODULES_FILE`` names a file in the rank's directory: a daemon thread looks at
``len(sys.modules)`` every half second and, each time the count has stayed the same for ``SETTLE`` seconds
(the script's set-up and first steps imported what they import), writes the names of the modules imported
from the interpreter's own library and site-packages (packages and top-level modules, not the script's own
files; ``MAX_NAMES`` at most) there, for the next attempt's standbys to import ahead (execute/local/warm.py).
It stops looking ``LIMIT`` seconds after the start. The variable is taken out of the environment (a child
process of the rank lists nothing); in a standby (``DLAUNCH_STANDBY_FD``), the standby starts the thread
itself when it becomes the rank. This file imports nothing of dlaunch: it runs in the rank, before its script.
"""

import os
import sys

RAISE_ENV = "DLAUNCH_RAISE_FD"   # launcher/contract.py names it too: "FD:LAUNCHER_PID"
MODULES_ENV = "DLAUNCH_MODULES_FILE"   # launcher/contract.py names it too
STANDBY_ENV = "DLAUNCH_STANDBY_FD"     # set in a warm-restart standby (standby.py)
HOOK_NAME = "_dlaunch_rankhook"        # where a standby finds this module again (sys.modules)
HERE = os.path.dirname(os.path.abspath(__file__))
POLL, SETTLE, LIMIT = 0.5, 2.0, 600.0   # seconds: a look at sys.modules, a settled count, the last look
MAX_NAMES = 4096


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


def importable_modules() -> list:
    """The names of the packages and top-level modules imported so far from the interpreter's own library or
    site-packages, in the order they were first imported (a package before its subpackages)."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    places = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    places.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    roots = tuple(os.path.join(os.path.realpath(place), "") for place in places)
    names = []
    for name, module in dict(sys.modules).items():   # a copy: the script imports on while this reads
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None)
        if spec is None or spec.name != name or not isinstance(origin, str) or not getattr(spec, "has_location", 0):
            continue   # built in, frozen, namespace, or an alias (os.path)
        if "." in name and not hasattr(module, "__path__"):
            continue   # a module inside a package: importing the package (or the script) brings it
        if os.path.realpath(origin).startswith(roots):
            names.append(name)
            if len(names) >= MAX_NAMES:
                break
    return names


def record_modules(path: str) -> None:
    """A daemon thread writes ``importable_modules()`` to ``path`` whenever the count settled and changed."""
    import threading
    import time

    def watch() -> None:
        seen, still, written, end = len(sys.modules), 0.0, -1, time.monotonic() + LIMIT
        while time.monotonic() < end:
            time.sleep(POLL)
            count = len(sys.modules)
            if count != seen:
                seen, still = count, 0.0
                continue
            still += POLL
            if still >= SETTLE and count != written:
                written = count
                try:
                    with open(path + ".tmp", "w") as out:
                        out.write("".join(name + "\n" for name in importable_modules()))
                    os.replace(path + ".tmp", path)
                except Exception:   # noqa: BLE001 - a full disk, a removed directory: the standbys import less
                    return

    threading.Thread(target=watch, name="dlaunch-modules", daemon=True).start()


def _modules(hook) -> None:
    path = os.environ.pop(MODULES_ENV, "")
    if not path:
        return
    if STANDBY_ENV in os.environ:   # a standby: what it imports ahead is no list; it starts this as the rank
        sys.modules[HOOK_NAME] = hook
    else:
        record_modules(path)


_off_the_path()
_hook = sys.modules.get(__name__)   # this module, before the chained sitecustomize takes its name
_chain()
_report_raises()   # it wraps whatever excepthook the chained sitecustomize set
_modules(_hook)
