"""MindSpore checkpoints in dlaunch: their names (pure, no MindSpore), then real MindSpore runs.

The names are MindSpore 2.x's own (``mindspore/train/callback/_checkpoint.py``): ``{prefix}-{epoch}_{step}.ckpt``
or ``.safetensors``, ``{prefix}_N-...`` where a directory already held files of the prefix, ``-graph.meta``
(not a checkpoint), ``..._breakpoint.ckpt`` (kept apart, never resumed), ``.tmp`` while saving.  The real
part trains ``examples/train_cifar_mindspore.py`` on 4 ranks with ``--ms-scheduler`` (the loss falls, each
rank saves its own ``.ckpt``, ``dlaunch ckpt list`` shows them), then resumes it with ``--resume`` (each rank
loads its own file) into one shared directory (the warning).  The real part skips without MindSpore, unless
CI or DLAUNCH_REQUIRE_MINDSPORE=1 says it must run.
"""

import importlib.util
import json
import os
import re
import shutil
import sys
import time

import pytest

from launcher.checkpoint import names as ckptnames
from launcher.checkpoint import resume
from launcher.errors import UsageError
from launcher.execute.local import hangs
from launcher.execute.sharedckpt import shared_checkpoint_warnings
from launcher.observe import ckpt as ckpttool
from launcher.plan.make import CWD_RANK, Command, Options, Policy, RankSpec, make_plan
from launcher.table.build import single_server_table
from tests.launching import ROOT, latest_run, run_dlaunch, summary

EXAMPLE = str(ROOT / "examples" / "train_cifar_mindspore.py")
HAVE_MINDSPORE = importlib.util.find_spec("mindspore") is not None
REQUIRED = bool(os.environ.get("CI")) or os.environ.get("DLAUNCH_REQUIRE_MINDSPORE") == "1"
LOSS_LINE = re.compile(r"^epoch: (\d+) step: (\d+), loss is (\d+\.\d+)$", re.MULTILINE)


# --------------------------------------------------------------------------
# names, pure
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name, expected", [
    ("resnet-3_156.pt", ("checkpoint", "resnet", 3, 156, "pt")),
    ("lenet-2_8.ckpt", ("checkpoint", "lenet", 2, 8, "ckpt")),
    ("lenet-2_8.safetensors", ("checkpoint", "lenet", 2, 8, "safetensors")),
    ("lenet_1-2_8.ckpt", ("checkpoint", "lenet_1", 2, 8, "ckpt")),
    ("semi-auto-1_10.ckpt", ("checkpoint", "semi-auto", 1, 10, "ckpt")),
    ("lenet-2_5_breakpoint.ckpt", ("breakpoint", "lenet", 2, 5, "ckpt")),
    ("lenet_2-2_5_breakpoint.ckpt", ("breakpoint", "lenet_2", 2, 5, "ckpt")),
    ("lenet-graph.meta", ("graph", "lenet", None, None, None)),
    ("lenet-3_8.tmp", ("temporary", "lenet", 3, 8, None)),
    (".resnet-3_156.pt~host~123~abc.tmp", ("temporary", "resnet-3_156.pt", None, None, None)),
])
def test_names_of_dlaunch_and_mindspore(name, expected):
    parsed = ckptnames.parse(name)
    assert (parsed.kind, parsed.prefix, parsed.epoch, parsed.step, parsed.format) == expected
    if parsed.kind in ("checkpoint", "breakpoint"):
        assert ckptnames.file_name(parsed.kind, parsed.prefix, parsed.epoch, parsed.step, parsed.format) == name


@pytest.mark.parametrize("name", ["lenet.ckpt", "lenet-x_8.ckpt", "lenet-2_8.ckpt.bak", "lenet-2_8", ".lenet-2_8.ckpt",
                                  "lenet-2_8_breakpoint.safetensors", "notes.txt", "strategy.json",
                                  "resnet-3_156.strategy.json", "lenet-2_8.meta"])
def test_other_names_are_no_checkpoints(name):
    assert ckptnames.parse(name) is None


