"""A slow mode versus a rare stall, per leg: which cost the fitted curve stands for.

The robust loss (:mod:`kvcal.fit.curves`) treats slow probes as outliers and fits the
*fast* path. That is right for a stall (a probe or two that met a scheduler hiccup)
and wrong for a second, common path (a congested link, a fallback transport: 20 % of
pulls at twice the time): the router pays the *mean* cost, and the fast curve's
break-even then lies below the mean's.

The test, on one leg's log ratios ``e_i = log(ttft_i / fast_i)`` to the robust curve:

1. a two-component normal mixture of equal sd (a slow path that multiplies the time
   keeps the relative noise) is fitted to e by EM (fast mu_f, slow mu_s, sd s, share
   pi), from several first splits, keeping the likeliest; the fast curve is refitted in
   each step with the slow probes divided by the slow/fast ratio (the robust curve is
   bent by a mode of 40 %);
2. the slow component is a **mode** when (a) the mixture explains the leg better than
   one normal (2 log LR >= ``MIN_LIKELIHOOD_RATIO``; by simulation of normal noise at
   12-100 probes its 99.9th percentile is 12-15) and its excess ``(mu_s - mu_f) / s``
   is at least ``MIN_SEPARATION_SD`` (a split of one normal into two clusters reaches
   4-5 sd at its 99th percentile): beyond what the noise model explains, (b) at least
   ``MIN_SLOW_PROBES`` probes belong to it and more than the fast component's normal
   tail would put there (binomial p < ``TAIL_ALPHA``), and (c) its share exceeds
   ``STALL_SHARE``: a few percent of probes are stalls, whose handling stays robust.

A mode in the **pull** leg makes the leg's curve its mean cost (least squares, no
robust loss), so the break-even and its bootstrap interval are those of the mean
costs. A mode in **recompute** only lowers the mean-cost crossover: the robust
(fast) recompute curve keeps the threshold above it, so it is reported and kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from kvcal.cost_curve import cost_ms
from kvcal.fit.curves import LegFit, weighted_fit
from kvcal.records import SlowMode

MIN_PROBES = 10  # below, a split of normal noise into two clusters passes the tests below by chance
MIN_SEPARATION_SD = 5.0
MIN_LIKELIHOOD_RATIO = 16.0  # 2 log LR of mixture over one normal; normal noise stays under it in 999 of 1,000 legs
MIN_SLOW_PROBES = 2
STALL_SHARE = 0.05  # a slow share up to this is a stall (robust handling); above it, a mode
TAIL_ALPHA = 1e-3
EM_STEPS = 40
START_QUANTILES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
SD_FLOOR = 1e-3  # relative; a component cannot collapse onto one value
MEAN_FITTED_LEGS = ("pull",)


def detect(fit: LegFit) -> SlowMode | None:
    """The leg's slow mode when it has one (module docstring), else None."""
    data = fit.data
    if data.n_probes < MIN_PROBES:
        return None
    mixture = _best_mixture(fit)
    if mixture is None:
        return None  # every probe on its curve: nothing to split
    e, slow = mixture.e, mixture.resp > 0.5
    n_slow = int(slow.sum())
    separation = (mixture.mu_s - mixture.mu_f) / mixture.sd
    if n_slow < MIN_SLOW_PROBES or n_slow / len(e) <= STALL_SHARE or separation < MIN_SEPARATION_SD:
        return None
    if 2.0 * (mixture.loglik - _em(fit, np.zeros(len(e))).loglik) < MIN_LIKELIHOOD_RATIO:
        return None
    # How many of n would the fast mode's own (normal) noise put as far out as the slow mode's nearest probe?
    tail = float(stats.norm.sf((float(e[slow].min()) - mixture.mu_f) / mixture.sd))
    if float(stats.binom.sf(n_slow - 1, data.n_probes, tail)) >= TAIL_ALPHA:
        return None
    slow_idx = np.flatnonzero(slow)
    return SlowMode(
        leg=data.name, share=round(n_slow / data.n_probes, 4), ratio=round(math.exp(mixture.mu_s - mixture.mu_f), 4),
        n_slow=n_slow, n_probes=data.n_probes, lengths=sorted({int(n) for n in data.n_tokens[slow_idx]}),
        separation_sd=round(separation, 2), mean_fitted=data.name in MEAN_FITTED_LEGS,
        slow_probes=[[int(data.n_tokens[i]), int(data.rep[i])] for i in slow_idx],
    )


