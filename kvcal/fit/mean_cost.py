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

The tails are pooled over the two legs unless their rates differ (Fisher's exact test at
``POOL_ALPHA``): stalls that hit both legs alike then scale both alike (the crossing does not
move), where a few drawn on one leg by chance would move it; a slow mode's share keeps its own.

Symmetric noise gives 1 to second order (``E log(1 + eps) = -sigma^2 / 2``); a lognormal leg
of sigma 0.6 fitted at its median gives ``exp(0.18) = 1.20``. A pull whose curve is already
its mean cost (a slow mode, :mod:`kvcal.fit.modes`) gives about 1: its fast probes sit
below that curve and its slow ones above.

Per length, the bulk's own offset ``d_k = mean(e at k) - mu`` is that length's measured
mean (the bulk's: a stall does not move it) relative to the curve; it **misfits** when ``|d_k|``
exceeds both ``MIN_MISFIT_LOG`` and ``z`` standard errors (``s / sqrt(m_k)``, z two-sided,
Bonferroni over both legs' lengths at ``MISFIT_ALPHA``). The threshold rule decides at a misfit
length on the measured mean (:mod:`kvcal.emit.expected_cost`).

:func:`mean_curves` is what another stage calls to charge mean costs (the fleet model):
each leg's fitted coefficients times its scale (1 for a fit.json written before scales).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from kvcal.cost_curve import cost_ms
from kvcal.fit.curves import LegData
from kvcal.fit_record import FitResult
from kvcal.records_cost import MeanCostSummary, MeanLength

TAIL_SD = 5.4  # where the robust fit's Huber weight falls below 1/4 (kvcal.fit.curves.DOWNWEIGHT_REPORT_BELOW)
SD_FLOOR = 1e-3
MIN_MISFIT_LOG = math.log(1.05)  # a length 5 % off its curve is a misfit only beyond the noise too
MISFIT_ALPHA = 0.01
POOL_ALPHA = 0.05


@dataclass(frozen=True)
class LegMean:
    """One leg's bulk mean ratio, its tail (count and summed excess over the bulk), and per-length offsets (log)."""

    bulk: float
    n_probes: int
    n_tail: int
    tail_excess: float
    scale_se: float
    lengths: np.ndarray
    offsets: np.ndarray
    misfit: np.ndarray

    @property
    def own_scale(self) -> float:
        return self.bulk + self.tail_excess / self.n_probes


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
    s = _spread(e, groups, means, mu, bulk)
    n = len(e)
    bulk_ratio = math.exp(mu + s * s / 2)
    excess = float(np.sum(np.exp(e[tail]) - bulk_ratio))
    scale = bulk_ratio + excess / n
    se = float(np.std(np.exp(e)) / max(scale, 1e-12) / math.sqrt(n))
    counts = np.array([int(g.sum()) for g in groups])
    offsets = np.where(present, means - mu, 0.0)
    limit = np.maximum(MIN_MISFIT_LOG, z * s / np.sqrt(np.maximum(counts, 1)))
    return LegMean(
        bulk_ratio, n, int(tail.sum()), excess, se, data.lengths, offsets, present & (np.abs(offsets) > limit)
    )


def scales(rec: LegMean, pull: LegMean, pull_mode: bool = False) -> tuple[float, float]:
    """Each leg's scale; the tails pooled over both legs when their rates do not differ (Fisher's exact test at
    ``POOL_ALPHA``): a stall that hits both legs alike then moves both alike, and a handful of stalls drawn on one
    leg by chance does not move the crossing. A pull whose slow mode is in its curve (``pull_mode``) keeps its own:
    the mode test already told its slow pulls from stalls."""
    if rec.n_tail + pull.n_tail == 0:
        return rec.bulk, pull.bulk
    table = [[rec.n_tail, rec.n_probes - rec.n_tail], [pull.n_tail, pull.n_probes - pull.n_tail]]
    if pull_mode or float(stats.fisher_exact(table)[1]) < POOL_ALPHA:
        return rec.own_scale, pull.own_scale
    pooled = (rec.tail_excess + pull.tail_excess) / (rec.n_probes + pull.n_probes)
    return rec.bulk + pooled, pull.bulk + pooled


def _spread(e: np.ndarray, groups: list[np.ndarray], means: np.ndarray, mu: float, bulk: np.ndarray) -> float:
    """The bulk's sd: pure error within lengths with reps (a misfit does not count as noise), else about ``mu``."""
    df = sum(int(g.sum()) - 1 for g in groups if g.sum() >= 2)
    if df >= 2:
        ss = sum(float(np.sum((e[g] - means[k]) ** 2)) for k, g in enumerate(groups) if g.sum() >= 2)
        return max(math.sqrt(ss / df), SD_FLOOR)
    return max(math.sqrt(float(np.sum((e[bulk] - mu) ** 2)) / max(int(bulk.sum()) - 1, 1)), SD_FLOOR)


def summarise(
    legs: dict[str, LegData], coefs: dict[str, np.ndarray], pull_mode: bool = False, medians: bool = False
) -> MeanCostSummary:
    """The mean-cost record of a fit: ``legs`` the raw probes per leg, ``coefs`` each leg's reported curve,
    ``pull_mode`` whether the pull's curve is already its mean cost over a slow mode (kvcal.fit.modes), ``medians``
    whether each probe is a length's median (an llm-d Job's table: its spread is the medians' noise, not the
    requests', so the scales stay 1)."""
    n_tests = sum(len(d.lengths) for d in legs.values())
    z = float(stats.norm.ppf(1.0 - MISFIT_ALPHA / (2 * max(n_tests, 1))))
    rec, pull = (leg_mean(legs[name], np.asarray(coefs[name], dtype=float), z) for name in ("recompute", "pull"))
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
            mean_ms = float(cost_ms(coefs[name], float(n))) * leg.bulk * math.exp(float(leg.offsets[k]))
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
    m_r, m_p = (1.0, 1.0) if medians else scales(rec, pull, pull_mode)
    return MeanCostSummary(
        recompute_scale=_sig(m_r),
        pull_scale=_sig(m_p),
        recompute_scale_se=_sig(rec.scale_se),
        pull_scale_se=_sig(pull.scale_se),
        per_length=rows,
    )


def _sig(value: float) -> float:
    return float(f"{value:.6g}")


def mean_scales(fit: FitResult) -> tuple[float, float]:
    """(recompute, pull) mean cost over each fitted curve; (1, 1) for a fit.json written before they were recorded."""
    if fit.mean_cost is None:
        return 1.0, 1.0
    return fit.mean_cost.recompute_scale, fit.mean_cost.pull_scale


def mean_curves(fit: FitResult) -> tuple[np.ndarray, np.ndarray]:
    """Each leg's mean-cost coefficients (intercept_ms, per_token_us, per_token2_ns): what the router pays on
    average, for :func:`kvcal.cost_curve.cost_ms`. The fleet model charges these."""
    m_r, m_p = mean_scales(fit)
    return np.asarray(fit.recompute.coefficients) * m_r, np.asarray(fit.pull.coefficients) * m_p
