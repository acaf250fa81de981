"""Inline SVG charts, drawn here: axes, lines, bands, points with native tooltips, marked lengths.

A page must open from disk with nothing fetched and stay small (a 1,000-probe run well under
2 MB), so the charts are plain SVG text rather than a charting bundle. Each series has a
colour, a dash pattern and a marker shape, so a chart reads without colour (and in print);
every point carries a ``<title>``, which browsers show on hover; the legend is HTML beside
the chart (it wraps in a narrow window).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvcal.report.html import esc, tag

WIDTH, HEIGHT = 800, 420
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 28, 48
MARKERS = ("circle", "triangle", "square", "diamond", "cross", "none")


@dataclass(frozen=True)
class Style:
    """How one series looks and what the legend calls it."""

    label: str
    colour: str
    dash: str = ""  # SVG stroke-dasharray: "" solid, "6 4" dashed, "2 3" dotted
    marker: str = "none"
    hollow: bool = False


@dataclass(frozen=True)
class Line:
    style: Style
    xs: Sequence[float]
    ys: Sequence[float]


@dataclass(frozen=True)
class Band:
    """A shaded interval around a line (its bootstrap band)."""

    style: Style
    xs: Sequence[float]
    lows: Sequence[float]
    highs: Sequence[float]


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    tooltip: str


@dataclass(frozen=True)
class Points:
    style: Style
    points: Sequence[Point]


@dataclass(frozen=True)
class Mark:
    """A vertical line at a length (a break-even, a threshold), its interval shaded when given."""

    style: Style
    x: float
    interval: tuple[float, float] | None = None


@dataclass
class Chart:
    """One chart; :meth:`svg` draws it. Log axes drop values at or below zero (they cannot be placed)."""

    title: str
    x_label: str
    y_label: str
    x_log: bool = False
    y_log: bool = False
    lines: list[Line] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    points: list[Points] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] | None = None  # fixed labelled ticks (runs in order), else computed

    def styles(self) -> list[Style]:
        seen: dict[str, Style] = {}
        every = [p.style for p in self.points] + [line.style for line in self.lines] + [m.style for m in self.marks]
        for style in every:
            seen.setdefault(style.label, style)
        return list(seen.values())

    def svg(self) -> str:
        x_scale = _Scale(self._values("x"), LEFT, WIDTH - RIGHT, self.x_log)
        y_scale = _Scale(self._values("y"), HEIGHT - BOTTOM, TOP, self.y_log)
        parts = [_axes(self, x_scale, y_scale)]
        parts += [_band(b, x_scale, y_scale) for b in self.bands]
        parts += [_mark(m, x_scale, y_scale) for m in self.marks]
        parts += [_line(line, x_scale, y_scale) for line in self.lines]
        parts += [_points(p, x_scale, y_scale) for p in self.points]
        labelled = tag("title", esc(self.title))
        return tag(
            "svg",
            labelled + "".join(parts),
            {"xmlns": "http://www.w3.org/2000/svg", "viewBox": f"0 0 {WIDTH} {HEIGHT}", "role": "img"},
        )

    def _values(self, axis: str) -> list[float]:
        out: list[float] = []
        for line in self.lines:
            out += list(line.xs if axis == "x" else line.ys)
        for band in self.bands:
            out += list(band.xs) if axis == "x" else [*band.lows, *band.highs]
        for group in self.points:
            out += [p.x if axis == "x" else p.y for p in group.points]
        if axis == "x":
            for mark in self.marks:
                out += [mark.x, *(mark.interval or ())]
            ticks = [x for x, _ in self.x_ticks or []]
            out += [min(ticks) - 0.5, max(ticks) + 0.5] if ticks else []  # labelled positions (runs): half a step free
        log = self.x_log if axis == "x" else self.y_log
        return [v for v in out if math.isfinite(v) and (v > 0 or not log)]


class _Scale:
    """Data to pixels along one axis, over nice bounds of the values."""

    def __init__(self, values: list[float], start: float, end: float, log: bool) -> None:
        self.log, self.start, self.end = log, start, end
        lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
        if log:
            lo, hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
            hi = hi if hi > lo else lo * 10
        else:
            lo = min(lo, 0.0) if lo >= 0 else lo  # lengths and times start at zero
            step = _nice_step(hi - lo if hi > lo else abs(hi) or 1.0)
            lo, hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
            hi = hi if hi > lo else lo + step
        self.lo, self.hi = lo, hi

    def __call__(self, value: float) -> float:
        if self.log:
            share = (math.log10(max(value, self.lo)) - math.log10(self.lo)) / (
                math.log10(self.hi) - math.log10(self.lo)
            )
        else:
            share = (value - self.lo) / (self.hi - self.lo)
        return round(self.start + share * (self.end - self.start), 1)

    def ticks(self) -> list[float]:
        if self.log:
            decades = range(round(math.log10(self.lo)), round(math.log10(self.hi)) + 1)
            few = len(decades) <= 3
            return [m * 10**d for d in decades for m in ((1, 2, 5) if few else (1,)) if m * 10**d <= self.hi]
        step = _nice_step(self.hi - self.lo)
        count = int(round((self.hi - self.lo) / step))
        return [self.lo + i * step for i in range(count + 1)]


def _nice_step(span: float) -> float:
    """A 1-2-5 step giving about six ticks over ``span``."""
    raw = span / 6
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def tick_text(value: float) -> str:
    if value and abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def _axes(chart: Chart, xs: _Scale, ys: _Scale) -> str:
    parts = []
    for value, text in chart.x_ticks or [(v, tick_text(v)) for v in xs.ticks()]:
        x = xs(value)
        parts.append(
            f'<line class="grid" x1="{x}" x2="{x}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>'
            + tag("text", esc(text), {"x": str(x), "y": str(HEIGHT - BOTTOM + 16), "text-anchor": "middle"})
        )
    for value in ys.ticks():
        y = ys(value)
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}"/>'
            + tag("text", esc(tick_text(value)), {"x": str(LEFT - 6), "y": str(y + 4), "text-anchor": "end"})
        )
    frame = (
        f'<path class="axis" fill="none" d="M{LEFT},{TOP}V{HEIGHT - BOTTOM}H{WIDTH - RIGHT}"/>'
        + tag(
            "text",
            esc(chart.x_label),
            {"x": str((LEFT + WIDTH - RIGHT) / 2), "y": str(HEIGHT - 8), "text-anchor": "middle"},
        )
        + tag(
            "text",
            esc(chart.y_label),
            {
                "x": "14",
                "y": str((TOP + HEIGHT - BOTTOM) / 2),
                "text-anchor": "middle",
                "transform": f"rotate(-90 14 {(TOP + HEIGHT - BOTTOM) / 2})",
            },
        )
        + tag("text", esc(chart.title), {"x": str(LEFT), "y": "16", "font-weight": "600"})
    )
    return "".join(parts) + frame


def _placeable(xs: _Scale, ys: _Scale, x: float, y: float) -> bool:
    ok = math.isfinite(x) and math.isfinite(y)
    return ok and (x > 0 or not xs.log) and (y > 0 or not ys.log)


def _line(line: Line, xs: _Scale, ys: _Scale) -> str:
    pts = [f"{xs(x)},{ys(y)}" for x, y in zip(line.xs, line.ys) if _placeable(xs, ys, x, y)]
    if len(pts) < 2:
        return ""
    s = line.style
    return tag(
        "polyline",
        tag("title", esc(s.label)),
        {
            "points": " ".join(pts),
            "fill": "none",
            "stroke": s.colour,
            "stroke-width": "2",
            "stroke-dasharray": s.dash or None,
        },
    )


def _band(band: Band, xs: _Scale, ys: _Scale) -> str:
    upper = [(x, h) for x, h in zip(band.xs, band.highs) if _placeable(xs, ys, x, h)]
    lower = [(x, lo) for x, lo in zip(band.xs, band.lows) if _placeable(xs, ys, x, lo)]
    if len(upper) < 2 or len(lower) < 2:
        return ""
    pts = " ".join(f"{xs(x)},{ys(y)}" for x, y in upper + lower[::-1])
    return tag(
        "polygon",
        tag("title", esc(band.style.label)),
        {"points": pts, "fill": band.style.colour, "fill-opacity": "0.15", "stroke": "none"},
    )


def _mark(mark: Mark, xs: _Scale, ys: _Scale) -> str:
    if not _placeable(xs, ys, mark.x, ys.hi):
        return ""
    x, s, out = xs(mark.x), mark.style, ""
    if mark.interval and all(_placeable(xs, ys, v, ys.hi) for v in mark.interval):
        a, b = xs(mark.interval[0]), xs(mark.interval[1])
        out += tag(
            "rect",
            tag("title", esc(f"{s.label}: interval")),
            {
                "x": str(a),
                "y": str(TOP),
                "width": str(max(b - a, 1)),
                "height": str(HEIGHT - BOTTOM - TOP),
                "fill": s.colour,
                "fill-opacity": "0.10",
                "stroke": s.colour,
                "stroke-dasharray": "1 3",
            },
        )
    out += tag(
        "line",
        tag("title", esc(s.label)),
        {
            "x1": str(x),
            "x2": str(x),
            "y1": str(TOP),
            "y2": str(HEIGHT - BOTTOM),
            "stroke": s.colour,
            "stroke-width": "2",
            "stroke-dasharray": s.dash or None,
        },
    )
    return out


def marker_path(shape: str, x: float, y: float, r: float = 4.5) -> str:
    """An SVG path of a marker centred on (x, y)."""
    if shape == "circle":
        return f"M{x - r:.1f},{y:.1f}a{r},{r} 0 1,0 {2 * r},0a{r},{r} 0 1,0 {-2 * r},0"
    if shape == "triangle":
        return f"M{x:.1f},{y - r:.1f}L{x + r:.1f},{y + r * 0.8:.1f}H{x - r:.1f}Z"
    if shape == "square":
        return f"M{x - r * 0.85:.1f},{y - r * 0.85:.1f}h{r * 1.7:.1f}v{r * 1.7:.1f}h{-r * 1.7:.1f}Z"
    if shape == "diamond":
        return f"M{x:.1f},{y - r:.1f}L{x + r:.1f},{y:.1f}L{x:.1f},{y + r:.1f}L{x - r:.1f},{y:.1f}Z"
    if shape == "cross":
        return f"M{x - r:.1f},{y - r:.1f}L{x + r:.1f},{y + r:.1f}M{x - r:.1f},{y + r:.1f}L{x + r:.1f},{y - r:.1f}"
    return ""


def _points(group: Points, xs: _Scale, ys: _Scale) -> str:
    s = group.style
    shape = s.marker if s.marker != "none" else "circle"
    fill = "none" if s.hollow or shape == "cross" else s.colour
    body = "".join(
        tag("path", tag("title", esc(p.tooltip)), {"class": "probe", "d": marker_path(shape, xs(p.x), ys(p.y))})
        for p in group.points
        if _placeable(xs, ys, p.x, p.y)
    )
    return tag("g", body, {"fill": fill, "stroke": s.colour, "stroke-width": "1.5", "fill-opacity": "0.75"})


def legend(styles: Sequence[Style]) -> str:
    """The chart's legend as an HTML list: a sample of each series' line and marker, and its label."""
    items = []
    for s in styles:
        sample = f'<line x1="2" x2="34" y1="8" y2="8" stroke="{esc(s.colour)}" stroke-width="2"'
        sample += f' stroke-dasharray="{esc(s.dash)}"/>' if s.dash else "/>"
        if s.marker != "none":
            fill = "none" if s.hollow or s.marker == "cross" else s.colour
            sample += tag("path", "", {"d": marker_path(s.marker, 18, 8), "fill": fill, "stroke": s.colour})
        icon = tag("svg", sample, {"width": "36", "height": "16", "aria-hidden": "true"})
        items.append(tag("li", icon + " " + esc(s.label)))
    return tag("ul", "".join(items), {"class": "legend"})


def chart_figure(chart: Chart, caption: str) -> str:
    """The chart, its legend and a caption that says what a reader without the picture needs to know."""
    return tag("figure", chart.svg() + legend(chart.styles()) + tag("figcaption", esc(caption)))
