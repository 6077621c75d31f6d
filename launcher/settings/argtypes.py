"""Number types for options, shared by flags, ``DLAUNCH_*`` variables and YAML configs.

argparse's plain ``float`` accepts ``nan`` and ``inf`` (a grace period of nan
never kills; inf overflows a deadline) and ``int`` accepts 5000 digits.  Every
number dlaunch reads goes through one of these, which refuse what no launch
could mean, with a message that names the option's value and the range.
"""

from __future__ import annotations

import argparse
import math

MAX_SECONDS = 30 * 24 * 3600.0   # a month: longer than any grace period, timeout or refresh anyone means
MAX_DIGITS = 9


def _text(value) -> str:
    shown = str(value)
    return shown if len(shown) <= 40 else shown[:40] + "..."


def seconds(value, positive: bool = False) -> float:
    """A duration in seconds: finite, not negative (positive when asked), at most a month."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"expected seconds, not {_text(value)!r}") from None
    low = "above 0" if positive else "0 or more"
    if not math.isfinite(number) or number < 0 or (positive and number == 0) or number > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{_text(value)} seconds is out of range: give {low}, at most "
                                         f"{MAX_SECONDS:.0f} (30 days)")
    return number


def positive_seconds(value) -> float:
    return seconds(value, positive=True)


def whole(low: int, high: int):
    """An integer type within [low, high]; its name shows in argparse's messages."""
    def convert(value) -> int:
        text = str(value).strip()
        digits = text[1:] if text[:1] in "+-" else text
        if not (digits.isascii() and digits.isdigit()) or len(digits) > MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low} to {high}, not {_text(value)!r}")
        number = int(text)
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{number} is out of range: give a whole number from {low} to {high}")
        return number

    convert.__name__ = "int"
    return convert


MAX_NODES = 10**6


def node_span(value) -> tuple[int, int]:
    """``--nnodes N`` or torchrun's ``MIN:MAX`` (elastic: the job starts with MIN hosts, takes up to MAX), as
    (MIN, MAX); N is (N, N)."""
    low, colon, high = str(value).strip().partition(":")
    count = whole(1, MAX_NODES)
    first = count(low)
    last = count(high) if colon else first
    if first > last:
        raise argparse.ArgumentTypeError(f"{_text(value)!r}: MIN is more than MAX; give MIN:MAX with MIN <= MAX")
    return first, last


def spell_span(span) -> str:
    """A node span as --nnodes takes it: N, or MIN:MAX."""
    low, high = span
    return str(high) if low == high else f"{low}:{high}"


port = whole(1, 65535)

SIZE_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
              "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40, "TIB": 2**40}
MAX_SIZE = 2**50   # a pebibyte: more memory than any host holds


def size(value) -> int | None:
    """A number of bytes (``512M``, ``4G``, ``1.5GiB``, binary units), or None for ``auto``."""
    text = str(value).strip().upper()
    if text == "AUTO":
        return None
    number = text.rstrip("BKMGTI")
    unit = text[len(number):]
    try:
        amount = float(number) if number and unit in SIZE_UNITS and len(text) <= 24 else math.nan
    except ValueError:
        amount = math.nan
    if not math.isfinite(amount) or not 1 <= amount * SIZE_UNITS.get(unit, 1) <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M, 4G or auto, from 1 byte to 1P, not "
                                         f"{_text(value)!r}")
    return int(amount * SIZE_UNITS[unit])


def spell_size(value: int | None) -> str:
    return "auto" if value is None else str(value)


def step_pattern(value) -> str:
    """A user's step line (``base.steps.UserPattern``): a regular expression naming ``ms`` or ``s``."""
    from launcher.base.steps import UserPattern

    try:
        UserPattern.parse(str(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return str(value)
