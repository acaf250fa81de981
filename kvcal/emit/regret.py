"""What a threshold costs the fleet: expected regret over the cached-token deltas the router sees.

A router with threshold ``t`` pulls a request whose cached-token delta ``d`` is at least
``t`` and recomputes it otherwise, so with mean costs ``R(d)`` (recompute) and ``P(d)``
(pull) and deltas weighted ``w``:

    cost(t)   = sum_d w(d) R(d) - S(t),     S(t) = sum_{d >= t} w(d) (R(d) - P(d))
    regret(t) = max_t' S(t') - S(t)         (t' over every threshold, "never pull" included)

in ms per request, and as a share of the best expected TTFT ``cost(t*)``. Each bootstrap
draw of the two curves (fit.json's samples, each leg times a draw of its mean-cost scale:
:func:`kvcal.fit.mean_cost.scale_draws`) gives one regret and its own optimum
``t*``; the figures are their means, and ``p_break_even_above`` is the share of draws whose
mean costs cross (for good) above ``t``. A fit without bootstrap samples has no figures.

The deltas are log-uniform over the measured range unless ``--deltas FILE`` gives them
(:mod:`kvcal.emit.deltas`). Because ``dcost/dt = w(t) (R(t) - P(t))``, the optimum is where
the mean gap turns positive for good whatever the deltas, which is why the threshold rule
itself needs no deltas except to round to the cheaper neighbouring block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvcal.cost_curve import break_even_tokens, cost_ms
from kvcal.fit.mean_cost import scale_draws
from kvcal.fit_record import FitResult

GRID_POINTS = 512  # log-spaced deltas over the measured range: under 1 % apart over a 32x range


@dataclass(frozen=True)
class Deltas:
    """Cached-token deltas (ascending) and their weights (summing to 1), and where they came from."""

    points: np.ndarray
    weights: np.ndarray
    source: str


def log_uniform(n_min: float, n_max: float, k: int = GRID_POINTS) -> Deltas:
    """Deltas spread log-uniformly over [n_min, n_max] (midpoints of equal log steps)."""
    lo, hi = math.log(max(n_min, 1.0)), math.log(max(n_max, n_min, 1.0))
    if hi <= lo:
        return Deltas(np.array([math.exp(lo)]), np.array([1.0]), f"{n_min:.0f} tokens")
    edges = np.linspace(lo, hi, k + 1)
    return Deltas(
        np.exp(0.5 * (edges[:-1] + edges[1:])),
        np.full(k, 1.0 / k),
        f"log-uniform over {n_min:,.0f}-{n_max:,.0f} tokens",
    )


@dataclass(frozen=True)
class Figures:
    """What one threshold costs (None where there is no threshold or no bootstrap draws)."""

    expected_regret_ms: float | None = None
    expected_regret_pct: float | None = None
    p_break_even_above: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "expected_regret_ms": self.expected_regret_ms,
            "expected_regret_pct": self.expected_regret_pct,
            "p_break_even_above": self.p_break_even_above,
        }


class RegretModel:
    """Mean-cost curves (one row per draw) against one set of deltas; :meth:`figures` for any threshold."""

    def __init__(self, recompute: np.ndarray, pull: np.ndarray, deltas: Deltas) -> None:
        recompute, pull = np.atleast_2d(recompute), np.atleast_2d(pull)
        self.points = deltas.points
        r = cost_ms(recompute, deltas.points)
        gap = (r - cost_ms(pull, deltas.points)) * deltas.weights
        self.suffix = np.concatenate([np.cumsum(gap[:, ::-1], axis=1)[:, ::-1], np.zeros((len(gap), 1))], axis=1)
        self.best = self.suffix.max(axis=1)
        self.best_cost = (r * deltas.weights).sum(axis=1) - self.best
        self.break_even = break_even_tokens(recompute, pull)

    def regret_ms(self, threshold: float) -> np.ndarray:
        """Per draw: the extra ms per request of pulling from ``threshold`` up, over the draw's best threshold."""
        index = int(np.searchsorted(self.points, threshold, side="left"))
        return np.maximum(self.best - self.suffix[:, index], 0.0)

    def figures(self, threshold: int | None) -> Figures:
        if threshold is None:
            return Figures()
        regret = self.regret_ms(threshold)
        share = regret / np.maximum(self.best_cost, 1e-12)
        return Figures(
            _sig(float(regret.mean())),
            _sig(100.0 * float(share.mean())),
            _sig(float(np.mean(self.break_even > threshold))),
        )


def _sig(value: float) -> float:
    return float(f"{value:.4g}")


def draws(fit: FitResult) -> tuple[np.ndarray, np.ndarray] | None:
    """Each bootstrap draw's mean-cost coefficients (recompute, pull), (B, 3) each; None without samples."""
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
    return rec * m_r[:, None], pull * m_p[:, None]
