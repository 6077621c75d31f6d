"""keeper: the area made and freed, persisting in the background and at an attempt's end, orphans rescued."""

import os
from types import SimpleNamespace

import torch

from launcher.base.waiting import until
from launcher.checkpoint import tier
from launcher.contract import MEMORY_DIR_ENV, MEMORY_SLOTS_ENV
from launcher.execute.memory import area as areas
from launcher.execute.memory.keeper import MemoryKeeper, rescue
from tests import memslots


def plan_for(tmp_path, run_id="run-1", pid=None, ranks=(0, 1)):
    root, run_dir = tmp_path / "shm", tmp_path / "runs" / run_id
    root.mkdir(exist_ok=True)
    area = str(root / tier.area_name(run_id, pid or os.getpid()))
    specs = []
    for rank in ranks:
        ckpt = run_dir / f"rank_{rank:03d}" / "ckpt"
        ckpt.mkdir(parents=True, exist_ok=True)
        specs.append(SimpleNamespace(rank=rank, ckpt_dir=str(ckpt), env={
            MEMORY_SLOTS_ENV: tier.slots_dir(area, rank), MEMORY_DIR_ENV: tier.files_dir(area, rank)}))
    return SimpleNamespace(run_id=run_id, run_dir=str(run_dir), ranks=specs), str(root), area


def test_an_attempt_is_kept_from_begin_to_close(tmp_path):
    plan, root, area = plan_for(tmp_path)
    said = []
    keeper = MemoryKeeper(root, None, log=said.append)
    keeper.begin(plan)
    assert os.path.isdir(tier.slots_dir(area, 1))
    ckpt0, ckpt1 = plan.ranks[0].ckpt_dir, plan.ranks[1].ckpt_dir
    memslots.save(tier.slots_dir(area, 0), {"step": 1}, 0, 1, persist=True)   # asked for: persisted meanwhile
    assert until(lambda: os.path.exists(f"{ckpt0}/ckpt-0_1.pt"), 30, 0.05)
    memslots.save(tier.slots_dir(area, 0), {"step": 2}, 0, 2)
    memslots.save(tier.slots_dir(area, 1), {"step": 2}, 0, 2)
    with open(os.path.join(tier.files_dir(area, 1), "ckpt.pt"), "wb") as fh:
        torch.save({"step": 2}, fh)
    keeper.end(plan)   # every rank stopped: the newest steps persisted, the mirror finished
    assert os.path.exists(f"{ckpt0}/ckpt-0_2.pt") and torch.load(f"{ckpt1}/ckpt-0_2.pt")["step"] == 2
    assert torch.load(f"{ckpt1}/memory/ckpt.pt")["step"] == 2
    assert any("rank 1: persisted its memory step 0_2" in line for line in said)
    # the next attempt: rank 1 killed mid-save left a torn file in memory; it is whole again before it starts
    with open(os.path.join(tier.files_dir(area, 1), "ckpt.pt"), "r+b") as fh:
        fh.truncate(40)
    keeper.begin(plan)
    assert torch.load(os.path.join(tier.files_dir(area, 1), "ckpt.pt"))["step"] == 2
    keeper.close()
    assert not os.path.exists(area)



def test_a_file_closed_after_writing_is_mirrored_at_once_not_at_the_next_look(tmp_path, monkeypatch):
    """nanoGPT rewrites ckpt.pt in place every iteration: a kill in the middle of a save leaves only the mirror's
    copy, so the mirror follows each finished save as it closes, not a half-second clock (here: an hour)."""
    from launcher.execute.memory import keeper as keeper_module

    monkeypatch.setattr(keeper_module, "LOOK", 3600.0)
    plan, root, area = plan_for(tmp_path)
    keeper = MemoryKeeper(root, None, log=lambda line: None)
    keeper.begin(plan)
    try:
        mirrored = os.path.join(plan.ranks[1].ckpt_dir, "memory", "ckpt.pt")
        for step in (1, 2, 3):
            with open(os.path.join(tier.files_dir(area, 1), "ckpt.pt"), "wb") as fh:
                torch.save({"step": step}, fh)
            assert until(lambda step=step: os.path.exists(mirrored) and torch.load(mirrored)["step"] == step, 30,
                         0.05), step
    finally:
        keeper.close()

