"""Bootstrap of the fitted curves and the break-even, vectorised over resamples.

Two schemes, chosen per leg:

* ``pooled-reps`` (the leg has pure error: reps within lengths carry ``MIN_POOLED_DF`` degrees
  of freedom and at least half the model's residual df): each resample keeps every length's (Huber-weighted) mean and
  adds, to each of its probes, the length's scale s_k times a deviation drawn from the leg's
  **pooled** pure error: every probe's deviation from its length's mean in units of s_k,
  scaled by sqrt(m_k / (m_k - 1)) (a plain resample of m values understates the variance of
  their mean by (m - 1) / m), over all lengths with reps. A length measured once (the
  adaptive climb's single probes) is resampled about its one value the same way.
* ``residual`` (no or little pure error, e.g. the llm-d table of medians, a one-rep ladder):
  y* = fitted + s_k * e*, where e* is drawn from the leg's relative residuals,
  leverage-corrected (e / sqrt(1 - h_ii)) and centred.

Why pooled (issue 50; docs/method.md, "Confidence: bootstrap"). The fit weights every probe
by one relative noise per leg, and the t expansion below charges for that noise's estimate
on the leg's pure-error df, N - K. The scheme before redrew each length from its own reps:
its variance then rested on each length's m - 1 df (1 at the adaptive design's pairs), far
fewer than the N - K the expansion assumed, and a single probe anywhere (the climb) moved
the whole leg to the residual scheme, whose N - p df made the expansion about 1. On the
adaptive benchmark its 90 % intervals covered the truth in 0.75-0.88 of campaigns; pooled,
each length's mean stays where it was measured (a misfit between lengths is not noise) and
the noise is one estimate on the df the expansion uses.

A pull with slow probes (:mod:`kvcal.fit.modes`) is resampled on its fast curve and each
resample's pull is multiplied by a draw of its mean-cost scale ``m*``
(:class:`kvcal.fit.modes.MeanCost`, a third seeded stream): for a mode those are the
break-even samples; for slow pulls too few to tell from a stall the fast samples are kept
and the mean-cost ones bound the interval from above (``break_even_upper``).

Each resample is then fitted the way the data were: Huber weights by IRLS on the
leg's largest model (when the point fit was robust), every candidate model by
non-negative weighted least squares, and the affine/quadratic choice by the same F
threshold, so the break-even's interval carries the uncertainty of that choice. The
coefficient samples are those of the point fit's chosen model.

Because the design (the distinct lengths) is fixed, a weighted fit depends on a
resample only through per-length sums S0_k = sum(w), S1_k = sum(w y), plus
sum(w y^2) for the residual sum of squares; each resample costs one p x p solve
per active set (:func:`kvcal.fit.curves.solve_nnls`), batched with numpy. The
resamples are drawn and re-weighted in slices whose size keeps resamples x probes
under ``CHUNK_ELEMENTS`` and only their sums are kept, so memory does not grow with
rows x resamples (a million-row table: 16.4 GB before, see benchmarks/fit_memory.py).

Small samples. A percentile interval treats the estimated noise as known; with few
residual degrees of freedom that is what makes it too narrow (the t versus normal
gap). Samples are therefore expanded about the point estimate by
t_{df}(q) / z(q), q = (1 + confidence) / 2, df the residual df
(N - K with pure error, N - p from residuals): x1.08 at 12 df, x1.15 at 7, x1.6 at 3. With
pure error on both legs df is the weaker leg's; when a leg has none (the residual scheme)
the two legs' df are combined by Welch-Satterthwaite (:func:`effective_df`). The benchmark
grid (benchmarks/fit_accuracy.py) chose between the two: the weaker leg's df over-covered
one-rep ladders (0.94-0.95 at nominal 0.90), Welch-Satterthwaite brought them to
0.89-0.92; on ladders with reps it under-covered (0.85-0.87), and on adaptive campaigns,
which stop on the width, Welch-Satterthwaite's larger df let them stop on a noise
estimate that came out low (coverage 0.75-0.90 on the benchmark's sim-default truths,
against 0.88-0.95 with the weaker leg's).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy import stats

from kvcal.costs.cost_curve import cost_ms
from kvcal.fit.bootstrap_atoms import Atoms, atom_sums, shifted_atoms, use_atoms
from kvcal.fit.breakeven import break_even_tokens
from kvcal.fit.curves import MODEL_PARAMS, LegFit, f_statistic, solve_nnls, to_physical
from kvcal.fit.modes import MeanCost
from kvcal.records.fit import FIT_DEFAULTS, FitSettings

log = logging.getLogger(__name__)

POOLED = "pooled-reps"
MIN_POOLED_DF = 2  # pure-error df below which a leg's pool (two deviations at df 1) is too coarse to draw from
IRLS_STEPS = 3  # from the point fit's weights, Huber IRLS settles within a few steps
RESIDUAL = "residual"
CHUNK_ELEMENTS = 4_000_000  # resamples x probes held at once (32 MB a float array)


@dataclass(frozen=True)
class BootstrapResult:
    """Resampled quantities; arrays have one row per resample."""

    methods: dict[str, str]  # leg -> scheme
    break_even: np.ndarray  # (B,) tokens; inf where the pull never wins
    coef: dict[str, np.ndarray]  # leg -> (B, 3) physical coefficients of the point fit's chosen model
    quadratic_share: float  # share of resamples whose recompute selection chose quadratic
    df: int  # residual degrees of freedom behind the small-sample expansion
    expansion: float  # t/z factor applied to every sample's deviation from the point estimate
    break_even_upper: np.ndarray | None = None  # (B,) the mean costs' samples, whose upper end bounds the interval


def pure_error_df(fit: LegFit) -> int:
    """The leg's pure-error degrees of freedom: sum over lengths of reps - 1 (N - K)."""
    return fit.data.n_probes - len(fit.data.lengths)