def test_invented_prefixes_continue_their_series_and_the_newest_wins():
    names = ["lenet-graph.meta", "lenet-1_8.ckpt", "lenet-2_8.ckpt", "lenet_1-2_8.ckpt", "lenet_1-graph.meta",
             "lenet_2-2_8.ckpt", "resnet_50-1_8.ckpt", "resnet_50-graph.meta", "lenet-2_8_breakpoint.ckpt",
             "lenet-2_8.pt", "lenet-3_8.tmp"]
    series = ckptnames.series(filter(None, map(ckptnames.parse, names)))
    assert series == {"lenet": ("lenet", 0), "lenet_1": ("lenet", 1), "lenet_2": ("lenet", 2),
                      "resnet_50": ("resnet_50", 0)}   # a user's own prefix, alone, stays whole
    assert ckptnames.by_series(names) == {
        ("lenet", 1, 8, "ckpt"): "lenet-1_8.ckpt", ("lenet", 2, 8, "ckpt"): "lenet_2-2_8.ckpt",
        ("resnet_50", 1, 8, "ckpt"): "resnet_50-1_8.ckpt", ("lenet", 2, 8, "pt"): "lenet-2_8.pt"}
    assert ckptnames.by_series(names, ckptnames.BREAKPOINT) == {("lenet", 2, 8, "ckpt"): "lenet-2_8_breakpoint.ckpt"}


def _files(directory, names, mtime=None):
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"x" * 10)
        if mtime is not None:
            os.utime(directory / name, (mtime, mtime))


def test_list_and_resume_a_run_of_mindspore_files(tmp_path):
    run = tmp_path / "run"
    _files(run / "rank_000" / "ckpt", ["lenet-graph.meta", "lenet-1_8.ckpt", "lenet-2_8.ckpt", "lenet_1-graph.meta",
                                        "lenet_1-2_8.ckpt", "lenet-3_2_breakpoint.ckpt", "lenet-3_8.tmp"])
    _files(run / "rank_001" / "ckpt", ["lenet-graph.meta", "lenet-1_8.ckpt", "lenet-2_8.ckpt",
                                        "lenet-3_2_breakpoint.ckpt", "lenet-3_8.safetensors"])
    rows = ckpttool.list_run(str(run))
    assert [(r["kind"], r["label"], r["ranks"], r["complete"], r["newest_complete"]) for r in rows] == [
        ("per-rank", "lenet-1_8.ckpt", [0, 1], True, False),
        ("per-rank", "lenet-2_8.ckpt", [0, 1], True, True),
        ("per-rank", "lenet-3_8.safetensors", [1], False, False),
        ("breakpoint", "lenet-3_2_breakpoint.ckpt", [0, 1], True, False)]
    assert rows[1]["files"][0].endswith("rank_000/ckpt/lenet_1-2_8.ckpt")   # the newer instance of the series
    table = ckpttool.format_list(rows)
    assert "saved as lenet-2_8.ckpt, lenet_1-2_8.ckpt" in table
    assert "incomplete: ranks 0 missing" in table and "graph" not in table and ".tmp" not in table

    messages = []
    point = resume.find_resume_point(str(run), 2, log=messages.append)
    assert point.label == "lenet-2_8.ckpt" and (point.epoch, point.step) == (2, 8)
    assert point.files == {0: str(run / "rank_000" / "ckpt" / "lenet_1-2_8.ckpt"),
                           1: str(run / "rank_001" / "ckpt" / "lenet-2_8.ckpt")}
    assert messages == ["skipping lenet-3_8.safetensors: incomplete, ranks 0 have no checkpoint of it"]
    with pytest.raises(UsageError, match="lenet-2_8.ckpt is a MindSpore checkpoint: merge and reshard join"):
        ckpttool.merge(str(run), str(tmp_path / "merged.pt"))


def test_hang_watch_counts_a_mindspore_save_in_progress(tmp_path):
    rank_dir = tmp_path / "rank_0"
    (rank_dir / "ckpt").mkdir(parents=True)
    spec = RankSpec(rank=0, local_rank=0, device_id=0, server_id="h", argv=[], cwd=str(rank_dir), env={},
                    rank_dir=str(rank_dir), log_file=str(rank_dir / "output.log"), env_log="",
                    ckpt_dir=str(rank_dir / "ckpt"), error_file="", console=False)
    old = time.time() - 100
    watch = hangs.HangWatch(10.0, started=old)
    for name in ("lenet-3_8.tmp", "lenet-2_8.ckpt"):
        _files(rank_dir / "ckpt", [name], mtime=old)
    os.utime(spec.ckpt_dir, (old, old))
    assert watch.find_hung([spec])[0] is spec
    os.utime(rank_dir / "ckpt" / "lenet-2_8.ckpt")          # a finished checkpoint's time says nothing
    assert watch.find_hung([spec])[0] is spec
    os.utime(rank_dir / "ckpt" / "lenet-3_8.tmp")           # MindSpore writing a checkpoint: alive
    assert watch.find_hung([spec]) is None


def _plan(tmp_path, ranks=4, **options):
    launch = tmp_path / "launch"
    launch.mkdir(exist_ok=True)
    opts = Options(command=Command("train.py"), run_id="r1", output_dir=str(launch / "dlaunch_runs"),
                   launch_dir=str(launch), python=sys.executable, **options)
    table = single_server_table(list(range(ranks)), "127.0.0.1")
    return make_plan(table, 0, opts, str(launch / "dlaunch_runs" / "r1" / "rank_table.json"), {}), launch


