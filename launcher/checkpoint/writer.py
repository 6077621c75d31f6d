"""The background writer behind ``checkpoint.save(..., async_save=True)``: saves that don't stop training.

``submit`` captures the state (``stage.capture``: one memory copy into reused buffers) and
hands the file to one writer thread per process, which runs the same atomic save a synchronous
call does.  The caller gets a ``SaveHandle`` back at once.  What this module guarantees:

- Order and bounds: saves are written one after another in the order they were made; at most
  ``max_in_flight`` (default 1) are captured and not yet written, so a new save first waits for
  the oldest; the buffers kept between saves are bounded (``configure``).
- No failure is lost: a failed write is raised by its handle's ``wait()``, else by the next save
  or ``wait_all()``, else printed to stderr when the interpreter exits.
- Nothing in flight is lost at the end: the interpreter's exit waits for saves in flight.  While a
  save is in flight, SIGTERM (what dlaunch sends on fail-fast, Ctrl-C or preemption before its
  SIGKILL) first lets the write finish, then does what it would have done: the handler there
  before is called, or the process dies of SIGTERM.  The handler is installed (from the main
  thread) only while saves are in flight; when the writer falls idle it puts SIGTERM's default
  back itself, so a main thread stuck in native code (a collective with a dead peer) is still
  stopped by SIGTERM at once between saves, and, when the SIGTERM came during the write, right
  after it (Linux; elsewhere at the next Python instruction).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import signal
import sys
import threading
from typing import Any

from launcher.checkpoint import stage as ckptstage


def _default_buffer_limit() -> int:
    """A quarter of this host's memory, shared by the ranks on it."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 16 << 30
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
    return memory // 4 // max(ranks, 1)


class SaveHandle:
    """A background save: ``wait()`` for it (returns the path, or raises what failed), ``done()``, ``exception()``."""

    def __init__(self, path: str, writer: _Writer):
        self.path = path
        self._writer = writer
        self._finished = threading.Event()
        self._error: BaseException | None = None
        self.reported = False

    def done(self) -> bool:
        """True once the file is committed (or the write failed)."""
        return self._finished.is_set()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait (up to ``timeout`` s) and return what made the write fail, or None once it succeeded."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"the background save of {self.path} is still being written")
        self.reported = True
        self._writer.settle_signal()
        return self._error

    def wait(self, timeout: float | None = None) -> str:
        """Wait (up to ``timeout`` s) until the checkpoint is on disk and listed; returns its path."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self.path

    def __repr__(self) -> str:
        state = "failed" if self._error else "written" if self.done() else "writing"
        return f"<SaveHandle {self.path} {state}>"


class _TermGuard:
    """SIGTERM while saves are in flight: finish them, then do what SIGTERM would have done."""

    def __init__(self, writer: _Writer):
        self.writer = writer
        self.previous: Any = None      # the handler below ours, while armed
        self.armed = False
        self.wakeup: tuple[int, int] | None = None   # our signal.set_wakeup_fd pipe, if we could take it

    @staticmethod
    def _main_thread() -> bool:
        return threading.current_thread() is threading.main_thread()

    def handler(self, signum, frame):
        self.writer.drain()
        with self.writer.cond:
            previous = self.previous
            self.disarm()
        if previous in (None, signal.SIG_DFL):
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        elif previous is not signal.SIG_IGN and callable(previous):
            previous(signum, frame)

    def arm(self) -> None:
        """(Re)install the handler; from the main thread only (elsewhere Python cannot)."""
        if not self._main_thread():
            return
        current = signal.getsignal(signal.SIGTERM)
        if not self.armed or current != self.handler:
            self.previous = current
        signal.signal(signal.SIGTERM, self.handler)   # again after an idle restore: Python's handler back in the kernel
        self.armed = True
        if self.wakeup is None and sys.platform.startswith("linux"):
            read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            if signal.set_wakeup_fd(write, warn_on_full_buffer=False) == -1:
                self.wakeup = read, write
            else:   # someone (an asyncio loop) owns it: put theirs back, go without
                signal.set_wakeup_fd(-1)
                os.close(read)
                os.close(write)

    def disarm(self) -> None:
        """Put the handler below ours back; main thread only."""
        if not (self.armed and self._main_thread()):
            return
        if signal.getsignal(signal.SIGTERM) == self.handler:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self.previous is None else self.previous)
        self.armed, self.previous = False, None
        if self.wakeup is not None:
            owner = signal.set_wakeup_fd(-1)
            if owner != self.wakeup[1]:
                signal.set_wakeup_fd(owner)
            for fd in self.wakeup:
                os.close(fd)
            self.wakeup = None

    def idle(self) -> None:
        """Writer thread, nothing left in flight: SIGTERM's default back in the kernel, and obey one that came."""
        if not self.armed or self.previous not in (signal.SIG_DFL, signal.SIG_IGN, None):
            return
        if not _set_kernel_disposition(signal.SIGTERM, self.previous or signal.SIG_DFL):
            return
        came = False
        if self.wakeup is not None:
            try:
                came = signal.SIGTERM in os.read(self.wakeup[0], 4096)
            except BlockingIOError:
                pass
        if came and self.previous in (None, signal.SIG_DFL):
            os.kill(os.getpid(), signal.SIGTERM)


