"""Fitting one probe table: both legs' curves, the break-even and its bootstrap interval."""

from __future__ import annotations

import logging
import math

from kvcal.errors import InputError
from kvcal.fit.bootstrap import residual_df, run_bootstrap
from kvcal.fit.breakeven import break_even_tokens
from kvcal.fit.costmodel import fit_cost_model
from kvcal.fit.costmodel_inputs import idle_curves
from kvcal.fit.curves import LegData, LegFit, fit_leg
from kvcal.fit.drift import describe as describe_trend
from kvcal.fit.drift import time_trends
from kvcal.fit.guards import annotate, exclude_warmup
from kvcal.fit.mean_cost import summarise as summarise_mean_cost
from kvcal.fit.modes import PullCost, describe_unresolved, pull_cost, too_few_probes
from kvcal.fit.modes import describe as describe_mode
from kvcal.fit.result import build_result
from kvcal.fit.tables import ProbeTable
from kvcal.fit_record import FIT_DEFAULTS, FitResult, FitSettings
from kvcal.records_engine import EngineSide

log = logging.getLogger(__name__)

RECOMPUTE_MODELS = ("affine", "quadratic")
PULL_MODELS = ("affine",)


def fit_table(
    table: ProbeTable, settings: FitSettings = FIT_DEFAULTS, *, busy_queue_threshold: int | None = None
) -> FitResult:
    """Fit both legs, find the break-even and bootstrap its interval at ``settings.confidence``.

    ``settings`` was checked against its declared bounds when it was built. A loaded run's table
    also yields the router's cost model (``cost_model``), with busy classified against
    ``busy_queue_threshold`` (default: the run's).
    """
    n_resamples = settings.n_resamples
    table, n_warmup, warmup_note = exclude_warmup(table)
    legs = _leg_data(table)
    recompute = fit_leg(legs["recompute"], RECOMPUTE_MODELS)
    paid = pull_cost(recompute, fit_leg(legs["pull"], PULL_MODELS), legs["pull"], PULL_MODELS, settings)
    pull = paid.curve
    notes: list[str] = [note for note in (warmup_note, too_few_probes(legs)) if note]
    notes += [describe_mode(m) for m in paid.modes]
    notes += [describe_unresolved(paid.unresolved)] if paid.unresolved else []
    trends = time_trends(table, (recompute, pull))
    notes += [describe_trend(t) for t in trends]
    boot = None
    if n_resamples == 0:
        notes.append("--resamples 0: no bootstrap, no intervals")
    else:
        starved = [f.data.name for f in (recompute, pull) if residual_df(f) < 1]
        if starved:
            notes.append(
                f"{', '.join(starved)}: as many coefficients as probes, so no interval can be estimated; "
                "add reps or lengths"
            )
        else:
            boot = run_bootstrap(recompute, paid.fast, settings, mean_cost=paid.mean)
    result = build_result(table, recompute, pull, boot, settings, notes=notes)
    result = annotate(result, table, n_warmup)
    result = result.model_copy(
        update={
            "slow_modes": paid.modes,
            "fast_break_even_tokens": _fast_break_even(recompute, paid),
            "unresolved_slow": paid.unresolved,
            "time_trends": trends,
            "engine_side": table.engine_side or EngineSide(pull_ms_per_token=None, prefill_ms_per_token=None),
            "mean_cost": summarise_mean_cost(
                legs,
                {"recompute": recompute.chosen_fit.coef, "pull": pull.chosen_fit.coef},
                frozenset(m.leg for m in paid.modes),
                medians=table.origin.kind == "llmd-table",
            ),
        }
    )
    if table.loaded is not None:
        cost = fit_cost_model(
            table.loaded,
            idle_curves(result),
            threshold=busy_queue_threshold or table.loaded.threshold,
            settings=settings,
        )
        result = result.model_copy(update={"cost_model": cost})
    log.info("fit %s: %s at %s tokens", table.origin.path, result.status, result.break_even_tokens)
    return result


def _fast_break_even(recompute: LegFit, paid: PullCost) -> float | None:
    """The fast curves' break-even, kept beside the mean costs' when the pull's curve is its mean cost."""
    if paid.mean is None or not paid.mean.decided:
        return None
    fast = float(break_even_tokens(recompute.chosen_fit.coef, paid.fast.chosen_fit.coef))
    return round(fast, 1) if math.isfinite(fast) else None


def _leg_data(table: ProbeTable) -> dict[str, LegData]:
    where = table.origin.path or "input"
    if table.probes.empty:
        raise InputError(f"{where}: no probes to fit")
    n_ref = float(table.probes["prefix_tokens"].max())
    out = {}
    for name in ("recompute", "pull"):
        rows = table.leg(name)
        if rows.empty:
            raise InputError(f"{where}: no {name} probes (a leg is missing); both legs are needed for a break-even")
        lengths = sorted(rows["prefix_tokens"].unique())
        if len(lengths) < 2:
            raise InputError(
                f"{where}: the {name} leg has one prefix length only ({lengths[0]}); a fit needs at least two lengths"
            )
        out[name] = LegData.from_frame(name, rows, n_ref)
    return out
