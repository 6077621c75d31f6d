"""store: one function puts a torch state or a ready file's bytes on the disk, with the same guarantees."""

import os

import torch

from launcher.checkpoint.store import range_writer, store, store_file


def test_a_state_and_a_files_bytes_take_the_same_way_to_the_disk(tmp_path):
    ckpt = tmp_path / "ckpt"
    first = store({"w": torch.ones(3)}, str(ckpt), "ckpt-0_1.pt", "ckpt")
    source = tmp_path / "slot"
    source.write_bytes(open(first, "rb").read() + b"stale bytes after the archive")
    fd = os.open(source, os.O_RDONLY)
    try:
        length = os.path.getsize(first)
        path = store_file(range_writer(fd, length, chunk=100), str(ckpt), "ckpt-0_2.pt", "ckpt", keep_max=1,
                          replicated=True)
        again = store_file(range_writer(fd, length), str(ckpt), "ckpt-0_2.pt", "ckpt", keep_max=1)
    finally:
        os.close(fd)
    assert path == again and open(path, "rb").read() == open(source, "rb").read()[:length]
    assert torch.equal(torch.load(path)["w"], torch.ones(3))
    # rotation kept the newest one, the earlier file of the same name is kept aside, the mark written first
    assert sorted(os.listdir(ckpt)) == ["ckpt-0_2.pt", "ckpt-0_2.pt.replica", "superseded"]
    assert os.listdir(ckpt / "superseded") == ["ckpt-0_2.pt"]


def test_a_source_shorter_than_its_length_writes_nothing(tmp_path):
    source = tmp_path / "slot"
    source.write_bytes(b"PK" * 10)
    fd = os.open(source, os.O_RDONLY)
    try:
        try:
            store_file(range_writer(fd, 100), str(tmp_path / "ckpt"), "ckpt-0_1.pt", "ckpt")
        except OSError as exc:
            assert "ended at byte 20 of 100" in str(exc)
        else:
            raise AssertionError("a short source was stored")
    finally:
        os.close(fd)
    assert os.listdir(tmp_path / "ckpt") == []
