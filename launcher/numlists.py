"""Lists of small numbers as people write them: "0-7", "0,1,2,3", "0,3,5-7".

One grammar for device lists (``--devices``), rank selections (``--console``,
``--rank``) and their display ("0-2,5,7-8"), so every command reads and prints them alike.
"""

from __future__ import annotations

import re

from .errors import UsageError

_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse(text: str, what: str, unique: bool = False) -> list[int]:
    """Numbers in the order written; ``what`` names the option in errors; ``unique`` refuses repeats."""
    numbers: list[int] = []
    for part in str(text).split(","):
        match = _ITEM.match(part)
        if not match or not match[1].isascii() or (match[2] and not match[2].isascii()):
            raise UsageError(f"bad {what} {text!r}: use numbers and ranges such as 0-7 or 0,3,5-7")
        low, high = int(match[1]), int(match[2] or match[1])
        if high < low:
            raise UsageError(f"bad {what} {text!r}: range {part.strip()} ends below its start")
        numbers.extend(range(low, high + 1))
    if unique:
        seen: set[int] = set()
        for number in numbers:
            if number in seen:
                raise UsageError(f"{what} {text!r} names {number} more than once")
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