def test_a_dead_launchers_area_is_persisted_then_freed_by_the_next(tmp_path):
    plan, root, _ = plan_for(tmp_path)
    _, _, dead = plan_for(tmp_path, pid=4194000)
    areas.create(dead, [0, 1], plan.run_dir)
    with open(os.path.join(dead, tier.OWNER_FILE), "w") as fh:
        fh.write("4194000 1\n")
    memslots.save(tier.slots_dir(dead, 0), {"step": 7}, 0, 7)
    with open(os.path.join(tier.files_dir(dead, 1), "ckpt.pt"), "wb") as fh:
        torch.save({"step": 7}, fh)
    said = []
    keeper = MemoryKeeper(root, None, log=said.append)
    keeper.begin(plan)
    try:
        assert not os.path.exists(dead)
        assert os.path.exists(f"{plan.ranks[0].ckpt_dir}/ckpt-0_7.pt")
        assert torch.load(os.path.join(tier.files_dir(keeper.area, 1), "ckpt.pt"))["step"] == 7   # restored
        assert any("freed the memory area" in line and "persisting 2 file(s)" in line for line in said)
    finally:
        keeper.close()


def test_an_orphan_goes_to_its_own_run_and_one_whose_run_is_gone_is_freed(tmp_path):
    plan, _, _ = plan_for(tmp_path)
    other, _, dead = plan_for(tmp_path, run_id="run-2", pid=4194001)
    areas.create(dead, [0], other.run_dir)
    memslots.save(tier.slots_dir(dead, 0), {"step": 3}, 0, 3)
    said = []
    assert rescue(dead, said.append) == [f"{other.ranks[0].ckpt_dir}/ckpt-0_3.pt"] and not os.path.exists(dead)
    assert os.listdir(plan.ranks[0].ckpt_dir) == []
    areas.create(dead, [0], str(tmp_path / "deleted-run"))
    assert rescue(dead, said.append) == [] and not os.path.exists(dead)
    assert said[-1].endswith("is not here: nothing persisted)")


def test_an_area_that_cannot_be_written_is_kept_and_said(tmp_path):
    plan, root, area = plan_for(tmp_path, ranks=(0,))
    said = []
    keeper = MemoryKeeper(root, None, log=said.append)
    keeper.begin(plan)
    memslots.save(tier.slots_dir(area, 0), {"step": 4}, 0, 4)
    ckpt = plan.ranks[0].ckpt_dir
    os.rmdir(ckpt)
    with open(ckpt, "w") as fh:   # the disk refuses the step (a full disk refuses with ENOSPC alike)
        fh.write("")
    keeper.close()
    assert os.path.isdir(area) and any("cannot persist" in line for line in said)
    assert any(f"the memory area {area} is kept" in line for line in said), said
    assert rescue(area, said.append) is None and os.path.isdir(area)   # prune keeps it too, and says so
    os.unlink(ckpt)
    os.mkdir(ckpt)
    assert rescue(area, said.append) == [f"{ckpt}/ckpt-0_4.pt"] and not os.path.exists(area)


def test_a_root_smaller_than_the_budget_is_said_with_the_disk_path(tmp_path):
    plan, root, _ = plan_for(tmp_path)
    said = []
    keeper = MemoryKeeper(root, 2**60, log=said.append)
    keeper.begin(plan)
    keeper.close()
    assert any("less than the budget needs" in line and plan.run_dir in line for line in said)


def test_ranks_stopped_one_save_apart_share_a_step_on_disk(tmp_path):
    """Rank 0 saved step 3, rank 1 was killed before its save of step 3: at the attempt's end dlaunch persists
    each rank's newest step and the one before it (still whole in the other slot), so step 2 is on both."""
    plan, root, area = plan_for(tmp_path)
    keeper = MemoryKeeper(root, None, log=lambda line: None)
    keeper.begin(plan)
    for step in (1, 2, 3):
        memslots.save(tier.slots_dir(area, 0), {"step": step}, 0, step)
    for step in (1, 2):
        memslots.save(tier.slots_dir(area, 1), {"step": step}, 0, step)
    memslots.save(tier.slots_dir(area, 1), {"step": 3}, 0, 3, cut=40, commit=False)   # killed while writing
    keeper.end()
    disk = [sorted(os.listdir(spec.ckpt_dir)) for spec in plan.ranks]
    assert "ckpt-0_2.pt" in disk[0] and "ckpt-0_3.pt" in disk[0]
    assert "ckpt-0_2.pt" in disk[1] and "ckpt-0_3.pt" not in disk[1]   # the torn step 3 is never persisted
    assert "ckpt-0_1.pt" not in disk[1]   # its previous slot was being written: not whole, not persisted
    assert torch.load(os.path.join(plan.ranks[0].ckpt_dir, "ckpt-0_2.pt")) == {"step": 2}
    keeper.close()
