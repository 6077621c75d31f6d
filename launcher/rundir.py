"""Run directories: one new directory per run, nothing of an earlier run ever touched.

The seeds' scripts ``rm -rf device$i`` before each run; dlaunch instead gives
every run ``<output>/<run id>/`` and every global rank its own ``rank_NNN/``
inside it, created exclusively so that two launches can never share (and so
clobber) a rank's logs or checkpoints.  With ``--run-id`` several hosts may use
one run directory on a shared filesystem: each creates only its own ranks'
directories and writes only its own host-suffixed files.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from typing import TYPE_CHECKING

from launcher.errors import LaunchError, UsageError

if TYPE_CHECKING:
    from launcher.plan import LaunchPlan

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LATEST = "latest"   # the link to the newest run: a reserved name, never a run id
RUN_MARKERS = ("plan*.json", "summary*.json", "rank_table*.json")   # a directory holding one is a run directory


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.match(run_id):
        raise UsageError(f"bad --run-id {run_id[:40]!r}: use letters, digits, '.', '_' and '-' (at most 128)")
    if run_id == LATEST:
        raise UsageError(f"--run-id {LATEST} is reserved: {LATEST} is the link to the newest run")
    return run_id


def is_run_dir(path: str) -> bool:
    import glob

    return os.path.isdir(path) and any(glob.glob(os.path.join(glob.escape(path), m)) for m in RUN_MARKERS)


def enclosing_run_dir(path: str) -> str | None:
    """The run directory ``path`` lies in (or is), if any: such paths are never an output's target."""
    current = os.path.dirname(os.path.abspath(path))
    while True:
        if is_run_dir(current):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def write_json(path: str, data) -> None:
    """Write JSON atomically (temporary file + rename): readers never see half a file, a failure leaves none."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, default=str)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def _make_dirs(path: str, made: list[str]) -> None:
    """``os.makedirs``, recording every level it creates (so a failed start can remove exactly those)."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for level in reversed(missing):
        try:
            os.mkdir(level)
            made.append(level)
        except FileExistsError:
            continue   # made by a launch beside this one: not ours to remove


def _remove(made: list[str]) -> None:
    """Undo a failed start: remove what it created, newest first (directories only if still empty)."""
    for path in reversed(made):
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
        except OSError:
            continue   # something else put a file there meanwhile: left, rather than lost


def create(plan: LaunchPlan, rank_table_text: str, shared: bool) -> None:
    """Create the run directory and this host's rank directories; refuse to reuse any rank directory.

    ``shared`` (an explicit --run-id) allows the run directory to exist already, as it does
    when several hosts of one job write into one shared filesystem.  If anything cannot be created
    (a full disk), everything this call made is removed again and nothing starts.
    """
    made: list[str] = []
    writing = plan.output_dir   # what is being made, for the message if it fails
    try:
        _make_dirs(plan.output_dir, made)
        writing = plan.run_dir
        try:
            os.mkdir(plan.run_dir)
            made.append(plan.run_dir)
        except FileExistsError:
            if not shared:
                raise UsageError(f"run directory {plan.run_dir} already exists") from None
        taken = [spec.rank_dir for spec in plan.ranks if os.path.lexists(spec.rank_dir)]
        if taken:
            raise UsageError(f"run {plan.run_id} already has {os.path.basename(taken[0])} in {plan.run_dir} "
                             f"from an earlier launch; nothing was changed: choose another --run-id")
        for spec in plan.ranks:
            writing = spec.rank_dir
            try:
                os.mkdir(spec.rank_dir)
            except FileExistsError as exc:
                raise UsageError(f"{exc.filename} appeared while dlaunch was creating it (another launch with "
                                 f"run id {plan.run_id}?); nothing was changed") from None
            made.append(spec.rank_dir)
        writing = plan.rank_table_file
        with open(plan.rank_table_file, "x", encoding="utf-8") as fh:
            made.append(plan.rank_table_file)
            fh.write(rank_table_text)
        writing = plan_file = plan.host_file("plan", "json")
        write_json(plan_file, plan.to_dict())
        made.append(plan_file)
    except UsageError:
        _remove(made)
        raise
    except OSError as exc:
        _remove(made)
        raise LaunchError(f"cannot create run {plan.run_id}: cannot write {exc.filename or writing}: "
                          f"{exc.strerror}; nothing was started") from None
    point_latest(plan.output_dir, plan.run_id)


def describe_os_error(exc: OSError) -> str:
    """``FILE: No space left on device``, naming the file when the error knows it."""
    return f"{exc.filename}: {exc.strerror}" if exc.filename else (exc.strerror or str(exc))


def point_latest(output_dir: str, run_id: str) -> None:
    """Make ``<output>/latest`` name the newest run, replacing only dlaunch's own link, atomically.

    Anything else of that name (a directory, a file) is left alone with a warning: it is not ours to replace.
    """
    link = os.path.join(output_dir, LATEST)
    if os.path.lexists(link) and not os.path.islink(link):
        from launcher.console import say

        say(f"warning: {link} is not dlaunch's link to the newest run; left as it is")
        return
    tmp = f"{link}.tmp.{os.getpid()}"
    try:
        os.symlink(run_id, tmp)
        os.replace(tmp, link)
    except OSError:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def resolve(path: str) -> str:
    """A run directory from a path that may be an output directory (uses its ``latest`` link, never a
    directory or file that only has the name)."""
    latest = os.path.join(path, LATEST)
    return os.path.realpath(latest) if os.path.islink(latest) and os.path.isdir(latest) else os.path.realpath(path)
