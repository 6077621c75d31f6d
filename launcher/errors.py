"""The one exception type the CLI turns into a one-line message and an exit code.

Anything raised as ``UsageError`` is the user's input being wrong (a flag, a file, a
rank table) and is reported before anything starts, with exit code 2, never as a
traceback.
"""


class UsageError(Exception):
    """Bad input: printed as ``dlaunch: error: <message>``, exit code 2."""

    exit_code = 2
