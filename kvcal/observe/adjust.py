"""A fit moved to production costs: the copy of fit.json ``kvcal observe --propose`` decides on and writes.

Only what production measured moves, the way it was measured:

- **the pull**: its slope moves by production's transfer time per token minus the
  calibration's (both the wire's share, :mod:`kvcal.observe.drift`), and nothing else (the
  fixed cost, the handshake, the scheduling are not the wire's). The slope is a typical
  (robust) curve's and the router pays the mean cost (the curve times its mean-cost scale,
  :mod:`kvcal.fit.mean_cost`), so the typical slope moves by ``delta / pull_scale``: the mean
  curve then moves by exactly ``delta`` a token;
- **recompute**: its per-token terms (``per_token_us``, ``per_token2_ns``) scale by production's
  prefill time per token over the calibration's; its intercept (HTTP, tokenising,
  scheduling) does not.

The bootstrap draws and the coefficients' intervals are transformed alike (a draw is a
curve), so the interval and the regret rest on the same uncertainty as the calibration's;
the break-even, its interval and status, and where the pull wins are recomputed on the
moved curves. What was measured per length cannot be moved and is dropped: the per-length
medians and measured means (the decision rests on the curves), the candidate models' fits,
the link classes and the router's cost model fitted under load; fit.json's ``warnings`` say so.
The adjusted fit's ``engine_side`` is production's, and ``proposed_from`` names the window and
the server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from kvcal import __version__
from kvcal.cost_curve import break_even_tokens, cost_ms
from kvcal.fit.breakeven import STATUSES, classify, classify_many, interval
from kvcal.fit_record import BootstrapSummary, CurveFit, FitResult
from kvcal.records_engine import EngineSide, ProposedFrom


@dataclass(frozen=True)
class Move:
    """How production moved the costs: ms a token added to the pull's mean curve, recompute's per-token factor."""

    pull_ms_per_token: float
    prefill_ratio: float

    def pull_us(self, fit: FitResult) -> float:
        """The typical pull slope's shift (us a token) that moves the mean curve by ``pull_ms_per_token``."""
        scale = fit.mean_cost.pull_scale if fit.mean_cost is not None else 1.0
        return self.pull_ms_per_token * 1e3 / scale


def _moved(values: list[float | None] | None, shift: float = 0.0, factor: float = 1.0) -> list[float | None] | None:
    if values is None:
        return None
    return [None if v is None else float(v) * factor + shift for v in values]


def _curve(curve: CurveFit, shift_us: float = 0.0, factor: float = 1.0) -> CurveFit:
    ci = dict(curve.ci)
    if "per_token_us" in ci:
        ci["per_token_us"] = [v * factor + shift_us for v in ci["per_token_us"]]
    if "per_token2_ns" in ci:
        ci["per_token2_ns"] = [v * factor for v in ci["per_token2_ns"]]
    return curve.model_copy(
        update={
            "per_token_us": curve.per_token_us * factor + shift_us,
            "per_token2_ns": curve.per_token2_ns * factor,
            "ci": ci,
            "alternatives": {},
        }
    )


def _samples(samples: dict[str, list[float | None]] | None, shift_us: float, factor: float):
    if not samples:
        return samples
    out = dict(samples)
    out["per_token_us"] = _moved(samples.get("per_token_us"), shift_us, factor) or []
    out["per_token2_ns"] = _moved(samples.get("per_token2_ns"), 0.0, factor) or []
    return out


def _draw_matrix(samples: dict[str, list[float | None]] | None) -> np.ndarray | None:
    columns = [list((samples or {}).get(name) or []) for name in ("intercept_ms", "per_token_us", "per_token2_ns")]
    if not columns[0] or len({len(c) for c in columns}) != 1:
        return None
    return np.array([[math.nan if v is None else v for v in c] for c in columns], dtype=float).T


