"""The page of a fleet study (``kvcal report --fleet FLEET_JSON``): the recommended threshold and why, the
what-if table and its plots.

The input is what ``kvcal fleet --json`` prints (:class:`~kvcal.fleet.result.FleetResult`);
its top-level keys are shown whole (``data-kvcal`` on each), so keys the fleet stage adds
appear without a change here; ``recommended_threshold`` is the headline.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from kvcal.errors import InputError
from kvcal.files.reading import load_json, read_text
from kvcal.fleet.policies import policy_class, policy_classes
from kvcal.fleet.result import Figure, FleetResult, FleetRow, checked_result
from kvcal.report.html import bullets, cell, figure, fmt, key_values, paragraph, section, table, tag
from kvcal.report.svg import Chart, Line, Mark, Point, Points, Style, chart_figure

NAV = (("verdict", "Recommendation"), ("plot", "Plots"), ("whatif", "What-if table"), ("keys", "Every key"))
LOAD_LOOK = (
    ("#2166ac", "", "circle"),
    ("#b35806", "7 4", "triangle"),
    ("#1b7837", "2 3", "square"),
    ("#762a83", "9 3 2 3", "diamond"),
)
SHOWN_ELSEWHERE = ("rows", "loads")


def load_fleet(path: Path) -> FleetResult:
    """A ``kvcal fleet --json`` result; InputError naming the file when it is not one."""
    text = read_text(path, f"fleet result {path}")
    try:
        return checked_result(FleetResult.model_validate(load_json(text)), str(path))
    except (json.JSONDecodeError, RecursionError):
        raise InputError(
            f"{path}: not a kvcal fleet result (not JSON; write one with `kvcal fleet ... --json > fleet.json`)"
        ) from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        raise InputError(f"{path}: not a kvcal fleet result (kvcal.fleet/1): {where}: {first.get('msg')}") from None


def fleet_body(result: FleetResult) -> str:
    return "".join((_verdict(result), _plots(result), _what_if(result), _keys(result)))


def _verdict(result: FleetResult) -> str:
    reason = result.recommended_reason
    head = tag(
        "p",
        "recommended minCachedTokenDelta "
        + figure(
            "recommended_threshold",
            result.recommended_threshold,
            reason=None if result.recommended_threshold else reason,
        ),
        {"class": "big"},
    )
    head += paragraph(
        f"{result.pods} pods, {result.seeds} seeds x {max(1, result.resamples)} cost sets, "
        f"{result.duration_s:g} s simulated; the fleet optimum by {result.best_rule}: "
        f"{fmt(result.best_threshold)} tokens; emit-config's idle threshold: {fmt(result.idle_threshold)}."
    )
    if reason and result.recommended_threshold:
        head += paragraph(f"Why: {reason}")
    head += tag("h3", "How it was reached") + bullets(result.recommended_steps, ordered=True)
    if result.warnings:
        head += tag("h3", "Warnings") + bullets(result.warnings, cls="warn")
    head += bullets(result.notes)
    return section("Recommendation", tag("div", head, {"class": "verdict"}), anchor="verdict")


def _threshold_rows(rows: list[FleetRow]) -> list[FleetRow]:
    return sorted((r for r in rows if policy_class(r.policy).swept and r.threshold), key=lambda r: r.threshold or 0)


def fleet_chart(result: FleetResult, key: str, label: str) -> Chart:
    chart = Chart(f"{label} against the threshold", "minCachedTokenDelta (tokens), log scale", label, x_log=True)
    loads = [(result.rows, f"rate {result.rate:g}/s" if result.rate else "given load")]
    loads += [(load.rows, f"rate {load.rate:g}/s" if load.rate else "load") for load in result.loads]
    every = [r.threshold for r in _threshold_rows(result.rows) if r.threshold]
    span = [float(min(every)), float(max(every))] if every else [1.0, 2.0]
    for (rows, name), (colour, dash, marker) in zip(loads, LOAD_LOOK * (1 + len(loads) // len(LOAD_LOOK))):
        points = _threshold_rows(rows)
        style = Style(f"{name}: threshold policy", colour, dash, marker)
        xs = [float(r.threshold or 0) for r in points]
        ys = [getattr(r, key).value for r in points]
        chart.lines.append(Line(style, xs, ys))
        chart.points.append(Points(style, [Point(x, y, _tooltip(r, name)) for x, y, r in zip(xs, ys, points)]))
        for policy, line_dash in ((c.name, c.flat_line[1]) for c in policy_classes() if c.flat_line):
            for r in (r for r in rows if r.policy == policy):
                chart.lines.append(
                    Line(Style(f"{name}: {policy}", colour, line_dash), span, [getattr(r, key).value] * 2)
                )
    if result.recommended_threshold:
        chart.marks.append(
            Mark(
                Style(f"recommended {result.recommended_threshold:,}", "#111111", "9 3 2 3"),
                float(result.recommended_threshold),
            )
        )
    if result.idle_threshold:
        chart.marks.append(
            Mark(Style(f"idle (emit-config) {result.idle_threshold:,}", "#6a3d9a", "2 3"), float(result.idle_threshold))
        )
    return chart


def _tooltip(row: FleetRow, load: str) -> str:
    figures = [
        f"{name} {value.value:.4g} [{value.ci[0]:.4g}, {value.ci[1]:.4g}]"
        for name, value in row
        if isinstance(value, Figure)
    ]
    return "\n".join([f"{load}, threshold {row.threshold:,}" if row.threshold else load, *figures])


def _plots(result: FleetResult) -> str:
    body = chart_figure(
        fleet_chart(result, "ttft_p90_ms", "TTFT p90 (ms)"),
        "TTFT p90 at each threshold (lower is better); flat lines: no-p2p (dotted) and always-pull "
        "(dashed); hover a point for every figure with its interval.",
    )
    body += chart_figure(
        fleet_chart(result, "goodput_rps", "goodput (requests/s)"),
        "Goodput at each threshold (higher is better): completed requests per second within the SLO.",
    )
    return section("Plots", body, anchor="plot")


def _what_if(result: FleetResult) -> str:
    names = [name for name, value in result.rows[0] if isinstance(value, Figure)] if result.rows else []
    rows = []
    for r in result.rows:
        cells = [cell(r.policy), cell(fmt(r.threshold), r.threshold if r.threshold is not None else "")]
        for name in names:
            value: Figure = getattr(r, name)
            cells.append(cell(f"{value.value:.4g} [{value.ci[0]:.3g}, {value.ci[1]:.3g}]", value.value))
        rows.append(cells)
    body = table(
        ["policy", "threshold", *names],
        rows,
        sortable=True,
        caption="Every policy at the given load: mean over the runs [interval] (click a column to sort)",
    )
    return section("What-if table", body, anchor="whatif")


def _keys(result: FleetResult) -> str:
    data = result.model_dump(mode="json", by_alias=True)
    shown = {key: value for key, value in data.items() if key not in SHOWN_ELSEWHERE}
    return section(
        "Every key of the fleet result",
        key_values(shown, figures=True) + paragraph("rows and loads are the table and plots above."),
        anchor="keys",
    )
