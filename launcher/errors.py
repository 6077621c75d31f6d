"""The one exception type the CLI turns into a one-line message and an exit code.

Anything raised as ``UsageError`` is the user's input being wrong (a flag, a file, a
rank table) and is reported before anything starts, with exit code 2, never as a
traceback.
"""


class UsageError(Exception):
    """Bad input: printed as ``dlaunch: error: <message>``, exit code 2.

    ``usage``, when given, is the command's usage line, printed first (as argparse does for its own errors).
    """

    exit_code = 2

    def __init__(self, message: str, usage: str | None = None):
        super().__init__(message)
        self.usage = usage


class LaunchError(UsageError):
    """The launch could not be set up (a full disk, a run directory that cannot be written): exit code 1.

    Raised only before any rank started; what was created for the run is removed again.
    """

    exit_code = 1
