"""Assembling ``fit.json``: point fits, break-even, bootstrap summaries and advice into a FitResult.

Everything numeric here is derived from :mod:`curves`, :mod:`breakeven` and
:mod:`bootstrap`; this module only summarises (percentile intervals, shares) and
words the warnings, each of which says what to run next.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

import numpy as np

from kvcal import __version__
from kvcal.cost_curve import COEFS, cost_ms
from kvcal.fit.bootstrap import BootstrapResult
from kvcal.fit.breakeven import (
    STATUSES,
    break_even_tokens,
    classify,
    classify_many,
    interval,
    reconcile,
    status_warning,
)
from kvcal.fit.curves import LegFit
from kvcal.fit.tables import ProbeTable
from kvcal.fit.wins import per_length, pull_won_from
from kvcal.fit_record import BootstrapSummary, CurveFit, FitResult, FitSettings

MEASURED_DISAGREE_MIN = 0.05  # a fitted winner contradicting the medians is reported when they differ by > 5%


def sig6(value: float | None) -> float | None:
    """Round to 6 significant digits (samples in fit.json); None and inf become None."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.6g}")


def build_result(
    table: ProbeTable,
    recompute: LegFit,
    pull: LegFit,
    boot: BootstrapResult | None,
    settings: FitSettings,
    *,
    notes: list[str],
) -> FitResult:
    """The FitResult for one campaign (``boot`` None when no interval could be computed)."""
    n_min, n_max = min(table.lengths), max(table.lengths)
    point = float(break_even_tokens(recompute.chosen_fit.coef, pull.chosen_fit.coef))
    rows = per_length(table, recompute.sigma_rel, pull.sigma_rel)
    status, extrapolated = reconcile(*classify(point, n_min, n_max), point, rows)  # the status the medians allow
    warnings = list(table.warnings) + list(notes)
    advice = status_warning(status, point, extrapolated, n_min, n_max, table.block_size, rows)
    if advice:
        warnings.append(advice)
    warnings += _disagreements(table, recompute, pull)
    warnings += _downweight_notes(recompute) + _downweight_notes(pull)

    ci, boot_summary, coef_ci = _interval_summary(boot, recompute, pull, point, (n_min, n_max), settings, warnings)

    return FitResult(
        status=status,
        break_even_tokens=round(point, 1) if math.isfinite(point) else None,
        break_even_ci=ci,
        confidence=settings.confidence,
        extrapolated=extrapolated,
        measured_range=[int(n_min), int(n_max)],
        recompute=_curve(recompute, coef_ci["recompute"]),
        pull=_curve(pull, coef_ci["pull"]),
        block_size=table.block_size,
        warnings=warnings,
        n_probes=len(table.probes),
        n_invalid_excluded=table.n_invalid_excluded,
        smallest_pull_win_tokens=smallest_pull_win(table),
        pull_bandwidth_gbps=pull_bandwidth_gbps(table),
        pulls_by_proof=dict(table.pulls_by_proof),
        per_length=rows,
        pull_won_from_tokens=pull_won_from(rows),
        bootstrap=BootstrapSummary(**boot_summary),
        setup=table.setup,
        source=table.origin,
        kvcal_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _interval_summary(
    boot: BootstrapResult | None,
    recompute: LegFit,
    pull: LegFit,
    point: float,
    measured: tuple[int, int],
    settings: FitSettings,
    warnings: list[str],
) -> tuple[list[float] | None, dict[str, Any], dict[str, dict[str, list[float | None]]]]:
    """The break-even's interval, the bootstrap's summary and each coefficient's interval; adds to ``warnings``."""
    confidence, seed, n_resamples = settings.confidence, settings.seed, settings.n_resamples
    n_min, n_max = measured
    ci: list[float] | None = None
    boot_summary: dict[str, Any] = {"n_resamples": 0, "seed": seed}
    coef_ci: dict[str, dict[str, list[float | None]]] = {"recompute": {}, "pull": {}}
    if boot is not None:
        low, high = interval(boot.break_even, confidence)
        if boot.break_even_upper is not None:  # a stall or a mode: the union of the fast and the mean-cost intervals
            high = max(high, interval(boot.break_even_upper, confidence)[1])
        no_cross = float(np.mean(~np.isfinite(boot.break_even)))
        if math.isfinite(point) and math.isfinite(high):
            ci = [round(low, 1), round(high, 1)]
        elif math.isfinite(point):
            warnings.append(
                f"the {confidence:.0%} interval of the break-even is open above: {no_cross:.0%} of resamples "
                "found no break-even; add reps and longer lengths to bound it"
            )
        shares = {s: float(np.mean(classify_many(boot.break_even, n_min, n_max) == s)) for s in STATUSES}
        if 0.2 <= boot.quadratic_share <= 0.8 and len(recompute.fits) == 2:
            warnings.append(
                f"affine versus quadratic recompute is uncertain (quadratic in {boot.quadratic_share:.0%} of "
                "resamples): add longer lengths to pin the curvature down"
            )
        methods = set(boot.methods.values())
        boot_summary = {
            "n_resamples": n_resamples,
            "seed": seed,
            "method": methods.pop() if len(methods) == 1 else "; ".join(f"{k}: {v}" for k, v in boot.methods.items()),
            "methods": dict(boot.methods),
            "no_crossover_share": no_cross,
            "status_shares": shares,
            "quadratic_share": boot.quadratic_share,
            "residual_df": boot.df,
            "t_expansion": sig6(boot.expansion),
            "break_even_ci_bounds": [sig6(low), sig6(high)],
            "break_even_samples": [sig6(v) for v in boot.break_even],
        }
        for leg_fit in (recompute, pull):
            name = leg_fit.data.name
            samples = boot.coef[name]
            boot_summary[f"{name}_samples"] = {c: [sig6(v) for v in samples[:, j]] for j, c in enumerate(COEFS)}
            coef_ci[name] = {c: [sig6(x) for x in interval(samples[:, j], confidence)] for j, c in enumerate(COEFS)}
        if "residual" in boot.methods.values():
            warnings.append(
                "some lengths have a single probe: intervals come from the residuals of a few points "
                "and are rough; sweep with --reps 3 or more"
            )
    return ci, boot_summary, coef_ci


def _curve(fit: LegFit, ci: dict[str, list[float | None]]) -> CurveFit:
    chosen = fit.chosen_fit
    alternatives = {
        m: {**dict(zip(COEFS, (sig6(v) for v in f.coef))), "wsse": sig6(f.wsse), "n_params": f.n_params}
        for m, f in fit.fits.items()
    }
    return CurveFit(
        model=chosen.model,
        intercept_ms=float(chosen.coef[0]),
        per_token_us=float(chosen.coef[1]),
        per_token2_ns=float(chosen.coef[2]),
        ci=ci,
        alternatives=alternatives,
        selection=fit.selection,
        downweighted=fit.downweighted,
        noise_cv=sig6(fit.sigma_rel),
        robust_f_scale=sig6(fit.f_scale),
    )


def smallest_pull_win(table: ProbeTable) -> int | None:
    """Smallest measured length at which the pull's median TTFT beat recompute's."""
    med = table.medians().dropna()
    wins = med[med["pull_ms"] < med["recompute_ms"]]
    return int(wins["prefix_tokens"].min()) if len(wins) else None


def pull_bandwidth_gbps(table: ProbeTable) -> float | None:
    """Achieved pull bandwidth in GB/s (1e9 bytes/s): median bytes_moved / ttft at the longest length with bytes."""
    rows = table.leg("pull")
    rows = rows[rows["bytes_moved"].notna()]
    rows = rows[rows["bytes_moved"] > 0]
    if rows.empty:
        return None
    longest = rows[rows["prefix_tokens"] == rows["prefix_tokens"].max()]
    rate = longest["bytes_moved"].astype(float) / (longest["ttft_ms"] / 1e3) / 1e9
    return sig6(float(np.median(rate)))


def _disagreements(table: ProbeTable, recompute: LegFit, pull: LegFit) -> list[str]:
    med = table.medians().dropna()
    if med.empty:
        return []
    n = med["prefix_tokens"].to_numpy(dtype=float)
    fitted_gap = cost_ms(recompute.chosen_fit.coef, n) - cost_ms(pull.chosen_fit.coef, n)
    measured_gap = (med["recompute_ms"] - med["pull_ms"]).to_numpy()
    rel = np.abs(measured_gap) / med["recompute_ms"].to_numpy()
    bad = (np.sign(fitted_gap) != np.sign(measured_gap)) & (rel > MEASURED_DISAGREE_MIN)
    out = []
    for i in np.flatnonzero(bad):
        winner = "pull" if measured_gap[i] > 0 else "recompute"
        out.append(
            f"at {int(n[i])} tokens the measured medians favour the {winner} by {rel[i]:.0%} but the fitted "
            "curves do not: the model misfits there; add reps or lengths around it"
        )
    return out


def _downweight_notes(fit: LegFit) -> list[str]:
    if not fit.downweighted:
        return []
    shown = ", ".join(
        f"{d['prefix_tokens']} tokens rep {d['rep']}: {d['ttft_ms']:.1f} ms vs fitted {d['fitted_ms']:.1f}"
        for d in fit.downweighted[:3]
    )
    more = f" and {len(fit.downweighted) - 3} more" if len(fit.downweighted) > 3 else ""
    return [
        f"{fit.data.name}: the robust loss down-weighted {len(fit.downweighted)} probe(s) ({shown}{more}); "
        "look for a scheduler hiccup or rerun those lengths"
    ]
