"""observe.memory: each rank's newest memory step beside the disk's; complete when every rank has it in one."""

from types import SimpleNamespace

from launcher.checkpoint import tier
from launcher.checkpoint.resume import Step
from launcher.observe.memory import memory_rows, memory_steps, memory_view, newest_across_tiers, status_line
from tests import memslots


def test_a_step_is_complete_when_every_rank_has_it_in_memory_or_on_disk(tmp_path):
    slots = {rank: str(tmp_path / f"r{rank}") for rank in range(3)}
    memslots.save(slots[0], {"s": 5}, 0, 5)
    memslots.save(slots[1], {"s": 5}, 0, 5)
    memslots.save(slots[2], {"s": 4}, 0, 4)   # killed before its step 5
    run = SimpleNamespace(run_dir=str(tmp_path / "run"), world_size=3, plans={"": {"ranks": [
        {"rank": rank, "env": {"DLAUNCH_MEMORY_SLOTS": path}} for rank, path in slots.items()] + [
        {"rank": 9, "env": {}}]}})
    memory = memory_steps(run)
    assert {rank: record.step for rank, record in memory.items()} == {0: 5, 1: 5, 2: 4}
    disk = [Step("ckpt", 0, 4, files={0: "a", 1: "b"}), Step("ckpt", 0, 5, files={2: "c"})]
    assert newest_across_tiers(memory, disk, 3) == "ckpt-0_5"   # rank 2's step 5 is on disk
    assert newest_across_tiers(memory, disk[:1], 3) == "ckpt-0_4"
    assert newest_across_tiers(memory, [], 3) is None
    rows = memory_rows(memory, disk[:1], 3)
    assert [(row["label"], row["ranks"], row["missing"], row["complete"]) for row in rows] == [
        ("ckpt-0_4", [2], [], True), ("ckpt-0_5", [0, 1], [2], False)]
    view = memory_view(run)
    assert view == {"ranks": {"0": "ckpt-0_5", "1": "ckpt-0_5", "2": "ckpt-0_4"}, "newest_on_disk": None,
                    "newest_complete": None}   # this run's disk has nothing: no step every rank holds
    assert status_line(view) == ("memory tier: newest step per rank 0: ckpt-0_5, 1: ckpt-0_5, 2: ckpt-0_4; newest "
                                 "complete in memory or on disk: none (on disk alone: none)")
    assert status_line(None) is None


def test_a_run_without_the_tier_or_whose_area_is_gone_shows_none(tmp_path):
    run = SimpleNamespace(run_dir=str(tmp_path), world_size=1, plans={"": {"ranks": [
        {"rank": 0, "env": {"DLAUNCH_MEMORY_SLOTS": tier.slots_dir(str(tmp_path / "gone"), 0)}}]}})
    assert memory_steps(run) == {} and memory_view(run) is None
