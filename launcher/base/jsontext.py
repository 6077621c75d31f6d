"""JSON text for the files people open (plans, summaries, rank tables): indented while small, compact beyond.

CPython's C encoder writes only compact JSON; ``indent`` takes the pure-Python encoder, many times slower.
A large job's plan or rank table is not read by eye, so beyond 16 KiB (a rank table of some 250 ranks, a
summary of some 32) the text is compact; below, the indenting is cheap and kept.

Large texts are made in pieces of LONG_LIST items of a long list or dict (the ranks of plan.json, summary.json
and pids.json): the C encoder keeps every small string of its output alive until it joins them, so encoding a
large plan.json at once passes through several times its size in fresh memory, whose page faults are much of
the cost.  A piece at a time, the same memory serves every rank, and a writer gets the pieces without the
whole text ever being joined.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False   # typing's own flag, without importing typing on the launch path (docs/development.md)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

INDENT_LIMIT = 16 << 10   # compact bytes beyond which the text stays compact
LONG_LIST = 64            # a list or dict of more items is encoded this many items a piece
OPENED_LEVELS = 3         # containers this deep are opened to find long lists (summary.json: attempts -> ranks)


def readable_pieces(data, indent: int = 2, default=None) -> Iterator[str]:
    """``data`` as JSON, in pieces: indented by ``indent`` when its compact text is under INDENT_LIMIT
    characters, else compact (exactly ``json.dumps(data, default=default)``)."""
    encode = json.JSONEncoder(default=default).encode
    pieces = _Pieces(encode, data)
    if not pieces.long:   # nothing long: one text, as json.dumps makes it
        text = encode(data)
        yield text if len(text) >= INDENT_LIMIT else json.dumps(data, indent=indent, default=default)
        return
    chunks = pieces.of(data, OPENED_LEVELS)
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


class _Pieces:
    """Compact JSON in pieces: a long list or dict LONG_LIST items a piece, the short lists and dicts of the
    first levels opened to find them, every other value in one piece.  A long one met twice (summary.json
    says the last attempt's ranks as ``ranks`` and in ``attempts``) is encoded once."""

    def __init__(self, encode: Callable[[object], str], data):
        self.encode = encode
        ids = [id(value) for value in _long_ones(data, OPENED_LEVELS)]   # a handful (``data`` holds them)
        self.long = bool(ids)   # without any, the pieces would be the whole text
        self.twice: dict[int, list[str] | None] = {i: None for i in ids if ids.count(i) > 1}   # -> its pieces

    def of(self, value, levels: int) -> Iterator[str]:
        if not _opens(value, levels):
            yield self.encode(value)
        elif _is_long(value):
            if id(value) not in self.twice:
                yield from self._slices(value)
                return
            made = self.twice[id(value)]
            if made is None:
                made = self.twice[id(value)] = list(self._slices(value))
            yield from made
        elif isinstance(value, dict):
            yield "{"
            for index, (key, item) in enumerate(value.items()):
                yield (", " if index else "") + self.encode(key) + ": "
                yield from self.of(item, levels - 1)
            yield "}"
        else:
            yield "["
            for index, item in enumerate(value):
                if index:
                    yield ", "
                yield from self.of(item, levels - 1)
            yield "]"

    def _slices(self, value) -> Iterator[str]:
        """``[a, b]`` or ``{"k": v}`` of each LONG_LIST items, less the brackets, joined by ", "."""
        items = value if isinstance(value, list) else list(value.items())
        wrap = list if isinstance(value, list) else dict
        yield "[" if isinstance(value, list) else "{"
        for start in range(0, len(items), LONG_LIST):
            yield (", " if start else "") + self.encode(wrap(items[start:start + LONG_LIST]))[1:-1]
        yield "]" if isinstance(value, list) else "}"

def _long_ones(value, levels: int) -> Iterator[object]:
    """The long lists and dicts ``_Pieces`` meets in ``value``, each time it meets one."""
    if not _opens(value, levels):
        return
    if _is_long(value):
        yield value
        return
    for item in (value.values() if isinstance(value, dict) else value):
        yield from _long_ones(item, levels - 1)


def _is_long(value) -> bool:
    return len(value) > LONG_LIST


def _opens(value, levels: int) -> bool:
    """Whether ``value`` is made in pieces: a list, or a dict of string keys (json.dumps converts others),
    within the opened levels or long."""
    return ((isinstance(value, list) or (isinstance(value, dict) and all(isinstance(k, str) for k in value)))
            and (levels > 0 or _is_long(value)))
