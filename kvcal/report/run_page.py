"""The page of one run: the verdict first, then the fit plot, the per-length table, the derivation, the records.

Headline figures carry ``data-kvcal`` named as in the JSON that holds them:
``minCachedTokenDelta`` (emit-config's JSON; ``none`` and the reason when it refuses),
``break_even_tokens`` and ``status`` (fit.json's). emit-config's JSON object is shown whole,
every key, so keys the emit stage adds appear without a change here.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median

from kvcal.fit.entry import curve_ms
from kvcal.records.fit import FitResult, LengthSummary
from kvcal.report.fit_chart import draw_fit, draw_threshold, fit_chart
from kvcal.report.html import bullets, cell, esc, figure, fmt, key_values, paragraph, section, table, tag
from kvcal.report.provenance import disturbance_section, provenance_section
from kvcal.report.run_data import RunData
from kvcal.report.svg import chart_figure
from kvcal.threshold.rules import rule_named

NAV = (
    ("verdict", "Verdict"),
    ("plot", "Fit"),
    ("lengths", "Per length"),
    ("derivation", "Derivation"),
    ("curves", "Curves"),
    ("disturbance", "Disturbance"),
    ("provenance", "Provenance"),
)


def run_body(run: RunData) -> str:
    """Every section of a run's page, in reading order."""
    return "".join(
        (
            verdict_section(run),
            plot_section(run),
            lengths_section(run),
            derivation_section(run),
            curves_section(run.fit),
            disturbance_section(run.fit),
            provenance_section(run),
        )
    )


def threshold_figure(run: RunData) -> str:
    """``minCachedTokenDelta`` as emit-config's JSON gives it, or ``none`` and why (its refusal's first clause)."""
    if run.emitted.threshold is None:
        reason = (run.emitted.refusal or "no threshold").split(";", 1)[0]
        return figure("minCachedTokenDelta", None, reason=reason)
    return figure("minCachedTokenDelta", run.emitted.threshold.min_cached_token_delta)


def verdict_section(run: RunData) -> str:
    fit, emitted = run.fit, run.emitted
    interval = (
        f"; {fit.confidence:.0%} interval {fmt(fit.break_even_ci[0])} to {fmt(fit.break_even_ci[1])} tokens"
        if fit.break_even_ci
        else ""
    )
    head = tag("p", "minCachedTokenDelta " + threshold_figure(run), {"class": "big"})
    head += tag(
        "p",
        "status "
        + figure("status", fit.status)
        + ", break-even "
        + figure("break_even_tokens", fit.break_even_tokens)
        + esc(
            f"{'' if fit.break_even_tokens is None else ' tokens'}{interval}; {fit.n_probes} probes over "
            f"{fmt(fit.measured_range[0])} to "
            f"{fmt(fit.measured_range[1])} tokens"
        ),
    )
    body = head + rule_text(run)
    if emitted.refusal:
        body += tag("p", tag("strong", "Refused: ") + esc(emitted.refusal), {"class": "refusal"})
    warnings = [*emitted.warnings, *fit.warnings]
    if warnings:
        body += tag("h3", "Warnings") + bullets(dict.fromkeys(warnings), cls="warn")
    body = tag("div", body, {"class": "verdict refused" if emitted.refusal else "verdict"})
    if emitted.json is not None:
        body += tag("h3", "emit-config --format json, every key") + key_values(emitted.json, figures=True, compact=True)
    return section("Verdict", body, anchor="verdict")


def rule_text(run: RunData) -> str:
    """The rule that made the threshold, and what it gives up: the saving a pull would have made at the threshold."""
    t = run.emitted.threshold
    if t is None:
        return ""
    rule = rule_named(t.rule).report_words(t.margin, t.block_size)
    figures = t.figures
    if figures.expected_regret_ms is not None and figures.expected_regret_pct is not None:
        rule += (
            f" Its expected regret over the bootstrap draws: {figures.expected_regret_ms:.3g} ms a request "
            f"({figures.expected_regret_pct:.3g} % of the expected TTFT)"
            + (
                f"; the break-even lies above it with probability {figures.p_break_even_above:.2f}."
                if figures.p_break_even_above is not None
                else "."
            )
        )
    n = t.min_cached_token_delta
    recompute, pull = float(curve_ms(run.fit.recompute, n)), float(curve_ms(run.fit.pull, n))
    saving = recompute - pull
    if saving > 0:
        cost = (
            f"What it costs: prefixes shorter than {n:,} tokens recompute, so a request just under the threshold "
            f"gives up up to {saving:.3g} ms ({saving / recompute:.0%} of its fitted recompute TTFT of "
            f"{recompute:.3g} ms); above it the router pulls."
        )
    else:
        cost = f"At the threshold the fitted pull does not yet save time ({-saving:.3g} ms slower): the floor set it."
    return paragraph(rule) + paragraph(cost)


