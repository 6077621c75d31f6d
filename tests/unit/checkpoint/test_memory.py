"""checkpoint.memory in this process: save(..., memory=True) into two slots (alternating, generations, the commit
record and its flags), a locked slot skipped, disk instead when no slots / over budget / out of room / not the
owner, a failed save leaving the previous step newest, and load() from a verified slot (a copy) or else the disk."""

import errno
import fcntl
import json
import os

import pytest

from launcher import checkpoint
from launcher.checkpoint import memory, tier

torch = pytest.importorskip("torch", reason="the memory tests save real torch archives (the torch extra)")


@pytest.fixture
def slots(run, tmp_path, monkeypatch):
    """This process as a rank under --memory-ckpt: its slots directory, no saves made yet."""
    directory = tmp_path / "memory" / "rank_000" / "slots"
    directory.mkdir(parents=True)
    for name in ("DLAUNCH_MEMORY_BUDGET", "DLAUNCH_MEMORY_PERSIST_EVERY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DLAUNCH_MEMORY_SLOTS", str(directory))
    monkeypatch.setenv(memory.OWNER_ENV, str(os.getpid()))
    monkeypatch.setattr(memory, "_slots", None)
    monkeypatch.setattr(memory, "_said", set())
    return directory


def state_at(step):
    base = torch.arange(12.0) + step
    return {"w": torch.full((64, 64), float(step)), "base": base, "view": base[2:6], "step": step,
            "param": torch.nn.Parameter(torch.ones(3) * step), "empty": torch.empty(0),
            "bf16": torch.ones(4, dtype=torch.bfloat16) * step}


def same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if torch.is_tensor(a[key]):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def newest(directory):
    return tier.read_record(str(directory))


def test_saves_alternate_slots_and_commit_each_step(slots, run):
    paths = [checkpoint.save(state_at(step), 1, step, memory=True, persist=False) for step in range(3)]
    assert paths == [str(slots / "slot-0"), str(slots / "slot-1"), str(slots / "slot-0")]
    record = newest(slots)
    assert (record.slot, record.generation, record.epoch, record.step) == (0, 3, 1, 2)
    assert record.name == "ckpt-1_2.pt" and record.prefix == "ckpt"
    assert os.path.getsize(paths[-1]) == record.length
    assert open(paths[-1], "rb").read().endswith(tier.comment(3))
    for options in (dict(), dict(mmap=True), dict(weights_only=True)):
        same(torch.load(paths[-1], **options), state_at(2))
    same(torch.load(paths[1], weights_only=True), state_at(1))   # the other slot: the step before
    assert os.listdir(run / "rank_000" / "ckpt") == []            # nothing on disk: dlaunch persists
    assert checkpoint.memory_step() == (1, 2)


def test_a_state_that_changes_shape_is_laid_out_anew(slots):
    checkpoint.save({"w": torch.ones(1000)}, 0, 1, memory=True)
    checkpoint.save({"w": torch.ones(10)}, 0, 2, memory=True)
    path = checkpoint.save({"a": torch.ones(3000), "b": torch.zeros(2)}, 0, 3, memory=True)
    loaded = torch.load(path, weights_only=True)
    assert torch.equal(loaded["a"], torch.ones(3000)) and torch.equal(loaded["b"], torch.zeros(2))


def persisted_by_dlaunch(directory, run):
    """What dlaunch's keeper does for a step the rank asked to persist: its file in the rank's checkpoint directory."""
    record = newest(directory)
    if record.persist:
        (run / "rank_000" / "ckpt" / record.name).write_bytes(b"persisted")


def test_persist_steps_that_are_multiples_of_n_and_flags_carry(slots, run, monkeypatch):
    monkeypatch.setenv("DLAUNCH_MEMORY_PERSIST_EVERY", "3")
    flags = []
    for step in range(1, 8):
        checkpoint.save({"step": step}, 0, step, memory=True)
        flags.append(newest(slots).persist)
        persisted_by_dlaunch(slots, run)
    assert flags == [False, False, True, False, False, True, False]   # steps 3 and 6: the same on every rank
    checkpoint.save({"step": 8}, 0, 8, memory=True, persist=True, keep_max=4, replicated=True)
    record = newest(slots)
    assert (record.persist, record.keep_max, record.replicated) == (True, 4, True)
    persisted_by_dlaunch(slots, run)
    checkpoint.save({"step": 9}, 0, 9, memory=True, persist=False)
    assert newest(slots).persist is False


