"""The one grammar for device lists and rank selections."""

import pytest

from launcher.base import numlists
from launcher.errors import UsageError


@pytest.mark.parametrize("text,numbers", [("0-7", list(range(8))), ("0,1,2,3", [0, 1, 2, 3]), ("4,5", [4, 5]),
                                          (" 0 - 1 , 4", [0, 1, 4]), ("7", [7]), ("3,1", [3, 1])])
def test_parse(text, numbers):
    assert numlists.parse(text, "x") == numbers


@pytest.mark.parametrize("text", ["", "a", "1-", "-1", "3-1", "1,,2", "1.5", "٣"])
def test_parse_refuses_with_the_option_named(text):
    with pytest.raises(UsageError, match="--devices"):
        numlists.parse(text, "--devices")


def test_unique_refuses_repeats():
    assert numlists.parse("0,0", "x") == [0, 0]
    with pytest.raises(UsageError, match="names 0 more than once"):
        numlists.parse("0-2,0", "x", unique=True)


@pytest.mark.parametrize("numbers,text", [([0, 1, 2, 5, 7, 8], "0-2,5,7-8"), ([], ""), ([3], "3"), ([2, 1, 1], "1-2")])
def test_format_ranges_round_trips(numbers, text):
    assert numlists.format_ranges(numbers) == text
    if text:
        assert numlists.parse(text, "x") == sorted(set(numbers))
