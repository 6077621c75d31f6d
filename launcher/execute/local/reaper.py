"""Nothing a launch started outlives it: ranks, their children, and daemons they started.

Three layers, each covering what the one before cannot:

1. Every rank gets ``PR_SET_PDEATHSIG=SIGKILL`` between fork and exec
   (``child_setup``), so the kernel kills it if the launcher dies at any
   moment, even while the launcher is still spawning the other ranks.
2. ``Reaper``, a forked watchdog, holds a pipe only the launcher writes to.
   When the pipe closes without a goodbye (the launcher was SIGKILLed), it
   SIGKILLs every rank's process group, then sweeps /proc for processes that
   carry the launcher's marker variable, again and again until a sweep finds
   none: a child caught between fork and exec carries the marker only after
   its exec.  Every second it also notes the launcher's whole tree (pid and
   start time), and kills what it noted: a daemon that left its group and
   carries no marker is reparented to the launcher (3.) while it lives, and
   so is noted; so is everything a nested dlaunch started (its watchdog,
   which the outer sweep kills for the marker it inherited, can no longer
   clean up after it).  What a nested dlaunch starts also carries every
   enclosing launch's marker (``DLAUNCH_LAUNCHER_IDS``), so the marker sweep
   finds what started after the last note.  The launcher notices a dead watchdog (its pidfd) or a stuck one
   (a write that would block, a goodbye not acknowledged) and replaces it.
3. The launcher is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a process
   that leaves its rank's group and whose parent exits (a double-forked
   ``setsid`` daemon) becomes the launcher's child.  ``sweep`` then kills every
   descendant and every marked process at the end of every attempt, however it
   ended.

What none of them reaches: a process a rank asks another service to start
(``systemd-run``, ``at``, a container engine), which is neither a descendant
nor marked; and, only when the launcher itself is SIGKILLed, a process that
both left its rank's group and removed the marker from its environment less
than a second (``NOTE_SECONDS``) before.
"""

from __future__ import annotations

import errno
import functools
import os
import signal
import time

from launcher.base.console import say
from launcher.base.lines import LineBuffer
from launcher.base.signals import STOP_SIGNALS
from launcher.contract import LAUNCHER_ID_ENV, LAUNCHER_IDS_ENV
from launcher.execute.local.proctree import children, descendants, last_pid, started, tree

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
LAUNCHER_SESSION = os.getsid(0)   # the user's terminal session: its groups (a shell's pipeline) are never killed;
# read at import, so the watchdog, which leaves it (setsid), still knows it
SWEEP_SECONDS = 5.0          # a sweep keeps looking for new marked processes this long at most
SWEEP_QUIET_ROUNDS = 3       # ... and stops after this many rounds that found nothing
SWEEP_PAUSE = 0.001         # between rounds: long enough for a fork-and-exit loop to show its next pid
SWEEP_SETTLE = 0.05         # once a sweep killed something, quiet this long too: a daemon that keeps hopping
                            # (fork, the parent exits, again) can hide between hops for three short rounds
ORPHANED_PAUSE = 0.02       # the watchdog's rounds: long enough for a rank being spawned to finish its exec
REGISTER_BATCH, REGISTER_SECONDS = 64, 0.005   # rank groups sent to the watchdog together
MAX_NESTING = 16             # markers a process carries at most: the innermost launches' (an absurd inherited
                             # list must not grow every rank's environment)
NOTE_SECONDS = 1.0           # how often the watchdog notes the launcher's tree (a few /proc reads per process)
GOODBYE_SECONDS = 2.0        # a watchdog that has not left this long after "bye" is stuck: killed


@functools.cache
def _prctl():
    """libc's prctl, loaded once in the launcher (never between fork and exec), or None off Linux."""
    try:
        import ctypes

        call = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return call


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children instead of init's (Linux 3.4+)."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


