"""The report page's pictures, drawn here as inline SVG: a colour per rank, the timeline, one chart per metric.

No plotting library: the page must open anywhere, offline, and the SVG stays small (long series are
thinned, many ranks get a mean line and a min-max band).
"""

from __future__ import annotations

import math
import re

from launcher.contract import Role
from launcher.observe.metrics import RankStory

MAX_POINTS = 1000              # per line drawn (wider than a chart's pixels): longer series are thinned evenly
POINT_BUDGET = 60000           # per chart: with many ranks each line gets fewer points (at least MIN_POINTS)
MIN_POINTS = 150
LOG_SCALE_NAMES = re.compile(r"loss|perplexity|ppl", re.IGNORECASE)   # drawn on a log scale when all positive
FRACTION_NAMES = re.compile(r"acc|precision|recall|\bf1|auc|iou", re.IGNORECASE)   # ratios: an axis within [0, 1]
MANY_RANKS = 8                 # above this, a chart adds the ranks' mean and their min-max band

OUTCOME_COLOURS = {
    "ok": ("#59a14f", "exited 0"),
    "root": ("#d7263d", "root cause"),
    "failed": ("#f28e2b", "failed too"),
    "stopped": ("#b4b4b4", "stopped by dlaunch"),
    "running": ("#4e79a7", "running / no summary"),
}
ROOT_COLOUR = OUTCOME_COLOURS["root"][0]


def _hex_to_lab(colour: str) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB colour: distances there are close to what eyes see."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    xyz = ((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b,
           (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883)
    fx, fy, fz = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def _hsl_hex(hue: float, sat: float, light: float) -> str:
    import colorsys

    r, g, b = colorsys.hls_to_rgb(hue / 360, light, sat)
    return "#" + "".join(f"{round(c * 255):02x}" for c in (r, g, b))


def colour_distance(a: str, b: str) -> float:
    """CIE76 delta E between two colours: about 2.3 is just noticeable, 20 and more is plainly different."""
    return math.dist(_hex_to_lab(a), _hex_to_lab(b))


_RANK_COLOURS: list[str] = []


def rank_colour(rank: int) -> str:
    """Rank N's line colour, the same in every report whatever the number of ranks.

    Colours are picked one by one from hues at every 7.5 degrees, in three lightnesses and two saturations
    (those readable on white), each the candidate farthest from every colour picked before (CIELAB): so
    ranks 0 and 12, or 0 and 1, never share a colour, and the first colours are the most different.
    After every candidate has been used (195 ranks) colours repeat.
    """
    if not _RANK_COLOURS:
        candidates = [_hsl_hex(h * 7.5, sat, light) for h in range(48) for sat in (0.85, 0.55)
                      for light in (0.32, 0.45, 0.58)]
        candidates = [c for c in dict.fromkeys(candidates) if 30 <= _hex_to_lab(c)[0] <= 72
                      and all(colour_distance(c, used) > 12 for used, _ in OUTCOME_COLOURS.values())]
        labs = [_hex_to_lab(c) for c in candidates]
        nearest = [math.dist(lab, _hex_to_lab("#1f77b4")) for lab in labs]   # start from a familiar blue
        while len(_RANK_COLOURS) < len(candidates):
            pick = min(range(len(candidates)), key=nearest.__getitem__) if not _RANK_COLOURS else \
                max(range(len(candidates)), key=nearest.__getitem__)
            _RANK_COLOURS.append(candidates[pick])
            nearest = [min(d, math.dist(lab, labs[pick])) for d, lab in zip(nearest, labs)]
            nearest[pick] = -1.0
    return _RANK_COLOURS[rank % len(_RANK_COLOURS)]


