"""Shared paths and helpers for the suite."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RANK_TABLES = ROOT / "rank_tables"


def dlaunch(*args, cwd=None, env=None, timeout=60, input=None):
    """Run the real CLI in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "launcher", *map(str, args)], cwd=cwd or ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, input=input)


@pytest.fixture
def run_cli():
    return dlaunch
