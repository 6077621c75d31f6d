"""Lists of small numbers as people write them: "0-7", "0,1,2,3", "0,3,5-7".

One grammar for device lists (``--devices``), rank selections (``--console``,
``--rank``) and their display ("0-2,5,7-8"), so every command reads and prints them alike.
"""

from __future__ import annotations

import re

from launcher.errors import UsageError

_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


MAX_NUMBER_DIGITS = 6    # device and rank numbers below a million
MAX_COUNT = 65536        # no list dlaunch reads names more (devices, ranks of one host's console)


def parse(text: str, what: str, unique: bool = False) -> list[int]:
    """Numbers in the order written; ``what`` names the option in errors; ``unique`` refuses repeats.

    Numbers have at most MAX_NUMBER_DIGITS digits and a list at most MAX_COUNT items, so ``0-999999999``
    is an error, not a billion-item list.
    """
    shown = str(text) if len(str(text)) <= 40 else str(text)[:40] + "..."
    numbers: list[int] = []
    for part in str(text).split(","):
        match = _ITEM.match(part)
        if not match or not match[1].isascii() or (match[2] and not match[2].isascii()):
            raise UsageError(f"bad {what} {shown!r}: use numbers and ranges such as 0-7 or 0,3,5-7")
        if len(match[1]) > MAX_NUMBER_DIGITS or len(match[2] or "") > MAX_NUMBER_DIGITS:
            raise UsageError(f"bad {what} {shown!r}: numbers have at most {MAX_NUMBER_DIGITS} digits")
        low, high = int(match[1]), int(match[2] or match[1])
        if high < low:
            raise UsageError(f"bad {what} {shown!r}: range {part.strip()[:20]} ends below its start")
        if len(numbers) + high - low + 1 > MAX_COUNT:
            raise UsageError(f"bad {what} {shown!r}: more than {MAX_COUNT} numbers")
        numbers.extend(range(low, high + 1))
    if unique:
        seen: set[int] = set()
        for number in numbers:
            if number in seen:
                raise UsageError(f"{what} {shown!r} names {number} more than once")
            seen.add(number)
    return numbers


def format_ranges(numbers) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8" (sorted, repeats dropped)."""
    ordered = sorted(set(numbers))
    parts, start = [], None
    for i, number in enumerate(ordered):
        if start is None:
            start = number
        if i + 1 == len(ordered) or ordered[i + 1] != number + 1:
            parts.append(str(start) if start == number else f"{start}-{number}")
            start = None
    return ",".join(parts)
