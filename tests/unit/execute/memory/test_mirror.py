"""mirror: finished files copied with their paths, torn ones never, deletions after the newer copies, restore."""

import io
import os

import torch

from launcher.execute.memory import mirror as mirror_module
from launcher.execute.memory.mirror import Mirror, copy_file, listing


def torch_bytes(value) -> bytes:
    buffer = io.BytesIO()
    torch.save({"v": value}, buffer)
    return buffer.getvalue()


def test_a_file_is_copied_once_unchanged_between_two_looks_and_not_while_open(tmp_path, monkeypatch):
    """A file whose end cannot be told (HF's trainer_state.json) waits one look unchanged; a torch archive is
    copied at the first look that finds it whole; neither while a rank has it open for writing."""
    source, target = tmp_path / "files", tmp_path / "ckpt" / "memory"
    (source / "checkpoint-1").mkdir(parents=True)
    (source / "checkpoint-1" / "trainer_state.json").write_text('{"global_step": 1}')
    mirror = Mirror(str(source), str(target))
    assert mirror.sync(set()) == []   # first look: seen, not yet known unchanged
    busy = {str(source / "checkpoint-1" / "trainer_state.json")}
    assert mirror.sync(busy) == []    # open for writing by a rank: not copied
    assert mirror.sync(set()) == ["checkpoint-1/trainer_state.json"]
    assert mirror.sync(set()) == []   # copied already
    (source / "checkpoint-1" / "model.pt").write_bytes(torch_bytes(1))
    read = []
    monkeypatch.setattr(mirror_module, "wholeness", lambda path: read.append(path) or True)
    assert mirror.sync({str(source / "checkpoint-1" / "model.pt")}) == []
    assert read == []   # a file a rank writes is not even opened
    monkeypatch.undo()
    assert mirror.sync(set()) == ["checkpoint-1/model.pt"]   # whole by its end: no second look needed
    assert torch.load(target / "checkpoint-1" / "model.pt")["v"] == 1


def test_a_checkpoint_rewritten_at_every_look_is_mirrored_at_every_look(tmp_path):
    """nanoGPT rewrites ckpt.pt in place every iteration, never unchanged for half a second: each look copies the
    whole one it finds, so a kill in the middle of the next save loses one look's steps, not the attempt's."""
    source, target = tmp_path / "files", tmp_path / "memory"
    source.mkdir()
    mirror = Mirror(str(source), str(target))
    for step in range(1, 4):
        (source / "ckpt.pt").write_bytes(torch_bytes(step))
        assert mirror.sync(set()) == ["ckpt.pt"]
        assert torch.load(target / "ckpt.pt")["v"] == step
    (source / "ckpt.pt").write_bytes(torch_bytes(4)[:100])   # killed half-way through step 4's save
    assert mirror.sync(set()) == [] and mirror.restore() == ["ckpt.pt"]
    assert torch.load(source / "ckpt.pt")["v"] == 3


def test_a_torn_file_is_never_mirrored_and_deletions_wait_for_the_newer_copies(tmp_path):
    source, target = tmp_path / "files", tmp_path / "memory"
    source.mkdir()
    (source / "checkpoint-1").mkdir()
    (source / "checkpoint-1" / "model.pt").write_bytes(torch_bytes(1))
    mirror = Mirror(str(source), str(target))
    mirror.sync(set(), settled=True)
    # the rank rotates: checkpoint-2 being written (torn), checkpoint-1 deleted
    (source / "checkpoint-2").mkdir()
    (source / "checkpoint-2" / "model.pt").write_bytes(torch_bytes(2)[:100])
    (source / "checkpoint-1" / "model.pt").unlink()
    (source / "checkpoint-1").rmdir()
    mirror.sync(set())
    mirror.sync(set())
    assert sorted(listing(str(target))) == ["checkpoint-1/model.pt"]   # the only whole one stays
    (source / "checkpoint-2" / "model.pt").write_bytes(torch_bytes(2))
    assert mirror.sync(set()) == ["checkpoint-2/model.pt"]
    assert sorted(os.listdir(target)) == ["checkpoint-2"]   # deleted once the newer one is on disk


def test_settled_copies_at_once_and_a_torn_file_left_by_a_killed_rank_is_restored(tmp_path):
    source, target = tmp_path / "files", tmp_path / "memory"
    source.mkdir()
    (source / "ckpt.pt").write_bytes(torch_bytes(5))
    mirror = Mirror(str(source), str(target))
    assert mirror.sync(set(), settled=True) == ["ckpt.pt"]
    (source / "ckpt.pt").write_bytes(torch_bytes(6)[:50])   # killed mid torch.save, in place
    assert mirror.sync(set(), settled=True) == []
    assert mirror.restore() == ["ckpt.pt"]
    assert torch.load(source / "ckpt.pt")["v"] == 5
    # a fresh memory directory (a new host, a new dlaunch) filled from the mirror
    fresh = Mirror(str(tmp_path / "fresh"), str(target))
    os.makedirs(fresh.source)
    assert fresh.restore() == ["ckpt.pt"] and fresh.sync(set(), settled=True) == []


def test_a_copy_is_dropped_when_its_source_changed_meanwhile(tmp_path):
    (tmp_path / "a").write_text("one")
    stale = (0, 0, 0)
    assert not copy_file(str(tmp_path / "a"), str(tmp_path / "out" / "a"), stale)
    assert listing(str(tmp_path / "out")) == {}


def test_a_restore_in_place_leaves_a_file_a_running_rank_is_writing(tmp_path):
    """Before a rank restarts alone the others run on: a file one of them has open for writing looks torn (its save
    is in flight) and is its own, never overwritten from the mirror; the same file, once closed, is restored."""
    source, target = tmp_path / "files", tmp_path / "memory"
    source.mkdir()
    (source / "ckpt.pt").write_bytes(torch_bytes(5))
    mirror = Mirror(str(source), str(target))
    assert mirror.sync(set(), settled=True) == ["ckpt.pt"]
    (source / "ckpt.pt").write_bytes(torch_bytes(6)[:50])
    assert mirror.restore(busy={str(source / "ckpt.pt")}) == []
    assert len((source / "ckpt.pt").read_bytes()) == 50
    assert mirror.restore(busy=set()) == ["ckpt.pt"] and torch.load(source / "ckpt.pt")["v"] == 5


def test_a_source_rewritten_once_it_was_read_is_still_copied_as_read(tmp_path, monkeypatch):
    """A 32 MB ckpt.pt rewritten every 50 ms was never mirrored: the source was checked unchanged only after the
    copy's fsync, which took longer than a step. Only the read must fit between two saves."""
    (tmp_path / "ckpt.pt").write_bytes(torch_bytes(1))
    sig = listing(str(tmp_path))["ckpt.pt"]

    def fsync_while_the_rank_saves_again(path):
        (tmp_path / "ckpt.pt").write_bytes(torch_bytes(2))   # the next save, during the copy's fsync

    monkeypatch.setattr(mirror_module, "fsync_path", fsync_while_the_rank_saves_again)
    assert copy_file(str(tmp_path / "ckpt.pt"), str(tmp_path / "out" / "ckpt.pt"), sig)
    assert torch.load(tmp_path / "out" / "ckpt.pt")["v"] == 1
