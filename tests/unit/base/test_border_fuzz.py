"""Every parser of outside text registered at the border (``border.READERS``) takes the hostile shapes that broke
dlaunch before (issue 45) and random mixtures of them: each call returns a value or its documented finding
(``Refused``; the rank table's ``RankTableError``), within a CPU budget, never another
exception and never a hang."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.base.border import READERS, OverBudget, Refused, time_budget
from launcher.table.model import RankTableError

FINDINGS = {"rank table": RankTableError}
DIGITS = "9" * 5000

SHAPES = [
    "", " ", "null", "[]", '"x"', "5", "true", DIGITS, "²", "٣", "\x00", "\ufeff{}", "\ud800",
    "[" * 3000, '{"a":' * 3000, "]" * 50 + "[" * 50,
    '{"step": ' + DIGITS + "}", '{"step": -5, "phase": 7}', '{"step": 1e999}', '{"step": NaN}',
    '{"GracefulExit": Infinity}', '{"GracefulExit": -Infinity}', '{"RankList": 5}', '{"RankList": [5, "x", null]}',
    '{"RankList": [{"RankId": "²", "Status": "fault"}]}', '{"RankList": [{"RankId": "' + DIGITS + '"}]}',
    '{"RankList": [{"RankId": ' + DIGITS + "}]}", '{"RankList": [{"RankId": -1, "Status": []}]}',
    '{"fail_count": -5}', '{"fail_count": 1.5}', '{"fail_count": true}', '{"fail_count": "3"}',
    '{"fail_count": ' + DIGITS + "}", '{"phases_s": [1], "silence_s": "x"}', '{"phases_s": {"a": 1e999}}',
    '{"counted_steps": -3}', " iteration " + DIGITS + "/ 100 | elapsed time per iteration (ms): 10.0 |",
    " iteration 5/ 100 | elapsed time per iteration (ms): " + DIGITS + " |",
    "{ step:[" + DIGITS + "/ 10], loss: 1.0, per_step_time: 12ms", "per step time: " + DIGITS + " ms",
    " 45%|####| " + DIGITS + "/100 [00:12<00:15,  3.61it/s]", " 45%|####| 45/100 [00:12<00:15,  " + DIGITS + "it/s]",
    "step ² took 12 ms", "step 3 took ² ms", "step " + DIGITS + " took 5 ms", "² s/step",
    "x" * 40, "x" * 200_000, "\r" * 10_000 + "a", "|" * 10_000,
    "0, " + DIGITS, DIGITS + ", 0", "0, 5\n1, ²\n",
    "| 0     910B3     | OK     |\n| 0 | 0000:C1:00.0 | 0 0 / 0 " + DIGITS + " / 65536 |",
    "| " + DIGITS + " 910B3 | OK |", "| ² 910B | OK |",
    '{"world_size": 1e40, "ranks": {"0": {"pid": ' + DIGITS + "}}}", '{"ranks": [' + "{}," * 1000 + "{}]}",
]

FRAGMENTS = st.sampled_from(['{', '}', '[', ']', '"', ':', ',', '1', '9' * 400, '-', '.', 'e', 'NaN', 'Infinity',
                             '"step"', '"RankList"', '"RankId"', '"fail_count"', '²', '\r', '\n', '|', ' ', 'ms',
                             'iteration ', 'elapsed time per iteration (ms): ', 'it/s]', 'x'])


def _readers():
    for name, where in sorted(READERS.items()):
        module, _, function = where.partition(":")
        yield name, getattr(importlib.import_module(module), function)


def _read(name, reader, text) -> None:
    allowed = (Refused, *((FINDINGS[name],) if name in FINDINGS else ()))
    try:
        with time_budget(5.0, name):
            reader(text)
    except OverBudget:
        pytest.fail(f"{name} ran past 5 s of CPU on {text[:60]!r}...")
    except allowed as exc:
        assert "\n" not in str(exc) and str(exc), f"{name}: a finding is one line: {exc!r}"


@pytest.mark.parametrize("name", sorted(READERS))
def test_every_reader_takes_the_shapes_that_broke_dlaunch(name):
    reader = dict(_readers())[name]
    for text in SHAPES:
        _read(name, reader, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FRAGMENTS, max_size=60).map("".join))
def test_every_reader_takes_mixtures_of_them(text):
    for name, reader in _readers():
        _read(name, reader, text)


def test_a_schedulers_variable_of_other_digits_is_no_number():
    from launcher.base.border import is_number

    assert [is_number(t) for t in ("12", "²", "٣", "", "-1", "9" * 31, " 1")] == [True] + [False] * 6
