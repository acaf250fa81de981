"""Each leg's mean cost: the fitted curve scaled to what the router pays on average.

The robust fit (:mod:`kvcal.fit.curves`) estimates a leg's *typical* cost: a skewed leg's
fit sits near its median, and the stalls and slow probes the Huber loss sets aside do
not move it. The router pays the *mean*. On one leg's log residuals to its reported curve,
``e_i = log(ttft_i / fitted_i)``:

* the **tail** is the probes beyond ``TAIL_SD`` robust sd of the median residual (where the
  robust fit's weight falls below 1/4: stalls, a slow mode); each counts at its own ratio;
* the **bulk** (the rest) is taken as lognormal about the curve: its location ``mu`` (the
  mean of its residuals) and its spread ``s`` (the pure error within lengths where a length
  has reps, so a misfit does not count as noise; else about ``mu``), whose mean ratio is
  ``exp(mu + s^2 / 2)``;

    scale = exp(mu + s^2 / 2) + (1 / n) sum_tail (exp(e_i) - exp(mu + s^2 / 2))

Each leg's tail is charged as far as the evidence says it is its own or shared with the other leg
(Bayesian model averaging over who the tail belongs to, under a prior that tails are rare), and a
leg whose slow mode the mode test found keeps its own (:mod:`kvcal.fit.tails`; until issue 50 the
tails were pooled unless Fisher's exact test told their rates apart, which charged half of a stall
drawn on one leg to the other).

**The scale's own uncertainty** (:func:`scale_draws`). ``*_scale_se`` treats the bulk's spread as
known; a few reps of sigma 0.9 noise do not pin ``exp(s^2 / 2)``. What each scale is made of is
recorded (``mean_cost.*_parts``) and each draw redraws it: the spread from its sampling
distribution, ``s*^2 = s^2 chi2_df / df`` (df the pure-error df behind ``s``), and the tail's rate
and size from theirs (:func:`kvcal.fit.tails.draw`). :func:`reps_to_settle` says how many more
probes of a leg bring its scale's uncertainty to a target.

Symmetric noise gives 1 to second order (``E log(1 + eps) = -sigma^2 / 2``); a lognormal leg
of sigma 0.6 fitted at its median gives ``exp(0.18) = 1.20``. A pull whose curve is already
its mean cost (a slow mode, :mod:`kvcal.fit.modes`) gives about 1: its fast probes sit
below that curve and its slow ones above.

Per length, the bulk's own offset ``d_k = mean(e at k) - mu`` is that length's measured
mean (the bulk's: a stall does not move it) relative to the curve; it **misfits** when ``|d_k|``
exceeds both ``MIN_MISFIT_LOG`` and ``z`` standard errors (``s / sqrt(m_k)``, z two-sided,
Bonferroni over both legs' lengths at ``MISFIT_ALPHA``). The threshold rule decides at a misfit
length on the measured mean (:mod:`kvcal.threshold.rules.expected_cost`).

:func:`mean_curves` is what another stage calls to charge mean costs (the fleet model):
each leg's fitted coefficients times its scale (1 for a fit.json written before scales).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import ndtri

from kvcal.costs.cost_curve import cost_ms
from kvcal.fit import tails
from kvcal.records.fit import FitResult
from kvcal.records.fit_mean_cost import MeanCostSummary, MeanLength, ScaleParts

if TYPE_CHECKING:  # the curves module brings pandas and scipy.optimize, which emit-config never needs
    from kvcal.fit.curves import LegData

TAIL_SD = 5.4  # where the robust fit's Huber weight falls below 1/4 (kvcal.fit.curves.DOWNWEIGHT_REPORT_BELOW)
SD_FLOOR = 1e-3
MIN_MISFIT_LOG = math.log(1.05)  # a length 5 % off its curve is a misfit only beyond the noise too
MISFIT_ALPHA = 0.01
MAX_SETTLE_REPS = 100_000  # reps_to_settle's answer when no number of reps would reach the target


@dataclass(frozen=True)
class LegMean:
    """One leg's bulk (its log location, spread and the spread's df), its tail probes' excess over the bulk (ratios),
    and per-length offsets (log)."""

    mu: float
    spread: float
    df: int
    n_probes: int
    tail_excess: np.ndarray
    scale_se: float
    lengths: np.ndarray
    offsets: np.ndarray
    misfit: np.ndarray

    @property
    def bulk(self) -> float:
        return math.exp(self.mu + self.spread**2 / 2)

    def tail(self, own: bool) -> tails.LegTail:
        return tails.LegTail(self.n_probes, self.tail_excess, own)


def leg_mean(data: LegData, coef: np.ndarray, z: float) -> LegMean:
    """The bulk, tail and per-length offsets of one leg against its reported curve ``coef`` (module docstring)."""
    fitted = np.maximum(cost_ms(coef, data.n_tokens), 1e-9)
    e = np.log(np.maximum(data.ttft_ms, 1e-9) / fitted)
    centre = float(np.median(e))
    spread = max(1.4826 * float(np.median(np.abs(e - centre))), SD_FLOOR)
    tail = np.abs(e - centre) > TAIL_SD * spread
    bulk = ~tail
    groups = [bulk & (data.group == k) for k in range(len(data.lengths))]
    means = np.array([float(e[g].mean()) if g.any() else math.nan for g in groups])
    present = np.isfinite(means)
    mu = float(e[bulk].mean())
    s, df = _spread(e, groups, means, mu, bulk)
    n = len(e)
    bulk_ratio = math.exp(mu + s * s / 2)
    excess = np.exp(e[tail]) / bulk_ratio - 1.0
    scale = bulk_ratio * (1.0 + float(excess.sum()) / n)
    se = float(np.std(np.exp(e)) / max(scale, 1e-12) / math.sqrt(n))
    counts = np.array([int(g.sum()) for g in groups])
    offsets = np.where(present, means - mu, 0.0)
    limit = np.maximum(MIN_MISFIT_LOG, z * s / np.sqrt(np.maximum(counts, 1)))
    return LegMean(mu, s, df, n, excess, se, data.lengths, offsets, present & (np.abs(offsets) > limit))


def charged_tails(
    rec: LegMean, pull: LegMean, own_tails: frozenset[str] = frozenset()
) -> tuple[tails.Charged, tails.Charged]:
    """Each leg's tail charge (:func:`kvcal.fit.tails.charge`); legs in ``own_tails`` (a slow mode found there) keep
    their own."""
    return tails.charge(rec.tail("recompute" in own_tails), pull.tail("pull" in own_tails))


def scales(rec: LegMean, pull: LegMean, own_tails: frozenset[str] = frozenset()) -> tuple[float, float]:
    """Each leg's scale: its bulk's mean ratio times one plus its tail's charged excess."""
    t_r, t_p = charged_tails(rec, pull, own_tails)
    return rec.bulk * (1.0 + t_r.excess), pull.bulk * (1.0 + t_p.excess)


