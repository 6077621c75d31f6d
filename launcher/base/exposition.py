"""Prometheus's text exposition format (version 0.0.4), written by hand: metric families in, bytes out.

Why not ``prometheus_client``: dlaunch serves a snapshot its event loop already holds, so it needs only the
format, not the client's registry, collectors and locks; the format is a few documented lines
(https://prometheus.io/docs/instrumenting/exposition_formats/); and no dependency is added to a launcher
whose ranks' environments it must not disturb. A launch without ``--metrics-port`` imports none of this.

Names follow Prometheus's conventions: the ``dlaunch_`` prefix, base units (seconds), ``_total`` for counters,
labels ``rank``, ``host``, ``state``, ``policy``, ``reason``. Pure: no socket, no file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def label_value(text: str) -> str:
    """A label value escaped as the format says: backslash, double quote and line feed."""
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(**pairs) -> str:
    """``rank="3",host="node1"``: a sample's labels, rendered once and reused across snapshots."""
    return ",".join(f'{name}="{label_value(value)}"' for name, value in pairs.items())


def number(value: float) -> str:
    """A sample's value: integers without a point, floats as ``repr`` gives them (NaN and infinities spelled
    as the format wants)."""
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is bool:
        return "1" if value else "0"
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass
class Family:
    """One metric: its name, ``gauge`` or ``counter``, its help, and its sample lines (written as added: a
    snapshot is written once, by the loop that makes it, and served as it is to every scrape)."""

    name: str
    kind: str
    help: str
    lines: list[str] = field(default_factory=list)

    def add(self, label_text: str, value: float | None) -> None:
        """A sample (``label_text`` from ``labels``, "" for none); a value of None is not known and not said."""
        if value is not None:
            name = self.name
            self.lines.append(f"{name}{{{label_text}}} {number(value)}\n" if label_text else
                              f"{name} {number(value)}\n")


def render(families: list[Family]) -> bytes:
    """The exposition of ``families``: ``# HELP``, ``# TYPE``, then their sample lines; a family without a sample
    is left out (what is not known is not said, rather than said as 0)."""
    out: list[str] = []
    for family in families:
        if family.lines:
            out.append(f"# HELP {family.name} {family.help}\n# TYPE {family.name} {family.kind}\n")
            out += family.lines
    return "".join(out).encode()
