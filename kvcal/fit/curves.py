"""Constrained cost-curve fits for one leg, and the choice between affine and quadratic.

Model, in ms at prefix length n tokens (``u = n / n_ref``, n_ref the largest length,
is used inside for conditioning and converted back):

    t(n) = intercept_ms + per_token_us * n / 1e3 + per_token2_ns * n^2 / 1e6   (kvcal.costs.cost_curve)

with every coefficient >= 0 (a cost cannot fall with length, and a negative floor
is the tell-tale of a straight line forced through a convex curve).

Weights. TTFT noise grows with TTFT (its coefficient of variation is roughly
constant), so probe i at length k gets weight ``1 / s_k^2``, s_k the leg's fitted
TTFT at that length (two passes from the per-length median, kept within 1/2-2x of
it): residuals are compared in relative terms, and the short lengths, where a
break-even usually lies, are not drowned by the long ones.

Robust loss. With at least p + 5 probes (p coefficients), the largest model is fitted
with ``scipy.optimize.least_squares(loss="huber", f_scale=1.345 * sigma)`` where
sigma is the robust (MAD) scale of the relative residuals; the Huber weights
``min(1, f_scale / |r_i|)`` at convergence are then held and every candidate model
is refitted by weighted least squares with them; that refit reproduces the Huber
solution (it is its IRLS fixed point) and lets both models be compared on the same
weights. The bootstrap re-estimates the weights of each resample the same way.
Probes whose weight fell below 1/4 (residual beyond about 5.4 sigma: a MAD from a
few dozen residuals can be a third too small, so a lower cut names ordinary noise)
are reported.
With fewer than p + 5 probes the fit is plain weighted least squares: a robust
scale from so few residuals cannot tell a wild probe from curvature.

Non-negative least squares is solved exactly by enumerating active sets: for p <= 3
there are at most 8, each a tiny linear solve, batched over bootstrap resamples.

Selection between affine and quadratic: a nested F-test of the curvature term,
one-sided because the term is constrained >= 0 (F > F_{1, N-3}(1 - 2*alpha)),
alpha = 0.05. AICc is not used because the ladders users bring are short (the
published one has 5 lengths, one median each): with 3 coefficients plus the noise
variance, AICc's N - k - 1 is zero there, while the F-test still has 2 df.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

from kvcal.costs.cost_curve import cost_ms

log = logging.getLogger(__name__)

MODEL_PARAMS = {"affine": 2, "quadratic": 3}
HUBER_K = 1.345  # 95% efficiency under normal noise
SELECTION_ALPHA = 0.05
DOWNWEIGHT_REPORT_BELOW = 0.25  # residual beyond about 5.4 robust SDs: a wild probe, not noise
ROBUST_MIN_DF = 5  # residual df below which a robust scale cannot be told from curvature
SIGMA_FLOOR = 1e-3  # 0.1% relative: keeps f_scale positive when a fit is exact
INTERIOR_START = 1e-9  # relative to the largest coefficient: where a Huber solve starts a coefficient fitted at 0


@dataclass(frozen=True)
class LegData:
    """One leg's probes, grouped by length (probes sorted by length)."""

    name: str
    n_tokens: np.ndarray  # (N,) int
    ttft_ms: np.ndarray  # (N,)
    rep: np.ndarray  # (N,)
    group: np.ndarray  # (N,) index into lengths
    lengths: np.ndarray  # (K,) distinct tokens, ascending
    scale_ms: np.ndarray  # (K,) the relative-noise scale per length: medians, then the smoothed fit
    n_ref: float  # tokens; u = n / n_ref

    @classmethod
    def from_frame(cls, name: str, rows: pd.DataFrame, n_ref: float) -> LegData:
        rows = rows.sort_values(["prefix_tokens", "rep"], kind="stable")
        n = rows["prefix_tokens"].to_numpy(dtype=np.int64)
        y = rows["ttft_ms"].to_numpy(dtype=float)
        lengths, group = np.unique(n, return_inverse=True)
        scale = np.array([np.median(y[group == k]) for k in range(len(lengths))])
        return cls(name, n, y, rows["rep"].to_numpy(dtype=np.int64), group, lengths, scale, float(n_ref))

    @property
    def n_probes(self) -> int:
        return len(self.ttft_ms)

    @property
    def counts(self) -> np.ndarray:
        return np.bincount(self.group, minlength=len(self.lengths))

    @property
    def rel_weight(self) -> np.ndarray:
        return 1.0 / self.scale_ms[self.group] ** 2

    def basis(self, p: int, n_tokens: np.ndarray | None = None) -> np.ndarray:
        """Columns 1, u, u^2 (first p) at the given lengths (default: the distinct lengths)."""
        u = (self.lengths if n_tokens is None else np.asarray(n_tokens, dtype=float)) / self.n_ref
        return np.stack([u**j for j in range(p)], axis=-1)


