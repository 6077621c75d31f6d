"""launcher.checkpoint with real torch files and real processes: atomic saves under SIGKILL, no overwrites,
rotation, breakpoints (on exceptions and on SIGTERM), resume from the launcher's env, sliced saving."""

import json
import os
import sys
import zipfile

import pytest

from launcher import checkpoint
from launcher.checkpoint import resume
from launcher.observe import ckpt as ckpttool

torch = pytest.importorskip("torch", reason="the checkpoint tests save real torch files (the torch extra)")


def ckpt_of(run):
    return run / "rank_000" / "ckpt"


def labels(run):
    return [step.label for step in resume.scan(str(run))[0]]


def test_save_names_loads_and_leaves_no_temporary(run):
    path = checkpoint.save({"w": torch.arange(4.0), "epoch": 3}, 3, 156)
    assert path == str(ckpt_of(run) / "ckpt-3_156.pt")
    assert sorted(os.listdir(ckpt_of(run))) == ["ckpt-3_156.pt"]
    assert torch.equal(checkpoint.load(path)["w"], torch.arange(4.0))
    assert labels(run) == ["ckpt-3_156"]
    with pytest.raises(ValueError, match="non-negative integers"):
        checkpoint.save({}, -1, 2)
    with pytest.raises(ValueError, match="plain file name"):
        checkpoint.save({}, 1, 2, prefix=".hidden")


def test_an_existing_checkpoint_is_kept_aside_never_overwritten(run, capsys):
    first = checkpoint.save({"attempt": 0}, 2, 20)
    second = checkpoint.save({"attempt": 1}, 2, 20)   # a restarted run re-saving the same step
    assert first == second
    assert checkpoint.load(second) == {"attempt": 1}
    aside = ckpt_of(run) / "superseded" / "ckpt-2_20.pt"
    assert checkpoint.load(str(aside)) == {"attempt": 0}
    checkpoint.save({"attempt": 2}, 2, 20)
    assert checkpoint.load(str(ckpt_of(run) / "superseded" / "ckpt-2_20.1.pt")) == {"attempt": 1}
    assert "already existed; kept the earlier file as" in capsys.readouterr().err
    assert labels(run) == ["ckpt-2_20"]


def test_a_resave_killed_after_keeping_the_earlier_file_does_not_keep_it_twice(run):
    checkpoint.save({"attempt": 0}, 2, 20)
    aside = ckpt_of(run) / "superseded"
    aside.mkdir()
    os.link(ckpt_of(run) / "ckpt-2_20.pt", aside / "ckpt-2_20.pt")   # where a killed re-save stopped
    checkpoint.save({"attempt": 1}, 2, 20)
    assert os.listdir(aside) == ["ckpt-2_20.pt"]
    assert checkpoint.load(str(aside / "ckpt-2_20.pt")) == {"attempt": 0}
    assert checkpoint.load(str(ckpt_of(run) / "ckpt-2_20.pt")) == {"attempt": 1}


def test_the_file_loads_as_a_torch_save_of_the_same_state_would(run):
    model = torch.nn.Linear(3, 2)
    base = torch.arange(20.0)
    state = {"model": model.state_dict(), "view": base[5:9], "base": base, "param": torch.nn.Parameter(torch.ones(2)),
             "bf16": torch.ones(3, dtype=torch.bfloat16), "empty": torch.empty(0), "plain": [1, 2.5, "x", (3, None)]}
    path = checkpoint.save(state, 1, 1)
    reference = run / "reference.pt"
    torch.save(state, reference)

    def records(archive):   # name (without the archive's own prefix) and size of every record
        return [(info.filename.split("/", 1)[1], info.file_size) for info in zipfile.ZipFile(archive).infolist()
                if not info.filename.endswith("serialization_id")]

    assert records(path) == records(reference)
    for how in ({}, {"mmap": True}, {"weights_only": False}):
        loaded = torch.load(path, **how)
        assert loaded["model"]._metadata == state["model"]._metadata
        assert torch.equal(loaded["model"]["weight"], model.weight.detach())
        assert torch.equal(loaded["view"], base[5:9])
        assert loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
        assert type(loaded["param"]) is torch.nn.Parameter and loaded["param"].requires_grad
        assert loaded["bf16"].dtype == torch.bfloat16 and loaded["plain"] == [1, 2.5, "x", (3, None)]


def test_keep_max_keeps_the_newest_of_its_prefix(run):
    checkpoint.save({}, 1, 5, prefix="other")
    for epoch in range(1, 4):
        for step in (5, 10):
            checkpoint.save({"at": (epoch, step)}, epoch, step, keep_max=3)
    assert labels(run) == ["other-1_5", "ckpt-2_10", "ckpt-3_5", "ckpt-3_10"]
    # an older step saved after a restart is not deleted by the save that wrote it
    checkpoint.save({}, 1, 5, keep_max=3)
    assert "ckpt-1_5" in labels(run)
    with pytest.raises(ValueError, match="keep_max"):
        checkpoint.save({}, 9, 9, keep_max=0)


def test_rotation_takes_strategy_files_along(run):
    for step in (1, 2, 3):
        checkpoint.save_sliced({"w": torch.ones(2, 2)}, {"w": 0}, 1, step, keep_max=1)
    assert sorted(os.listdir(ckpt_of(run))) == ["ckpt-1_3.pt", "ckpt-1_3.strategy.json"]