def _esc(text) -> str:
    """Text for SVG markup (html.escape's rules, without importing html's entity tables)."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;"))


def nice_ticks(low: float, high: float, count: int = 6, integer: bool = False,
               within: tuple[float, float] = (-math.inf, math.inf)) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 2.5 or 5 times a power of ten apart); with
    ``integer``, whole numbers only (steps, epochs: never a tick at step 2.5). A single value is centred,
    but never padded past ``within`` (an accuracy of 0.9 gets no axis up to 1.6)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0]
    if high <= low:  # one value: centre it
        pad = 1.0 if integer else (abs(low) / 2 or 1.0)
        low, high = max(low - pad, min(within[0], low)), min(high + pad, max(within[1], high))
        if high <= low:
            low, high = low - pad, high + pad
    raw = (high - low) / max(1, count - 1)
    if integer:
        raw = max(raw, 1.0)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw and not (integer and m * power % 1))
    first = math.floor(low / step) * step
    ticks, value = [], first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 12))
    return [int(t) for t in ticks] if integer else ticks


def value_range(name: str, values: list[float]) -> tuple[float, float]:
    """Where a metric's axis may reach: never below 0 for values that are all >= 0, never above 1 for a
    fraction (accuracy, precision, ...) whose values are all within [0, 1]."""
    low = 0.0 if min(values) >= 0 else -math.inf
    high = 1.0 if FRACTION_NAMES.search(name) and 0 <= min(values) and max(values) <= 1 else math.inf
    return low, high


def log_ticks(low: float, high: float) -> tuple[float, float, list[float]] | None:
    """A log axis for [low, high] > 0: (bottom, top, labelled ticks).

    The ticks are decades, else 1-2-5, else every digit (four to nine labels); the ends are the nearest
    digit multiples outside the data.  None when the range is too narrow for three ticks (a linear axis
    then reads better)."""
    if not (0 < low < high and math.isfinite(high)):
        return None
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    digits = [round(m * 10.0 ** e, 12) for e in range(first, last + 1) for m in range(1, 10)] + [10.0 ** (last + 1)]
    bottom, top = max(t for t in digits if t <= low), min(t for t in digits if t >= high)
    choices = []
    for multiples in ((1,), (1, 2, 5), range(1, 10)):
        ticks = [round(m * 10.0 ** e, 12) for e in range(first, last + 1) for m in multiples]
        inside = [t for t in ticks if bottom <= t <= top]
        if len(inside) <= 9:      # more would crowd 300 pixels
            choices.append((sum(low <= t <= high for t in inside), inside))
    chosen = next((ticks for count, ticks in choices if count >= 4), None) or \
        next((ticks for count, ticks in choices if count >= 3), None)
    return (bottom, top, chosen) if chosen else None


def format_number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10000 or abs(value) < 0.001:
        return f"{value:.3g}"
    return f"{value:.6g}"


def _thin(points: list[tuple[float, float]], limit: int = MAX_POINTS) -> list[tuple[float, float]]:
    if len(points) <= limit:
        return points
    stride = len(points) / limit
    kept = [points[int(i * stride)] for i in range(limit - 1)]
    return kept + [points[-1]]


def _seconds(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:.2g} h" if value % 3600 else f"{value / 3600:.0f} h"
    if value >= 120:
        return f"{value / 60:g} min"
    return f"{format_number(value)} s"


def _text_width(text: str, size: float = 12, bold: bool = False) -> float:
    """About how wide ``text`` is drawn (sans-serif): wide enough never to underestimate."""
    return len(text) * size * (0.62 if bold else 0.58) + 4


ROW_LABEL_MIN = 14          # pixels a timeline row needs for its own name; thinner rows are named every k-th


def timeline_svg(stories: list[RankStory], width: int = 1056) -> str:
    """Every rank a row, every attempt a bar from start to end coloured by how it ended; root causes marked.

    A root cause's label goes right of its marker where its row is free that far (never over the next
    attempt's bar), else inside its own bar, else (thin rows, or no room) into the right margin, next to
    its row, moved down as little as needed not to touch another label.
    """
    starts = [s.start for st in stories for s in st.spans if s.start is not None]
    ends = [s.end for st in stories for s in st.spans if s.end is not None]
    if not starts:
        return '<p class="empty">No rank has started.</p>'
    t0 = min(starts)
    span = max(max(ends, default=t0), max(starts)) - t0 or 1.0
    hosts = len({st.ref.host for st in stories})
    row = max(4, min(22, 640 // max(1, len(stories))))
    bar = max(3, row - 6)
    names = [f"{st.ref.host} · {st.ref.title}" if hosts > 1 or st.ref.role == Role.SCHEDULER else
             f"{st.ref.title} · dev {st.ref.device_id}" for st in stories]
    left = int(max(_text_width(name) for name in names)) + 12
    right = 24
    while True:    # a right margin only as wide as the root-cause labels that must go there
        drawn, needed = _timeline_body(stories, names, t0, span, row, bar, left, width, width - left - right)
        if needed <= right:
            return drawn
        right = math.ceil(needed)


def _timeline_body(stories, names, t0, span, row, bar, left, width, plot_w) -> tuple[str, float]:
    """The timeline drawn with this plot width, and the right margin its root-cause labels need."""
    top = 30
    rows_h = row * len(stories)
    ticks = [t for t in nice_ticks(0, span, 8) if t <= span * 1.0001]
    x = lambda t: left + (t - t0) / span * plot_w  # noqa: E731
    out = [f'<rect x="{left}" y="{top - 4}" width="{plot_w}" height="{rows_h + 8}" fill="#fbfbfd" '
           f'stroke="#d8dae0"/>']
    for tick in ticks:
        tx = left + tick / span * plot_w
        out.append(f'<line x1="{tx:.1f}" y1="{top - 4}" x2="{tx:.1f}" y2="{top + rows_h + 4}" stroke="#e6e8ee"/>')
        out.append(f'<text x="{tx:.1f}" y="{top + rows_h + 20}" class="tick" '
                   f'text-anchor="middle">{_esc(_seconds(tick))}</text>')
    restarts: dict[int, float] = {}
    for story in stories:
        for s in story.spans:
            if s.attempt and s.start is not None:
                restarts[s.attempt] = min(restarts.get(s.attempt, s.start), s.start)
    free_from = -1e9
    for attempt, when in sorted(restarts.items()):
        rx = x(when)
        out.append(f'<line x1="{rx:.1f}" y1="{top - 10}" x2="{rx:.1f}" y2="{top + rows_h + 4}" '
                   f'stroke="#555" stroke-dasharray="4 3"/>')
        text = f"restart {attempt}"
        if rx + 3 >= free_from:      # restarts close together: the later ones keep their line, not their label
            out.append(f'<text x="{rx + 3:.1f}" y="{top - 12}" class="tick">{_esc(text)}</text>')
            free_from = rx + 3 + _text_width(text, 11) + 4
    every = max(1, math.ceil(ROW_LABEL_MIN / row))
    inline, margin = [], []
    for i, (story, name) in enumerate(zip(stories, names)):
        y = top + i * row + (row - bar) / 2
        ref = story.ref
        if i % every == 0:
            out.append(f'<text x="{left - 8}" y="{y + bar / 2 + 4:.1f}" class="label" text-anchor="end">'
                       f'{_esc(name)}</text>')
        placed = [x(s.start) for s in story.spans if s.start is not None]   # where this row's bars begin
        for s in story.spans:
            if s.start is None:
                continue
            x0, x1 = x(s.start), x(s.end if s.end is not None else s.start)
            colour = OUTCOME_COLOURS[s.outcome][0]
            tip = f"{ref.title}, attempt {s.attempt}: {s.detail or s.label}, " \
                  f"{_seconds(s.start - t0)} to {_seconds((s.end or s.start) - t0)}"
            out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(2.0, x1 - x0):.1f}" height="{bar}" rx="2" '
                       f'fill="{colour}"><title>{_esc(tip)}</title></rect>')
            if s.outcome == "root":
                cy, r = y + bar / 2, max(4.0, bar / 2 + 2)
                out.append(f'<path d="M{x1:.1f} {cy - r:.1f} L{x1 + r:.1f} {cy:.1f} L{x1:.1f} {cy + r:.1f} '
                           f'L{x1 - r:.1f} {cy:.1f} Z" fill="{ROOT_COLOUR}" stroke="#fff" stroke-width="1.5">'
                           f'<title>{_esc("root cause: " + tip)}</title></path>')
                text = f"root cause: {s.label}"
                room = min([a for a in placed if a > x1 + 0.5], default=left + plot_w) - (x1 + r + 6)
                if row >= 16 and room >= _text_width(text, 12, True):
                    inline.append(f'<text x="{x1 + r + 4:.1f}" y="{cy + 4:.1f}" class="root">{_esc(text)}</text>')
                elif row >= 16 and x1 - x0 - r - 8 >= _text_width(s.label, 11):
                    inline.append(f'<text x="{x1 - r - 4:.1f}" y="{cy + 4:.1f}" class="inbar" '
                                  f'text-anchor="end">{_esc(s.label)}</text>')
                else:
                    margin.append((cy, f"{ref.title}: {s.label}" if row < 16 else text))
            elif row >= ROW_LABEL_MIN and s.outcome != "running" and x1 - x0 > _text_width(s.label, 10) + 8:
                out.append(f'<text x="{x1 - 4:.1f}" y="{y + bar - 3:.1f}" class="inbar" text-anchor="end">'
                           f'{_esc(s.label)}</text>')
    out += inline
    needed = 0.0
    if margin:
        if any(not text.startswith("root") for _, text in margin):
            out.append(f'<text x="{left + plot_w + 12}" y="{top - 12}" class="root">root cause</text>')
        below = top - 2.0
        for cy, text in sorted(margin):
            ly = max(cy + 4, below + 13)
            below = ly
            out.append(f'<text x="{left + plot_w + 12}" y="{ly:.1f}" class="root">{_esc(text)}</text>')
            needed = max(needed, 12 + _text_width(text, 12, True) + 4)
        rows_h = max(rows_h, below - top + 4)
    height = int(top + rows_h + 46)
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" class="axis" text-anchor="middle">'
               f'seconds since the first rank started</text>')
    return "\n".join([f'<svg class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
                      f'role="img" aria-label="timeline of every rank">', *out, "</svg>"]), needed


def legend_html(stories: list[RankStory]) -> str:
    """The timeline's colour keys, those it uses."""
    used = {s.outcome for st in stories for s in st.spans}
    return "".join(f'<span class="key"><i style="background:{colour}"></i>{_esc(text)}</span>'
                   for outcome, (colour, text) in OUTCOME_COLOURS.items() if outcome in used)