def scheme(fit: LegFit) -> str:
    """Pooled reps where the leg's pure error carries at least half its residual df (and ``MIN_POOLED_DF``), else
    residuals: a one-rep ladder with a length measured twice knows its noise better from the model's residuals."""
    pure = pure_error_df(fit)
    return POOLED if pure >= MIN_POOLED_DF and 2 * pure >= fit.data.n_probes - fit.chosen_fit.n_params else RESIDUAL


def residual_df(fit: LegFit) -> int:
    """Degrees of freedom of the leg's noise estimate: its pure error, else the chosen model's residual df."""
    if scheme(fit) == POOLED:
        return pure_error_df(fit)
    return fit.data.n_probes - fit.chosen_fit.n_params


def t_quantile(df, confidence: float):
    """Student's t_{df}(q), q = (1 + confidence) / 2, df floored at 1 (scalar or array): what an estimated noise
    costs."""
    return stats.t.ppf(0.5 * (1.0 + confidence), np.maximum(df, 1))


def t_expansion(df: int, confidence: float) -> float:
    """t_{df}(q) / z(q) with q = (1 + confidence) / 2: widens a percentile interval for an estimated noise."""
    return float(t_quantile(df, confidence) / stats.norm.ppf(0.5 * (1.0 + confidence)))


