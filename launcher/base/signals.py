"""The signals dlaunch knows by name: those that stop the job (spelled once here), and those it passes on to
every rank without stopping it (Slurm's warning signal, user hooks).

SIGINT/SIGTERM/SIGHUP/SIGQUIT mean "stop": dlaunch forwards them and starts its
grace period.  SIGUSR1 and SIGUSR2 mean nothing to dlaunch itself: Slurm sends
one before a time limit (``#SBATCH --signal=B:USR1@120``) so the ranks can
checkpoint, and what happens next is the ranks' decision.  They are forwarded
to every rank's process group and the job keeps running; ``--forward-signals``
names more.
"""

from __future__ import annotations

import argparse
import signal

PASS_THROUGH_DEFAULT = (signal.SIGUSR1, signal.SIGUSR2)
# The signals that stop the job, spelled once: dlaunch forwards them to every rank and starts its grace period,
# its watchdog ignores them, a head may send them to its hosts. torchrun's set, in torchrun's order.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_UNCATCHABLE = (signal.SIGKILL, signal.SIGSTOP)
_LAUNCHER_OWN = (signal.SIGCHLD, signal.SIGPIPE)   # dlaunch needs these itself


def signal_names(signals) -> str:
    """Signals as ``--forward-signals`` takes them back: ``SIGWINCH,SIGURG``."""
    return ",".join(signal.Signals(s).name for s in signals)


# The stop signals as torchrun's --signals-to-handle names them ("SIGTERM,SIGINT,SIGHUP,SIGQUIT"): made once,
# every rank's environment carries it.
STOP_SIGNAL_NAMES = signal_names(STOP_SIGNALS)


def signal_list(text) -> tuple[int, ...]:
    """``--forward-signals USR1,SIGWINCH,10``: names (with or without SIG) or numbers, comma-separated."""
    found: list[int] = []
    for word in str(text).split(","):
        word = word.strip().upper()
        if not word:
            continue
        sig = _one(word)
        if sig in _UNCATCHABLE or sig in _LAUNCHER_OWN or sig in STOP_SIGNALS:
            why = ("cannot be caught" if sig in _UNCATCHABLE else "is dlaunch's own" if sig in _LAUNCHER_OWN
                   else "already stops the job and is forwarded")
            raise argparse.ArgumentTypeError(f"{signal.Signals(sig).name} {why}; it cannot be a forwarded signal")
        if sig not in found:
            found.append(sig)
    if not found:
        raise argparse.ArgumentTypeError(f"expected signal names such as USR1,WINCH, not {str(text)[:40]!r}")
    return tuple(found)


def _one(word: str) -> int:
    if word.isascii() and word.isdigit() and len(word) <= 3:
        try:
            return signal.Signals(int(word))
        except ValueError:
            pass
    name = word if word.startswith("SIG") else "SIG" + word
    try:
        return signal.Signals[name]
    except KeyError:
        raise argparse.ArgumentTypeError(f"{word[:20]!r} is not a signal name (e.g. USR1, SIGUSR2, WINCH)") from None


def pass_through(extra=()) -> tuple[int, ...]:
    """The signals forwarded without stopping: SIGUSR1, SIGUSR2 and what --forward-signals added."""
    return tuple(dict.fromkeys((*PASS_THROUGH_DEFAULT, *(extra or ()))))


class Stopped(Exception):
    """A stop signal arrived inside ``StopsRaise``."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopsRaise:
    """Within it, a stop signal raises ``Stopped``: for waits before anything is started, where the default
    action would end the process without a word (and where PID 1 of a PID namespace, as in a container,
    the kernel drops a signal that has no handler). The previous handlers come back on leaving; outside the
    main thread, where no handler can be set, it does nothing."""

    def __enter__(self) -> StopsRaise:
        self._previous: dict = {}
        try:
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._raise)
        except ValueError:   # not the main thread
            pass
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @staticmethod
    def _raise(signum, frame) -> None:
        raise Stopped(signum)
