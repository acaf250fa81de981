"""Each leg's tail (stalls, a slow mode's far probes) as a rate times a size, each leg's its own unless both show one.

:mod:`kvcal.fit.mean_cost` splits a leg's log residuals into a bulk and a tail (the probes
beyond 5.4 robust sd); the tail raises the leg's mean cost by ``rate x size``: the share of
probes in it, and a tail probe's mean excess over the bulk as a ratio,
``x_i = exp(e_i) / bulk - 1``.

**Own unless both legs show one.** A tail seen on one leg only is charged to that leg alone: it
says nothing about the other leg (a link's retransmits stall pulls, a scheduler's hiccup stalls
whatever runs), and pooling it (the Fisher test this replaced could not tell 2 stalls in 18
probes from 0 in 18) charged half of a pull's stalls to recompute: issue 50 saw 4.25 % regret
where each leg's own tail cost 0.02 %. Where **both** legs show a tail, the two are shrunk
towards each other by empirical Bayes, as far as their own evidence allows:

* the rates by a beta-binomial: each leg's rate has a Beta prior with the pooled rate ``p0``
  as its mean and concentration ``kappa`` (the prior's weight, in probes), ``kappa`` the
  maximum of the two legs' marginal likelihood; rates that differ beyond binomial noise give
  a small ``kappa`` (each keeps its own), rates alike a large one (pooled). The posterior
  mean is ``(k + kappa p0) / (n + kappa)``;
* the sizes by a normal-normal model: each leg's mean excess (standard error from the pooled
  spread of both legs' tail probes) shrunk towards their precision-weighted mean by
  ``se^2 / (se^2 + tau^2)``, ``tau^2`` the excess of their squared difference over what the
  standard errors explain (method of moments).

Stalls that hit both legs alike then move both alike (the crossing of the mean costs does not
move); a leg whose slow mode the mode test found (:mod:`kvcal.fit.modes`) keeps its own tail:
the test has already told its slow probes from stalls.

A size from a single tail probe has no spread of its own; it is given ``SINGLE_SIZE_CV`` (one
stall's excess says little about the next one's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln

KAPPA_GRID = np.geomspace(0.1, 1e4, 161)  # prior weights tried, in probes: from "own" to "pooled"
SINGLE_SIZE_CV = 1.0  # relative sd of a size estimated from one tail probe


@dataclass(frozen=True)
class LegTail:
    """One leg's tail: its probe count and each tail probe's excess over the bulk (a ratio)."""

    n: int
    excess: np.ndarray
    own: bool = False  # a slow mode found on this leg: never shrunk

    @property
    def k(self) -> int:
        return len(self.excess)


@dataclass(frozen=True)
class Charged:
    """What a leg is charged for its tail: rate x size, with what the draws need."""

    rate: float
    weight: float  # probes behind the rate (n, plus the shrinkage prior's): the Beta draws' weight
    size: float | None  # None: no tail
    size_sd: float | None
    shrunk: bool = False

    @property
    def excess(self) -> float:
        return 0.0 if self.size is None else self.rate * self.size


def own(tail: LegTail) -> Charged:
    """The leg's own tail, unshrunk."""
    if tail.k == 0:
        return Charged(0.0, float(tail.n), None, None)
    size = float(tail.excess.mean())
    return Charged(tail.k / tail.n, float(tail.n), size, _size_se(tail.excess))


def charge(rec: LegTail, pull: LegTail) -> tuple[Charged, Charged]:
    """Each leg's tail charge: its own, or (both legs with a tail, neither a slow mode) shrunk towards each other."""
    if rec.k == 0 or pull.k == 0 or rec.own or pull.own:
        return own(rec), own(pull)
    kappa = _kappa(rec, pull)
    p0 = (rec.k + pull.k) / (rec.n + pull.n)
    sizes = _shrunk_sizes(rec, pull)
    out = []
    for tail, other, (size, size_sd) in zip((rec, pull), (pull, rec), sizes):
        rate = (tail.k + kappa * p0) / (tail.n + kappa)
        out.append(Charged(rate, tail.n + min(kappa, float(other.n)), size, size_sd, shrunk=True))
    return out[0], out[1]


def _kappa(a: LegTail, b: LegTail) -> float:
    """The beta-binomial prior weight maximising the two legs' marginal likelihood about the pooled rate."""
    p0 = (a.k + b.k) / (a.n + b.n)
    alpha, beta = KAPPA_GRID * p0, KAPPA_GRID * (1.0 - p0)
    loglik = sum(betaln(t.k + alpha, t.n - t.k + beta) - betaln(alpha, beta) for t in (a, b))
    return float(KAPPA_GRID[int(np.argmax(loglik))])


def _shrunk_sizes(a: LegTail, b: LegTail) -> list[tuple[float, float]]:
    """Each leg's size shrunk towards the two legs' precision-weighted mean (normal-normal, method of moments)."""
    both = np.concatenate([a.excess, b.excess])
    df = len(both) - 2
    if df >= 1:
        within = (
            float(np.sum((a.excess - a.excess.mean()) ** 2)) + float(np.sum((b.excess - b.excess.mean()) ** 2))
        ) / df
    else:
        within = (SINGLE_SIZE_CV * float(np.abs(both).mean())) ** 2
    se2 = [max(within, 1e-12) / t.k for t in (a, b)]
    means = [float(t.excess.mean()) for t in (a, b)]
    precision = sum(1.0 / v for v in se2)
    centre = sum(m / v for m, v in zip(means, se2)) / precision
    tau2 = max(0.0, ((means[0] - means[1]) ** 2 - se2[0] - se2[1]) / 2.0)
    out = []
    for m, v in zip(means, se2):
        shrink = v / (v + tau2) if v + tau2 > 0 else 1.0
        var = (1.0 - shrink) * v + shrink / precision
        out.append((shrink * centre + (1.0 - shrink) * m, math.sqrt(var)))
    return out


def _size_se(excess: np.ndarray) -> float:
    """Standard error of a leg's mean excess: its tail probes' spread over sqrt(k); one probe: ``SINGLE_SIZE_CV``."""
    if len(excess) < 2:
        return SINGLE_SIZE_CV * abs(float(excess.mean()))
    return math.sqrt(float(np.var(excess, ddof=1)) / len(excess))


def draw(charged: Charged, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) draws of the tail's excess ``rate x size``: the rate from its Beta posterior (for an own tail, the
    Bayesian bootstrap's law of a k-of-n share, Beta(k, n - k), whose mean is the charged k / n), the size
    lognormal about its estimate with its standard error (normal where the size is not positive: fast outliers)."""
    if charged.size is None or charged.rate <= 0:
        return np.zeros(n)
    a = charged.rate * charged.weight
    rate = rng.beta(a, max(charged.weight - a, 1e-9), size=n)
    sd = charged.size_sd or 0.0
    if charged.size > 0:
        v = math.log1p((sd / charged.size) ** 2)
        size = charged.size * np.exp(rng.normal(-v / 2, math.sqrt(v), size=n))
    else:
        size = rng.normal(charged.size, sd, size=n)
    return rate * size