def _spread(
    e: np.ndarray, groups: list[np.ndarray], means: np.ndarray, mu: float, bulk: np.ndarray
) -> tuple[float, int]:
    """The bulk's sd and its df: pure error within lengths with reps (a misfit does not count as noise), else about
    ``mu``."""
    df = sum(int(g.sum()) - 1 for g in groups if g.sum() >= 2)
    if df >= 2:
        ss = sum(float(np.sum((e[g] - means[k]) ** 2)) for k, g in enumerate(groups) if g.sum() >= 2)
        return max(math.sqrt(ss / df), SD_FLOOR), df
    df = max(int(bulk.sum()) - 1, 1)
    return max(math.sqrt(float(np.sum((e[bulk] - mu) ** 2)) / df), SD_FLOOR), df


def summarise(
    legs: dict[str, LegData],
    coefs: dict[str, np.ndarray],
    own_tails: frozenset[str] = frozenset(),
    medians: bool = False,
    in_curve: frozenset[str] = frozenset(),
) -> MeanCostSummary:
    """The mean-cost record of a fit: ``legs`` the raw probes per leg, ``coefs`` each leg's reported curve,
    ``own_tails`` the legs whose slow mode the mode test found (kvcal.fit.modes: their tails are never shrunk),
    ``in_curve`` those whose curve is already its mean cost over that mode (its draws carry the share),
    ``medians`` whether each probe is a length's median (an llm-d Job's table: its spread is the medians' noise,
    not the requests', so the scales stay 1 and no parts are recorded)."""
    n_tests = sum(len(d.lengths) for d in legs.values())
    z = float(ndtri(1.0 - MISFIT_ALPHA / (2 * max(n_tests, 1))))  # the normal quantile, as stats.norm.ppf computes it
    rec, pull = (leg_mean(legs[name], np.asarray(coefs[name], dtype=float), z) for name in ("recompute", "pull"))
    if medians:
        return MeanCostSummary(
            recompute_scale=1.0,
            pull_scale=1.0,
            recompute_scale_se=_sig(rec.scale_se),
            pull_scale_se=_sig(pull.scale_se),
            per_length=_per_length(rec, pull, coefs, {"recompute": rec.bulk, "pull": pull.bulk}),
        )
    t_r, t_p = charged_tails(rec, pull, own_tails)
    m_r, m_p = rec.bulk * (1.0 + t_r.excess), pull.bulk * (1.0 + t_p.excess)
    return MeanCostSummary(
        recompute_scale=_sig(m_r),
        pull_scale=_sig(m_p),
        recompute_scale_se=_sig(rec.scale_se),
        pull_scale_se=_sig(pull.scale_se),
        per_length=_per_length(rec, pull, coefs, {"recompute": m_r, "pull": m_p}),
        recompute_parts=_parts(rec, t_r, "recompute" in in_curve),
        pull_parts=_parts(pull, t_p, "pull" in in_curve),
    )