def test_a_step_to_persist_is_not_overwritten_before_dlaunch_has_it_on_disk(slots, run, monkeypatch, capsys):
    """The rank asked dlaunch to persist step 3 (slot 0); until its file is in the checkpoint directory, a save that
    would write slot 0 again is skipped, and dlaunch finds step 3 in persist.json however many saves came since."""
    monkeypatch.setenv("DLAUNCH_MEMORY_PERSIST_EVERY", "3")
    assert checkpoint.save({"step": 3}, 0, 3, memory=True) == str(slots / "slot-0")
    assert checkpoint.save({"step": 4}, 0, 4, memory=True) == str(slots / "slot-1")
    assert checkpoint.save({"step": 5}, 0, 5, memory=True) is None   # slot 0 still holds step 3, not yet on disk
    assert tier.read_record(str(slots), tier.PENDING_FILE).step == 3 and newest(slots).step == 4
    assert torch.load(slots / "slot-0") == {"step": 3}
    (run / "rank_000" / "ckpt" / "ckpt-0_3.pt").write_bytes(b"persisted")   # dlaunch has it now
    assert checkpoint.save({"step": 6}, 0, 6, memory=True) == str(slots / "slot-0")
    err = capsys.readouterr().err
    assert err.count("dlaunch has not yet persisted step 0_3") == 1


def test_a_slot_dlaunch_holds_is_skipped_and_said_once(slots, capsys):
    checkpoint.save({"step": 1}, 0, 1, memory=True)
    checkpoint.save({"step": 2}, 0, 2, memory=True)
    fd = os.open(slots / "slot-0", os.O_RDONLY)      # dlaunch still persisting step 1, in the slot saved next
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        assert checkpoint.save({"step": 3}, 0, 3, memory=True) is None
        assert checkpoint.save({"step": 4}, 0, 4, memory=True) is None
        assert torch.load(slots / "slot-0") == {"step": 1}
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert err.count("skipped") == 1 and "slot-0" in err
    assert newest(slots).step == 2
    assert checkpoint.save({"step": 5}, 0, 5, memory=True) == str(slots / "slot-0")


def test_without_slots_memory_saves_go_to_disk_with_one_line(run, monkeypatch, capsys):
    monkeypatch.delenv("DLAUNCH_MEMORY_SLOTS", raising=False)
    monkeypatch.setattr(memory, "_said", set())
    first = checkpoint.save({"step": 1}, 0, 1, memory=True)
    checkpoint.save({"step": 2}, 0, 2, memory=True)
    assert first == str(run / "rank_000" / "ckpt" / "ckpt-0_1.pt")
    assert torch.load(first) == {"step": 1}
    err = capsys.readouterr().err
    assert err.count("DLAUNCH_MEMORY_SLOTS is not set") == 1 and first in err


def test_over_the_budget_the_step_goes_to_disk_naming_both(slots, run, monkeypatch, capsys):
    monkeypatch.setenv("DLAUNCH_MEMORY_BUDGET", str(2 * 64 * 1024))
    assert checkpoint.save({"small": torch.ones(10)}, 0, 1, memory=True) == str(slots / "slot-0")
    path = checkpoint.save({"big": torch.ones(100_000)}, 0, 2, memory=True)
    assert path == str(run / "rank_000" / "ckpt" / "ckpt-0_2.pt")
    assert torch.equal(torch.load(path)["big"], torch.ones(100_000))
    err = capsys.readouterr().err
    assert "DLAUNCH_MEMORY_BUDGET=131072" in err and path in err
    assert newest(slots).step == 1 and os.path.getsize(slots / "slot-1") == 0   # the failed slot gave its memory back


def test_a_full_memory_file_system_sends_the_step_to_disk(slots, run, monkeypatch, capsys):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    path = checkpoint.save({"w": torch.ones(100)}, 0, 1, memory=True)
    assert path == str(run / "rank_000" / "ckpt" / "ckpt-0_1.pt")
    err = capsys.readouterr().err
    assert "out of memory" in err and str(slots) in err and path in err
    assert newest(slots) is None


def test_a_child_of_the_rank_never_writes_its_slots(slots, run, monkeypatch, capsys):
    monkeypatch.setenv(memory.OWNER_ENV, str(os.getpid() + 1))   # as a spawned or forked child sees it
    path = checkpoint.save({"step": 1}, 0, 1, memory=True)
    assert path == str(run / "rank_000" / "ckpt" / "ckpt-0_1.pt")
    assert "child process" in capsys.readouterr().err
    assert sorted(os.listdir(slots)) == []


def test_a_failed_save_leaves_the_previous_step_newest_and_whole(slots):
    checkpoint.save(state_at(1), 0, 1, memory=True)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle this")

    with pytest.raises(RuntimeError, match="cannot pickle"):
        checkpoint.save({**state_at(2), "bad": Unpicklable()}, 0, 2, memory=True)
    record = newest(slots)
    assert (record.slot, record.step) == (0, 1)
    same(torch.load(slots / "slot-0", weights_only=True), state_at(1))
    assert checkpoint.save(state_at(3), 0, 3, memory=True) == str(slots / "slot-1")


def test_load_reads_the_resumed_step_from_memory_as_a_copy(slots, run, monkeypatch, capsys):
    checkpoint.save(state_at(4), 2, 4, memory=True)
    monkeypatch.setenv("DLAUNCH_RESUME_FROM", str(run / "rank_000" / "ckpt" / "ckpt-2_4.pt"))   # not on disk
    loaded = checkpoint.load()
    same(loaded, state_at(4))
    assert "from memory" in capsys.readouterr().err
    checkpoint.save(state_at(5), 2, 5, memory=True)
    checkpoint.save(state_at(6), 2, 6, memory=True)       # slot-0 overwritten: the loaded state must not change
    same(loaded, state_at(4))


