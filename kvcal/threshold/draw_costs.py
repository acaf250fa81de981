"""The fit's own draws of what each leg costs on average: the curves, their scales and the measured means.

One draw ``b`` of the mean costs is, per leg, a bootstrap draw of its fitted curve times a draw
of its mean-cost scale (:func:`kvcal.threshold.regret.draws`), and at every measured length where a
leg's measured mean misfits its curve (fit.json's ``mean_cost.per_length``), that length's
measured mean times its own noise:

    value_bk = measured_k x (scale_b / scale) x exp(eps_bk),    eps_bk ~ N(0, s / sqrt(m_k))

(``s`` the leg's bulk spread, ``m_k`` the length's reps; the measured mean carries the leg's
point scale, its tail's charge included, so ``scale_b / scale`` moves it with the same scale
draw its curve carries). The correction
``value_bk - curve_b(n_k)`` is 0 at every other measured length and linear in between (flat
beyond the ends), so a misfit reshapes the cost only up to the neighbouring lengths. A fit
without draws (an older fit.json, ``--resamples 0``) is one draw: the point mean curves with
the measured means as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvcal.costs.cost_curve import cost_ms
from kvcal.fit.mean_cost import mean_curves, mean_scales, scale_draws
from kvcal.records.fit import FitResult
from kvcal.records.fit_mean_cost import MeanLength

LEGS = ("recompute", "pull")


@dataclass(frozen=True)
class Misfit:
    """A measured length where a leg's measured mean lies beyond the noise from its curve."""

    leg: str
    prefix_tokens: int
    measured_ms: float
    fitted_ms: float


@dataclass(frozen=True)
class CostDraws:
    """Per draw, each leg's mean-cost curve (B, 3) and its correction at each measured length (B, K), in ms."""

    recompute: np.ndarray
    pull: np.ndarray
    knots: np.ndarray
    recompute_correction: np.ndarray
    pull_correction: np.ndarray
    misfits: tuple[Misfit, ...]
    from_bootstrap: bool

    @property
    def n_draws(self) -> int:
        return len(self.recompute)

    def mean(self) -> CostDraws:
        """One draw: the mean over draws of every term (the expected cost is linear in them)."""
        return CostDraws(
            self.recompute.mean(axis=0, keepdims=True),
            self.pull.mean(axis=0, keepdims=True),
            self.knots,
            self.recompute_correction.mean(axis=0, keepdims=True),
            self.pull_correction.mean(axis=0, keepdims=True),
            self.misfits,
            self.from_bootstrap,
        )


def cost_draws(fit: FitResult, known_scale: str | None = None) -> CostDraws:
    """The fit's draws of both legs' mean costs with the misfit lengths' measured means (module docstring);
    ``known_scale`` ('recompute' or 'pull'): that leg's scale held at its point value in every draw, what the draws
    would be were its mean cost over the curve known."""
    parts = draw_parts(fit)
    from_bootstrap = parts is not None
    if parts is None:
        rec, pull = (np.atleast_2d(curve) for curve in mean_curves(fit))
        scales = tuple(np.array([scale]) for scale in mean_scales(fit))
    else:
        point = mean_scales(fit)
        scales = tuple(
            np.full(len(drawn), point[i]) if known_scale == LEGS[i] else drawn
            for i, drawn in enumerate((parts[2], parts[3]))
        )
        rec, pull = parts[0] * scales[0][:, None], parts[1] * scales[1][:, None]
    rows = [r for r in (fit.mean_cost.per_length if fit.mean_cost else []) if r.prefix_tokens > 0]
    knots = np.array([float(r.prefix_tokens) for r in rows])
    rng = np.random.default_rng([fit.bootstrap.seed, 50])
    corrections, misfits = [], []
    for leg, curves, leg_scales in (("recompute", rec, scales[0]), ("pull", pull, scales[1])):
        correction, found_misfits = _corrections(fit, leg, curves, leg_scales, rows, rng, noisy=from_bootstrap)
        corrections.append(correction)
        misfits += found_misfits
    return CostDraws(rec, pull, knots, corrections[0], corrections[1], tuple(misfits), from_bootstrap)


def _corrections(
    fit: FitResult,
    leg: str,
    curves: np.ndarray,
    scale_draws: np.ndarray,
    rows: list[MeanLength],
    rng: np.random.Generator,
    noisy: bool,
) -> tuple[np.ndarray, list[Misfit]]:
    """(B, K) corrections of one leg at the measured lengths, and the misfits they come from."""
    out = np.zeros((len(curves), len(rows)))
    point = np.asarray(mean_curves(fit)[LEGS.index(leg)])
    scale = mean_scales(fit)[LEGS.index(leg)]
    reps = {r.prefix_tokens: (r.n_recompute if leg == "recompute" else r.n_pull) for r in fit.per_length}
    spread = _spread(fit, leg)
    misfits = []
    for k, row in enumerate(rows):
        measured = row.recompute_ms if leg == "recompute" else row.pull_ms
        misfit = row.recompute_misfit if leg == "recompute" else row.pull_misfit
        if not misfit or measured is None or not math.isfinite(measured):
            continue
        n = float(row.prefix_tokens)
        sd = spread / math.sqrt(max(reps.get(row.prefix_tokens, 1), 1))
        noise = rng.normal(0.0, sd, len(curves)) if noisy else np.zeros(len(curves))
        value = measured * (scale_draws / scale) * np.exp(noise)
        out[:, k] = value - cost_ms(curves, n).reshape(-1)
        misfits.append(Misfit(leg, row.prefix_tokens, float(measured), float(cost_ms(point, n))))
    return out, misfits


def _spread(fit: FitResult, leg: str) -> float:
    """The leg's bulk spread (log sd) from fit.json's scale parts, else its robust noise cv."""
    parts = getattr(fit.mean_cost, f"{leg}_parts", None) if fit.mean_cost is not None else None
    if parts is not None:
        return float(parts.bulk_sd)
    curve = fit.recompute if leg == "recompute" else fit.pull
    return float(curve.noise_cv or 0.0)


def draws(fit: FitResult) -> tuple[np.ndarray, np.ndarray] | None:
    """Each bootstrap draw's mean-cost coefficients (recompute, pull), (B, 3) each; None without samples."""
    parts = draw_parts(fit)
    if parts is None:
        return None
    rec, pull, m_r, m_p = parts
    return rec * m_r[:, None], pull * m_p[:, None]


def draw_parts(fit: FitResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Each bootstrap draw's fitted curves (recompute, pull), (B, 3) each, and its mean-cost scales, (B,) each;
    None without samples."""
    legs = [fit.bootstrap.leg_samples(leg) for leg in ("recompute", "pull")]
    arrays = []
    for samples in legs:
        if not samples:
            return None
        columns = [samples.get(name) or [] for name in ("intercept_ms", "per_token_us", "per_token2_ns")]
        if len({len(c) for c in columns}) != 1 or not columns[0]:
            return None
        arrays.append(np.array([[math.nan if v is None else v for v in c] for c in columns], dtype=float).T)
    rec, pull = arrays
    keep = np.isfinite(rec).all(axis=1) & np.isfinite(pull).all(axis=1)
    if keep.sum() < 2:
        return None
    rec, pull = rec[keep], pull[keep]
    m_r, m_p = scale_draws(fit, len(rec), np.random.default_rng([fit.bootstrap.seed, 38]))
    return rec, pull, m_r, m_p