@functools.lru_cache(maxsize=1)
def death_signal_wrapper() -> tuple[str, ...]:
    """``setpriv --pdeathsig KILL --``, a prefix that arms the death signal in the child and execs the rank,
    when util-linux's setpriv is here: then no ``preexec_fn`` runs, so subprocess spawns with vfork instead
    of copying the launcher's whole address space for every rank.  The moment between
    the spawn and setpriv's prctl, where the launcher could die unnoticed, is the watchdog's (the rank carries
    the marker).  Empty where setpriv is missing: ``child_setup`` then does the same in Python."""
    import shutil

    found = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    return (found, "--pdeathsig", "KILL", "--") if found and _prctl() is not None else ()


def child_setup(launcher_pid: int):
    """A ``preexec_fn`` that makes the child die with the launcher, checked against the race before it was set."""
    prctl = _prctl()

    def setup() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher_pid:   # the launcher died before the death signal was armed
            os._exit(128 + signal.SIGKILL)

    return setup


def marker(launcher_id: str) -> bytes:
    return f"{LAUNCHER_ID_ENV}={launcher_id}".encode()


def marker_chain(environ, launcher_id: str) -> str:
    """The value of ``DLAUNCH_LAUNCHER_IDS`` for what this launcher starts: the enclosing launches' markers
    (from its own environment) and its own, so that an outer watchdog still finds a nested job's processes
    once the inner launcher and its watchdog are gone."""
    outer = environ.get(LAUNCHER_IDS_ENV, "").split() or [environ.get(LAUNCHER_ID_ENV, "")]
    kept = [mark for mark in outer if mark and mark != launcher_id][-MAX_NESTING + 1:]
    return " ".join([*kept, launcher_id])


def marked_processes(launcher_id: str) -> set[int]:
    """Pids of processes whose environment carries this launcher's marker, as its own or as an enclosing
    launch's (what their exec gave them)."""
    mark, chained, found = marker(launcher_id), f"{LAUNCHER_IDS_ENV}=".encode(), set()
    own = launcher_id.encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    entries = fh.read().split(b"\0")
            except OSError:
                continue  # gone, or not ours to read
            if mark in entries or any(entry.startswith(chained) and own in entry[len(chained):].split()
                                      for entry in entries):
                found.add(int(name))
    return found