@dataclass(frozen=True)
class ModelFit:
    """One candidate model's weighted fit (coefficients in physical units)."""

    model: str
    coef: np.ndarray  # (3,) intercept_ms, per_token_us, per_token2_ns
    wsse: float  # weighted residual sum of squares (relative units)
    n_params: int


@dataclass(frozen=True)
class LegFit:
    """Everything the point fit of one leg decided, kept for the bootstrap and the report."""

    data: LegData
    weights: np.ndarray  # (N,) Huber weights (1 where the loss was not robust)
    f_scale: float | None  # Huber threshold in relative units; None when not robust
    sigma_rel: float  # robust relative scale of the residuals
    fits: dict[str, ModelFit]
    chosen: str
    selection: str
    f_crit: float | None  # the selection threshold, reused for every resample
    downweighted: list[dict[str, Any]] = field(default_factory=list)

    @property
    def chosen_fit(self) -> ModelFit:
        return self.fits[self.chosen]


def to_physical(beta_u: np.ndarray, n_ref: float) -> np.ndarray:
    """Coefficients of 1, u, u^2 (u = n/n_ref, ms) -> intercept_ms, per_token_us, per_token2_ns; shape (..., 3)."""
    beta_u = np.asarray(beta_u, dtype=float)
    out = np.zeros(beta_u.shape[:-1] + (3,))
    out[..., 0] = beta_u[..., 0]
    if beta_u.shape[-1] > 1:
        out[..., 1] = beta_u[..., 1] / n_ref * 1e3
    if beta_u.shape[-1] > 2:
        out[..., 2] = beta_u[..., 2] / n_ref**2 * 1e6
    return out


