"""``python -m launcher`` is the same as the ``dlaunch`` command."""

import sys

from launcher.cli import main

sys.exit(main())
