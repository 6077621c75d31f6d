"""Fuzz the run-directory readers: any value of any type at any place of plan, summary and pids files, and
special files (FIFOs, /dev/zero, sparse giants, deep JSON, directories, bytes that are not UTF-8) in their
place. status, logs, report, ckpt list and prune, in-process through ``launcher.cli.main``, always answer
with an exit code, never an exception, never a hang.
"""

import copy
import json
import os
import shutil
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher import cli
from tests.launching import RANK_PROGRAM, run_dlaunch, within

FILES = ["plan.json", "summary.json", "pids.json", "summary.head.json", "plan.other.json"]
COMMANDS = [["status", "--json"], ["logs"], ["report"], ["ckpt", "list"], ["prune", "--keep", "0"]]
PER_COMMAND_SECONDS = 20

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 9),
                    st.sampled_from([10**40, -(10**30), 2**63, 1e40, 1e308, -1, 0, 4194305]),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=6),
                    st.sampled_from(["x", "0-999999999", "\x1b[2J\u202e", "0,1", "", "-1", "a\x00b", "\ud800",
                                     "caf\udce9", "/dev/zero", "."]))
json_values = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=3), st.dictionaries(st.sampled_from(["rank", "pid", "ranks", "x", "0"]) |
                                                    st.text(max_size=4), children, max_size=3)), max_leaves=8)


def _slots(node, out, key=None):
    """(container, key) of every value in ``node``, but inside a rank's env and argv (only their strings)."""
    if isinstance(node, dict):
        for name, value in node.items():
            out.append((node, name))
            if name not in ("env", "argv"):
                _slots(value, out, name)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.append((node, index))
            _slots(value, out)
    return out


@st.composite
def mutation(draw, docs):
    """(file name, new JSON text or a special kind) for one file of the run."""
    name = draw(st.sampled_from(FILES))
    special = draw(st.sampled_from([None] * 6 + ["fifo", "dev-zero", "sparse", "deep", "directory", "latin-1",
                                                 "empty"]))
    if special:
        return name, special
    doc = copy.deepcopy(docs.get(name) or docs["summary.json"])
    for _ in range(draw(st.integers(1, 4))):
        slots = _slots(doc, [])
        if not slots:
            break
        target, key = draw(st.sampled_from(slots))
        if isinstance(target, dict) and draw(st.integers(0, 3)) == 0:
            del target[key]
        else:
            target[key] = draw(json_values)
    return name, json.dumps(doc)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    where = tmp_path_factory.mktemp("fuzzbase")
    result = run_dlaunch("run", RANK_PROGRAM, "--ranks", "2", "--run-id", "base", "--output-dir", where / "runs",
                         "--console", "none", "--", "--fail-rank", "1", "--print", "3", cwd=where)
    assert result.returncode == 3, result.stderr
    run = where / "runs" / "base"
    docs = {name: json.loads((run / name).read_text()) for name in ("plan.json", "summary.json", "pids.json")}
    docs["plan.other.json"] = {**docs["plan.json"], "peers": [{"server_id": "h", "suffix": ".h", "ranks": "2-3"}]}
    return run, docs


DOCS = {}


def _apply(run, name, change):
    path = run / name
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if change == "fifo":
        os.mkfifo(path)
    elif change == "dev-zero":
        path.symlink_to("/dev/zero")
    elif change == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(40 << 20)
    elif change == "deep":
        path.write_text('{"ranks": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif change == "directory":
        path.mkdir()
    elif change == "latin-1":
        path.write_bytes(b'{"run_id": "caf\xe9"}')
    elif change == "empty":
        path.write_bytes(b"")
    else:
        path.write_text(change)


def _call(argv):
    return within(PER_COMMAND_SECONDS, lambda: cli.main(argv), f"dlaunch {' '.join(argv)}")


@st.composite
def damaged_runs(draw):
    changes = draw(st.lists(mutation(DOCS), min_size=1, max_size=3))
    log = draw(st.sampled_from([None, None, "fifo", "dev-zero", "latin-1", "sparse"]))
    return changes, log


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(case=damaged_runs())
def test_damaged_run_directories_always_get_an_answer(base, tmp_path_factory, case):
    changes, log = case
    out = tmp_path_factory.mktemp("fuzz") / "runs"
    run = out / "r"
    shutil.copytree(base[0], run, symlinks=True)
    for name in ("plan.json", "summary.json", "pids.json"):
        (run / name).write_text((run / name).read_text().replace(str(base[0]), str(run)))
    for name, change in changes:
        _apply(run, name, change)
    if log:
        _apply(run, "rank_001/output.log", log)
    for command in COMMANDS:
        argv = command + ([str(run)] if command[0] != "prune" else ["--output-dir", str(out)])
        if command[0] == "report":
            argv += ["-o", str(out.parent / "report.html"), "--force"]
        started = time.monotonic()
        code = _call(argv)
        assert isinstance(code, int) and 0 <= code < 256, (argv, code)
        assert time.monotonic() - started < PER_COMMAND_SECONDS


@pytest.fixture(scope="module", autouse=True)
def _docs(base):
    DOCS.update(base[1])
    yield
    DOCS.clear()