def test_shared_directory_warning_names_the_directory_and_prefix(tmp_path):
    plan, launch = _plan(tmp_path)
    started = time.time()
    _files(launch / "out" / "ckpt", ["lenet-1_8.ckpt"], mtime=started - 3600)   # an earlier run's: not this one's
    _files(launch / "elsewhere", ["model-1_8.pt", "lenet-graph.meta"])          # no MindSpore checkpoint
    _files(launch / "dlaunch_runs" / "r1" / "rank_000" / "ckpt", ["lenet-1_8.ckpt"])   # a rank's own directory
    assert shared_checkpoint_warnings(plan, started) == []
    _files(launch / "out" / "ckpt", ["lenet-graph.meta", "lenet_1-2_8.ckpt", "lenet_1-3_8.ckpt"])
    _files(launch / "dlaunch_runs" / "r1" / "shared", ["net-1_8.safetensors"])   # in the run directory
    found = shared_checkpoint_warnings(plan, started)
    assert found == [
        f"warning: MindSpore checkpoints of prefix 'lenet' were saved into {launch / 'out' / 'ckpt'}, a directory "
        "4 ranks share (2 file(s) there now, e.g. lenet_1-3_8.ckpt): ranks saving one prefix there overwrite "
        "each other's files and keep_checkpoint_max deletes other ranks' files, and dlaunch ckpt list/--resume "
        "do not see them; save into each rank's own directory: "
        "ModelCheckpoint(directory=os.environ[\"DLAUNCH_CKPT_DIR\"])",
        found[1]]
    assert f"prefix 'net' were saved into {launch / 'dlaunch_runs' / 'r1' / 'shared'}, a directory 4 ranks" in found[1]
    alone, _ = _plan(tmp_path, ranks=1)
    assert shared_checkpoint_warnings(alone, started) == []
    # each rank in its own directory: only the run dir is shared
    own_dirs, _ = _plan(tmp_path, policy=Policy(cwd_mode=CWD_RANK))
    assert [line.split(" were saved")[0] for line in shared_checkpoint_warnings(own_dirs, started)] == \
        ["warning: MindSpore checkpoints of prefix 'net'"]


# --------------------------------------------------------------------------
# real MindSpore: train on 4 ranks, list, resume into a shared directory
# --------------------------------------------------------------------------

TRAIN = ["--samples", "512", "--batch-size", "16", "--log-every", "4"]


