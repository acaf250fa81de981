"""The page of a history (``kvcal report --history RUN...``): the newest run judged against the oldest, the
break-even and the costs over runs, and what changed at each step.

Runs are ordered and labelled by :func:`kvcal.gate.history.build_history`, the regression
verdict is :func:`kvcal.gate.regression.compare_runs` of the newest against the oldest; each
run's ``status`` and ``break_even_tokens`` carry ``data-kvcal`` with ``data-kvcal-run`` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvcal.gate.history import HEADER, HistoryEntry, table_rows
from kvcal.gate.regression import compare_runs
from kvcal.records.fit import FitResult
from kvcal.report.html import bullets, cell, esc, figure, paragraph, section, table, tag
from kvcal.report.svg import Band, Chart, Line, Point, Points, Style, chart_figure

NAV = (("verdict", "Verdict"), ("trend", "Over runs"), ("runs", "Runs"))
LEG_LOOK = {"recompute": ("#b2182b", "", "circle"), "pull": ("#2166ac", "7 4", "triangle")}


def history_body(entries: Sequence[HistoryEntry]) -> str:
    return "".join((_verdict(entries), _trend(entries), _runs(entries)))


def _verdict(entries: Sequence[HistoryEntry]) -> str:
    figures = "".join(
        tag(
            "li",
            tag("strong", esc(f"#{i} {e.run.label} ({e.run_time}): "))
            + "status "
            + figure("status", e.run.fit.status, run=e.run.label)
            + ", break-even "
            + figure("break_even_tokens", e.run.fit.break_even_tokens, run=e.run.label)
            + esc(f" tokens; {e.change_label}"),
        )
        for i, e in enumerate(entries, start=1)
    )
    if len(entries) < 2:
        head = paragraph("One run: nothing to compare yet.")
    else:
        first, last = entries[0].run, entries[-1].run
        result = compare_runs(first, last, force=True)
        head = tag("p", esc(f"{last.label} against {first.label}: {result.verdict}"), {"class": "big"})
        head += bullets(result.notes)
    body = tag("div", head + tag("ol", figures), {"class": "verdict"})
    return section("Regression verdict (newest against oldest)", body, anchor="verdict")


def _run_ticks(entries: Sequence[HistoryEntry]) -> list[tuple[float, str]]:
    return [(float(i), f"#{i + 1}") for i in range(len(entries))]


def break_even_chart(entries: Sequence[HistoryEntry]) -> Chart:
    chart = Chart(
        "break-even over runs (ordered by run time)",
        "run (oldest first)",
        "break-even (tokens)",
        x_ticks=_run_ticks(entries),
    )
    style = Style("break-even with its interval", "#6a3d9a", "", "diamond")
    crossing = [(i, e) for i, e in enumerate(entries) if e.run.fit.break_even_tokens is not None]
    xs = [float(i) for i, _ in crossing]
    values = [float(e.run.fit.break_even_tokens or 0.0) for _, e in crossing]
    lows = [_ci(e.run.fit, 0) for _, e in crossing]
    highs = [_ci(e.run.fit, 1) for _, e in crossing]
    chart.bands.append(Band(style, xs, lows, highs))
    chart.lines.append(Line(style, xs, values))
    chart.points.append(Points(style, [Point(x, v, _tooltip(e)) for x, v, (_, e) in zip(xs, values, crossing)]))
    return chart


def _ci(fit: FitResult, end: int) -> float:
    return float(fit.break_even_ci[end]) if fit.break_even_ci else float(fit.break_even_tokens or 0.0)


def _tooltip(entry: HistoryEntry) -> str:
    fit = entry.run.fit
    ci = f" [{fit.break_even_ci[0]:,.0f}, {fit.break_even_ci[1]:,.0f}]" if fit.break_even_ci else ""
    be = "none" if fit.break_even_tokens is None else f"{fit.break_even_tokens:,.0f}"
    return f"{entry.run.label}\n{entry.run_time}\n{fit.status}, break-even {be}{ci}\n{entry.change_label}"


def cost_chart(entries: Sequence[HistoryEntry], coefficient: str, label: str) -> Chart:
    chart = Chart(f"{label} over runs", "run (oldest first)", label, x_ticks=_run_ticks(entries))
    xs = [float(i) for i in range(len(entries))]
    for leg, (colour, dash, marker) in LEG_LOOK.items():
        style = Style(f"{leg} {label}", colour, dash, marker)
        values = [float(getattr(getattr(e.run.fit, leg), coefficient)) for e in entries]
        chart.lines.append(Line(style, xs, values))
        chart.points.append(
            Points(
                style,
                [
                    Point(x, v, f"{e.run.label}: {leg} {label} {v:.4g}\n{e.change_label}")
                    for x, v, e in zip(xs, values, entries)
                ],
            )
        )
    return chart


def _trend(entries: Sequence[HistoryEntry]) -> str:
    body = chart_figure(
        break_even_chart(entries),
        "The break-even of each run that crossed, with its interval shaded; "
        "hover a run for its time, status and what changed.",
    )
    body += chart_figure(cost_chart(entries, "per_token_us", "us per token"), "Each leg's per-token cost over runs.")
    body += chart_figure(cost_chart(entries, "intercept_ms", "fixed cost ms"), "Each leg's fixed cost over runs.")
    return section("Over runs", body, anchor="trend")


def _runs(entries: Sequence[HistoryEntry]) -> str:
    rows = [[cell(text) for text in cells] for cells in table_rows(list(entries))]
    return section("Runs and what changed", table(HEADER, rows, sortable=True), anchor="runs")
