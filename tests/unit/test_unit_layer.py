"""The unit layer's one rule, checked: a test here cannot start a process (tests/unit/conftest.py)."""

import os
import subprocess

import pytest


def test_a_unit_test_cannot_start_a_process():
    with pytest.raises(AssertionError, match="belongs in tests/e2e"):
        subprocess.run(["true"], check=False)
    with pytest.raises(AssertionError, match="starts no process"):
        os.fork()
