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
   tail would put there (binomial p < ``TAIL_ALPHA``), and (c) its share is beyond a
   stall's: a few percent of probes (``STALL_SHARE``) are stalls, so under the Jeffreys
   posterior of the share, Beta(k + 1/2, n - k + 1/2) for k slow of n (the one
   :class:`MeanCost` draws from), the probability of a share of ``STALL_SHARE`` or less
   is below the interval's lower tail, (1 - confidence) / 2 (:func:`stall_posterior`).
   A point share over 5 % is not enough: a 3 % stall rate leaves 2 or more stalls in 18
   probes (11 %) in 1 campaign of 10, and at 2 of 18 the posterior still gives a share of
   5 % or less 0.12 (at 3 of 18, 0.026; a 3 % stall rate leaves 3 or more in 1 of 60);
   (d) the slow component holds at most half the probes: a minority *below* the bulk is
   low outliers, not a fast path (the roles would be swapped).

The pull's **mean cost** is its fast curve times ``m = 1 + share x (ratio - 1)``
(:class:`MeanCost`). A mode in the **pull** leg makes the leg's curve that mean cost: the
fast curve is the robust fit with the slow probes divided by the ratio, and the
break-even and its bootstrap interval are those of the mean costs. Slow pulls that the
robust fit set aside but that are too few to call a mode (1-2 slow pulls of 18 are what a
10 % mode usually leaves, and what a 3 % stall sometimes does) cannot be told from a
stall: the point stays the robust one and the interval runs from the fast curves' lower
end to the mean costs' upper end (``unresolved``), so the threshold is safe for the mean
either way. A mode in **recompute** only lowers the mean-cost crossover: the robust
(fast) recompute curve keeps the threshold above it, so it is reported and kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from kvcal.costs.cost_curve import cost_ms
from kvcal.fit.curves import DOWNWEIGHT_REPORT_BELOW, LegData, LegFit, fit_leg, weighted_fit
from kvcal.fit.tails import STALL_SHARE
from kvcal.records.fit import FIT_DEFAULTS, FitSettings, SlowMode

MIN_PROBES = 10  # below, a split of normal noise into two clusters passes the tests below by chance
MIN_SEPARATION_SD = 5.0
MIN_LIKELIHOOD_RATIO = 16.0  # 2 log LR of mixture over one normal; normal noise stays under it in 999 of 1,000 legs
MIN_SLOW_PROBES = 2
TAIL_ALPHA = 1e-3
EM_STEPS = 40
START_QUANTILES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
SD_FLOOR = 1e-3  # relative; a component cannot collapse onto one value
MEAN_FITTED_LEGS = ("pull",)
TOO_FEW_NOTE = "the slow-mode test needs at least"


def stall_posterior(n_slow: int, n_probes: int) -> float:
    """The Jeffreys posterior probability that a leg with ``n_slow`` slow probes of ``n_probes`` has a slow share
    of ``STALL_SHARE`` or less, i.e. that its slow probes are stalls."""
    return float(stats.beta.cdf(STALL_SHARE, n_slow + 0.5, n_probes - n_slow + 0.5))


def detect(fit: LegFit, confidence: float = FIT_DEFAULTS.confidence) -> tuple[SlowMode, np.ndarray] | None:
    """The leg's slow mode and its slow probes' indices when it has one (module docstring), else None."""
    data = fit.data
    if data.n_probes < MIN_PROBES:
        return None
    mixture = _best_mixture(fit)
    if mixture is None:
        return None  # every probe on its curve: nothing to split
    e, slow = mixture.e, mixture.resp > 0.5
    n_slow = int(slow.sum())
    separation = (mixture.mu_s - mixture.mu_f) / mixture.sd
    if n_slow < MIN_SLOW_PROBES or separation < MIN_SEPARATION_SD:
        return None
    if 2 * n_slow > data.n_probes:
        # The "fast" component is a minority below the bulk: low outliers (one probe at a third of the time), not a
        # fast path with most probes slow; called a mode, it read "17 of 18 probes took 3.3x the fast time".
        return None
    if stall_posterior(n_slow, data.n_probes) >= (1.0 - confidence) / 2:
        return None  # the share may still be a stall's: the slow probes are set aside, unresolved (pull_cost)
    if 2.0 * (mixture.loglik - _em(fit, np.zeros(len(e))).loglik) < MIN_LIKELIHOOD_RATIO:
        return None
    # How many of n would the fast mode's own (normal) noise put as far out as the slow mode's nearest probe?
    tail = float(stats.norm.sf((float(e[slow].min()) - mixture.mu_f) / mixture.sd))
    if float(stats.binom.sf(n_slow - 1, data.n_probes, tail)) >= TAIL_ALPHA:
        return None
    slow_idx = np.flatnonzero(slow)
    return _record(data, slow_idx, mixture.mu_s - mixture.mu_f, separation, data.name in MEAN_FITTED_LEGS), slow_idx


