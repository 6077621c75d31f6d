"""torn: a torch zip archive or safetensors file cut anywhere is torn; a whole one, or another file, is not."""

import io
import json
import os
import struct
import zipfile

import pytest
import torch

from launcher.execute.memory.torn import is_torn


def torch_bytes(state) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def test_a_torch_archive_is_whole_only_to_its_last_byte(tmp_path):
    data = torch_bytes({"w": torch.arange(300.0), "step": 3})
    path = tmp_path / "ckpt.pt"
    path.write_bytes(data)
    assert not is_torn(str(path))
    for cut in range(0, len(data), 7):
        path.write_bytes(data[:cut])
        assert is_torn(str(path)), cut
    path.write_bytes(data + b"junk")   # a longer file rewritten in place without truncation
    assert is_torn(str(path))


def test_a_plain_zip_with_a_comment_and_other_files(tmp_path):
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a", "hello")
        archive.comment = b"note"
    assert not is_torn(str(path))
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "trainer_state.json").write_text("{")
    assert not is_torn(str(tmp_path / "notes.txt")) and not is_torn(str(tmp_path / "trainer_state.json"))
    assert is_torn(str(tmp_path / "missing.pt"))


@pytest.mark.parametrize("cut", [0, 4, 9, 30, -1])
def test_safetensors_torn_where_its_header_says_more(tmp_path, cut):
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                         "__metadata__": {"format": "pt"}}).encode()
    data = struct.pack("<Q", len(header)) + header + bytes(16)
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    assert not is_torn(str(path))
    path.write_bytes(data[:cut] if cut else b"")
    assert is_torn(str(path))


def test_a_fifo_or_a_link_a_rank_left_is_torn_and_read_without_waiting(tmp_path):
    """A FIFO with no writer would block a plain open() forever; a link may point anywhere: neither is mirrored."""
    os.mkfifo(tmp_path / "model.pt")
    assert is_torn(str(tmp_path / "model.pt"))
    (tmp_path / "real.pt").write_bytes(b"")
    os.symlink(tmp_path / "real.pt", tmp_path / "link.pt")
    assert is_torn(str(tmp_path / "link.pt"))
    assert is_torn(str(tmp_path / "real.pt"))   # killed before its first header: torn
    (tmp_path / "notes.txt").write_text("free text")
    assert not is_torn(str(tmp_path / "notes.txt"))