def _recompute_draws(
    recompute: LegFit, rec: dict[str, tuple[np.ndarray, np.ndarray]], n_resamples: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The recompute draws' chosen-model coefficients, the coefficients each draw's own F-test selects, and
    which draws picked the quadratic."""
    rec_chosen = to_physical(rec[recompute.chosen][0], recompute.data.n_ref)
    if len(rec) == 2 and recompute.f_crit is not None:
        f_values = f_statistic(rec["affine"][1], rec["quadratic"][1], recompute.data.n_probes)
        pick_quad = f_values > recompute.f_crit
        selected = np.where(
            pick_quad[:, None],
            to_physical(rec["quadratic"][0], recompute.data.n_ref),
            to_physical(rec["affine"][0], recompute.data.n_ref),
        )
    else:
        pick_quad = np.full(n_resamples, recompute.chosen == "quadratic")
        selected = rec_chosen
    return rec_chosen, selected, pick_quad


def run_bootstrap(
    recompute: LegFit, pull: LegFit, settings: FitSettings = FIT_DEFAULTS, *, mean_cost: MeanCost | None = None
) -> BootstrapResult:
    """Resample both legs independently (separate seeded streams) and refit everything; ``pull`` is the fast curve
    and ``mean_cost`` its mean-cost scale when slow pulls were seen (module docstring)."""
    seed, n_resamples, confidence = settings.seed, settings.n_resamples, settings.confidence
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)]  # the first two as spawn(2)
    refits: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    methods: dict[str, str] = {}
    for leg_fit, rng in zip((recompute, pull), streams[:2]):
        method = scheme(leg_fit)
        methods[leg_fit.data.name] = method
        sums = _resampled_sums(leg_fit, _draw_pooled if method == POOLED else _draw_residuals, rng, n_resamples)
        refits[leg_fit.data.name] = {m: _refit(leg_fit, MODEL_PARAMS[m], *sums) for m in leg_fit.fits}

    rec_chosen, selected, pick_quad = _recompute_draws(recompute, refits[recompute.data.name], n_resamples)
    pull_coef = to_physical(refits[pull.data.name][pull.chosen][0], pull.data.n_ref)

    rec_point, pull_point = recompute.chosen_fit.coef, pull.chosen_fit.coef
    upper = None
    if mean_cost is not None:
        mean_coef = pull_coef * mean_cost.scale_samples(n_resamples, streams[2])[:, None]
        if mean_cost.decided:
            pull_coef, pull_point = mean_coef, pull_point * mean_cost.scale
        else:
            upper = break_even_tokens(selected, mean_coef)
    be_point = float(break_even_tokens(rec_point, pull_point))
    be = break_even_tokens(selected, pull_coef)
    if all(method == POOLED for method in methods.values()):
        df = min(residual_df(recompute), residual_df(pull))
    else:
        df = effective_df(
            residual_df(recompute),
            residual_df(pull),
            break_even_tokens(selected, pull_point[None, :]),
            break_even_tokens(rec_point[None, :], pull_coef),
        )
    factor = t_expansion(df, confidence)
    be = _expand_break_even(be, be_point, factor)
    return BootstrapResult(
        methods=methods,
        break_even=be,
        coef={
            recompute.data.name: _expand(rec_chosen, rec_point, factor),
            pull.data.name: _expand(pull_coef, pull_point, factor),
        },
        quadratic_share=float(np.mean(pick_quad)),
        df=df,
        expansion=factor,
        break_even_upper=None if upper is None else _expand_break_even(upper, be_point, factor),
    )


def _expand_break_even(be: np.ndarray, be_point: float, factor: float) -> np.ndarray:
    """Widen break-even samples about the point estimate (inf, no break-even, stays inf)."""
    if not np.isfinite(be_point):
        return be
    finite = np.isfinite(be)
    return np.where(finite, np.maximum(be_point + factor * (np.where(finite, be, 0.0) - be_point), 0.0), be)


def effective_df(df_recompute: int, df_pull: int, be_recompute_only: np.ndarray, be_pull_only: np.ndarray) -> int:
    """Welch-Satterthwaite degrees of freedom of the break-even's noise estimate.

    The break-even's variance is the sum of what each leg's noise contributes, v_r + v_p
    (estimated by moving one leg's coefficients at a time through the resamples), and
    each part is estimated with its leg's own df, so df_eff = (v_r + v_p)^2 /
    (v_r^2 / df_r + v_p^2 / df_p): between min(df_r, df_p) (one leg dominates) and
    df_r + df_p (equal shares). Taking the minimum outright over-widened one-rep ladders
    (coverage 0.94-0.95 at nominal 0.90 on the benchmark grid).
    """
    low = max(min(df_recompute, df_pull), 1)
    parts = []
    for samples in (be_recompute_only, be_pull_only):
        finite = samples[np.isfinite(samples)]
        parts.append(float(np.var(finite)) if finite.size > 1 else 0.0)
    v_r, v_p = parts
    denominator = v_r**2 / max(df_recompute, 1) + v_p**2 / max(df_pull, 1)
    if denominator <= 0 or not np.isfinite(denominator):
        return low
    return int(max(low, min(df_recompute + df_pull, (v_r + v_p) ** 2 / denominator)))


def _expand(samples: np.ndarray, point: np.ndarray, factor: float) -> np.ndarray:
    """Widen samples about the point estimate, keeping coefficients non-negative."""
    return np.maximum(point + factor * (samples - point), 0.0)


def _group_starts(fit: LegFit) -> tuple[np.ndarray, np.ndarray]:
    counts = fit.data.counts
    return np.concatenate([[0], np.cumsum(counts)[:-1]]), counts


def _pool(fit: LegFit) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each length's (Huber-weighted) mean, and the leg's pooled pure error: every probe's deviation from its
    length's mean in units of the length's scale, inflated by sqrt(m / (m - 1)) (lengths with reps only), with the
    indices of the probes they came from.

    Not re-centred: the deviations' Huber-weighted sum is 0 at every length, the drawn weights start the resample's
    IRLS there, and a plain mean would carry a stall's deviation into every other draw (with 3 % of probes stalled,
    re-centring moved every resampled length down and the 6 x 3 ladder's coverage fell to 0.66)."""
    data = fit.data
    starts, counts = _group_starts(fit)
    g, y, h = data.group, data.ttft_ms, fit.weights
    ybar = np.add.reduceat(h * y, starts) / np.add.reduceat(h, starts)
    inflate = np.sqrt(counts / np.maximum(counts - 1.0, 1.0))  # a single probe's deviation is 0 and not pooled
    r = (y - ybar[g]) / data.scale_ms[g] * inflate[g]
    source = np.flatnonzero(counts[g] >= 2)
    return ybar, r[source], source


def _draw_pooled(fit: LegFit, rng: np.random.Generator, n_resamples: int) -> tuple[np.ndarray, np.ndarray]:
    """Each length's mean plus its scale times deviations drawn from the leg's pooled pure error (B, N)."""
    data = fit.data
    ybar, pool, source = _pool(fit)
    g = data.group
    draw = rng.integers(0, len(pool), size=(n_resamples, data.n_probes))
    return ybar[g] + data.scale_ms[g] * pool[draw], fit.weights[source][draw]


def _draw_residuals(fit: LegFit, rng: np.random.Generator, n_resamples: int) -> tuple[np.ndarray, np.ndarray]:
    """Fitted + resampled leverage-corrected relative residuals (B, N); starting weights 1."""
    data = fit.data
    fitted = cost_ms(fit.chosen_fit.coef, data.n_tokens)
    s = data.scale_ms[data.group]
    resid = _relative_residuals(fit)
    draw = rng.integers(0, data.n_probes, size=(n_resamples, data.n_probes))
    y_star = fitted + s * resid[draw]
    return y_star, np.ones_like(y_star)


def _relative_residuals(fit: LegFit) -> np.ndarray:
    """The leg's relative residuals, leverage-corrected and centred: what the residual scheme draws from."""
    data = fit.data
    resid = (data.ttft_ms - cost_ms(fit.chosen_fit.coef, data.n_tokens)) / data.scale_ms[data.group]
    resid = resid / np.sqrt(np.maximum(1.0 - _leverage(fit), 1e-3))
    return resid - resid.mean()


def _resampled_sums(fit: LegFit, draw, rng: np.random.Generator, n_resamples: int):
    """Per-length sums of every resample, drawn and re-weighted a slice of resamples at a time.

    A resample enters the refits only through its per-length sums, so at most
    ``CHUNK_ELEMENTS`` (resamples x probes) values are held at once: a million-row table
    bootstraps in a few hundred MB instead of tens of GB. The slices draw the same random
    stream in the same order, so the samples do not depend on the slice size. A table far larger
    than any sweep's is resampled from per-length atoms instead (:mod:`kvcal.fit.bootstrap_atoms`).
    """
    if use_atoms(fit, n_resamples):
        return atom_sums(fit, scheme_atoms(fit, draw), rng, n_resamples)
    indicator = _indicator(fit)
    step = max(1, CHUNK_ELEMENTS // fit.data.n_probes)
    parts = []
    for start in range(0, n_resamples, step):
        y_star, h_star = draw(fit, rng, min(step, n_resamples - start))
        w_star = _robust_weights(fit, y_star, h_star, indicator) * fit.data.rel_weight
        parts.append(_sums(w_star, y_star, indicator))
    return tuple(np.concatenate(columns) for columns in zip(*parts))


def scheme_atoms(fit: LegFit, draw) -> Atoms:
    """The atoms of ``draw``'s scheme (:mod:`kvcal.fit.bootstrap_atoms`): each length's mean and the leg's pooled
    pure error, or the fitted cost and the model's residuals."""
    if draw is _draw_pooled:
        ybar, pool, source = _pool(fit)
        return shifted_atoms(fit, ybar, pool, fit.weights[source])
    resid = _relative_residuals(fit)
    return shifted_atoms(fit, cost_ms(fit.chosen_fit.coef, fit.data.lengths), resid, np.ones_like(resid))


def _robust_weights(fit: LegFit, y_star: np.ndarray, h_star: np.ndarray, indicator: np.ndarray) -> np.ndarray:
    """Huber weights of each resample, by IRLS on the leg's largest model (as in the point fit).

    Holding the point fit's weights fixed would treat the Huber estimate as a weighted
    mean with known weights and understate its variance (by a fifth in the sd at 5%
    noise); re-weighting each resample is what the point fit did to the data.
    """
    if fit.f_scale is None:
        return h_star
    data = fit.data
    p = max(f.n_params for f in fit.fits.values())
    x = data.basis(p)
    z = y_star / data.scale_ms[data.group]  # relative units, where f_scale lives
    v = data.rel_weight
    h = h_star
    resid = np.empty_like(z)
    for _ in range(IRLS_STEPS):
        w = h * v
        beta, _ = solve_nnls(np.einsum("bk,kj,kl->bjl", w @ indicator, x, x), ((w * y_star) @ indicator) @ x)
        fitted_rel = (beta @ x.T) / data.scale_ms
        np.subtract(z, fitted_rel[:, data.group], out=resid)
        np.abs(resid, out=resid)
        np.maximum(resid, 1e-300, out=resid)
        h = np.minimum(1.0, np.divide(fit.f_scale, resid, out=resid))
    return h


def _indicator(fit: LegFit) -> np.ndarray:
    """(N, K) 0/1 matrix mapping probes to lengths: per-length sums become one BLAS product."""
    return (fit.data.group[:, None] == np.arange(len(fit.data.lengths))[None, :]).astype(float)


def _leverage(fit: LegFit) -> np.ndarray:
    """Diagonal of the weighted hat matrix over the coefficients the constraints left free."""
    data = fit.data
    p = fit.chosen_fit.n_params
    free = fit.chosen_fit.coef[:p] > 0
    if not free.any():
        return np.zeros(data.n_probes)
    x = data.basis(p)[data.group][:, free]
    w = data.rel_weight * fit.weights
    inv = np.linalg.inv(np.einsum("i,ij,ik->jk", w, x, x))
    return w * np.einsum("ij,jk,ik->i", x, inv, x)


def _sums(w_star: np.ndarray, y_star: np.ndarray, indicator: np.ndarray):
    wy = w_star * y_star
    return w_star @ indicator, wy @ indicator, np.einsum("bi,bi->b", wy, y_star)


def _refit(fit: LegFit, p: int, s0: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Batched non-negative WLS from per-length sums; returns beta_u (B, p) and WSSE (B,)."""
    x = fit.data.basis(p)
    gram = np.einsum("bk,kj,kl->bjl", s0, x, x)
    rhs = s1 @ x
    beta, obj = solve_nnls(gram, rhs)
    return beta, np.maximum(s2 + obj, 0.0)
