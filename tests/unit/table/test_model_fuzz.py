"""Property-based fuzz: any JSON, and any mutation of a valid table, gets a verdict, never a traceback."""

import copy
import json

import pytest

pytest.importorskip("hypothesis", reason="the fuzz tests need hypothesis (the test extra installs it)")

from hypothesis import HealthCheck, given, settings  # noqa: E402 (after the skip: any venv runs tests/unit)
from hypothesis import strategies as st  # noqa: E402

from launcher import cli
from launcher.table import model as ranktable
from launcher.table import rules as topology
from tests.conftest import RANK_TABLES

BASES = [json.loads(p.read_text()) for p in sorted(RANK_TABLES.glob("*.json"))]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 20), st.floats(allow_nan=True),
                    st.text(max_size=6), st.sampled_from(["0", "7", "8", "-1", "1.0", "", "10.0.0.9", "fe80::1"]))
json_values = st.recursive(scalars, lambda children: st.one_of(st.lists(children, max_size=4),
                                                               st.dictionaries(st.text(max_size=5), children,
                                                                               max_size=4)), max_leaves=12)


def _containers(node, out):
    if isinstance(node, dict):
        out.append(node)
        for value in node.values():
            _containers(value, out)
    elif isinstance(node, list):
        out.append(node)
        for value in node:
            _containers(value, out)
    return out


@st.composite
def mutated_tables(draw):
    table = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        target = draw(st.sampled_from(_containers(table, [])))
        if isinstance(target, dict) and target:
            key = draw(st.sampled_from(sorted(target)))
            action = draw(st.sampled_from(["replace", "delete"]))
            if action == "delete":
                del target[key]
            else:
                target[key] = draw(json_values)
        elif isinstance(target, list) and target:
            index = draw(st.integers(0, len(target) - 1))
            action = draw(st.sampled_from(["replace", "delete", "duplicate"]))
            if action == "delete":
                del target[index]
            elif action == "duplicate":
                target.append(copy.deepcopy(target[index]))
            else:
                target[index] = draw(json_values)
    return table


def verdict(obj):
    try:
        table = ranktable.from_obj(obj)
    except ranktable.RankTableError:
        return "unreadable"
    problems = []
    for profile in topology.PROFILES:
        problems += topology.validate(table, profile)
    for problem in problems:
        str(problem)
        json.dumps(problem.as_dict(), default=str)
    topology.summary(table)
    ranktable.dumps(table)
    return problems


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_tables())
def test_mutated_tables_always_get_a_verdict(obj):
    verdict(obj)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_arbitrary_json_always_gets_a_verdict(obj):
    verdict(obj)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(mutated_tables().map(json.dumps), st.text(max_size=40)))
def test_cli_answers_every_file_with_an_exit_code(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "t.json"
    path.write_text(text)
    assert cli.main(["validate-ranktable", "--json", str(path)]) in (0, 1, 2)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(alphabet="0123456789.:af ", max_size=16),
                 st.ip_addresses().map(str),
                 st.lists(st.integers(0, 300), min_size=3, max_size=5).map(lambda p: ".".join(map(str, p)))))
def test_fast_ip_check_agrees_with_ipaddress(text):
    import ipaddress

    try:
        expected = str(ipaddress.ip_address(text.strip()))
    except ValueError:
        expected = None
    assert topology.canonical_ip(text) == expected
