"""Parsing and writing rank tables: tolerant of formats, faithful to unknown fields."""

import json

import pytest

from launcher.table import model as ranktable
from launcher.table.model import MISSING, RankTableError, as_int
from tests.conftest import RANK_TABLES


@pytest.mark.parametrize("value,expected", [("3", 3), (3, 3), (" 7 ", 7), ("0", 0), ("-1", None), (-1, None),
                                            (True, None), (1.0, None), ("", None), ("x", None), (None, None),
                                            ("٣", None)])
def test_as_int_accepts_digit_strings_and_integers_only(value, expected):
    assert as_int(value) == expected


@pytest.mark.parametrize("path", sorted(RANK_TABLES.glob("*.json")), ids=lambda p: p.name)
def test_round_trip_keeps_every_field(path):
    original = json.loads(path.read_text())
    assert json.loads(ranktable.dumps(ranktable.load(str(path)))) == original


def test_unknown_fields_survive_at_every_level(tmp_path):
    obj = {"status": "completed", "vendor": {"x": 1}, "server_list": [
        {"device": [{"rank_id": 0, "device_ip": "1.2.3.4", "device_id": 0, "note": "hot"}],
         "server_id": "h1", "rack": "r7"}], "server_count": 1, "version": "1.0"}
    table = ranktable.from_obj(obj)
    assert table.servers[0].extra == {"rack": "r7"}
    assert table.servers[0].devices[0].extra == {"note": "hot"}
    out = tmp_path / "t.json"
    ranktable.dump(table, str(out))
    assert json.loads(out.read_text()) == obj
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left behind


def test_malformed_json_names_line_and_column():
    with pytest.raises(RankTableError, match=r"line 4, column 3"):
        ranktable.load(str(RANK_TABLES / "invalid" / "s_malformed_json.json"))


@pytest.mark.parametrize("text", ["[]", "3", '"x"', "null"])
def test_top_level_must_be_an_object(text):
    with pytest.raises(RankTableError, match="top level"):
        ranktable.loads(text)


def test_unreadable_file_is_a_rank_table_error(tmp_path):
    with pytest.raises(RankTableError, match="cannot read"):
        ranktable.load(str(tmp_path / "absent.json"))
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(RankTableError):
        ranktable.load(str(tmp_path / "bin.json"))


def test_shape_problems_are_recorded_not_raised():
    table = ranktable.from_obj({"server_list": [5, {"server_id": "a", "device": [None]}]})
    assert [p.path for p in table.shape_problems] == ["server_list[0]", "server_list[1].device[0]"]
    assert table.version is MISSING


# ---------------------------------------------------------------- issue 38, item 14: JSON mistakes in plain words

@pytest.mark.parametrize(("text", "said"), [
    ('{"version": "1.0",}', "line 1, column 18: a comma before the closing '}' (JSON allows no trailing comma"),
    ('{\n  "server_list": [\n    {"server_id": "a"},\n  ]\n}', "line 3, column 23: a comma before the closing ']'"),
    ('{"version": "1.0", "server_list": [', "line 1, column 36: the text ends before the JSON does"),
])
def test_a_json_mistake_is_said_in_plain_words_where_it_is(text, said):
    with pytest.raises(RankTableError) as refused:
        ranktable.loads(text)
    assert said in str(refused.value), str(refused.value)