def test_breakpoint_on_exception_is_kept_apart(run):
    model = torch.nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match="boom"):
        with checkpoint.saving_on_exception(lambda: {"model": model.state_dict()}) as here:
            here.epoch, here.step = 2, 7
            raise RuntimeError("boom")
    path = ckpt_of(run) / "breakpoint" / "ckpt_breakpoint-2_7.pt"
    assert here.path == str(path)
    assert torch.equal(checkpoint.load(str(path))["model"]["weight"], model.weight.detach())
    # never picked for resume, never rotated away
    for step in (1, 2, 3):
        checkpoint.save({}, 3, step, keep_max=1)
    assert labels(run) == ["ckpt-3_3"]
    assert path.exists()
    assert [(row["kind"], row["label"]) for row in ckpttool.list_run(str(run))] == \
        [("per-rank", "ckpt-3_3"), ("breakpoint", "ckpt_breakpoint-2_7")]
    # a block that ends normally, or by sys.exit(0), saves nothing
    with checkpoint.saving_on_exception(lambda: {}, 5, 5):
        pass
    with pytest.raises(SystemExit):
        with checkpoint.saving_on_exception(lambda: {}, 6, 6):
            sys.exit(0)
    assert os.listdir(path.parent) == [path.name]


def test_load_and_resume_step_follow_the_launcher_env(run, monkeypatch):
    assert checkpoint.load() is None and checkpoint.resume_step() is None
    path = checkpoint.save({"w": torch.ones(2)}, 3, 156)
    monkeypatch.setenv("DLAUNCH_RESUME_FROM", path)
    monkeypatch.setenv("DLAUNCH_RESUME_STEP", "3_156")
    assert torch.equal(checkpoint.load()["w"], torch.ones(2))
    assert checkpoint.resume_step() == (3, 156)
    monkeypatch.setenv("DLAUNCH_RESUME_STEP", "3-156")
    with pytest.raises(ValueError, match="EPOCH_STEP"):
        checkpoint.resume_step()


def test_ckpt_dir_defaults_to_the_seeds_per_rank_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DLAUNCH_CKPT_DIR", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("RANK_ID", "5")
    assert checkpoint.ckpt_dir() == "./ckpt_5" and (tmp_path / "ckpt_5").is_dir()


def test_save_sliced_writes_a_strategy_beside_each_slice(run, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    full = torch.arange(48.0).reshape(3, 16)
    mine = full[:, 4:8]            # a view: only these 12 numbers may reach the file, not full's storage
    state = {"model": {"w": mine, "b": torch.ones(3)}, "optimizer": {"state": {0: {"buf": mine * 2}}}, "epoch": 1}
    path = checkpoint.save_sliced(state, {"model.w": 1, "optimizer.state.0.buf": -1}, 1, 10)
    doc = json.loads((ckpt_of(run) / "ckpt-1_10.strategy.json").read_text())
    assert doc == {"format": 1, "checkpoint": "ckpt-1_10.pt", "rank": 1, "world_size": 4,
                   "sliced": {name: {"dim": 1, "index": 1, "count": 4, "full_shape": [3, 16], "shape": [3, 4],
                                     "dtype": "float32"} for name in ("model.w", "optimizer.state.0.buf")},
                   "replicated": ["model.b"]}
    loaded = checkpoint.load(path)
    assert torch.equal(loaded["model"]["w"], mine)
    assert loaded["model"]["w"].untyped_storage().nbytes() == 12 * 4
    assert labels(run) == ["ckpt-1_10"]
    with pytest.raises(ValueError, match="does not have: model.nope"):
        checkpoint.save_sliced(state, {"model.nope": 0}, 1, 11)
    with pytest.raises(ValueError, match="not a tensor"):
        checkpoint.save_sliced(state, {"epoch": 0}, 1, 11)


def test_integrated_save_goes_to_the_run_directory_from_rank_0_only(run, monkeypatch):
    path = checkpoint.save_integrated({"w": torch.ones(2)}, 1, 10)
    assert path == str(run / "integrated" / "ckpt-1_10.pt")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert checkpoint.save_integrated({"w": torch.ones(2)}, 1, 20) is None
    assert os.listdir(run / "integrated") == ["ckpt-1_10.pt"]


def test_broadcast_parameters_without_a_process_group_is_a_no_op():
    model = torch.nn.Linear(2, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    checkpoint.broadcast_parameters(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())




def test_a_replicated_save_completes_a_step_that_a_dead_rank_never_saved(run):
    """Data parallel: every rank holds the whole state. Rank 0 saved step 1_25 as a replica on the notice; rank
    1 died without saving it: 1_25 is still complete, rank 1 resuming from rank 0's file. A plain save is not
    enough, and rotation takes the mark along."""
    other = run / "rank_001" / "ckpt"
    other.mkdir(parents=True)
    for rank_ckpt in (ckpt_of(run), other):
        checkpoint.save({"step": 20}, 1, 20, directory=str(rank_ckpt))
    checkpoint.save({"step": 24}, 1, 24)                       # rank 0 only, plain: incomplete
    path = checkpoint.save({"step": 25}, 1, 25, replicated=True)
    assert os.path.exists(path + ".replica")
    step, skipped = resume.resume_point(str(run), 2)
    assert step.label == "ckpt-1_25" and step.files == {0: path, 1: path} and skipped == []
    point = resume.find_resume_point(str(run), 2)
    assert point.files[1] == path
    checkpoint.save({"step": 26}, 1, 26, replicated=True, keep_max=1)
    assert not os.path.exists(path) and not os.path.exists(path + ".replica")


def test_ckpt_list_says_which_ranks_a_replica_covers(run):
    (run / "rank_001" / "ckpt").mkdir(parents=True)
    checkpoint.save({"step": 25}, 1, 25, replicated=True)
    rows = ckpttool.list_run(str(run))
    assert [(r["label"], r["complete"], r["covered"], r["newest_complete"]) for r in rows] == [
        ("ckpt-1_25", True, [1], True)]
    assert "complete (ranks 1 from rank 0's replica), newest (--resume picks it)" in ckpttool.format_list(rows)
