"""Start one rank process cheaply: ``os.posix_spawn`` of the launch's shared environment plus the rank's own.

Why not ``subprocess.Popen`` for every rank: Popen re-encodes the whole inherited environment (two
``os.fsencode`` calls a variable, in Python) for every rank, builds its error pipe and its bookkeeping, and
costs the launcher about as much CPU as the rank's own exec.  Here a rank's environment is one dict copy (the
inherited variables and the launch's markers, read once) updated with its own variables, which
``posix_spawn`` encodes in C, and glibc's ``posix_spawn`` starts it with ``CLONE_VFORK`` (no copy of the
launcher's memory).

What Popen did and this keeps: the rank's own session (``setsid``), stdin from /dev/null, stdout and stderr
to the rank's log or console pipe, SIGPIPE and SIGXFSZ back to their defaults (Python ignores them, and an
ignored signal stays ignored across exec), no launcher file descriptor inherited (Python opens every fd
non-inheritable; the few the launcher itself inherited are made non-inheritable once, ``_keep_fds_private``),
and the parent-death signal through ``death_signal_wrapper`` (setpriv), whose program check gives a missing
or non-executable program the same 127/126 spawn error as an exec would.  Where posix_spawn cannot do what
a rank needs (no setpriv here, so a ``preexec_fn`` must arm the death signal; a working directory other than
the launcher's, which Python's posix_spawn cannot change), Popen does it as before.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Mapping

from launcher.execute.local.reaper import child_setup, death_signal_wrapper

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    import subprocess

_DEFAULT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name))


class Child:
    """A spawned rank as the executor uses it: ``pid``, ``poll()``, ``wait()`` and ``returncode`` with
    Popen's meaning (negative: killed by that signal)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._collect(os.WNOHANG)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self._collect(0)
        return self.returncode

    def _collect(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:   # collected elsewhere already: as Popen, an unknown status reads 0
            pid, status = self.pid, 0
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)


def _keep_fds_private() -> None:
    """Make every descriptor above stderr that the launcher inherited non-inheritable, once: Popen closed
    them in each child (``close_fds``); posix_spawn passes on whatever is inheritable."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return
    for name in names:
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                os.set_inheritable(fd, False)
        except OSError:
            continue   # the listing's own descriptor, closed by now


class RankSpawner:
    """Spawns the ranks of one launch: a rank's environment is the inherited variables, its own over them, and
    the launch's markers over both."""

    def __init__(self, environ: Mapping[str, str], markers: Mapping[str, str], inherited_fd: int | None = None):
        """``inherited_fd``: a descriptor every process gets under its own number (the launch's raise channel,
        which ``markers`` name)."""
        self._environ = dict(environ)
        self._markers = dict(markers)
        self._inherited_fd = inherited_fd
        self._wrapper = death_signal_wrapper()
        self._child_setup = child_setup(os.getpid())
        self._cwd = os.getcwd()
        self._checked: set[tuple[str, str | None, str]] = set()   # (program, PATH, cwd) found executable
        self.fallbacks = 0   # ranks started by Popen (no setpriv, or another working directory)
        if self._wrapper:
            _keep_fds_private()
        if inherited_fd is not None:
            os.set_inheritable(inherited_fd, True)

    def spawn(self, argv: list[str], env: Mapping[str, str], cwd: str, out_fd: int,
              extra_fd: int | None = None) -> Child | subprocess.Popen:
        """Start ``argv`` with the shared environment plus ``env`` (the rank's own variables), stdout and stderr
        to ``out_fd``, and ``extra_fd`` passed on under its own number (a warm-restart standby's socket, which
        ``env`` names); an ``OSError`` (ENOENT, EACCES) when the program cannot be started."""
        if extra_fd is not None:
            os.set_inheritable(extra_fd, True)   # the one descriptor it inherits; the caller closes it at once
        if not self._wrapper or cwd != self._cwd:
            return self._popen(argv, env, cwd, out_fd, extra_fd)
        self._check_program(str(argv[0]), env.get("PATH", self._environ.get("PATH")), cwd)
        pid = os.posix_spawn(self._wrapper[0], [*self._wrapper, *argv], self.full_env(env), setsid=True,
                             setsigdef=_DEFAULT_SIGNALS,
                             file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                           (os.POSIX_SPAWN_DUP2, out_fd, 1), (os.POSIX_SPAWN_DUP2, out_fd, 2)])
        return Child(pid)

    def _popen(self, argv: list[str], env: Mapping[str, str], cwd: str, out_fd: int,
               extra_fd: int | None = None) -> subprocess.Popen:
        import subprocess  # only here: posix_spawn starts the ranks of a common launch

        self.fallbacks += 1
        full = self.full_env(env)
        setup = None
        if self._wrapper:
            self._check_program(str(argv[0]), full.get("PATH"), cwd)
            argv = [*self._wrapper, *argv]
        else:
            setup = self._child_setup
        return subprocess.Popen(argv, cwd=cwd, env=full, stdin=subprocess.DEVNULL, stdout=out_fd,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=setup,
                                pass_fds=tuple(fd for fd in (extra_fd, self._inherited_fd) if fd is not None))

    def variable(self, name: str, env: Mapping[str, str]) -> str | None:
        """One variable of the environment a process with ``env`` gets (its own, else the inherited)."""
        return env.get(name, self._environ.get(name))

    def full_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The environment a process gets: the inherited variables, ``env`` over them, the markers over both."""
        full = self._environ.copy()
        full.update(env)
        full.update(self._markers)
        return full

    def _check_program(self, program: str, path_var: str | None, cwd: str) -> None:
        """What exec would refuse, checked here (once per program, PATH and directory): behind setpriv a
        missing or non-executable program would be setpriv's own error, not the spawn error dlaunch reports."""
        key = (program, path_var, cwd)
        if key in self._checked:
            return
        import shutil

        if "/" in program:   # as exec takes it: relative to the rank's working directory
            path: str | None = os.path.join(cwd, program)
        else:
            path = shutil.which(program, mode=os.F_OK, path=path_var if path_var is not None else os.defpath)
        if path is None or not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
        self._checked.add(key)


ENV_LOG_MODE = 0o600   # env.log: the owner's alone (docs/run-directory.md)


def open_rank_files(spec, env_text: str) -> int:
    """A process's files before its spawn: its checkpoint (or own) directory, ``env.log`` written whole, and
    its log opened for appending (a restart's output goes on in the same file). Returns the log's fd; an
    OSError (a full disk) means it cannot start with its files.

    ``env.log`` holds the whole environment, and masking knows only secret-looking names: it is its owner's
    alone (0600 whatever the umask, also when an earlier file of that name was readable by others)."""
    _make_dir(spec.ckpt_dir or spec.rank_dir)
    env_fd = os.open(spec.env_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, ENV_LOG_MODE)
    try:   # bytes as given
        os.fchmod(env_fd, ENV_LOG_MODE)
        data = env_text.encode("utf-8", "surrogateescape")
        written = os.write(env_fd, data)
        while written < len(data):   # a short write (a nearly full disk) goes on where it stopped
            written += os.write(env_fd, data[written:])
    finally:
        os.close(env_fd)
    return os.open(spec.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def _make_dir(path: str) -> None:
    """A rank's checkpoint directory, inside its rank directory (made by ``rundir.create.create``): one mkdir.
    ``os.makedirs`` stats every parent first, for every rank; a path whose parent is missing
    (the scheduler's directory) still gets every level, and a restart finds its directory there."""
    try:
        os.mkdir(path)
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