def _kill(pid: int, spared_groups: frozenset[int] = frozenset()) -> None:
    """SIGKILL ``pid`` and its process group, where it has a session of its own (a rank, a daemon): not the
    launcher's session, whose groups are the user's shell's, nor a kept process's group.

    The group is what catches a daemon that forks and exits in a loop (a new pid every hop, the group kept): a
    signal to a pid lands after it forked its successor as often as not, while a signal to its group reaches
    every member at once, and the kernel makes a fork that races it fail (``copy_process`` refuses while a
    group signal is pending), so no successor is left."""
    try:
        group = os.getpgid(pid) if os.getsid(pid) != LAUNCHER_SESSION else 0   # never a group of the user's shell
    except OSError:
        group = 0
    try:
        if group > 1 and group not in spared_groups:
            os.killpg(group, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
    except OSError as exc:
        if exc.errno not in (errno.ESRCH, errno.EPERM):
            raise


def _reap_children(keep: set[int]) -> None:
    """Collect exit statuses of our children that were orphans handed to us (not ``keep``, whose owners wait)."""
    for pid in children(os.getpid()) - keep:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue


def _groups(pids: set[int]) -> set[int]:
    """The process groups of ``pids`` (those still alive)."""
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except OSError:
            continue
    return groups


def sweep(launcher_id: str, keep: set[int], quiet_rounds: int = SWEEP_QUIET_ROUNDS, orphaned: bool = False,
          subreaper: bool = False) -> int:
    """Kill every descendant of this process but ``keep``, and every process with the marker; reap; repeat
    until ``quiet_rounds`` rounds in a row find nothing new.  Returns how many processes were killed.

    The launcher at the end of an attempt (its ranks all dead): a round reads its own tree only (cheap: one
    host's end stays fast when many launchers share a machine).  As their ``subreaper`` every descendant that
    loses its parent (a daemon's double fork, a nested launcher killed) is handed to this process, so the tree
    is all there is; without that (prctl refused), or once the sweep killed something (a daemon may hop between
    two looks at the tree), one scan of all of /proc for the marker ends the sweep, or starts the rounds over:
    that scan reads every process's environment, the biggest cost of a host's stop when 16 launchers share 2
    cores, so a sweep that killed nothing skips it.  Two quiet rounds: one can miss a daemon that forks and
    exits in a loop (caught between its parent's exit and its move to this subreaper).  The watchdog of a
    launcher that died (``orphaned``) owns no tree: every round scans /proc for the marker, ORPHANED_PAUSE
    apart, since a rank the launcher was spawning shows the marker only once its exec is done."""
    keep = keep | {os.getpid()}
    spared = frozenset(_groups(keep))
    killed: set[int] = set()
    # the tree is complete only where the kernel lists children (CONFIG_PROC_CHILDREN): else the marker decides
    tree_only = subreaper and not orphaned and os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    quiet, deadline, last_kill = 0, time.monotonic() + SWEEP_SECONDS, 0.0
    while time.monotonic() < deadline:
        found = descendants(os.getpid()) - keep
        if not found:
            last = quiet + 1 >= quiet_rounds and time.monotonic() - last_kill >= (SWEEP_SETTLE if killed else 0.0)
            if last and tree_only and not killed:   # nothing was left: no scan (a host's stop stays cheap)
                break
            if last or orphaned:
                found = marked_processes(launcher_id) - keep
                if not found and last:
                    break
        for pid in found:
            _kill(pid, spared)
        if found:
            last_kill = time.monotonic()
        killed |= found
        _reap_children(keep)
        quiet = quiet + 1 if not found else 0
        time.sleep(ORPHANED_PAUSE if orphaned else SWEEP_PAUSE)
    _reap_children(keep)
    return len(killed)


# --------------------------------------------------------------------------
# the watchdog
# --------------------------------------------------------------------------


class Reaper:
    """A forked watchdog that kills every rank if the launcher dies without saying goodbye."""

    def __init__(self, launcher_id: str):
        self.launcher_id = launcher_id
        self.groups: list[int] = []
        self._unsent: list[bytes] = []
        self._sent_at = 0.0
        self.pid = 0
        self.pidfd: int | None = None
        self._fd = -1
        self._start()

    def _start(self) -> None:
        read_fd, write_fd = os.pipe()
        launcher_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the watchdog: never returns
            status = 0
            try:
                os.close(write_fd)
                _keep_only_fd(read_fd)  # hold none of the launcher's pipes, sockets or SSH channel open
                os.setsid()  # out of the launcher's group: a killpg of the launcher must not take us too
                for sig in STOP_SIGNALS:
                    signal.signal(sig, signal.SIG_IGN)
                _reap_when_orphaned(read_fd, self.launcher_id, launcher_pid)
            except BaseException:
                status = 1
            finally:
                os._exit(status)
        os.close(read_fd)
        os.set_blocking(write_fd, False)   # a stopped watchdog must never block the launcher
        self.pid, self._fd = pid, write_fd
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def watch(self, pgid: int) -> None:
        """Register a rank's process group: the watchdog kills it if the launcher dies.  Sent in batches
        (``flush``, at most REGISTER_BATCH groups or REGISTER_SECONDS apart): one write per rank woke the
        watchdog 1,024 times.  A rank not yet registered still dies with the launcher (its death signal)
        and is found by its marker."""
        self.groups.append(pgid)
        self._unsent.append(b"+%d\n" % pgid)
        if len(self._unsent) >= REGISTER_BATCH or time.monotonic() - self._sent_at >= REGISTER_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self._unsent:
            data, self._unsent = b"".join(self._unsent), []
            self._sent_at = time.monotonic()
            self._send(data)

    def _send(self, data: bytes) -> None:
        try:
            os.write(self._fd, data)
        except BlockingIOError:
            self._replace("is not reading (stopped?)")
        except OSError as exc:
            self._replace(f"is gone ({exc.strerror})")

    def check(self) -> None:
        """Replace the watchdog if it has exited (its pidfd turned readable, or an attempt ended)."""
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid = self.pid
        if pid:
            self._replace("exited", reaped=True)

    def _replace(self, why: str, reaped: bool = False) -> None:
        """Start a new watchdog that knows every group, so the ranks stay covered; say what happened."""
        old = self.pid
        self._forget(reaped)
        self._start()
        say(f"warning: the watchdog (pid {old}) that stops the ranks if dlaunch is killed {why}; "
            f"started a new one (pid {self.pid})")
        try:
            os.write(self._fd, b"".join(b"+%d\n" % g for g in self.groups))
        except OSError as exc:
            say(f"warning: the new watchdog cannot be told the ranks ({exc.strerror}); they are covered by "
                f"their parent-death signal only")

    def _forget(self, reaped: bool) -> None:
        """Close our end to the current watchdog and make sure it is gone and reaped."""
        os.close(self._fd)
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        if not reaped:
            _kill(self.pid)
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass   # already collected: nothing left to wait for

    def keep_watched(self, selector) -> None:
        """The watchdog's exit wakes the event loop (``("reaper", None)``), which replaces it at once; called
        again after anything that may have replaced it, so ``selector`` always watches the current one."""
        import selectors

        watched = getattr(selector, "dlaunch_reaper_fd", None)   # one lookup, not a walk of every rank's fds
        if watched == self.pidfd:
            return
        if watched is not None:
            selector.unregister(watched)   # the replaced watchdog's (epoll forgets a closed fd by itself)
        selector.dlaunch_reaper_fd = self.pidfd
        if self.pidfd is not None:
            selector.register(self.pidfd, selectors.EVENT_READ, ("reaper", None))

    def leave(self) -> None:
        """Tell the watchdog to leave (every rank is stopped and swept); ``close`` waits for it.  Said before
        the summary is written, so the watchdog's exit and the launcher's last work overlap: with 16 hosts on
        2 cores, waiting for 16 watchdogs to be scheduled one by one was the longest step after the verdict."""
        if self._fd < 0:
            return
        try:
            os.write(self._fd, b"bye\n")
        except OSError:
            pass   # gone or stuck: the bounded wait in close settles it either way
        os.close(self._fd)
        self._fd = -1

    def close(self) -> None:
        """Normal exit: the launcher has stopped its ranks itself, so the watchdog leaves; a stuck one is killed."""
        self.leave()
        deadline = time.monotonic() + GOODBYE_SECONDS
        if self.pidfd is not None:   # woken the moment it leaves, not at the next poll
            import select

            select.select([self.pidfd], [], [], GOODBYE_SECONDS)
            os.close(self.pidfd)
            self.pidfd = None
        while time.monotonic() < deadline:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:
                return
            time.sleep(0.01)
        say(f"warning: the watchdog (pid {self.pid}) did not leave within {GOODBYE_SECONDS:g} s; killed it")
        _kill(self.pid)
        os.waitpid(self.pid, 0)


def _keep_only_fd(keep: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)


def _reap_when_orphaned(read_fd: int, launcher_id: str, launcher_pid: int) -> None:
    """The watchdog's life: collect groups until "bye" (leave) or EOF (the launcher died: kill everything),
    noting the launcher's tree every NOTE_SECONDS while it waits, unless no process or thread was created
    since a note that began a whole round after the last creation (``last_pid``; a process given its pid just
    before one note may not be linked to its parent yet, so the next note is taken too). Reading the tree
    costs /proc reads per process and per thread, for as long as the job runs, and a quiet job creates
    nothing."""
    import select

    groups: set[int] = set()
    noted: dict[int, bytes] = {}
    seen: bytes | None = None   # the kernel's last pid at the previous round
    settled = False             # the last note began a round after the last creation: it holds everything
    buffer = LineBuffer()
    while True:
        if not select.select([read_fd], [], [], NOTE_SECONDS)[0]:
            last = last_pid()
            if last is None or last != seen or not settled:
                noted = tree(launcher_pid)
                noted.pop(os.getpid(), None)
                settled = last is not None and last == seen
            seen = last
            continue
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        for line in buffer.lines(chunk):
            if line == b"bye":
                return
            if line.startswith(b"+"):
                groups.add(int(line[1:]))
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            continue   # that group is already gone
    for pid, born in noted.items():
        if started(pid) == born:   # the same process, not a later one given its pid
            _kill(pid)
    sweep(launcher_id, set(), orphaned=True)
