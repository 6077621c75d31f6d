"""dlaunch's own errors: each is one line on stderr and an exit code, never a traceback.

Two kinds, siblings under ``DlaunchError``: the user's input is wrong (``UsageError``, exit code 2,
found before anything starts), or the machine would not let dlaunch go on (``LaunchError``, exit code 1:
a full disk, a run directory that cannot be written). The CLI catches ``DlaunchError``; code that means
only one kind catches only that one.
"""

from launcher.contract import ExitCode


class DlaunchError(Exception):
    """Printed as ``dlaunch: error: <message>``; the process exits with ``exit_code``.

    ``usage``, when given, is the command's usage line, printed first (as argparse does for its own errors).
    ``also``: more errors found in the same pass (a second broken config file), each printed as a line of its
    own after this one, so one attempt shows every file to fix.
    """

    exit_code: int = ExitCode.FAILED

    def __init__(self, message: str, usage: str | None = None, also: tuple[str, ...] = ()):
        super().__init__(message)
        self.usage = usage
        self.also = also


class UsageError(DlaunchError):
    """Bad input (a flag, a file, a rank table): exit code 2, before anything started."""

    exit_code = ExitCode.USAGE


class LaunchError(DlaunchError):
    """The launch could not be set up (a full disk, a run directory that cannot be written): exit code 1.

    Raised only before any rank started; what was created for the run is removed again.
    """

    exit_code = ExitCode.FAILED
