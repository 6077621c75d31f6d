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

from .errors import UsageError
from .plan import LaunchPlan

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LATEST = "latest"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.match(run_id):
        raise UsageError(f"bad --run-id {run_id!r}: use letters, digits, '.', '_' and '-' (at most 128)")
    return run_id


def write_json(path: str, data) -> None:
    """Write JSON atomically (temporary file + rename): readers never see half a file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, default=str)
        fh.write("\n")
    os.replace(tmp, path)


def create(plan: LaunchPlan, rank_table_text: str, shared: bool) -> None:
    """Create the run directory and this host's rank directories; refuse to reuse any rank directory.

    ``shared`` (an explicit --run-id) allows the run directory to exist already, as it does
    when several hosts of one job write into one shared filesystem.
    """
    try:
        os.makedirs(plan.output_dir, exist_ok=True)
        try:
            os.mkdir(plan.run_dir)
        except FileExistsError:
            if not shared:
                raise UsageError(f"run directory {plan.run_dir} already exists") from None
        taken = [spec.rank_dir for spec in plan.ranks if os.path.lexists(spec.rank_dir)]
        if taken:
            raise UsageError(f"run {plan.run_id} already has {os.path.basename(taken[0])} in {plan.run_dir} "
                             f"from an earlier launch; nothing was changed: choose another --run-id")
        made = []
        try:
            for spec in plan.ranks:
                os.mkdir(spec.rank_dir)
                made.append(spec.rank_dir)
        except FileExistsError as exc:
            for path in made:
                os.rmdir(path)
            raise UsageError(f"{exc.filename} appeared while dlaunch was creating it (another launch with "
                             f"run id {plan.run_id}?); nothing was changed") from None
        with open(plan.rank_table_file, "x", encoding="utf-8") as fh:
            fh.write(rank_table_text)
    except OSError as exc:
        raise UsageError(f"cannot create the run directory in {plan.output_dir}: {exc.strerror} "
                         f"({exc.filename})") from None
    write_json(plan.host_file("plan", "json"), plan.to_dict())
    point_latest(plan.output_dir, plan.run_id)


def point_latest(output_dir: str, run_id: str) -> None:
    """Make ``<output>/latest`` name the newest run, replacing the link atomically."""
    link = os.path.join(output_dir, LATEST)
    tmp = f"{link}.tmp.{os.getpid()}"
    try:
        os.symlink(run_id, tmp)
        os.replace(tmp, link)
    except OSError:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def resolve(path: str) -> str:
    """A run directory from a path that may be an output directory (uses its ``latest``)."""
    latest = os.path.join(path, LATEST)
    return os.path.realpath(latest) if os.path.isdir(latest) else os.path.realpath(path)
