"""Shared paths and helpers for the suite."""

import os
from pathlib import Path

import pytest

from tests.launching import run_dlaunch

ROOT = Path(__file__).resolve().parent.parent
RANK_TABLES = ROOT / "rank_tables"

# Third-party clients that tests/e2e/test_clients.py launches: programs, not tests.
collect_ignore_glob = ["clients/*"]


def dlaunch(*args, cwd=None, env=None, timeout=60, input=None):
    """Run the real CLI in a fresh interpreter, as a user would (tests.launching.run_dlaunch, a shorter wait)."""
    return run_dlaunch(*args, cwd=cwd, env=env, timeout=timeout, input=input)


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


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run directory laid out as dlaunch makes it, this process being rank 0 of 1."""
    ckpt = tmp_path / "run" / "rank_000" / "ckpt"
    ckpt.mkdir(parents=True)
    for name in ("DLAUNCH_RESUME_FROM", "DLAUNCH_RESUME_STEP", "RANK", "RANK_ID", "WORLD_SIZE", "RANK_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DLAUNCH_CKPT_DIR", str(ckpt))
    monkeypatch.setenv("DLAUNCH_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


# The suite's longest files (over 40 s each on 2 cores), started first: with --dist loadfile a long file
# drawn last keeps one worker busy while the other has nothing left to do.
LONGEST_FIRST = ("test_mindspore_checkpoints.py", "test_clients.py", "test_resume.py", "test_slurm.py",
                 "test_cluster_ssh.py", "test_ms_scheduler.py", "test_cluster.py", "test_scripts.py",
                 "test_pods.py", "test_checkpoint_async.py", "test_ckpttool.py", "test_hf_clm.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))   # stable: order kept within