def _parts(leg: LegMean, tail: tails.Charged, in_curve: bool) -> ScaleParts:
    return ScaleParts(
        bulk_log_mean=_sig(leg.mu),
        bulk_sd=_sig(leg.spread),
        bulk_df=leg.df,
        n_probes=leg.n_probes,
        tail_probes=len(leg.tail_excess),
        tail_rate=_sig(tail.rate),
        tail_weight=_sig(tail.weight),
        tail_size=None if tail.size is None else _sig(tail.size),
        tail_size_sd=None if tail.size_sd is None else _sig(tail.size_sd),
        shared=_sig(tail.shared),
        tail_in_curve=in_curve,
    )


def _per_length(rec: LegMean, pull: LegMean, coefs: dict[str, np.ndarray], scale: dict[str, float]) -> list[MeanLength]:
    """Each measured length's mean cost per leg, and whether it misfits: the leg's mean curve (its curve times its
    ``scale``, the tail's charge included) moved by the length's own bulk offset (a stall there does not move it:
    the tail is charged to every length alike, as the router meets it)."""
    rows = []
    for n in sorted(set(rec.lengths.tolist()) | set(pull.lengths.tolist())):
        ms: dict[str, float | None] = {}
        misfit: dict[str, bool] = {}
        for name, leg in (("recompute", rec), ("pull", pull)):
            hit = np.flatnonzero(leg.lengths == n)
            if not hit.size:
                ms[name], misfit[name] = None, False
                continue
            k = int(hit[0])
            mean_ms = float(cost_ms(coefs[name], float(n))) * scale[name] * math.exp(float(leg.offsets[k]))
            ms[name], misfit[name] = float(f"{mean_ms:.6g}"), bool(leg.misfit[k])
        rows.append(
            MeanLength(
                prefix_tokens=int(n),
                recompute_ms=ms["recompute"],
                pull_ms=ms["pull"],
                recompute_misfit=misfit["recompute"],
                pull_misfit=misfit["pull"],
            )
        )
    return rows


def _sig(value: float) -> float:
    return float(f"{value:.6g}")


def mean_scales(fit: FitResult) -> tuple[float, float]:
    """(recompute, pull) mean cost over each fitted curve; (1, 1) for a fit.json written before they were recorded."""
    if fit.mean_cost is None:
        return 1.0, 1.0
    return fit.mean_cost.recompute_scale, fit.mean_cost.pull_scale


def mean_curves(fit: FitResult) -> tuple[np.ndarray, np.ndarray]:
    """Each leg's mean-cost coefficients (intercept_ms, per_token_us, per_token2_ns): what the router pays on
    average, for :func:`kvcal.costs.cost_curve.cost_ms`. The fleet model charges these."""
    m_r, m_p = mean_scales(fit)
    return np.asarray(fit.recompute.coefficients) * m_r, np.asarray(fit.pull.coefficients) * m_p


