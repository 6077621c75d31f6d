"""``python -m launcher`` is the same as the ``dlaunch`` command."""

from launcher.cli import entry

entry()