@dataclass(frozen=True)
class Mixture:
    """A fitted two-mode leg: log ratios to the fast curve, slow membership, the modes' centres and sd."""

    loglik: float
    e: np.ndarray
    resp: np.ndarray
    mu_f: float
    mu_s: float
    sd: float


def _best_mixture(fit: LegFit) -> Mixture | None:
    """The likeliest two-mode fit of the leg, by EM from several first splits (the top 5-50 % of the robust residuals).

    One start from the tail misses a mode of 40 %, whose probes inflate the robust sd.
    """
    e = np.log(fit.data.ttft_ms / cost_ms(fit.chosen_fit.coef, fit.data.n_tokens))
    best: Mixture | None = None
    for q in START_QUANTILES:
        start = e > np.quantile(e, q)
        if start.sum() < 1 or start.all():
            continue
        found = _em(fit, start.astype(float))
        if best is None or found.loglik > best.loglik:
            best = found
    return best


def _em(fit: LegFit, resp: np.ndarray) -> Mixture:
    """EM of the curve and the two modes together: the fast curve is refitted to the probes with the slow ones
    divided by the slow/fast ratio (a robust curve under a 40 % mode is bent towards it). ``resp`` all 0 with
    no steps is the one-mode fit (the null of the likelihood ratio)."""
    data = fit.data
    p = fit.chosen_fit.n_params
    x = data.basis(p)[data.group]
    one_mode = not resp.any()
    n = len(resp)
    lift = 0.0
    for _ in range(1 if one_mode else EM_STEPS):
        beta, _ = weighted_fit(replace(data, ttft_ms=data.ttft_ms * np.exp(-resp * lift)), p, data.rel_weight)
        e = np.log(data.ttft_ms / np.maximum(x @ beta, 1e-9))
        share = float(np.clip(resp.mean(), 1.0 / n, 1.0 - 1.0 / n))
        mu_f = float(np.sum((1 - resp) * e) / max(float(np.sum(1 - resp)), 1e-12))
        mu_s = float(np.sum(resp * e) / max(float(resp.sum()), 1e-12))
        sd = max(math.sqrt(float(np.sum((1 - resp) * (e - mu_f) ** 2 + resp * (e - mu_s) ** 2)) / n), SD_FLOOR)
        if one_mode:
            return Mixture(float(np.sum(-0.5 * ((e - mu_f) / sd) ** 2)) - n * math.log(sd), e, resp, mu_f, mu_f, sd)
        log_f = math.log(1.0 - share) - 0.5 * ((e - mu_f) / sd) ** 2 - math.log(sd)
        log_s = math.log(share) - 0.5 * ((e - mu_s) / sd) ** 2 - math.log(sd)
        new = 1.0 / (1.0 + np.exp(np.clip(log_f - log_s, -700, 700)))
        lift = max(mu_s - mu_f, 0.0)
        if np.allclose(new, resp, atol=1e-6):
            break
        resp = new
    loglik = float(np.sum(np.logaddexp(log_f, log_s)))
    if mu_s < mu_f:  # the labels swapped: the slow component is the upper one
        mu_f, mu_s, resp = mu_s, mu_f, 1.0 - resp
    return Mixture(loglik, e, resp * (e > mu_f), mu_f, mu_s, sd)


def describe(mode: SlowMode) -> str:
    """One line for stderr and fit.json's warnings."""
    shown = ", ".join(str(n) for n in mode.lengths[:6]) + (" ..." if len(mode.lengths) > 6 else "")
    if mode.mean_fitted:
        effect = ("the router pays the mean, so this leg is fitted to its mean cost (no robust loss) and the "
                  "break-even is that of the mean costs")
    else:
        effect = ("it lowers the mean-cost crossover; the robust (fast) curve is kept, which keeps the threshold "
                  "above the mean-cost break-even")
    return (f"{mode.leg} has a slow mode: {mode.n_slow} of {mode.n_probes} probes ({mode.share:.0%}) took "
            f"{mode.ratio:.2g}x the fast time (at {shown} tokens), beyond a stall and beyond the noise "
            f"({mode.separation_sd:.0f} sd); {effect}. Find the slow path (link congestion, a fallback transport) "
            "or measure more reps (`kvcal sweep --reps 5`) to pin its share down")
