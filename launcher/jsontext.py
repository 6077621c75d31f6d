"""JSON text for the files people open (plans, summaries, rank tables): indented while small, compact beyond.

CPython's C encoder writes only compact JSON; ``indent`` takes the pure-Python encoder, some 10x slower.
Indenting a 1,024-rank rank table cost ~10 ms of a launch whose whole budget is ~0.3 ms per rank, and
nobody reads 150 KB of JSON by eye.  Under 16 KiB (a rank table of up to ~250 ranks, a summary of up
to ~32) the indenting costs under 3 ms and is kept.

Large texts are made in pieces, one per item of a long list (a rank's entry in plan.json or summary.json):
the C encoder keeps every small string of its output alive until it joins them, so encoding a 1,024-rank
plan.json (1.6 MB) at once passed through ~10 MB of fresh memory: ~2,000 page faults, a third of the
encoding's cost.  A piece at a time, the same memory serves every rank, and a writer gets the pieces
without the whole text ever being joined.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

INDENT_LIMIT = 16 << 10   # compact bytes beyond which the text stays compact
LONG_LIST = 64            # a list of more items is encoded item by item
OPENED_LEVELS = 3         # containers this deep are opened to find long lists (summary.json: attempts -> ranks)


def readable_pieces(data, indent: int = 2, default=None) -> Iterator[str]:
    """``data`` as JSON, in pieces: indented by ``indent`` when its compact text is under INDENT_LIMIT
    characters, else compact (exactly ``json.dumps(data, default=default)``)."""
    chunks = _pieces(data, json.JSONEncoder(default=default).encode, OPENED_LEVELS)
    head: list[str] = []
    size = 0
    for chunk in chunks:
        head.append(chunk)
        size += len(chunk)
        if size >= INDENT_LIMIT:
            yield from head
            yield from chunks
            return
    yield json.dumps(data, indent=indent, default=default)


def readable(data, indent: int = 2, default=None) -> str:
    """``readable_pieces`` joined."""
    return "".join(readable_pieces(data, indent, default))


def _pieces(value, encode: Callable[[object], str], levels: int) -> Iterator[str]:
    """Compact JSON of ``value`` in pieces: a long list or dict LONG_LIST items a piece, and the short lists
    and dicts of the first ``levels`` levels opened to find them; every other value in one piece."""
    if isinstance(value, list) and (levels or len(value) > LONG_LIST):
        if len(value) > LONG_LIST:   # "[a, b]" of each slice, less its brackets, joined by ", "
            yield "["
            for start in range(0, len(value), LONG_LIST):
                yield (", " if start else "") + encode(value[start:start + LONG_LIST])[1:-1]
            yield "]"
        else:
            yield "["
            for index, item in enumerate(value):
                if index:
                    yield ", "
                yield from _pieces(item, encode, levels - 1)
            yield "]"
    elif isinstance(value, dict) and (levels or len(value) > LONG_LIST) and all(isinstance(k, str) for k in value):
        if len(value) > LONG_LIST:
            items = list(value.items())
            yield "{"
            for start in range(0, len(items), LONG_LIST):
                yield (", " if start else "") + encode(dict(items[start:start + LONG_LIST]))[1:-1]
            yield "}"
        else:
            yield "{"
            for index, (key, item) in enumerate(value.items()):
                yield (", " if index else "") + encode(key) + ": "
                yield from _pieces(item, encode, levels - 1)
            yield "}"
    else:   # a dict whose keys are not all strings too (json.dumps converts those)
        yield encode(value)
