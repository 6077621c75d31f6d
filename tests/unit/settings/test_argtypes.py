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


def test_a_size_is_bytes_with_binary_units_or_auto():
    from launcher.settings.argtypes import size, spell_size

    assert size("512M") == 512 << 20 and size("4g") == 4 << 30 and size("1.5GiB") == 3 << 29 and size("100") == 100
    assert size(" auto ") is None and spell_size(None) == "auto" and spell_size(4096) == "4096"


@pytest.mark.parametrize("bad", ["", "0", "-1G", "4Q", "nanG", "inf", "2000P", "G", "1e400"])
def test_a_size_no_memory_could_mean_is_refused(bad):
    from launcher.settings.argtypes import size

    with pytest.raises(argparse.ArgumentTypeError, match="expected a size"):
        size(bad)
