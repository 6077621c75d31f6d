"""persist: a rank's newest complete memory step onto the disk, whole, never a torn or replaced one."""

import fcntl
import os

import torch

from launcher.checkpoint import tier
from launcher.execute.memory.persist import newest, persist
from tests import memslots


def test_the_newest_step_is_copied_whole_under_its_dlaunch_name(tmp_path):
    slots, ckpt = str(tmp_path / "slots"), str(tmp_path / "ckpt")
    memslots.save(slots, {"w": torch.arange(1000.0)}, 0, 1)
    big = {"w": torch.arange(5000.0)}
    record = memslots.save(slots, big, 0, 2)
    memslots.save(slots, {"w": torch.arange(10.0)}, 0, 3, commit=False)   # slot 0 overwritten, never committed
    done = persist(0, slots, ckpt)
    assert done is not None and done.record == record and done.path == os.path.join(ckpt, "ckpt-0_2.pt")
    assert os.path.getsize(done.path) == record.length
    assert torch.equal(torch.load(done.path)["w"], big["w"])
    assert persist(0, slots, ckpt) is None   # on disk already: not copied again
    assert sorted(os.listdir(ckpt)) == ["ckpt-0_2.pt"]   # no temporary left


def test_a_step_being_written_or_torn_is_never_persisted(tmp_path):
    slots, ckpt = str(tmp_path / "slots"), str(tmp_path / "ckpt")
    record = memslots.save(slots, {"w": torch.zeros(100)}, 0, 1)
    fd = os.open(tier.slot_path(slots, record.slot), os.O_RDWR)
    try:   # a writer holds the slot (a rank that ignores the record): nothing is read
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert persist(0, slots, ckpt) is None
    finally:
        os.close(fd)
    # the slot's end no longer says its generation (overwritten in place without a new record)
    with open(tier.slot_path(slots, record.slot), "r+b") as fh:
        fh.seek(record.length - 1)
        fh.write(b"9")
    assert persist(0, slots, ckpt) is None and not os.path.exists(ckpt + "/ckpt-0_1.pt")
    # a record that names more bytes than the slot has
    tier.write_record(slots, tier.Record(**{**record.to_json(), "length": record.length + 10}))
    assert persist(0, slots, ckpt) is None


def test_rotation_and_the_replica_mark_follow_the_record(tmp_path):
    slots, ckpt = str(tmp_path / "slots"), str(tmp_path / "ckpt")
    for step in range(1, 4):
        memslots.save(slots, {"s": step}, 0, step, keep_max=2, replicated=True)
        assert persist(0, slots, ckpt) is not None
    names = sorted(os.listdir(ckpt))
    assert names == ["ckpt-0_2.pt", "ckpt-0_2.pt.replica", "ckpt-0_3.pt", "ckpt-0_3.pt.replica"]


def test_no_record_or_an_unreadable_one_is_nothing(tmp_path):
    slots = tmp_path / "slots"
    slots.mkdir()
    assert newest(str(slots)) is None and persist(0, str(slots), str(tmp_path / "ckpt")) is None
    (slots / tier.NEWEST_FILE).write_text('{"format": 1, "slot": 7}')
    assert newest(str(slots)) is None and persist(0, str(slots), str(tmp_path / "ckpt")) is None


def test_a_ranks_own_memory_save_is_persisted_byte_for_byte(tmp_path, monkeypatch):
    from launcher import checkpoint

    slots = tmp_path / "slots"
    slots.mkdir()
    for name in ("DLAUNCH_MEMORY_BUDGET", "DLAUNCH_RESUME_FROM"):
        monkeypatch.delenv(name, raising=False)
    # the slots' writer is this process (checkpoint.memory names it in the environment): undone after the test,
    # or every dlaunch a later test starts would pass it on and its ranks would not write their slots
    monkeypatch.setenv("DLAUNCH_MEMORY_OWNER", str(os.getpid()))
    monkeypatch.setenv("DLAUNCH_MEMORY_SLOTS", str(slots))
    monkeypatch.setenv("DLAUNCH_CKPT_DIR", str(tmp_path / "own"))
    state = {"w": torch.arange(4096.0), "step": 9}
    checkpoint.save(state, 1, 9, memory=True, persist=False)
    done = persist(0, str(slots), str(tmp_path / "ckpt"))
    assert done is not None and done.record.name == "ckpt-1_9.pt"
    assert torch.equal(torch.load(done.path)["w"], state["w"])
