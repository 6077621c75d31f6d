"""The unit layer's rules, checked: a test here cannot start a process (tests/unit/conftest.py), and its
folders mirror the packages."""

import os
import subprocess

import pytest


def test_a_unit_test_cannot_start_a_process():
    with pytest.raises(AssertionError, match="belongs in tests/e2e"):
        subprocess.run(["true"], check=False)
    with pytest.raises(AssertionError, match="starts no process"):
        os.fork()


def test_the_unit_tests_mirror_the_packages():
    """tests/unit/<package>/test_<module>.py tests launcher/<package>/<module>.py (``test_main`` a package's
    ``__init__``, a ``_fuzz`` suffix the same module by property); the files directly in tests/unit test the
    tree as a whole (imports, docs, this layer, the pure pipeline)."""
    from pathlib import Path

    unit = Path(__file__).resolve().parent
    launcher = unit.parents[1] / "launcher"
    strays = []
    for path in unit.rglob("test_*.py"):
        folder = path.parent.relative_to(unit)
        if folder == Path("."):
            continue
        module = path.stem.removeprefix("test_").removesuffix("_fuzz")
        home = launcher / folder / ("__init__.py" if module == "main" else f"{module}.py")
        if not home.is_file():
            strays.append(str(path.relative_to(unit)))
    assert strays == []
