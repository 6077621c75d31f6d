"""dlaunch as a container's PID 1: zombies reaped, and the root cause in a termination-message file.

In a container whose command is ``dlaunch ...``, dlaunch is PID 1: every
orphan of the ranks is reparented to it (it is a subreaper anyway), and nobody
else collects their exit statuses.  ``ZombieCollector`` does, in a thread, for
any child that is not a rank (the ranks' own pids are waited by the launcher).
SIGTERM from the kubelet is handled like any SIGTERM: forwarded to the ranks,
one grace period, then SIGKILL, and the true exit code (143).

The termination message is what ``kubectl describe pod`` shows as the
container's last state: one short paragraph naming the failed rank, host,
exit code or signal and its log's last lines.  It is written to
``--termination-log PATH``; without it, only as PID 1 and only when
Kubernetes' default path exists and is writable.
"""

from __future__ import annotations

import os
import time

from launcher.execute.results import closing_lines

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Mapping

KUBERNETES_TERMINATION_LOG = "/dev/termination-log"
DEFAULT_OVERRIDE_ENV = "DLAUNCH_TERMINATION_LOG_DEFAULT"   # tests point the default at a temporary file
MESSAGE_LIMIT = 4096   # Kubernetes keeps at most 4096 bytes of the message
REAP_PAUSE = 0.2


def is_pid1() -> bool:
    return os.getpid() == 1


def termination_log_path(given: str | None, environ: Mapping[str, str]) -> str | None:
    """Where the termination message goes: the option's path, else the default path as PID 1 when writable."""
    if given:
        return given
    default = environ.get(DEFAULT_OVERRIDE_ENV) or KUBERNETES_TERMINATION_LOG
    if is_pid1() and os.path.exists(default) and os.access(default, os.W_OK):
        return default
    return None


def termination_message(summary: dict) -> str:
    """The failed run's root cause as one short paragraph (the closing lines, joined), at most 4096 bytes."""
    lines = [line.strip() for line in closing_lines(summary, "summary.json in the run directory")]
    text = " ".join(line for line in lines if line) + "\n"
    data = text.encode("utf-8", "replace")
    return data[:MESSAGE_LIMIT].decode("utf-8", "ignore")


def write_termination_log(path: str | None, summary: dict) -> str | None:
    """Write the message for a run that did not succeed; returns a warning when the file cannot be written."""
    if not path or summary.get("status") == "succeeded":
        return None
    return write_termination_text(path, termination_message(summary))


def write_termination_text(path: str | None, text: str) -> str | None:
    """``text`` as the termination message (at most 4096 bytes); a warning when it cannot be written."""
    if not path:
        return None
    data = text.rstrip("\n").encode("utf-8", "replace")[:MESSAGE_LIMIT - 1].decode("utf-8", "ignore") + "\n"
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(data)
    except OSError as exc:
        return f"warning: cannot write the termination message to {path}: {exc.strerror}"
    return None


class ZombieCollector:
    """Collects every child that is not a rank: orphans the kernel hands to dlaunch, the child subreaper it always
    is (as PID 1 too). As PID 1 a thread of its own does it (between attempts as well); otherwise the attempt's
    event loop calls ``tick`` (a launch imports no threading).

    ``keep()`` names the pids the launcher waits for itself.  A zombie not in it
    is reaped only when seen twice, ``REAP_PAUSE`` apart, so a rank that died
    before the launcher registered it is still the launcher's to wait for.
    """

    def __init__(self, keep):
        self._keep = keep
        self._seen: set[int] = set()
        self._next = 0.0
        self._thread = None
        self._stop = None
        self.reaped = 0

    def start(self) -> ZombieCollector:
        """As PID 1: a thread collects every ``REAP_PAUSE``."""
        import threading  # only PID 1 runs a thread: the launch path imports none

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dlaunch-zombies", daemon=True)
        self._thread.start()
        return self

    def tick(self) -> float | None:
        """Collect when a round is due (the event loop's call); the seconds until the next one (None: PID 1's
        thread collects)."""
        if self._thread is not None:
            return None
        now = time.monotonic()
        if now >= self._next:
            self._collect()
            self._next = now + REAP_PAUSE
        return max(0.0, self._next - now)

    def _run(self) -> None:
        assert self._stop is not None
        while not self._stop.wait(REAP_PAUSE):
            self._collect()

    def _collect(self) -> None:
        zombies = _zombie_children() - set(self._keep())
        for pid in zombies & self._seen:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self.reaped += 1
            except ChildProcessError:
                continue   # collected by someone else meanwhile
        self._seen = zombies - self._seen

    def stop(self) -> None:
        if self._thread is not None and self._stop is not None:
            self._stop.set()
            self._thread.join()


def _zombie_children() -> set[int]:
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", encoding="ascii") as fh:
            children = [int(p) for p in fh.read().split()]
    except OSError:
        return set()
    found = set()
    for pid in children:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2:].split()[:1] == [b"Z"]:
            found.add(pid)
    return found
