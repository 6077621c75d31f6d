"""jsontext: the files' JSON is json.dumps' own text (compact, or indented while small), made in pieces."""

from __future__ import annotations

import json

import pytest

from launcher.base.jsontext import INDENT_LIMIT, LONG_LIST, readable, readable_pieces


def _rank(rank: int) -> dict:
    return {"rank": rank, "argv": ["python", "train.py"],
            "env": {f"VAR_{i}": f"/run/rank_{rank:03d}/{i}" for i in range(27)},
            "start": 1795747728.38361 + rank, "signal": None, "console": False}


def _expected(data, default=None) -> str:
    compact = json.dumps(data, default=default)
    return compact if len(compact) >= INDENT_LIMIT else json.dumps(data, indent=2, default=default)


PLAN = {"layout": 3, "run_id": "r", "ranks": [_rank(r) for r in range(1024)], "scheduler": None}
SUMMARY = {"ranks": [_rank(r) for r in range(300)],
           "attempts": [{"attempt": 0, "ranks": [_rank(r) for r in range(300)]}]}
PIDS = {"launcher_pid": 1, "ranks": {str(r): {"pid": 100 + r, "start": 1.5 * r} for r in range(1024)}}
CASES = [PLAN, SUMMARY, PIDS, {}, [], "text", None, 3.5, {"a": 1}, [1] * LONG_LIST, [1] * (LONG_LIST + 1),
         [1] * (2 * LONG_LIST), [1] * (2 * LONG_LIST + 1), {"deep": [[[[list(range(5000))]]]]},
         {1: list(range(5000))}, {"k": {1: "a", None: "b"}, "pad": "x" * INDENT_LIMIT},
         {str(i): [i] * 100 for i in range(100)}, ["\ud800 é \n \"quoted\""] * 3000, {"path": object()}]


@pytest.mark.parametrize("data", CASES, ids=range(len(CASES)))
def test_the_text_is_json_dumps_own(data):
    assert readable(data, default=str) == _expected(data, default=str)


def test_a_large_file_never_passes_through_the_encoder_whole():
    """The 1,024-rank plan in pieces of at most LONG_LIST ranks: the encoder's memory is a slice's."""
    pieces = list(readable_pieces(PLAN))
    longest_rank = max(len(json.dumps(rank)) for rank in PLAN["ranks"])
    assert len(pieces) > len(PLAN["ranks"]) // LONG_LIST
    assert max(map(len, pieces)) <= LONG_LIST * (longest_rank + 2)
    assert json.loads("".join(pieces)) == PLAN


def test_a_small_file_is_indented():
    assert readable({"a": [1, 2]}) == '{\n  "a": [\n    1,\n    2\n  ]\n}'


def test_a_list_said_twice_is_encoded_once(monkeypatch):
    """summary.json says the last attempt's ranks twice (``ranks`` and ``attempts``): one list, encoded once."""
    ranks = [_rank(r) for r in range(4 * LONG_LIST)]
    summary = {"ranks": ranks, "attempts": [{"attempt": 0, "ranks": ranks}], "copy": list(ranks)}
    encoded: list[int] = []
    plain = json.JSONEncoder.encode

    def counting(self, value):
        if isinstance(value, list) and len(value) == LONG_LIST:
            encoded.append(id(value[0]))
        return plain(self, value)

    monkeypatch.setattr(json.JSONEncoder, "encode", counting)
    assert readable(summary) == json.dumps(summary)
    assert len(encoded) == 2 * 4   # four slices of ``ranks`` (said twice), four of its copy (another list)