def scale_draws(fit: FitResult, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(recompute, pull) mean-cost scales, (n,) each: one per bootstrap draw of the curves.

    From each leg's recorded parts: the bulk's spread drawn from its sampling distribution,
    ``s*^2 = s^2 chi2_df / df``, the tail's rate and size from theirs (:func:`kvcal.fit.tails.draw`),
    ``scale* = exp(mu + s*^2 / 2) x (1 + rate* x size*)``. A fit.json without parts (older files, an
    llm-d table) draws ``scale x exp(N(0, se))`` as before; one without mean costs draws 1.
    """
    summary = fit.mean_cost
    if summary is None:
        return np.ones(n), np.ones(n)
    out = []
    for scale, se, parts in (
        (summary.recompute_scale, summary.recompute_scale_se, summary.recompute_parts),
        (summary.pull_scale, summary.pull_scale_se, summary.pull_parts),
    ):
        out.append(scale * np.exp(rng.normal(0.0, se, n)) if parts is None else _parts_draws(parts, n, rng))
    return out[0], out[1]


def _parts_draws(parts: ScaleParts, n: int, rng: np.random.Generator) -> np.ndarray:
    s2 = parts.bulk_sd**2 * rng.chisquare(parts.bulk_df, size=n) / parts.bulk_df
    bulk = np.exp(parts.bulk_log_mean + s2 / 2)
    charged = _charged(parts)
    tail = np.full(n, charged.excess) if parts.tail_in_curve else tails.draw(charged, n, rng)
    return bulk * (1.0 + tail)


def _charged(parts: ScaleParts) -> tails.Charged:
    return tails.Charged(parts.tail_rate, parts.tail_weight, parts.tail_size, parts.tail_size_sd, parts.shared)


def scale_rel_sd(parts: ScaleParts, more: int = 0) -> float:
    """The sd of log(scale) that :func:`scale_draws` gives (to first order), after ``more`` probes of the leg at
    lengths it has measured: each adds a pure-error df to the spread and a probe behind the tail's rate, and the
    tail probes it brings (at the same rate) narrow the size."""
    s2 = parts.bulk_sd**2
    var = s2 * s2 / (2.0 * (parts.bulk_df + more))  # Var(s*^2 / 2), s*^2 = s^2 chi2_df / df
    if parts.tail_size and parts.tail_rate > 0 and not parts.tail_in_curve:
        excess = parts.tail_rate * parts.tail_size
        share = excess / (1.0 + excess)
        rate_var = (1.0 - parts.tail_rate) / (parts.tail_rate * (parts.tail_weight + more + 1.0))  # Beta, relative
        k = max(parts.tail_probes, 1)
        size_var = (parts.tail_size_sd or 0.0) ** 2 / parts.tail_size**2 * k / (k + parts.tail_rate * more)
        var += share * share * (rate_var + size_var)
    return math.sqrt(var)


def reps_to_settle(fit: FitResult, leg: str, target_rel_sd: float) -> int:
    """How many more probes of ``leg`` ('recompute' or 'pull'), at lengths it has measured, bring the sd of its
    log scale to ``target_rel_sd``: 0 where it is there already or nothing is recorded to tell (an older fit.json,
    an llm-d table), ``MAX_SETTLE_REPS`` where no number would."""
    if leg not in ("recompute", "pull"):
        raise ValueError(f"leg must be 'recompute' or 'pull', got {leg!r}")
    if fit.mean_cost is None or target_rel_sd <= 0:
        return 0 if fit.mean_cost is None else MAX_SETTLE_REPS
    parts = fit.mean_cost.recompute_parts if leg == "recompute" else fit.mean_cost.pull_parts
    if parts is None or scale_rel_sd(parts) <= target_rel_sd:
        return 0
    low, high = 0, 1
    while scale_rel_sd(parts, high) > target_rel_sd:
        if high >= MAX_SETTLE_REPS:
            return MAX_SETTLE_REPS
        low, high = high, min(2 * high, MAX_SETTLE_REPS)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if scale_rel_sd(parts, mid) <= target_rel_sd else (mid, high)
    return high
