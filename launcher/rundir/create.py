"""Run directories: one new directory per run, nothing of an earlier run ever touched.

The seeds' scripts ``rm -rf device$i`` before each run; dlaunch instead gives
every run ``<output>/<run id>/`` and every global rank its own ``rank_NNN/``
inside it, created exclusively so that two launches can never share (and so
clobber) a rank's logs or checkpoints.  With ``--run-id`` several hosts may use
one run directory on a shared filesystem: each creates only its own ranks'
directories and writes only its own host-suffixed files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from launcher.base.jsontext import readable_pieces
from launcher.base.userfiles import RUN_MARKERS, enclosing_run_dir
from launcher.errors import DlaunchError, LaunchError, UsageError
from launcher.rundir.paths import LATEST, LAYOUT_VERSION

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from typing import Protocol


    class _RankLayout(Protocol):
        @property
        def rank_dir(self) -> str: ...

    class RunLayout(Protocol):
        """What ``create`` needs of a launch plan: names and its JSON, so this module needs no plan type."""

        @property
        def run_id(self) -> str: ...
        @property
        def run_dir(self) -> str: ...
        @property
        def output_dir(self) -> str: ...
        @property
        def rank_table_file(self) -> str: ...
        @property
        def ranks(self) -> Sequence[_RankLayout]: ...
        def host_file(self, name: str, ext: str) -> str: ...
        def to_dict(self) -> dict: ...


def write_json(path: str, data) -> None:
    """Write JSON atomically: readers (status, other hosts) never see half a file, a failure leaves none."""
    from launcher.base.atomic import write_atomically

    def write(fh) -> None:
        fh.writelines(readable_pieces(data, default=str))
        fh.write("\n")

    write_atomically(path, write, permissions=0o666)


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


def create(plan: RunLayout, rank_table_text: str, shared: bool) -> None:
    """Create the run directory and this host's rank directories; refuse to reuse any rank directory.

    ``shared`` (an explicit --run-id) allows the run directory to exist already, as it does
    when several hosts of one job write into one shared filesystem; then a host with no rank (a spare
    standing by, started again) replaces its own host-named rank table file.  If anything cannot be created
    (a full disk), everything this call made is removed again and nothing starts.
    """
    made: list[str] = []
    writing = plan.output_dir   # what is being made, for the message if it fails
    outer = enclosing_run_dir(os.path.join(os.path.realpath(plan.output_dir), RUN_MARKERS[0]))
    if outer is not None:
        raise UsageError(f"the output directory {plan.output_dir} is inside the run directory {outer}: a run "
                         f"inside another would be removed with it (prune, a copy); choose a directory outside it")
    try:
        _make_dirs(plan.output_dir, made)
        writing = plan.run_dir
        try:
            os.mkdir(plan.run_dir)
            made.append(plan.run_dir)
        except FileExistsError:
            if not shared:
                raise UsageError(f"run directory {plan.run_dir} already exists") from None
        # a run directory this call made is empty: only one that existed can hold an earlier launch's ranks
        taken = [spec.rank_dir for spec in plan.ranks if os.path.lexists(spec.rank_dir)] \
            if plan.run_dir not in made else []
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
        try:
            with open(plan.rank_table_file, "x", encoding="utf-8") as fh:
                made.append(plan.rank_table_file)
                fh.write(rank_table_text)
        except FileExistsError:
            if not shared or plan.ranks:
                raise
            # a host with no rank (a spare standing by) started again in its run: the file is named for this
            # host, its own from its earlier life there, and no rank's work hangs on it: replaced, in one step
            from launcher.base.atomic import write_atomically

            write_atomically(plan.rank_table_file, lambda fh: fh.write(rank_table_text), permissions=0o666)
        writing = plan_file = plan.host_file("plan", "json")
        write_json(plan_file, {"layout": LAYOUT_VERSION, **plan.to_dict()})
        made.append(plan_file)
    except DlaunchError:
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
        from launcher.base.console import say

        say(f"warning: {link} is not dlaunch's link to the newest run; left as it is")
        return
    tmp = f"{link}.tmp.{os.getpid()}"
    try:
        os.symlink(run_id, tmp)
        os.replace(tmp, link)
    except OSError:
        if os.path.lexists(tmp):
            os.unlink(tmp)