def _bootstrap(fit: FitResult, move: Move) -> BootstrapSummary:
    """The draws moved, and the break-even's samples, shares and bounds recomputed on them."""
    boot = fit.bootstrap
    rec = _samples(boot.recompute_samples, 0.0, move.prefill_ratio)
    pull = _samples(boot.pull_samples, move.pull_us(fit), 1.0)
    r, p = _draw_matrix(rec), _draw_matrix(pull)
    if r is None or p is None or len(r) != len(p):
        return boot.model_copy(update={"recompute_samples": rec, "pull_samples": pull, "break_even_samples": []})
    crossings = break_even_tokens(r, p)
    n_min, n_max = fit.measured_range
    low, high = interval(crossings, fit.confidence)
    return boot.model_copy(
        update={
            "recompute_samples": rec,
            "pull_samples": pull,
            "break_even_samples": [float(v) if math.isfinite(v) else None for v in crossings],
            "no_crossover_share": float(np.mean(~np.isfinite(crossings))),
            "status_shares": {s: float(np.mean(classify_many(crossings, n_min, n_max) == s)) for s in STATUSES},
            "break_even_ci_bounds": [float(low), float(high) if math.isfinite(high) else None],
        }
    )


def _wins(fit: FitResult, recompute: CurveFit, pull: CurveFit) -> tuple[int | None, int | None]:
    """(smallest measured length where the moved mean pull wins, shortest from which it wins at every longer one)."""
    lengths = sorted({row.prefix_tokens for row in fit.per_length}) or list(fit.measured_range)
    scale_r = fit.mean_cost.recompute_scale if fit.mean_cost else 1.0
    scale_p = fit.mean_cost.pull_scale if fit.mean_cost else 1.0
    won = [
        n
        for n in lengths
        if float(cost_ms(np.asarray(pull.coefficients) * scale_p, n))
        < float(cost_ms(np.asarray(recompute.coefficients) * scale_r, n))
    ]
    from_tokens = None
    for n in reversed(lengths):
        if n not in won:
            break
        from_tokens = n
    return (min(won) if won else None), from_tokens


def _ci(crossing: float, bounds: list[float | None] | None) -> list[float] | None:
    """The break-even's interval as the fit reports it: both ends finite around a finite break-even, else none."""
    if not math.isfinite(crossing) or bounds is None or bounds[0] is None or bounds[1] is None:
        return None
    return [round(bounds[0], 1), round(bounds[1], 1)]


def adjusted(fit: FitResult, move: Move, engine_side: EngineSide, provenance: ProposedFrom) -> FitResult:
    """A copy of ``fit`` whose costs moved as production says (module docstring)."""
    recompute = _curve(fit.recompute, factor=move.prefill_ratio)
    pull = _curve(fit.pull, shift_us=move.pull_us(fit))
    crossing = float(break_even_tokens(recompute.coefficients, pull.coefficients))
    status, extrapolated = classify(crossing, *fit.measured_range)
    boot = _bootstrap(fit, move)
    ci = _ci(crossing, boot.break_even_ci_bounds)
    smallest, won_from = _wins(fit, recompute, pull)
    mean_cost = fit.mean_cost.model_copy(update={"per_length": []}) if fit.mean_cost else None
    note = (
        f"adjusted by kvcal observe --propose to production costs over {provenance.window_start} .. "
        f"{provenance.window_end} ({provenance.prometheus}): the pull's mean curve {move.pull_ms_per_token * 1e3:+.4g} "
        f"us a token, recompute's per-token terms x{move.prefill_ratio:.4g}; the per-length medians and means, "
        "the link classes and the cost model of the calibration are not carried over"
    )
    moved = fit.model_copy(
        update={
            "recompute": recompute,
            "pull": pull,
            "status": status,
            "extrapolated": extrapolated,
            "break_even_tokens": round(crossing, 1) if math.isfinite(crossing) else None,
            "break_even_ci": ci,
            "bootstrap": boot,
            "per_length": [],
            "smallest_pull_win_tokens": smallest,
            "pull_won_from_tokens": won_from,
            "mean_cost": mean_cost,
            "fast_break_even_tokens": None,
            "pull_bandwidth_gbps": None,
            "cost_model": None,
            "classes": None,
            "class_difference": None,
            "warnings": [*fit.warnings, note],
            "engine_side": engine_side,
            "proposed_from": provenance,
            "kvcal_version": __version__,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
    )
    return FitResult.model_validate(moved.model_dump(by_alias=True))  # held to fit.json's own checks
