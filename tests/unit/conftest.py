"""tests/unit: one layer at a time, in this process, no process started: the suite's fast half.

A unit test calls the code (``cli.main(argv)`` for the command line, the plan, the rules, the protocol)
and never starts a process: not a rank, not sshd, not a second interpreter. This fixture makes that a
rule rather than a habit: a test here that starts one fails, naming where it belongs (tests/e2e, where
real processes, real sshd hosts, Slurm and MindSpore run).
"""

import os
import subprocess

import pytest


class StartedAProcess(AssertionError):
    pass


def _refuse(*_args, **_kwargs):
    raise StartedAProcess("a unit test starts no process (tests/unit/conftest.py): it belongs in tests/e2e")


@pytest.fixture(autouse=True)
def no_process_started(monkeypatch):
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """The test's temporary directory as the launch directory, with no device restriction inherited."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    return tmp_path
