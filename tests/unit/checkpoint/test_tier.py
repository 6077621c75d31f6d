"""checkpoint.tier: the memory tier's names, its commit record (written, read back, refused when broken) and the
generation mark that ends a slot's archive."""

import json
import os

import pytest

from launcher.base import border
from launcher.checkpoint import tier


def record(**changes):
    values = dict(slot=1, generation=7, epoch=2, step=40, prefix="ckpt", name="ckpt-2_40.pt", length=4096,
                  persist=True, keep_max=3, replicated=True)
    values.update(changes)
    return tier.Record(**values)


def test_names_of_the_area_and_its_rank_directories():
    area = tier.area_name("20261207-1", 4242)
    assert area == "dlaunch-20261207-1-4242"
    assert tier.area_owner_pid(area) == 4242
    assert tier.area_owner_pid(area, "20261207-1") == 4242
    assert tier.area_owner_pid(area, "other") is None
    assert tier.area_owner_pid("something-else") is None
    assert tier.area_owner_pid("dlaunch-run-x1") is None      # not a pid
    assert tier.files_dir("/m", 3) == "/m/rank_003/files"
    assert tier.slots_dir("/m", 3) == "/m/rank_003/slots"
    assert tier.slot_path("/m/rank_003/slots", 1) == "/m/rank_003/slots/slot-1"


def test_a_record_written_is_read_back_whole(tmp_path):
    assert tier.read_record(str(tmp_path)) is None        # no memory save yet
    tier.write_record(str(tmp_path), record())
    assert tier.read_record(str(tmp_path)) == record()
    tier.write_record(str(tmp_path), record(slot=0, generation=8, persist=False, keep_max=None, replicated=False))
    assert tier.read_record(str(tmp_path)).generation == 8
    assert os.listdir(tmp_path) == [tier.NEWEST_FILE]      # replaced in one rename, no temporary left


@pytest.mark.parametrize("change, why", [
    ({"format": 2}, "format"),
    ({"slot": 2}, "slot"),
    ({"generation": -1}, "generation"),
    ({"name": "ckpt-2_41.pt"}, "name"),
    ({"name": "../ckpt-2_40.pt"}, "name"),
    ({"persist": "yes"}, "persist"),
    ({"replicated": 1}, "replicated"),
    ({"keep_max": 0}, "keep_max"),
    ({"length": 3}, "length"),
])
def test_a_broken_record_is_refused_in_one_line(change, why):
    doc = record().to_json()
    doc.update(change)
    with pytest.raises(border.Refused, match=why) as refused:
        tier.parse_record(json.dumps(doc))
    assert "\n" not in str(refused.value)


def test_text_that_is_no_record_is_refused(tmp_path):
    for text in ("", "[1]", "{", '{"format": 1}', "null"):
        with pytest.raises(border.Refused):
            tier.parse_record(text)


def test_the_generation_mark_ends_the_archive():
    tail = b"...zip end record..." + tier.comment(12)
    assert tier.comment(12) == b"dlaunch generation=12"
    assert tier.ends_with_generation(tail, 12)
    assert not tier.ends_with_generation(tail, 2)          # "12" ends with "2", the mark does not
    assert not tier.ends_with_generation(tail, 13)
    assert not tier.ends_with_generation(b"", 12)
