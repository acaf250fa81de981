"""Each leg's tail (stalls, a slow mode's far probes) as a share times a size, shared between the legs as far as
the evidence says.

:mod:`kvcal.fit.mean_cost` splits a leg's log residuals into a bulk and a tail (the probes
beyond 5.4 robust sd); the tail raises the leg's mean cost by ``share x size``: the share of
its probes in the tail, and a tail probe's mean excess over the bulk as a ratio,
``x_i = exp(e_i) / bulk - 1``.

**Whose stalls.** A stall seen on one leg may be that leg's own (a link's retransmits stall
pulls) or the host's, hitting both legs alike (a scheduler's hiccup stalls whatever runs).
Four hypotheses, equally likely a priori: the legs share one tail share, only recompute has
a tail, only the pull has one, each has its own. Each share has the prior ``Beta(RARE_SHARE
x RARE_WEIGHT, (1 - RARE_SHARE) x RARE_WEIGHT)`` (tails are rare; a leg with none has a share
of exactly 0 under the hypotheses that say so), so each hypothesis's marginal likelihood is a
ratio of Beta functions, and each leg is charged its share averaged over the hypotheses'
posterior weights (Bayesian model averaging). The evidence sets how far they are shared:

* 2 stalls in 18 pulls and none in 18 recomputes: the shared hypothesis keeps a weight of
  0.18, recompute is charged a fifth of the pull's excess (the Fisher test this replaced
  pooled them: half each, and issue 50 saw 4.25 % regret where own tails cost 0.02 %);
  4 in 36 against 0: 0.06 (recompute charged 8 % of the pull's excess); 6 in 60: 0.015 (3 %);
* 2 stalls on each leg: shared at 0.74, both legs charged alike (the crossing of the mean
  costs does not move).

A leg whose slow mode the mode test found (:mod:`kvcal.fit.modes`) keeps its own tail at its own
share, k / n, without the rare prior: the test has already told its slow probes from stalls.

The prior matters where probes are few: one stall in 8 probes is a 12.5 % share by itself,
3-10x the rates stalls are seen at; the prior's 0.5 stall in 20 probes brings it to 5.4 %.
docs/method.md ("Mean costs") has the regret of each choice on simulated campaigns.

**Sizes.** Where both legs show a tail, each leg's mean excess (standard error from the pooled
spread of both legs' tail probes) is shrunk towards their precision-weighted mean by
``se^2 / (se^2 + tau^2)``, ``tau^2`` the excess of their squared difference over what the
standard errors explain (method of moments); a leg without tail probes is charged at the
other's size (it matters only as far as the hypotheses charge it a share). A size from one
tail probe has no spread of its own; it is given ``SINGLE_SIZE_CV`` (one stall's excess says
little about the next one's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln

STALL_SHARE = 0.05  # a slow share up to this is a stall (robust handling); beyond it (test (c)), a mode
RARE_SHARE = STALL_SHARE / 2  # the prior mean of a tail share: half the most a stall's share is (2.5 %)
RARE_WEIGHT = 20.0  # the prior's weight, in probes: about a 6-length x 3-rep leg's 18
SINGLE_SIZE_CV = 1.0  # relative sd of a size estimated from one tail probe
HYPOTHESES = ("shared", "recompute only", "pull only", "each its own")  # equally likely a priori


@dataclass(frozen=True)
class LegTail:
    """One leg's tail: its probe count and each tail probe's excess over the bulk (a ratio)."""

    n: int
    excess: np.ndarray
    own: bool = False  # a slow mode found on this leg: never shared

    @property
    def k(self) -> int:
        return len(self.excess)


@dataclass(frozen=True)
class Charged:
    """What a leg is charged for its tail: share x size, with what the draws need."""

    rate: float
    weight: float  # the Beta law of the share: mean ``rate``, ``weight`` probes behind it
    size: float | None  # None: no tail charged
    size_sd: float | None
    shared: float = 0.0  # the posterior weight of the shared hypothesis

    @property
    def excess(self) -> float:
        return 0.0 if self.size is None else self.rate * self.size


def _prior() -> tuple[float, float]:
    return RARE_SHARE * RARE_WEIGHT, (1.0 - RARE_SHARE) * RARE_WEIGHT


def own(tail: LegTail) -> Charged:
    """The leg's own tail: its share under the rare prior (a slow mode's, k / n: the mode test found it common), its
    own size; nothing where it has no tail probe."""
    if tail.k == 0:
        return Charged(0.0, float(tail.n), None, None)
    size, size_sd = float(tail.excess.mean()), _size_se(tail.excess)
    if tail.own:
        return Charged(tail.k / tail.n, float(tail.n), size, size_sd)
    a0, b0 = _prior()
    return Charged((tail.k + a0) / (tail.n + a0 + b0), tail.n + a0 + b0, size, size_sd)


def charge(rec: LegTail, pull: LegTail) -> tuple[Charged, Charged]:
    """Each leg's tail charge, averaged over who the tail belongs to (module docstring); own where a slow mode was
    found or no leg shows a tail."""
    if rec.own or pull.own or rec.k + pull.k == 0:
        return own(rec), own(pull)
    weights = _posterior(rec, pull)
    a0, b0 = _prior()
    k, n = rec.k + pull.k, rec.n + pull.n
    shared = ((k + a0) / (n + a0 + b0), n + a0 + b0)
    sizes = _shrunk_sizes(rec, pull) if rec.k and pull.k else None
    out = []
    for i, (tail, other) in enumerate(((rec, pull), (pull, rec))):
        mine = ((tail.k + a0) / (tail.n + a0 + b0), tail.n + a0 + b0)
        zero = (0.0, tail.n + a0 + b0)
        laws = [shared, mine if i == 0 else zero, zero if i == 0 else mine, mine]
        rate, weight = _mixture(weights, laws)
        if sizes is not None:
            size, size_sd = sizes[i]
        else:
            seen = tail if tail.k else other
            size, size_sd = float(seen.excess.mean()), _size_se(seen.excess)
        out.append(Charged(rate, weight, size, size_sd, float(weights[0])))
    return out[0], out[1]


def _posterior(rec: LegTail, pull: LegTail) -> np.ndarray:
    """The posterior weights of :data:`HYPOTHESES` (equal priors)."""
    a0, b0 = _prior()

    def share(k: int, n: int) -> float:  # log marginal likelihood of k in n under the rare prior
        return float(betaln(k + a0, n - k + b0) - betaln(a0, b0))

    def none(t: LegTail) -> float:  # a share of exactly 0
        return 0.0 if t.k == 0 else -math.inf

    logm = np.array(
        [
            share(rec.k + pull.k, rec.n + pull.n),
            share(rec.k, rec.n) + none(pull),
            none(rec) + share(pull.k, pull.n),
            share(rec.k, rec.n) + share(pull.k, pull.n),
        ]
    )
    w = np.exp(logm - logm.max())
    return w / w.sum()


def _mixture(weights: np.ndarray, laws: list[tuple[float, float]]) -> tuple[float, float]:
    """The mean of a mixture of Beta laws (mean, weight), and the weight of the one Beta with its mean and variance."""
    means = np.array([m for m, _ in laws])
    var = np.array([m * (1.0 - m) / (w + 1.0) for m, w in laws])
    mean = float(weights @ means)
    total = float(weights @ (var + means * means)) - mean * mean
    if mean <= 0.0:
        return 0.0, laws[0][1]
    return mean, max(mean * (1.0 - mean) / max(total, 1e-12) - 1.0, 1.0)


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
    """(n,) draws of the tail's excess ``share x size``: the share from the Beta law with the charged mean and weight,
    the size lognormal about its estimate with its standard error (normal where the size is not positive: fast
    outliers)."""
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