def plot_section(run: RunData) -> str:
    fit = run.fit
    chart = fit_chart(fit, f"{run.label}: time to first token against prefix length")
    draw_fit(chart, fit, run.probes)
    if run.emitted.threshold is not None:
        tokens = run.emitted.threshold.min_cached_token_delta
        draw_threshold(chart, tokens, f"minCachedTokenDelta {tokens:,}")
    caption = (
        f"{len(run.probes)} probes (hover one for its length, leg, rep, TTFT, bytes moved, the counter that proved "
        f"them and the host's load); lines: fitted curves with their {fit.confidence:.0%} bootstrap bands."
    )
    if not run.probes:
        caption = "The probes behind this fit were not found: curves only."
    return section("Fit", chart_figure(chart, caption), anchor="plot")


def per_length(run: RunData) -> tuple[list[LengthSummary], str]:
    """fit.json's per-length medians; for a fit.json made before it kept them, the medians of the probes shown."""
    if run.fit.per_length:
        return list(run.fit.per_length), "Medians per measured length, as fit.json records them"
    times: dict[int, dict[str, list[float]]] = defaultdict(lambda: {"recompute": [], "pull": []})
    for probe in run.probes:
        times[probe.prefix_tokens].setdefault(probe.leg, []).append(probe.ttft_ms)
    rows = []
    for n, legs in sorted(times.items()):
        rec, pull = (median(legs[leg]) if legs[leg] else None for leg in ("recompute", "pull"))
        rows.append(
            LengthSummary(
                prefix_tokens=n,
                recompute_ms=rec,
                pull_ms=pull,
                n_recompute=len(legs["recompute"]),
                n_pull=len(legs["pull"]),
                pull_won=None if rec is None or pull is None else pull < rec,
                pull_won_measurably=None,
            )
        )
    return rows, (
        "Medians per length of the probes above (this fit.json predates per-length records, so whether a "
        "win was measurable is not known)"
    )


def lengths_section(run: RunData) -> str:
    rows = []
    summaries, caption = per_length(run)
    for r in summaries:
        saving = (r.recompute_ms - r.pull_ms) / r.recompute_ms if r.recompute_ms and r.pull_ms else None
        rows.append(
            [
                cell(fmt(r.prefix_tokens), r.prefix_tokens),
                cell(fmt(r.recompute_ms), r.recompute_ms),
                cell(fmt(r.pull_ms), r.pull_ms),
                cell("—" if saving is None else f"{saving:+.1%}", saving),
                cell(str(r.n_recompute), r.n_recompute),
                cell(str(r.n_pull), r.n_pull),
                cell(_yes_no(r.pull_won)),
                cell(_yes_no(r.pull_won_measurably)),
            ]
        )
    header = [
        "prefix tokens",
        "recompute median ms",
        "pull median ms",
        "pull saving",
        "recompute probes",
        "pull probes",
        "pull won",
        "won measurably",
    ]
    body = (
        table(header, rows, sortable=True, caption=f"{caption} (click a column to sort)")
        if rows
        else paragraph("Neither the fit nor its probes give per-length medians (the probes were not found).")
    )
    return section("Per length", body, anchor="lengths")


def _yes_no(value: bool | None) -> str:
    return "—" if value is None else "yes" if value else "no"


def derivation_section(run: RunData) -> str:
    t = run.emitted.threshold
    if t is None:
        body = paragraph("No threshold was derived: " + (run.emitted.refusal or "emit-config refused."), "refusal")
    else:
        body = bullets(t.steps, ordered=True)
    steps = t.steps if t is not None else ()
    return section(
        "Threshold derivation", body + bullets(n for n in run.emitted.notes if n not in steps), anchor="derivation"
    )


def curves_section(fit: FitResult) -> str:
    rows = []
    for leg in ("recompute", "pull"):
        curve = getattr(fit, leg)
        for name, unit in (("intercept_ms", "ms"), ("per_token_us", "us/token"), ("per_token2_ns", "ns/token²")):
            ci = curve.ci.get(name)
            rows.append(
                [
                    cell(leg),
                    cell(curve.model),
                    cell(f"{name} ({unit})"),
                    cell(fmt(getattr(curve, name))),
                    cell(f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci and len(ci) == 2 else "—"),
                ]
            )
    body = table(["leg", "model", "coefficient", "value", f"{fit.confidence:.0%} interval"], rows)
    if fit.pull_bandwidth_gbps is not None:
        body += paragraph(f"Achieved pull bandwidth {fmt(fit.pull_bandwidth_gbps)} GB/s.")
    if fit.pulls_by_proof:
        body += paragraph("Pulls proved by: " + "; ".join(f"{k}: {v}" for k, v in fit.pulls_by_proof.items()))
    return section("Curves", body, anchor="curves")