def test_a_copied_load_keeps_views_of_one_storage_and_leaves_no_mapping_of_the_slot(slots, run, monkeypatch):
    """The copy is made from the slot mapped (one copy, not torch.load's reads): the mapping must end with the
    load, and a view must stay a view of its base (tied weights stay tied)."""
    def mappings_of_the_slots():   # the saver maps its slots too: only the count may not grow
        with open("/proc/self/maps") as maps:
            return sum(str(slots) in line for line in maps)

    checkpoint.save(state_at(4), 2, 4, memory=True)
    monkeypatch.setenv("DLAUNCH_RESUME_FROM", str(run / "rank_000" / "ckpt" / "ckpt-2_4.pt"))
    before = mappings_of_the_slots()
    loaded = checkpoint.load()
    assert mappings_of_the_slots() == before
    assert loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    loaded["base"][3] = -1.0
    assert loaded["view"][1].item() == -1.0


def test_load_reads_the_disk_when_memory_is_not_that_step_or_does_not_verify(slots, run, monkeypatch):
    on_disk = checkpoint.save({"from": "disk"}, 2, 4)
    monkeypatch.setenv("DLAUNCH_RESUME_FROM", on_disk)
    checkpoint.save({"from": "memory, step 3"}, 2, 3, memory=True)
    assert checkpoint.load() == {"from": "disk"}          # another step in memory
    checkpoint.save({"from": "memory"}, 2, 4, memory=True)
    assert checkpoint.load() == {"from": "memory"}
    slot = slots / f"slot-{newest(slots).slot}"
    fd = os.open(slot, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)                    # being written
        assert checkpoint.load() == {"from": "disk"}
    finally:
        os.close(fd)
    record = json.loads((slots / "newest.json").read_text())
    tier.write_record(str(slots), tier.Record(**{**record, "generation": record["generation"] + 5}))
    assert checkpoint.load() == {"from": "disk"}          # the archive's mark is another generation's
    tier.write_record(str(slots), tier.Record(**record))
    with open(slot, "r+b") as fh:
        fh.truncate(record["length"] - 1)                 # torn
    assert checkpoint.load() == {"from": "disk"}
    (slots / "newest.json").write_text("{not json")
    assert checkpoint.load() == {"from": "disk"} and checkpoint.memory_step() is None
    assert checkpoint.load(on_disk) == {"from": "disk"}


def test_memory_step_without_the_tier_is_none(monkeypatch):
    monkeypatch.delenv("DLAUNCH_MEMORY_SLOTS", raising=False)
    assert checkpoint.memory_step() is None


@pytest.mark.parametrize("restarted", [True, False])
def test_a_mapped_load_retires_the_slot_so_later_saves_never_reach_it(slots, run, monkeypatch, restarted):
    checkpoint.save(state_at(1), 0, 1, memory=True)
    checkpoint.save(state_at(2), 0, 2, memory=True)        # slot-1, the newest
    if restarted:
        monkeypatch.setattr(memory, "_slots", None)        # a new process of the rank
    monkeypatch.setattr(memory, "_retired", set())
    monkeypatch.setenv("DLAUNCH_RESUME_FROM", str(run / "rank_000" / "ckpt" / "ckpt-0_2.pt"))
    loaded = checkpoint.load(map_memory=True)
    same(loaded, state_at(2))
    inode = os.stat(slots / "slot-1").st_ino
    for step in range(3, 7):                                # slot-1 written twice more
        checkpoint.save(state_at(step), 0, step, memory=True)
    same(loaded, state_at(2))
    assert os.stat(slots / "slot-1").st_ino != inode
    same(torch.load(slots / "slot-1", weights_only=True), state_at(6))
    loaded["w"].add_(1)                                     # copy-on-write: the slots are untouched
    same(torch.load(slots / "slot-0", weights_only=True), state_at(5))
    assert [name for name in os.listdir(slots) if name.startswith(".")] == []


def test_slots_that_are_gone_send_the_step_to_disk(slots, run, capsys):
    slots.rmdir()                                           # dlaunch freed the area, say
    path = checkpoint.save({"step": 1}, 0, 1, memory=True)
    assert path == str(run / "rank_000" / "ckpt" / "ckpt-0_1.pt")
    assert torch.load(path) == {"step": 1}
    err = capsys.readouterr().err
    assert "could not save epoch 0 step 1 into memory" in err and path in err


def test_after_fork_the_parent_owns_the_slots(slots, monkeypatch):
    monkeypatch.delenv(memory.OWNER_ENV)
    memory._forget_in_child()                               # what os.fork runs in the child
    assert os.environ[memory.OWNER_ENV] == str(os.getppid()) and memory._slots is None
    assert not memory._is_owner()


def test_a_bad_keep_max_is_refused_before_anything_is_written(slots):
    with pytest.raises(ValueError, match="keep_max"):
        checkpoint.save({"step": 1}, 0, 1, memory=True, keep_max=0)
    assert os.listdir(slots) == []