MEAN_COLOUR = "#1d2330"


def chart_svg(name: str, stories: list[RankStory], width: int = 1056, plot_h: int = 300) -> str:
    """One metric: a polyline per rank and attempt (earlier attempts dashed), axes, ticks, a legend below.

    Losses are drawn on a log scale when every value is positive and they span a factor of 2 or more (a
    loss falling from 2.3 to 0.05 is not a flat line after its first epoch).  Steps are whole numbers.
    Above MANY_RANKS ranks, lines get thinner and the ranks' mean and min-max band are drawn over them.
    """
    lines = [(story, attempt, sorted(points))
             for story in stories for attempt, points in sorted(story.metrics.get(name, {}).items()) if points]
    if not lines:
        return ""
    limit = max(MIN_POINTS, min(MAX_POINTS, POINT_BUDGET // len(lines)))
    series = [(story, attempt, _thin(pts, limit)) for story, attempt, pts in lines]
    values = [v for _, _, pts in series for _, v in pts if math.isfinite(v)]
    steps = [s for _, _, pts in series for s, _ in pts]
    if not values:
        return ""
    axes = {getattr(points, "axis", "step") for story in stories for points in story.metrics.get(name, {}).values()}
    x_name = "step" if "step" in axes or len(axes) != 1 else axes.pop()
    ranks = sorted({story.ref.rank for story, _, _ in series})
    many = len(ranks) > MANY_RANKS
    left, right, top = 70, 24, 16
    plot_w = width - left - right
    xt = nice_ticks(min(steps), max(steps), 8, integer=all(float(s).is_integer() for s in steps))
    scale = log_ticks(min(values), max(values)) if LOG_SCALE_NAMES.search(name) and min(values) > 0 else None
    log = scale is not None
    if scale is not None:
        bottom, ceiling, yt = scale
    else:
        yt = nice_ticks(min(values), max(values), 6, within=value_range(name, values))
        bottom, ceiling = yt[0], yt[-1]
    x0, x1 = xt[0], xt[-1]
    f = math.log10 if log else (lambda v: v)
    y0, y1 = f(bottom), f(ceiling)
    sx = lambda s: left + (s - x0) / ((x1 - x0) or 1) * plot_w  # noqa: E731
    sy = lambda v: top + plot_h - (f(v) - y0) / ((y1 - y0) or 1) * plot_h  # noqa: E731
    out = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fbfbfd" stroke="#d8dae0"/>']
    for tick in xt:
        px = sx(tick)
        out.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{top + plot_h}" stroke="#e6e8ee"/>')
        out.append(f'<text x="{px:.1f}" y="{top + plot_h + 16}" class="tick" text-anchor="middle">'
                   f'{_esc(format_number(tick))}</text>')
    for tick in yt:
        py = sy(tick)
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{left + plot_w}" y2="{py:.1f}" stroke="#e6e8ee"/>')
        out.append(f'<text x="{left - 6}" y="{py + 4:.1f}" class="tick ytick" text-anchor="end">'
                   f'{_esc(format_number(tick))}</text>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 34}" class="axis" '
               f'text-anchor="middle">{_esc(x_name)}</text>')
    out.append(f'<text transform="translate(16 {top + plot_h / 2:.1f}) rotate(-90)" class="axis" '
               f'text-anchor="middle">{_esc(name + (" (log scale)" if log else ""))}</text>')
    newest = {story.ref.rank: max(story.metrics.get(name, {}) or [0]) for story in stories}
    current = [(story, pts) for story, attempt, pts in series if attempt == newest[story.ref.rank]]
    if many:   # the band under the lines: min to max over the ranks at each step
        at: dict[float, list[float]] = {}
        for _, pts in current:
            for s, v in pts:
                if math.isfinite(v):
                    at.setdefault(s, []).append(v)
        shared = sorted(s for s, vs in at.items() if len(vs) > 1)
        if shared:
            upper = " ".join(f"{sx(s):.1f},{sy(max(at[s])):.1f}" for s in shared)
            lower = " ".join(f"{sx(s):.1f},{sy(min(at[s])):.1f}" for s in reversed(shared))
            out.append(f'<polygon class="band" points="{upper} {lower}" fill="{MEAN_COLOUR}" fill-opacity="0.10"/>')
    width_now = 2.5 if len(ranks) <= 4 else 2.0 if not many else 1.5
    for story, attempt, pts in series:
        colour = rank_colour(story.ref.rank)
        coords = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in pts if math.isfinite(v))
        style = f'stroke-width="{width_now}"' if attempt == newest[story.ref.rank] else \
            'stroke-width="1.5" stroke-dasharray="5 4" opacity="0.55"'
        tip = f"{story.ref.title}, attempt {attempt}: {len(pts)} points, last {format_number(pts[-1][1])}"
        out.append(f'<polyline fill="none" stroke="{colour}" {style} stroke-linejoin="round" '
                   f'points="{coords}"><title>{_esc(tip)}</title></polyline>')
        if len(pts) == 1:
            out.append(f'<circle cx="{sx(pts[0][0]):.1f}" cy="{sy(pts[0][1]):.1f}" r="3" fill="{colour}"/>')
    if many and shared:
        mean = " ".join(f"{sx(s):.1f},{sy(sum(at[s]) / len(at[s])):.1f}" for s in shared)
        out.append(f'<polyline class="mean" fill="none" stroke="#fff" stroke-width="5" stroke-linejoin="round" '
                   f'points="{mean}"/>')
        out.append(f'<polyline class="mean" fill="none" stroke="{MEAN_COLOUR}" stroke-width="2.5" '
                   f'stroke-linejoin="round" points="{mean}"><title>mean of {len(ranks)} ranks</title></polyline>')
    # the legend, under the chart: special keys first, then a swatch per rank in a grid
    keys = []
    if many and shared:
        keys += [("mean", f"mean of {len(ranks)} ranks"), ("band", "min to max of the ranks")]
    if any(attempt != newest[story.ref.rank] for story, attempt, _ in series):
        keys.append(("dash", "earlier attempt"))
    ly = top + plot_h + 52
    kx = float(left)
    for kind, text in keys:
        if kind == "band":
            out.append(f'<rect x="{kx}" y="{ly - 9}" width="24" height="12" fill="{MEAN_COLOUR}" fill-opacity="0.10"/>')
        else:
            out.append(f'<line x1="{kx}" y1="{ly - 3}" x2="{kx + 24}" y2="{ly - 3}" '
                       + (f'stroke="{MEAN_COLOUR}" stroke-width="2.5"/>' if kind == "mean" else
                          'stroke="#777" stroke-width="1.5" stroke-dasharray="5 4"/>'))
        out.append(f'<text x="{kx + 30}" y="{ly + 1}" class="tick">{_esc(text)}</text>')
        kx += 30 + _text_width(text, 11) + 18
    if keys:
        ly += 20
    cell = 80 if ranks[-1] < 1000 else 100
    per_row = max(1, plot_w // cell)
    for i, rank in enumerate(ranks):
        cx, cy = left + (i % per_row) * cell, ly + (i // per_row) * 18
        out.append(f'<rect class="swatch" x="{cx}" y="{cy - 9}" width="14" height="10" fill="{rank_colour(rank)}"/>')
        out.append(f'<text x="{cx + 19}" y="{cy}" class="label">rank {rank}</text>')
    height = ly + ((len(ranks) - 1) // per_row) * 18 + 12
    return "\n".join([f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
                      f'role="img" aria-label="{_esc(name)} per rank over {_esc(x_name)}s">', *out, "</svg>"])
