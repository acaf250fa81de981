"""The page of a comparison (``kvcal report --compare``, ``kvcal compare --html``): the regression verdict first,
then both runs on one plot, the compared quantities, and what changed in the setup between them.

Every figure comes from compare's own :class:`~kvcal.gate.regression.Comparison` and the two
fits; each run's ``status``, ``break_even_tokens`` and ``minCachedTokenDelta`` carry
``data-kvcal`` with ``data-kvcal-run`` naming the side (``baseline``, ``current``).
"""

from __future__ import annotations

from kvcal.gate.compare import TABLE_HEADER, table_rows
from kvcal.gate.history import flat_provenance, provenance_changes
from kvcal.gate.regression import Comparison
from kvcal.report.fit_chart import draw_fit, draw_threshold, fit_chart, lengths_for
from kvcal.report.html import bullets, cell, esc, figure, paragraph, section, table, tag
from kvcal.report.run_data import RunData, run_data_of
from kvcal.report.svg import chart_figure

NAV = (("verdict", "Verdict"), ("plot", "Both runs"), ("quantities", "Quantities"), ("changes", "Changed setup"))
RUN_COLOURS = {"baseline": "#1b7837", "current": "#762a83"}


def run_figures(run: RunData, role: str) -> str:
    """One run's headline figures: status and break-even (fit.json's), the threshold (emit-config's JSON)."""
    threshold = run.emitted.threshold
    if threshold is None:
        emitted = figure(
            "minCachedTokenDelta", None, run=role, reason=(run.emitted.refusal or "no threshold").split(";", 1)[0]
        )
    else:
        emitted = figure("minCachedTokenDelta", threshold.min_cached_token_delta, run=role)
    return tag(
        "li",
        tag("strong", esc(f"{role} ({run.label}): "))
        + "status "
        + figure("status", run.fit.status, run=role)
        + ", break-even "
        + figure("break_even_tokens", run.fit.break_even_tokens, run=role)
        + esc(" tokens, minCachedTokenDelta ")
        + emitted,
    )


def compare_body(result: Comparison) -> str:
    runs = {"baseline": run_data_of(result.baseline), "current": run_data_of(result.current)}
    verdict = tag("p", esc(result.verdict), {"class": "big"})
    verdict += paragraph(
        f"Tolerance {result.tolerance:.0%}, confidence {result.confidence:.0%}: a regression is a "
        "break-even move beyond the tolerance that the fits' bootstrap draws call significant, in "
        "either direction, or a pull that no longer wins (docs/ci.md)."
    )
    verdict += tag("ul", "".join(run_figures(run, role) for role, run in runs.items()))
    if result.deployed is not None:
        verdict += paragraph(f"Deployed threshold ({result.deployed.origin}): {result.deployed.message}")
    verdict = tag("div", verdict, {"class": "verdict refused" if result.regression else "verdict"})
    return "".join(
        (
            section("Regression verdict", verdict, anchor="verdict"),
            _plot(result, runs),
            _quantities(result),
            _changes(result),
        )
    )


def _plot(result: Comparison, runs: dict[str, RunData]) -> str:
    fits = [run.fit for run in runs.values()]
    chart = fit_chart(fits[0], "baseline and current: time to first token against prefix length")
    n = lengths_for(fits, chart.x_log)
    for role, run in runs.items():
        draw_fit(
            chart,
            run.fit,
            run.probes,
            run=f"{role} {run.label}",
            colour=RUN_COLOURS[role],
            hollow=role == "current",
            lengths=n,
        )
    if result.deployed is not None:
        draw_threshold(
            chart,
            result.deployed.threshold_tokens,
            f"deployed {result.deployed.threshold_tokens:,} ({result.deployed.verdict})",
        )
    caption = (
        "Baseline filled, current hollow; recompute solid with circles, pull dashed with triangles; the dotted "
        "lines are each run's break-even with its interval shaded. Hover a probe for its record."
    )
    return section("Both runs", chart_figure(chart, caption), anchor="plot")


def _quantities(result: Comparison) -> str:
    header = [*TABLE_HEADER, "note"]
    rows = [[cell(text) for text in cells] for cells in table_rows(result, notes=True)]
    body = table(header, rows, caption="Each fitted quantity, baseline against current; change with its interval")
    return section("Quantities", body + bullets(result.notes), anchor="quantities")


def _changes(result: Comparison) -> str:
    changed = provenance_changes(flat_provenance(result.baseline), flat_provenance(result.current))
    body = bullets(changed) if changed else paragraph("Nothing recorded differs between the two runs' setups.")
    return section("Changed setup between baseline and current", body, anchor="changes")