def _record(data: LegData, slow_idx: np.ndarray, log_ratio: float, separation: float, mean_fitted: bool) -> SlowMode:
    n_slow = len(slow_idx)
    return SlowMode(
        leg=data.name,
        share=round(n_slow / data.n_probes, 4),
        ratio=round(math.exp(log_ratio), 4),
        n_slow=n_slow,
        n_probes=data.n_probes,
        lengths=sorted({int(n) for n in data.n_tokens[slow_idx]}),
        separation_sd=round(separation, 2),
        mean_fitted=mean_fitted,
        slow_probes=[[int(data.n_tokens[i]), int(data.rep[i])] for i in slow_idx],
    )


@dataclass(frozen=True)
class MeanCost:
    """The pull's mean cost over its fast curve, ``m = 1 + share x (ratio - 1)``, and the spread of m.

    The share of k slow probes of n is binomial. A percentile bootstrap of it behaves like the
    Wald interval, which under-covers at a few slow probes of 18 (Brown, Cai & DasGupta 2001:
    the Wald interval's coverage collapses at small n p), so each resample draws the share
    from the Jeffreys posterior Beta(k + 1/2, n - k + 1/2), whose intervals keep near-nominal
    coverage there; the log ratio is drawn normal about its mean over the slow probes with
    the fast noise's sd / sqrt(k) (one sd for both modes, as in the test above).
    """

    n_slow: int
    n_probes: int
    log_ratio: float
    log_ratio_se: float
    decided: bool  # a mode: the curve is the mean cost; else too few to tell from a stall: the interval's upper end

    @property
    def scale(self) -> float:
        return 1.0 + self.n_slow / self.n_probes * math.expm1(self.log_ratio)

    def scale_samples(self, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
        share = rng.beta(self.n_slow + 0.5, self.n_probes - self.n_slow + 0.5, size=n_resamples)
        excess = np.expm1(rng.normal(self.log_ratio, self.log_ratio_se, size=n_resamples))
        return 1.0 + share * np.maximum(excess, 0.0)


@dataclass(frozen=True)
class PullCost:
    """What the fit knows of the pull's cost: its fast (robust) curve, each leg's mode, and the mean-cost scale."""

    fast: LegFit
    modes: list[SlowMode]
    mean: MeanCost | None  # None: no slow pull seen, the fast curve is the mean
    unresolved: SlowMode | None  # slow pulls too few to tell a stall from a mode

    @property
    def curve(self) -> LegFit:
        """The pull's reported curve: the mean cost when the pull has a mode, else the fast curve."""
        if self.mean is None or not self.mean.decided:
            return self.fast
        m = self.mean.scale
        return replace(
            self.fast,
            fits={k: replace(f, coef=f.coef * m) for k, f in self.fast.fits.items()},
            selection=f"{self.fast.selection}; mean cost: the fast curve x {m:.4g} (1 + share x (ratio - 1))",
        )


def pull_cost(
    recompute: LegFit, pull: LegFit, pull_data: LegData, models: tuple[str, ...], settings: FitSettings = FIT_DEFAULTS
) -> PullCost:
    """Each leg's mode (told apart at the fit's confidence); a pull with one refitted on its fast path (slow probes
    divided by the ratio) with its mean-cost scale; else the slow pulls the robust fit set aside, when there are
    any (unresolved)."""
    found = [hit for hit in (detect(recompute, settings.confidence), detect(pull, settings.confidence)) if hit]
    modes = [mode for mode, _ in found]
    for mode, slow_idx in found:
        if mode.mean_fitted:
            sd = math.log(mode.ratio) / mode.separation_sd
            fast = fit_leg(_unslowed(pull_data, slow_idx, mode.ratio), models)
            return PullCost(
                fast,
                modes,
                MeanCost(mode.n_slow, mode.n_probes, math.log(mode.ratio), sd / math.sqrt(mode.n_slow), decided=True),
                None,
            )
    aside, e, sd = _set_aside(pull)
    if not aside.size:
        return PullCost(pull, modes, None, None)
    mean = MeanCost(len(aside), pull.data.n_probes, float(e.mean()), sd / math.sqrt(len(aside)), decided=False)
    return PullCost(pull, modes, mean, _record(pull.data, aside, float(e.mean()), float(e.mean()) / sd, False))


def _set_aside(fit: LegFit) -> tuple[np.ndarray, np.ndarray, float]:
    """The slow probes the robust fit set aside (weight < 1/4, above the curve) when they lie beyond the fast
    noise: k of n that far out has p < ``TAIL_ALPHA`` under the other probes' noise (sd from them, Student t),
    as in the mode test's (b). Without it a MAD that came out small by chance set aside a clean probe 3.2 sd
    above the curve (1 of 40 clean 6 x 3 campaigns). Returns (indices, their log ratios to the fast curve, the
    noise sd)."""
    data = fit.data
    e = np.log(data.ttft_ms / cost_ms(fit.chosen_fit.coef, data.n_tokens))
    aside = np.flatnonzero((fit.weights < DOWNWEIGHT_REPORT_BELOW) & (e > 0))
    df = data.n_probes - len(aside) - fit.chosen_fit.n_params
    if not aside.size or df < 1:
        return np.array([], dtype=int), e[:0], 0.0
    rest = np.delete(e, aside)
    sd = max(math.sqrt(float(np.sum((rest - rest.mean()) ** 2)) / df), SD_FLOOR)
    tail = float(stats.t.sf((float(e[aside].min()) - float(rest.mean())) / sd, df))
    if float(stats.binom.sf(len(aside) - 1, data.n_probes, tail)) >= TAIL_ALPHA:
        return np.array([], dtype=int), e[:0], 0.0
    return aside, e[aside], sd


def _unslowed(data: LegData, slow_idx: np.ndarray, ratio: float) -> LegData:
    """The leg with its slow probes divided by the slow/fast ratio (its fast path), noise scales recomputed."""
    y = data.ttft_ms.copy()
    y[slow_idx] /= ratio
    return replace(
        data, ttft_ms=y, scale_ms=np.array([np.median(y[data.group == k]) for k in range(len(data.lengths))])
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
    if mode.mean_fitted:
        effect = (
            "the router pays the mean, so this leg's curve is its mean cost (the fast curve x (1 + share x "
            "(ratio - 1))) and the break-even is that of the mean costs"
        )
    else:
        effect = (
            "it lowers the mean-cost crossover; the robust (fast) curve is kept, which keeps the threshold "
            "above the mean-cost break-even"
        )
    return (
        f"{mode.leg} has a slow mode: {mode.n_slow} of {mode.n_probes} probes ({mode.share:.0%}) took "
        f"{mode.ratio:.2g}x the fast time (at {_lengths(mode)} tokens), beyond a stall and beyond the noise "
        f"({mode.separation_sd:.0f} sd); {effect}. Find the slow path (link congestion, a fallback transport) "
        "or measure more reps (`kvcal sweep --reps 5`) to pin its share down"
    )


def describe_unresolved(aside: SlowMode) -> str:
    """One line for the slow pulls that cannot be told from a stall."""
    return (
        f"pull: {aside.n_slow} of {aside.n_probes} probes took {aside.ratio:.2g}x the fitted time (at "
        f"{_lengths(aside)} tokens): too few to tell a stall from a slow mode (the test needs a share beyond a "
        f"stall's {STALL_SHARE:.0%} and the fast noise's tail, {MIN_SLOW_PROBES}+ probes and a likelihood ratio of "
        f"{MIN_LIKELIHOOD_RATIO:.0f}); the "
        "break-even is the robust one and its interval reaches up to the mean cost with them, so a threshold "
        "is safe for what the router pays either way. Measure more reps (`kvcal sweep --reps 8`) to tell"
    )


def too_few_probes(legs: dict[str, LegData]) -> str | None:
    """One note for the legs too small for the slow-mode test: a slow path there would go unseen."""
    small = [f"{name} {data.n_probes}" for name, data in legs.items() if data.n_probes < MIN_PROBES]
    if not small:
        return None
    return (
        f"{TOO_FEW_NOTE} {MIN_PROBES} probes on a leg ({', '.join(small)} probes): a slow path "
        "there (a congested link, a fallback transport) would go unseen; sweep more reps (`kvcal sweep --reps 3`)"
    )


def _lengths(mode: SlowMode) -> str:
    return ", ".join(str(n) for n in mode.lengths[:6]) + (" ..." if len(mode.lengths) > 6 else "")
