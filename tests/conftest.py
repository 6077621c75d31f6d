"""Shared paths and helpers for the suite."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RANK_TABLES = ROOT / "rank_tables"

# Third-party clients that tests/test_clients.py launches: programs, not tests.
collect_ignore_glob = ["clients/*"]


def dlaunch(*args, cwd=None, env=None, timeout=60, input=None):
    """Run the real CLI in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "launcher", *map(str, args)], cwd=cwd or ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, input=input)


@pytest.fixture
def run_cli():
    return dlaunch


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Caches the examples keep (synthetic data) go to the session's temporary directory, never ~/.cache."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    yield cache
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved
