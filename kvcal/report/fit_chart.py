"""A fit drawn into a :class:`~kvcal.report.svg.Chart`: probes with their tooltips, both curves, bands, the break-even.

Legs differ by dash and marker (recompute solid with circles, pull dashed with triangles),
runs of an overlay by colour and by filled or hollow markers, so the chart reads in grey too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvcal.fit.entry import curve_ms
from kvcal.gate.plot import crossover_near_short_end, curve_band, grid
from kvcal.records.fit import FitResult
from kvcal.report.run_data import ProbePoint
from kvcal.report.svg import Band, Chart, Line, Mark, Point, Points, Style
from kvcal.sweep.load import IDLE

LEG_COLOURS = {"recompute": "#b2182b", "pull": "#2166ac"}
LEG_LOOK = {"recompute": ("", "circle"), "pull": ("7 4", "triangle")}
BREAK_EVEN_COLOUR = "#6a3d9a"
THRESHOLD_COLOUR = "#111111"
GRID_POINTS = 120


def fit_chart(fit: FitResult, title: str) -> Chart:
    """An empty chart with the axes a fit needs (log-log when its crossover sits at the short end of a long ladder)."""
    log = crossover_near_short_end(fit)
    return Chart(
        title,
        "prefix length (tokens)" + (", log scale" if log else ""),
        "time to first token (ms)" + (", log scale" if log else ""),
        x_log=log,
        y_log=log,
    )


def lengths_for(fits: Sequence[FitResult], log: bool) -> np.ndarray:
    """One grid of lengths for every fit drawn, so overlaid curves span the same lengths."""
    ends = [grid(f, log_x=log, points=2) for f in fits]
    low, high = min(float(e[0]) for e in ends), max(float(e[-1]) for e in ends)
    return np.geomspace(max(low, 1.0), high, GRID_POINTS) if log else np.linspace(low, high, GRID_POINTS)


def draw_fit(
    chart: Chart,
    fit: FitResult,
    probes: Sequence[ProbePoint],
    *,
    run: str = "",
    colour: str | None = None,
    hollow: bool = False,
    lengths: np.ndarray | None = None,
) -> None:
    """Add one fit: each leg's probes (tooltips), fitted curve and bootstrap band, the break-even and its interval."""
    n = lengths if lengths is not None else lengths_for([fit], chart.x_log)
    prefix = f"{run}: " if run else ""
    for leg in ("recompute", "pull"):
        curve = getattr(fit, leg)
        dash, marker = LEG_LOOK[leg]
        c = colour or LEG_COLOURS[leg]
        line = Style(f"{prefix}{leg} fit ({curve.model})", c, dash)
        chart.lines.append(Line(line, n.tolist(), curve_ms(curve, n).tolist()))
        band = curve_band(fit, leg, n)
        if band is not None:
            chart.bands.append(Band(line, n.tolist(), band[0].tolist(), band[1].tolist()))
        for state in dict.fromkeys(p.load_state for p in probes if p.leg == leg):
            shown = [
                Point(p.prefix_tokens, p.ttft_ms, f"{prefix}{p.tooltip()}")
                for p in probes
                if p.leg == leg and p.load_state == state
            ]
            busy = state not in (None, IDLE)  # a loaded run's busy probes: not what the idle curves were fitted to
            label = f"{prefix}{leg} probes" + (f", {state} (not fitted)" if busy else "")
            chart.points.append(Points(Style(label, c, "", "cross" if busy else marker, hollow), shown))
    if fit.break_even_tokens is not None:
        ci = fit.break_even_ci
        interval = (float(ci[0]), float(ci[1])) if ci else None
        label = f"{prefix}break-even {fit.break_even_tokens:,.0f} tokens"
        if interval:
            label += f" ({fit.confidence:.0%} interval {interval[0]:,.0f}-{interval[1]:,.0f})"
        chart.marks.append(Mark(Style(label, colour or BREAK_EVEN_COLOUR, "2 3"), fit.break_even_tokens, interval))


def draw_threshold(chart: Chart, tokens: int, label: str) -> None:
    chart.marks.append(Mark(Style(label, THRESHOLD_COLOUR, "9 3 2 3"), float(tokens)))
