"""The value types of launch options (launcher/settings/argtypes.py)."""

import argparse

import pytest

from launcher.settings.argtypes import node_span, spell_span


def test_nnodes_is_n_or_min_max_and_is_written_back_the_same():
    assert node_span("4") == (4, 4) and node_span("1:2") == (1, 2) and node_span(" 2:2 ") == (2, 2)
    assert spell_span((4, 4)) == "4" and spell_span((1, 2)) == "1:2"


@pytest.mark.parametrize("bad", ["0", "2:1", "a:2", "1:", ""])
def test_a_node_count_that_is_none_is_refused(bad):
    with pytest.raises(argparse.ArgumentTypeError):
        node_span(bad)