def solve_nnls(gram: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimise beta' G beta - 2 beta' r subject to beta >= 0, batched, by active-set enumeration.

    gram: (B, p, p) or (p, p) positive definite; rhs: (B, p). Returns beta (B, p) and
    the objective J (B,), so that the weighted SSE is sum(w y^2) + J. The optimum is
    the best of the per-subset unconstrained solutions that are feasible (for a convex
    problem the true active set is among them); the empty set (beta = 0) always is.
    """
    rhs = np.atleast_2d(rhs)
    n_batch, p = rhs.shape
    gram = np.broadcast_to(gram, (n_batch, p, p))
    best_beta = np.zeros((n_batch, p))
    best_obj = np.zeros(n_batch)
    for size in range(1, p + 1):
        for subset in itertools.combinations(range(p), size):
            idx = np.array(subset)
            sub_gram = gram[:, idx[:, None], idx[None, :]]
            sub_rhs = rhs[:, idx]
            beta_s = np.linalg.solve(sub_gram, sub_rhs[..., None])[..., 0]
            obj = -np.einsum("bi,bi->b", beta_s, sub_rhs)
            better = np.all(beta_s >= 0, axis=1) & (obj < best_obj)
            if better.any():
                best_obj = np.where(better, obj, best_obj)
                full = np.zeros((n_batch, p))
                full[:, idx] = beta_s
                best_beta = np.where(better[:, None], full, best_beta)
    return best_beta, best_obj


def weighted_fit(data: LegData, p: int, weights: np.ndarray) -> tuple[np.ndarray, float]:
    """Exact non-negative WLS of the first p basis columns; weights per probe. Returns (beta_u, wsse)."""
    # Per-length sums: the probes of one length share their basis row, so the normal equations need only
    # sum(w) and sum(w y) per length (a million-row table's EM refits this many times).
    x = data.basis(p)
    k = len(data.lengths)
    s0 = np.bincount(data.group, weights=weights, minlength=k)
    s1 = np.bincount(data.group, weights=weights * data.ttft_ms, minlength=k)
    gram = (x * s0[:, None]).T @ x
    rhs = s1 @ x
    beta, obj = solve_nnls(gram, rhs[None, :])
    wsse = float(np.sum(weights * data.ttft_ms**2) + obj[0])
    return beta[0], max(wsse, 0.0)


def _robust_sigma(resid_rel: np.ndarray, p: int) -> float:
    n = len(resid_rel)
    mad = 1.4826 * float(np.median(np.abs(resid_rel - np.median(resid_rel))))
    return max(mad * np.sqrt(n / max(n - p, 1)), SIGMA_FLOOR)


def _huber_weights(data: LegData, p: int, beta0: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Two Huber passes with scipy; returns the converged weights, f_scale and sigma (relative units)."""
    x = data.basis(p)[data.group]
    s = data.scale_ms[data.group]

    def resid(beta: np.ndarray) -> np.ndarray:
        return (data.ttft_ms - x @ beta) / s

    jac = -x / s[:, None]
    # scipy's bounded "trf" raises "`x` is not within the trust region" when it starts with a
    # coefficient exactly on the bound (a flat pull whose slope the first fit set to 0, scipy
    # 1.17): start just inside, far below any coefficient that matters.
    beta = np.maximum(beta0, 0.0)
    beta = np.where(beta > 0.0, beta, INTERIOR_START * max(float(beta.max()), 1.0))
    sigma = _robust_sigma(resid(beta), p)
    for _ in range(2):
        f_scale = HUBER_K * sigma
        sol = optimize.least_squares(
            resid,
            beta,
            jac=lambda _b: jac,
            bounds=(0.0, np.inf),
            loss="huber",
            f_scale=f_scale,
            method="trf",
            x_scale="jac",
        )
        beta = sol.x
        sigma = _robust_sigma(resid(beta), p)
    f_scale = HUBER_K * sigma
    r = np.abs(resid(beta))
    weights = np.where(r <= f_scale, 1.0, f_scale / np.maximum(r, 1e-300))
    return weights, f_scale, sigma


def _smooth_scales(data: LegData, p: int) -> tuple[LegData, np.ndarray]:
    """Replace per-length medians by the fitted curve as the noise scale (two passes).

    Medians of a few reps are noisy, and a weight computed from a length's own values
    both biases the fit towards the low draws and makes the estimator noisier than a
    bootstrap with those weights held fixed can see. The fitted curve pools every
    length; it is kept within [1/2, 2] x the median so a poor first fit cannot run away.
    """
    medians = data.scale_ms
    beta = np.zeros(p)
    for _ in range(2):
        beta, _ = weighted_fit(data, p, data.rel_weight)
        fitted = data.basis(p) @ beta
        data = replace(data, scale_ms=np.clip(fitted, 0.5 * medians, 2.0 * medians))
    beta, _ = weighted_fit(data, p, data.rel_weight)
    return data, beta


def fit_leg(data: LegData, models: tuple[str, ...]) -> LegFit:
    """Robust point fit of every candidate model that the lengths support, then selection."""
    k = len(data.lengths)
    candidates = [m for m in models if MODEL_PARAMS[m] <= k]
    notes: list[str] = []
    if len(candidates) < len(models):
        notes.append(
            f"{len(data.lengths)} lengths cannot support {', '.join(m for m in models if m not in candidates)}"
        )
    p_big = max(MODEL_PARAMS[m] for m in candidates)
    data, beta0 = _smooth_scales(data, p_big)
    v = data.rel_weight
    n = data.n_probes
    if n >= p_big + ROBUST_MIN_DF:
        huber, f_scale, sigma = _huber_weights(data, p_big, beta0)
    else:
        huber, f_scale = np.ones(n), None
        resid = (data.ttft_ms - data.basis(p_big)[data.group] @ beta0) / data.scale_ms[data.group]
        sigma = float(np.sqrt(np.sum(resid**2) / max(n - p_big, 1)))
        notes.append(
            f"{n} probes: too few for a robust loss (needs {p_big + ROBUST_MIN_DF}); plain weighted least squares"
        )
    w = huber * v
    fits = {}
    for m in candidates:
        p = MODEL_PARAMS[m]
        beta, wsse = weighted_fit(data, p, w)
        fits[m] = ModelFit(m, to_physical(beta, data.n_ref), wsse, p)
    chosen, selection, f_crit = _select(fits, models, n, notes)
    fitted = cost_ms(fits[chosen].coef, data.n_tokens)
    down = [
        {
            "prefix_tokens": int(data.n_tokens[i]),
            "rep": int(data.rep[i]),
            "ttft_ms": round(float(data.ttft_ms[i]), 4),
            "fitted_ms": round(float(fitted[i]), 4),
            "weight": round(float(huber[i]), 4),
        }
        for i in np.flatnonzero(huber < DOWNWEIGHT_REPORT_BELOW)
    ]
    return LegFit(data, huber, f_scale, sigma, fits, chosen, selection, f_crit, down)


def f_threshold(n_probes: int) -> float | None:
    """One-sided level-alpha threshold for the curvature F statistic; None when untestable."""
    df = n_probes - MODEL_PARAMS["quadratic"]
    return float(stats.f.isf(2 * SELECTION_ALPHA, 1, df)) if df >= 1 else None


def f_statistic(wsse_affine: np.ndarray | float, wsse_quadratic: np.ndarray | float, n_probes: int) -> np.ndarray:
    """F = (WSSE_a - WSSE_q) / (WSSE_q / (N - 3)); inf where the quadratic fits exactly."""
    df = n_probes - MODEL_PARAMS["quadratic"]
    num = np.maximum(np.asarray(wsse_affine) - np.asarray(wsse_quadratic), 0.0)
    den = np.asarray(wsse_quadratic) / max(df, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, 0.0))


def _select(
    fits: dict[str, ModelFit], models: tuple[str, ...], n: int, notes: list[str]
) -> tuple[str, str, float | None]:
    prefix = "; ".join(notes) + ("; " if notes else "")
    if len(fits) == 1:
        (only,) = fits
        why = (
            "affine by design (fixed floor + per-token transfer)"
            if len(models) == 1
            else f"{only}: the only candidate the lengths support"
        )
        return only, prefix + why, None
    crit = f_threshold(n)
    if crit is None:
        return "affine", prefix + f"{n} probes leave no residual df to test curvature: affine", None
    f_value = float(f_statistic(fits["affine"].wsse, fits["quadratic"].wsse, n))
    p_value = 0.5 * float(stats.f.sf(f_value, 1, n - 3)) if np.isfinite(f_value) else 0.0
    chosen = "quadratic" if f_value > crit else "affine"
    text = (
        f"nested F-test of curvature (one-sided, alpha={SELECTION_ALPHA}): F={f_value:.3g} on (1, {n - 3}) df, "
        f"p={p_value:.3g}, threshold {crit:.3g} -> {chosen}"
    )
    return chosen, prefix + text, crit
