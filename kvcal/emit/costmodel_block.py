"""The ``costModel`` block: NOT for llm-d-router main.

``costModel`` is accepted only by a router build whose ``p2p-source-producer`` has it
(a fork and an open proposal; documented by the llm-d calibration README). The main
branch's config loader rejects the unknown key and refuses the whole config, so this
block is labelled as such on its first line and in ``--help``, and is written into a
values file only when ``--with-costmodel`` asks (see :mod:`kvcal.emit.helm_patch`); in that
variant ``minCachedTokenDelta`` is only a floor, lowered to :data:`COSTMODEL_FLOOR_TOKENS`.

The variant pulls when ``delta*(P - T) + fleetWeight*R(d)*delta*P > F + busy(s)*S + busy(d)*Q``.
An idle sweep gives P, T, F (:func:`cost_model`); S, Q, ``busyQueueThreshold`` and
``fleetWeight`` are load-dependent. :func:`render_costmodel` takes an optional
:class:`LoadCalibration` (from a loaded run) to fill those; without one they are left
commented out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from kvcal.emit.costmodel_under_load import loaded_values, render_loaded_costmodel
from kvcal.emit.router import PLUGIN_TYPE
from kvcal.errors import InputError, NotRecommended
from kvcal.fit.entry import curve_ms as fit_curve_ms
from kvcal.fit_record import CurveFit, FitResult

COSTMODEL_FLOOR_TOKENS = 256
"""The fixed threshold the cost-model variant keeps as a floor (the llm-d calibration README's example)."""
LABEL = (
    f"# kvcal: costModel NEEDS A ROUTER BUILD WHOSE {PLUGIN_TYPE} ACCEPTS costModel; "
    "llm-d-router main rejects the key and refuses its whole config."
)

ROUTER_MAIN_WARNING = (
    "costModel is not accepted by llm-d-router main (unknown keys make it refuse the whole config): "
    "use it only with a router build that has it, else deploy --format plugin"
)


def _load_dependent(router_key: str) -> Any:
    """A figure only a loaded run measures (None until one does), set as ``router_key`` in the block."""
    return field(default=None, metadata={"router_key": router_key})


@dataclass(frozen=True)
class LoadCalibration:
    """Cost-model figures measured under load (None: not calibrated); ``origin`` names the run."""

    transfer_fixed_ms: float | None = None  # the idle fit has F too: a measured one replaces it, with a note
    source_wait_ms: float | None = _load_dependent("sourceWaitMs")
    requeue_ms: float | None = _load_dependent("requeueMs")
    busy_queue_threshold: int | None = _load_dependent("busyQueueThreshold")
    fleet_weight: float | None = _load_dependent("fleetWeight")
    origin: str = ""

    def values(self) -> dict[str, Any]:
        """Router key -> value for the load-dependent keys this calibration sets."""
        return {
            f.metadata["router_key"]: value
            for f in fields(self)
            if "router_key" in f.metadata and (value := getattr(self, f.name)) is not None
        }


LOAD_DEPENDENT_COST_KEYS = tuple(
    f.metadata["router_key"] for f in fields(LoadCalibration) if "router_key" in f.metadata
)
"""The keys an idle sweep cannot calibrate (the block comments out those not set), in the block's order."""


def curve_ms(c: CurveFit, n: float) -> float:
    """CurveFit value at ``n`` tokens, in ms (the fit stage's formula)."""
    return float(fit_curve_ms(c, n))


def cost_model(fit: FitResult) -> tuple[dict[str, float], list[str], list[str]]:
    """P, T, F for the router's per-request comparison, and the notes/warnings behind them.

    The router compares P*n (recompute, us) with F*1e3 + T*n (pull). With the pull fit
    pull(n) = F + T*n (ms; F = intercept, T = slope), choosing P as the recompute
    curve's secant slope from the origin at the break-even n*,

        P = recompute(n*) / n*   (us/token, recompute in ms x 1e3),

    makes the router's idle crossover F/(P - T) equal n* exactly, because recompute(n*) =
    pull(n*). A convex (quadratic) recompute has no single per-token figure; the secant at
    n* is the one that keeps the decision right on both sides of the break-even. With no
    crossover (pull-always-wins) n* is replaced by the shortest measured length.
    """
    notes: list[str] = []
    warnings: list[str] = []
    if fit.status == "recompute-always-wins":
        raise NotRecommended(
            "P2P is not recommended on this setup for a costModel: the fitted curves never cross in the measured "
            "range (status recompute-always-wins), so there is no break-even to fit P, T and F at; no cost model "
            "emitted"
        )
    n_eval: float | None = None
    if fit.status == "crossover" and fit.break_even_tokens and fit.break_even_tokens > 0:
        n_eval, where = float(fit.break_even_tokens), "the break-even"
    elif fit.measured_range:
        n_eval, where = float(fit.measured_range[0]), "the shortest measured length"
    if not n_eval or n_eval <= 0:
        raise InputError(
            "the fit records neither a break-even nor a measured range; cannot place the cost model's per-token figures"
        )
    fixed_ms = fit.pull.intercept_ms
    if fixed_ms < 0:
        warnings.append(
            f"the pull fit's intercept is negative ({fixed_ms:.3g} ms); transferFixedMs set to 0: "
            "sweep shorter prefixes to pin the floor"
        )
        fixed_ms = 0.0
    transfer_us = (curve_ms(fit.pull, n_eval) - fit.pull.intercept_ms) * 1e3 / n_eval
    prefill_us = curve_ms(fit.recompute, n_eval) * 1e3 / n_eval
    notes.append(
        f"prefillMicrosecondsPerToken = recompute({n_eval:,.0f}) / {n_eval:,.0f} = {prefill_us:.3f} us/token: "
        f"the {fit.recompute.model} recompute curve's secant slope from 0 at {where}, so the router's idle comparison "
        "crosses where the measured curves do"
    )
    if fit.pull.per_token2_ns:
        notes.append(
            f"the pull fit is {fit.pull.model}: transferMicrosecondsPerToken is its secant slope above the floor "
            f"at {n_eval:,.0f}"
        )
    if prefill_us <= transfer_us:
        warnings.append(
            "prefill per token does not exceed transfer per token at the evaluation point: the router would never pull"
        )
    values = {
        "prefillMicrosecondsPerToken": round(prefill_us, 3),
        "transferMicrosecondsPerToken": round(transfer_us, 3),
        "transferFixedMs": round(fixed_ms, 3),
    }
    return values, notes, warnings


def costmodel_values(
    fit: FitResult, calibrated: LoadCalibration | None = None
) -> tuple[dict[str, Any], list[str], list[str]]:
    """Every key the block sets: the idle fit's P, T, F, then what ``calibrated`` measured under load.

    A fit with its own ``cost_model`` (a loaded run, or production logs) gives every key it calibrated.
    """
    if calibrated is None and fit.cost_model is not None:
        return loaded_values(fit.cost_model)
    values, notes, warnings = cost_model(fit)
    if calibrated is not None:
        if calibrated.transfer_fixed_ms is not None:
            values["transferFixedMs"] = round(calibrated.transfer_fixed_ms, 3)
            notes.append(f"transferFixedMs from the loaded calibration {calibrated.origin}".rstrip())
        values.update(calibrated.values())
    return values, notes, warnings


def render_costmodel(
    fit: FitResult, origin: str = "", calibrated: LoadCalibration | None = None
) -> tuple[str, list[str], list[str]]:
    """The ``costModel`` block; load-dependent keys not in ``calibrated`` are commented out as not calibrated."""
    if calibrated is None and fit.cost_model is not None:
        text, notes, warnings = render_loaded_costmodel(fit.cost_model, origin, LABEL)
        return text, notes, [ROUTER_MAIN_WARNING] + warnings
    values, notes, warnings = costmodel_values(fit, calibrated)
    missing = [k for k in LOAD_DEPENDENT_COST_KEYS if k not in values]
    lines = [
        LABEL,
        f"# From the idle pull-versus-recompute fit{' of ' + origin if origin else ''}; "
        f"place under the {PLUGIN_TYPE} parameters.",
        "# prefillMicrosecondsPerToken: recompute curve's secant slope at the break-even (see docs/emit.md).",
        "costModel:",
        *(f"  {k}: {v}" for k, v in values.items()),
    ]
    if missing:
        lines.append("  # Not calibrated by kvcal (load-dependent): measure under production load, then set:")
        lines += [f"  # {k}:" for k in missing]
    warnings.insert(0, ROUTER_MAIN_WARNING)
    return "\n".join(lines) + "\n", notes, warnings