def _set_kernel_disposition(signum: int, disposition) -> bool:
    """libc ``signal()``: the one way to change a disposition from a thread other than Python's main one."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc_signal = ctypes.CDLL(None).signal
    except (OSError, AttributeError):
        return False
    libc_signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc_signal.restype = ctypes.c_void_p
    libc_signal(signum, int(disposition))   # SIG_DFL = 0, SIG_IGN = 1
    return True


class _Writer:
    """One writer thread, a queue of captured saves, the failures not yet reported."""

    def __init__(self):
        self.cond = threading.Condition(threading.RLock())
        self.jobs: collections.deque = collections.deque()
        self.in_flight: list[SaveHandle] = []
        self.failed: list[SaveHandle] = []
        self.max_in_flight = 1
        self.pool = ckptstage.BufferPool(_default_buffer_limit())
        self.guard = _TermGuard(self)
        self.thread: threading.Thread | None = None
        self.at_exit_registered = False
        self.pid = os.getpid()   # a forked child inherits this object (and its atexit hook), not the thread

    # -- the caller's side ------------------------------------------------------------------

    def raise_failure(self) -> None:
        """Raise the oldest failed write nobody has been told about yet."""
        with self.cond:
            unreported = [handle for handle in self.failed if not handle.reported]
            self.failed = unreported[1:]
            if unreported:
                unreported[0].reported = True
                error = unreported[0]._error
                assert error is not None   # only handles whose write failed are in self.failed
                raise error

    def submit(self, path: str, state, store) -> SaveHandle:
        """Capture ``state`` and queue ``store(snapshot)``; first report a failure, wait for room."""
        self.raise_failure()
        with self.cond:
            while len(self.in_flight) >= self.max_in_flight:
                self.cond.wait()
        self.raise_failure()
        snapshot = ckptstage.capture(state, self.pool)
        handle = SaveHandle(path, self)
        with self.cond:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="dlaunch-checkpoint-writer", daemon=True)
                self.thread.start()
            if not self.at_exit_registered:
                atexit.register(self.at_exit)
                self.at_exit_registered = True
            self.in_flight.append(handle)
            self.jobs.append((handle, snapshot, store))
            self.cond.notify_all()
            self.guard.arm()
        return handle

    def drain(self) -> None:
        """Wait until every save in flight is written or failed."""
        with self.cond:
            self.cond.notify_all()   # from a signal handler that interrupted submit before its notify
            while self.in_flight:
                self.cond.wait()

    def settle(self) -> None:
        """Before a synchronous save: the background ones first, and their failure if any."""
        self.drain()
        self.settle_signal()
        self.raise_failure()

    def settle_signal(self) -> None:
        with self.cond:
            if not self.in_flight:
                self.guard.disarm()

    def configure(self, max_in_flight: int | None = None, buffer_bytes: int | None = None) -> None:
        if max_in_flight is not None:
            if not isinstance(max_in_flight, int) or max_in_flight < 1:
                raise ValueError(f"max_in_flight must be a positive integer, not {max_in_flight!r}")
            self.max_in_flight = max_in_flight
        if buffer_bytes is not None:
            if not isinstance(buffer_bytes, int) or buffer_bytes < 0:
                raise ValueError(f"buffer_bytes must be a non-negative integer, not {buffer_bytes!r}")
            self.pool.limit = buffer_bytes
            self.pool.trim()

    def at_exit(self) -> None:
        if os.getpid() != self.pid:   # a child forked mid-save: the saves and the writer are its parent's
            return
        self.drain()
        with self.cond:
            unreported, self.failed = [handle for handle in self.failed if not handle.reported], []
        for handle in unreported:
            print(f"dlaunch checkpoint: the background save of {handle.path} failed: {handle._error}",
                  file=sys.stderr, flush=True)

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.jobs:
                    self.cond.wait()
                handle, snapshot, store = self.jobs.popleft()
            try:
                store(snapshot)
            except BaseException as error:   # kept for the caller, raised there
                import traceback

                traceback.clear_frames(error.__traceback__)   # the frames' locals: files, buffers
                if hasattr(error, "add_note"):   # Python 3.11+
                    error.add_note(f"dlaunch checkpoint: the background save of {handle.path} failed; "
                                   "the checkpoints saved before it are intact")
                handle._error = error
            self.pool.give_back(snapshot.buffers)
            del snapshot
            with self.cond:
                self.in_flight.remove(handle)
                if handle._error is not None:
                    self.failed.append(handle)
                if not self.in_flight:
                    self.guard.idle()   # before anyone can see the save done
                handle._finished.set()
                self.cond.notify_all()


_writer: _Writer | None = None
_writer_lock = threading.Lock()


def writer() -> _Writer:
    global _writer
    with _writer_lock:
        if _writer is None:
            _writer = _Writer()
        return _writer


def store_now(state, store):
    """A synchronous save (after the background ones settled): ``store(snapshot)`` of ``state``, its device
    tensors staged through the writer's pinned buffers (``stage.capture(devices_only=True)``), a state
    without any as it is (and no writer made for it); returns what ``store`` returns."""
    if not ckptstage.on_device(state):
        return store(ckptstage.Snapshot(state, {}, []))
    pool = writer().pool
    snapshot = ckptstage.capture(state, pool, devices_only=True)
    try:
        return store(snapshot)
    finally:
        pool.give_back(snapshot.buffers)


def handler_below(signum: int):
    """``signum``'s handler as it will be once background saves are done (the guard's, unwrapped)."""
    current = _writer
    if current is not None and signum == signal.SIGTERM and current.guard.armed:
        with current.cond:
            if current.in_flight:
                return signal.SIG_DFL if current.guard.previous is None else current.guard.previous
            current.guard.disarm()
    return signal.getsignal(signum)


def set_handler_below(signum: int, handler) -> None:
    """Install ``handler`` for ``signum``, under the guard while saves are in flight (main thread)."""
    current = _writer
    if current is not None and signum == signal.SIGTERM and current.guard.armed:
        with current.cond:
            if current.in_flight and signal.getsignal(signum) == current.guard.handler:
                current.guard.previous = handler
                return
            current.guard.disarm()
    signal.signal(signum, handler)


def active() -> _Writer | None:
    """The writer, if this process ever saved in the background (or staged device tensors for a save)."""
    return _writer


def _forget_in_child() -> None:
    """A forked child (a data loader worker) has no writer thread: its parent's saves are not its own,
    and its SIGTERM must not wait for them."""
    global _writer, _writer_lock
    if _writer is not None:
        with contextlib.suppress(ValueError, OSError):
            _writer.guard.disarm()
    _writer, _writer_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