def _require_mindspore():
    if not HAVE_MINDSPORE:
        if REQUIRED:
            pytest.fail("mindspore is not importable, but CI or DLAUNCH_REQUIRE_MINDSPORE=1 requires these tests: "
                        "pip install -e .[mindspore]")
        pytest.skip("mindspore is not installed (pip install -e .[mindspore], or bash scripts/test.sh)")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One 4-rank training run of the MindSpore example, 2 epochs of 8 steps, each rank saving per epoch."""
    _require_mindspore()
    tmp = tmp_path_factory.mktemp("ms")
    sys.path.insert(0, str(ROOT / "examples"))
    try:   # the data once, here, rather than by 4 ranks at once on 2 cores: as on any later run, the cache is warm
        import synthetic_cifar
    finally:
        sys.path.remove(str(ROOT / "examples"))
    synthetic_cifar.ensure_synthetic_cifar(synthetic_cifar.default_cache_root(), 512, 1)
    out = tmp / "runs"
    result = run_dlaunch("run", EXAMPLE, "--ranks", "4", "--ms-scheduler", "--output-dir", out, "--",
                         *TRAIN, "--epochs", "2", cwd=tmp, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return tmp, out, latest_run(out), result


def _log(run_dir, rank):
    return (run_dir / f"rank_{rank:03d}" / "output.log").read_text()


def test_four_ranks_train_with_a_falling_loss_and_save_their_own_checkpoints(trained):
    tmp, out, run_dir, result = trained
    first, last = [], []
    for rank in range(4):
        log = _log(run_dir, rank)
        assert f"rank {rank}/4 (RANK_ID={rank} MS_NODE_ID={rank})" in log
        losses = [(int(e), int(s), float(v)) for e, s, v in LOSS_LINE.findall(log)]
        assert [(e, s) for e, s, _ in losses] == [(1, 4), (1, 8), (2, 4), (2, 8)], log[-2000:]
        first.append(losses[0][2])
        last.append(losses[-1][2])
        names = sorted(os.listdir(run_dir / f"rank_{rank:03d}" / "ckpt"))
        assert names == ["lenet-1_8.ckpt", "lenet-2_8.ckpt", "lenet-graph.meta"]
    assert 2.0 < sum(first) / 4 < 2.6, first        # about ln(10) at the start
    assert sum(last) / 4 < sum(first) / 4 - 0.1, (first, last)

    listed = run_dlaunch("ckpt", "list", run_dir, cwd=tmp)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[2:]]
    assert [row[:3] for row in rows] == [["per-rank", "lenet-1_8.ckpt", "0-3"], ["per-rank", "lenet-2_8.ckpt", "0-3"]]
    assert listed.stdout.splitlines()[-1].endswith("complete, newest (--resume picks it)")
    as_json = json.loads(run_dlaunch("ckpt", "list", run_dir, "--json", cwd=tmp).stdout)
    assert as_json[1]["files"] == {str(r): str(run_dir / f"rank_{r:03d}" / "ckpt" / "lenet-2_8.ckpt") for r in range(4)}
    assert summary(run_dir)["newest_complete_checkpoint"] == "lenet-2_8.ckpt"
    assert "dlaunch: warning" not in result.stderr and "warnings" not in summary(run_dir)


def test_resume_loads_each_ranks_own_file_and_a_shared_directory_is_warned_of(trained):
    tmp, out, first_run, _ = trained
    shared = tmp / "shared"
    shared.mkdir()
    old = time.time() - 3600   # an earlier run's file there: MindSpore then names this run's files lenet_1-...
    shutil.copy(first_run / "rank_000" / "ckpt" / "lenet-1_8.ckpt", shared / "lenet-1_8.ckpt")
    os.utime(shared / "lenet-1_8.ckpt", (old, old))
    result = run_dlaunch("run", EXAMPLE, "--ranks", "4", "--ms-scheduler", "--output-dir", out, "--resume", "--",
                         *TRAIN, "--epochs", "3", "--ckpt-dir", "shared", cwd=tmp, timeout=300)
    if result.returncode != 0:   # MindSpore's own race in a shared directory, what the warning is about, can
        # fail a rank's save: another rank renamed or removed the file between its check and its rename
        assert "FileNotFoundError" in result.stderr and str(shared) in result.stderr, result.stderr[-4000:]
    assert f"resuming from lenet-2_8.ckpt of {first_run}" in result.stderr
    run_dir = latest_run(out)
    for rank in range(4):
        own = first_run / f"rank_{rank:03d}" / "ckpt" / "lenet-2_8.ckpt"
        assert f"DLAUNCH_RESUME_FROM={own}\n" in (run_dir / f"rank_{rank:03d}" / "env.log").read_text()
        log = _log(run_dir, rank)
        assert f"resumed from {own}: epoch 2 (step 16 of the run) restored, continuing at epoch 3" in log
        losses = [(int(e), int(s)) for e, s, _ in LOSS_LINE.findall(log)]
        # after that race stopped the run, a rank stopped with it may not have reached its last steps
        assert losses == [(3, 4), (3, 8)] if result.returncode == 0 else losses == [(3, 4), (3, 8)][:len(losses)]
    # every rank saved lenet_1-3_8.ckpt (MindSpore's invented prefix) into one directory: one file is left of four,
    # or none, when one rank's keep_checkpoint_max removed it under another (seen in a full run, exit 0 or not)
    left = sorted(os.listdir(shared))
    assert "lenet_1-graph.meta" in left and "lenet-3_8.ckpt" not in left, left
    assert ckptnames.series(filter(None, map(ckptnames.parse, left)))["lenet_1"] == ("lenet", 1)
    saved = [name for name in left if name.startswith("lenet_1-") and name.endswith(".ckpt")]
    assert saved in (["lenet_1-3_8.ckpt"], []), left
    warnings = [line for line in result.stderr.splitlines() if line.startswith("dlaunch: warning")]
    if saved:   # the warning names what is there after the run; with nothing there it has nothing to show
        assert warnings == [f"dlaunch: warning: MindSpore checkpoints of prefix 'lenet' were saved into {shared}, "
                            "a directory 4 ranks share (1 file(s) there now, e.g. lenet_1-3_8.ckpt): ranks saving "
                            "one prefix there overwrite each other's files and keep_checkpoint_max deletes other "
                            "ranks' files, and dlaunch ckpt list/--resume do not see them; save into each rank's "
                            "own directory: ModelCheckpoint(directory=os.environ[\"DLAUNCH_CKPT_DIR\"])"]
        assert summary(run_dir)["warnings"] == [warnings[0].removeprefix("dlaunch: ")]
    else:
        assert warnings == [] and summary(run_dir)["warnings"] == []
    assert run_dlaunch("ckpt", "list", run_dir, cwd=tmp).stdout.splitlines()[-1] == "no checkpoints"
