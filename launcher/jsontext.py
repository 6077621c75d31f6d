"""JSON text for the files people open (plans, summaries, rank tables): indented while small, compact beyond.

CPython's C encoder writes only compact JSON; ``indent`` takes the pure-Python encoder, some 10x slower.
Indenting a 1,024-rank rank table cost ~10 ms of a launch whose whole budget is ~0.3 ms per rank, and
nobody reads 150 KB of JSON by eye.  Under 16 KiB (a rank table of up to ~250 ranks, a summary of up
to ~32) the indenting costs under 3 ms and is kept.
"""

from __future__ import annotations

import json

INDENT_LIMIT = 16 << 10   # compact bytes beyond which the text stays compact


def readable(data, indent: int = 2, default=None) -> str:
    """``data`` as JSON, indented by ``indent`` when its compact text is under INDENT_LIMIT bytes."""
    text = json.dumps(data, default=default)
    return json.dumps(data, indent=indent, default=default) if len(text) < INDENT_LIMIT else text
