"""checkpoint.archive: an archive laid out in place is read unchanged by torch.load (plain, mmap=True,
weights_only=True), with storages 64-byte aligned, CRC fields 0, zip64 past 4 GiB and the generation comment last."""

import io
import mmap
import os
import pickle
import struct
import sys
import zipfile

import pytest

from launcher.checkpoint import archive
from launcher.checkpoint import file as ckptfile

torch = pytest.importorskip("torch", reason="the archive tests load real torch files (the torch extra)")

LOADS = [dict(), dict(mmap=True), dict(weights_only=True), dict(mmap=True, weights_only=True)]


def pickled(state):
    """The state's pickle with torch.save's persistent ids, and its storages by key."""
    persistent_id, storages = ckptfile._persistent_ids(None)

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return persistent_id(obj)

    sink = io.BytesIO()
    Pickler(sink, protocol=2).dump(state)
    return sink.getvalue(), storages


def bytes_of(storage) -> bytes:
    return bytes(torch.empty(0, dtype=torch.uint8).set_(storage).numpy()) if storage.nbytes() else b""


def write(state, path, comment=b"dlaunch generation=1", reserve_first=True):
    """``state`` as an archive laid out in a bytearray (storages reserved, then named), written to ``path``."""
    data, storages = pickled(state)
    buffer = bytearray(1 << 20)
    layout = archive.Archive(buffer)
    for key, storage in storages.items():
        if reserve_first:
            offset = layout.reserve(storage.nbytes())
            buffer[offset:offset + storage.nbytes()] = bytes_of(storage)
        else:
            layout.add(f"data/{key}", storage.nbytes(), bytes_of(storage))
    if reserve_first:
        for index, key in enumerate(storages):
            layout.name_reserved(index, key)
    length = layout.finish(data, comment)
    layout.release()
    with open(path, "wb") as fh:
        fh.write(buffer[:length])
    return length


def state_of_every_kind():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    base = torch.arange(20.0)
    return {"model": model.state_dict(), "param": torch.nn.Parameter(torch.randn(2, 2)), "base": base,
            "view": base[3:9].view(2, 3), "tied": [model.weight, model.weight], "empty": torch.empty(0, 5),
            "bf16": torch.randn(7).to(torch.bfloat16), "ints": torch.arange(5, dtype=torch.int64),
            "step": 12, "name": "run", "ratios": (0.5, 2.0), "none": None}


def check(loaded, state):
    assert loaded.keys() == state.keys()
    assert loaded["model"].keys() == state["model"].keys()
    assert loaded["model"]._metadata == state["model"]._metadata
    for key in ("base", "view", "empty", "bf16", "ints", "param"):
        assert loaded[key].dtype == state[key].dtype and torch.equal(loaded[key], state[key]), key
    assert type(loaded["param"]) is torch.nn.Parameter
    assert loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    assert loaded["tied"][0].data_ptr() == loaded["tied"][1].data_ptr()
    assert torch.equal(loaded["tied"][0], state["model"]["weight"])
    assert (loaded["step"], loaded["name"], loaded["ratios"], loaded["none"]) == (12, "run", (0.5, 2.0), None)


@pytest.mark.parametrize("reserve_first", [True, False])
def test_torch_load_reads_the_archive_unchanged(tmp_path, reserve_first):
    state = state_of_every_kind()
    path = tmp_path / "slot"
    write(state, path, reserve_first=reserve_first)
    for options in LOADS:
        check(torch.load(path, **options), state)


def test_records_are_aligned_with_crc_zero_and_the_comment_last(tmp_path):
    path = tmp_path / "slot"
    length = write(state_of_every_kind(), path, comment=b"dlaunch generation=42")
    raw = path.read_bytes()
    assert len(raw) == length and raw.endswith(b"dlaunch generation=42")
    with zipfile.ZipFile(path) as zf:
        assert zf.comment == b"dlaunch generation=42"
        infos = zf.infolist()
        names = [info.filename for info in infos]
        assert set(names) >= {"archive/data.pkl", "archive/.format_version", "archive/.storage_alignment",
                              "archive/byteorder", "archive/version", "archive/data/0"}
        for info in infos:
            assert info.CRC == 0 and info.compress_type == zipfile.ZIP_STORED
            name_length, extra_length = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
            start = info.header_offset + 30 + name_length + extra_length
            assert start % 64 == 0, info.filename
            assert raw[info.header_offset + 30 + name_length:][:2] == b"FB"   # torch's padding field
    assert raw[-64:].find(b"PK\x05\x06") >= 0 and b"PK\x06\x06" in raw[-200:]


def test_torch_2_13_reads_crc_zero_and_ignores_a_wrong_crc(tmp_path):
    """Why no CRC is computed: torch's reader does not check it (a wrong one loads too)."""
    path = tmp_path / "slot"
    write({"w": torch.arange(6.0)}, path)
    raw = bytearray(path.read_bytes())
    central = raw.find(b"PK\x01\x02")
    raw[central + 16:central + 20] = b"\x12\x34\x56\x78"
    path.write_bytes(raw)
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.arange(6.0))


def test_a_full_buffer_says_so_and_claims_go_through_ensure():
    claimed = []
    layout = archive.Archive(bytearray(4096), ensure=claimed.append)
    offset = layout.reserve(1000)
    assert offset % 64 == 0 and claimed == [offset + 1000]
    with pytest.raises(archive.ArchiveFull) as full:
        layout.reserve(4000)
    assert full.value.capacity == 4096 and full.value.needed > 4096
    with pytest.raises(ValueError, match="longer"):
        layout.name_reserved(0, "9" * 30)


def test_zip64_past_4_gib(tmp_path):
    """A storage over 4 GiB and records past 4 GiB, in a sparse file: the data's pages are never touched."""
    size = (4 << 30) + 1000
    source = tmp_path / "source"
    with open(source, "wb") as fh:
        fh.truncate(size)
    big = torch.from_file(str(source), shared=True, size=size, dtype=torch.uint8)
    data, storages = pickled({"big": big, "small": torch.arange(3.0)})
    target = tmp_path / "slot"
    with open(target, "w+b") as fh:
        fh.truncate(size + (1 << 20))
        mapping = mmap.mmap(fh.fileno(), size + (1 << 20))
        layout = archive.Archive(mapping)
        offset = layout.reserve(size)
        mapping[offset + size - 1] = 7                     # one page of the big record touched
        layout.name_reserved(0, "0")
        small = storages["1"]
        layout.add("data/1", small.nbytes(), bytes_of(small))
        length = layout.finish(data, b"dlaunch generation=3")
        layout.release()
        mapping.close()
        fh.truncate(length)
    del big
    loaded = torch.load(target, mmap=True, weights_only=True)
    assert loaded["big"].numel() == size and int(loaded["big"][-1]) == 7 and int(loaded["big"][0]) == 0
    assert torch.equal(loaded["small"], torch.arange(3.0))
    with zipfile.ZipFile(target) as zf:
        assert zf.getinfo("archive/data/0").file_size == size
        assert zf.getinfo("archive/data/1").header_offset > 0xFFFFFFFF
    os.unlink(source)


def test_the_module_imports_no_torch():
    assert "import torch" not in open(archive.__file__).read()
    assert sys.byteorder in ("little", "big")
