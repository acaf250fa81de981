"""Simulated campaigns with known mean costs, drawn apart from kvcal's own simulator (kvcal.engines.sim).

Shared by benchmarks/threshold_regret.py (what each rule's threshold costs) and the tests of
the decision's messages. A campaign is a true pair of mean-cost curves, a design (lengths,
reps, order) and one noise class; its probes are what a sweep would have recorded.

Cost scales (recompute ms, us/token, ns/token^2; pull ms, us/token), every coefficient x0.7-1.4:
a tiny CPU model near 700 tokens, a GPU 8B-like pair near 1.5K, a gpt-oss-like convex recompute
near 5K, a GLM-like flat pull near 13K.

Classes. The first round (``ROUND_1``): clean (normal, cv 2-8 %), student-t (3 df), stalls
(1-5 % of probes x3-10 on both legs), drift (+-30 % over the run), warm-up (the first probe of
each length and leg x1.5), chunked (recompute steps by 5-10 % of a chunk's cost every 2K or 8K
tokens, in the truth too), growing noise (cv x1 to x4 over the range), skewed (lognormal sigma
0.3-0.6 on the pull, half the time on recompute too), slow lengths (one or two measured lengths
20-50 % slower on one leg: a measurement artefact, the truth stays smooth), slow-mode pulls
(10-40 % of pulls x1.5-3). The tails round (``TAILS``): heavy lognormal legs (sigma 0.6-1.0 on
one leg or both), Pareto pull tails (5-20 % of pulls x(1 + Pareto, alpha 1.5-3)), dead ties on
sparse ladders (3-4 lengths x2-3 reps, pull within +-3 % of recompute), a step in the pull (the
transfer's cost jumps by 10-40 % of its floor every 4K-16K tokens, in the truth), stalls on one
leg (2-10 % x3-10 on the pull or recompute alone), bimodal pulls (25-50 % x1.3-2.0, the mode's
share near the mode test's reach).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

BLOCK = 64
SCALES = {  # recompute (ms, us/token, ns/token^2), pull (ms, us/token)
    "cpu-tiny": ((5.0, 25.0, 0.012), (20.0, 3.0)),
    "gpu-8b": ((12.0, 40.0, 0.004), (60.0, 8.0)),
    "gpt-oss-like": ((10.0, 30.0, 0.3), (150.0, 5.0)),
    "glm-like": ((40.0, 136.0, 0.25), (1810.0, 5.2)),
}
ROUND_1 = ("clean", "student-t", "stalls", "drift", "warm-up", "chunked", "growing", "skewed", "slow-lengths",
           "slow-mode")
TAILS = ("heavy-lognormal", "pareto-pull", "dead-tie", "pull-step", "stalls-one-leg", "bimodal-pull")
CLASSES = ROUND_1 + TAILS
DELTA_POINTS = 2000


@dataclass
class Truth:
    """True mean costs: base curves (with chunk or pull steps) times each leg's mean multiplier."""

    rec: np.ndarray
    pull: np.ndarray
    rec_scale: float = 1.0
    pull_scale: float = 1.0
    chunk: int | None = None
    step: float = 0.0
    pull_every: int | None = None
    pull_step: float = 0.0

    def base(self, leg: str, n: np.ndarray) -> np.ndarray:
        c = self.rec if leg == "recompute" else self.pull
        n = np.asarray(n, dtype=float)
        out = c[0] + c[1] * n / 1e3 + c[2] * n**2 / 1e6
        if leg == "recompute" and self.chunk:
            out = out + self.step * np.floor(n / self.chunk)
        if leg == "pull" and self.pull_every:
            out = out + self.pull_step * np.floor(n / self.pull_every)
        return out

    def mean(self, leg: str, n: np.ndarray) -> np.ndarray:
        return self.base(leg, n) * (self.rec_scale if leg == "recompute" else self.pull_scale)

    def crossing(self) -> float:
        grid = np.geomspace(32, 2e6, 20000)
        gap = self.base("recompute", grid) - self.base("pull", grid)
        losing = np.flatnonzero(gap <= 0)
        return float(grid[losing[-1]]) if losing.size else 32.0


@dataclass
class Campaign:
    cls: str
    scale: str
    rows: list[dict]
    truth: Truth
    lengths: list[int]
    notes: dict = field(default_factory=dict)


def draw_truth(scale: str, rng: np.random.Generator) -> Truth:
    (r0, r1, r2), (p0, p1) = SCALES[scale]
    f = rng.uniform(0.7, 1.4, 5)
    return Truth(np.array([r0 * f[0], r1 * f[1], r2 * f[2]]), np.array([p0 * f[3], p1 * f[4], 0.0]))


def draw_lengths(truth: Truth, rng: np.random.Generator, k: int) -> list[int]:
    span = rng.uniform(8, 64)
    lo = truth.crossing() / math.exp(rng.uniform(0.15, 0.85) * math.log(span))
    grid = np.geomspace(max(lo, 2 * BLOCK), max(lo, 2 * BLOCK) * span, k)
    return sorted({max(2 * BLOCK, int(round(n / BLOCK)) * BLOCK) for n in grid})


def _dead_tie(truth: Truth, rng: np.random.Generator) -> None:
    """The pull a few percent either side of recompute over the range: a curve that tracks recompute's."""
    r0, r1, r2 = truth.rec
    tilt = rng.uniform(-0.03, 0.03)
    offset = rng.uniform(-0.03, 0.03)
    truth.pull = np.array([r0 * (1 + offset), r1 * (1 + tilt), r2 * (1 + tilt)])


def campaign(cls: str, scale: str, seed: int) -> Campaign:
    rng = np.random.default_rng([seed, CLASSES.index(cls), list(SCALES).index(scale)])
    truth = draw_truth(scale, rng)
    if cls == "chunked":
        truth.chunk = int(rng.choice([2048, 8192]))
        truth.step = float(rng.uniform(0.05, 0.10) * truth.base("recompute", np.array([truth.chunk]))[0])
    if cls == "pull-step":
        truth.pull_every = int(rng.choice([4096, 8192, 16384]))
        truth.pull_step = float(rng.uniform(0.1, 0.4) * truth.pull[0])
    sparse = cls == "dead-tie"
    lengths = draw_lengths(truth, rng, int(rng.integers(3, 5) if sparse else rng.integers(4, 7)))
    if sparse:
        _dead_tie(truth, rng)
    reps = int(rng.choice([2, 3] if sparse else [2, 3, 5, 8]))
    cv = rng.uniform(0.02, 0.08)
    plan = [(n, leg, r) for r in range(reps) for n in lengths for leg in ("recompute", "pull")]
    order = rng.permutation(len(plan))
    noise = _noise(cls, truth, lengths, len(plan), cv, rng)
    rows, seen = [], set()
    for t, i in enumerate(order):
        n, leg, r = plan[i]
        y = float(truth.base(leg, np.array([n]))[0]) * noise(n, leg, t, (n, leg) not in seen)
        seen.add((n, leg))
        rows.append({"prefix_tokens": n, "leg": leg, "ttft_ms": y, "rep": r, "order": t})
    return Campaign(cls, scale, rows, truth, lengths)


def _pareto_mean(alpha: float, xm: float) -> float:
    return alpha * xm / (alpha - 1)


def _noise(cls: str, truth: Truth, lengths: list[int], n_probes: int, cv: float, rng: np.random.Generator):
    """The class's noise: (length, leg, time index, first of its shape) -> multiplier; sets the truth's mean."""
    lo, hi = math.log(lengths[0]), math.log(lengths[-1])
    p, factor, drift = rng.uniform(0.01, 0.05), rng.uniform(3, 10), rng.uniform(-0.3, 0.3)
    sigma, both = rng.uniform(0.3, 0.6), rng.random() < 0.5
    slow = {(int(n), str(rng.choice(["recompute", "pull"]))): rng.uniform(1.2, 1.5)
            for n in rng.choice(lengths, size=int(rng.integers(1, 3)), replace=False)}
    share, ratio = rng.uniform(0.1, 0.4), rng.uniform(1.5, 3.0)
    heavy_sigma, heavy_legs = rng.uniform(0.6, 1.0), str(rng.choice(["pull", "recompute", "both"]))
    q, alpha, xm = rng.uniform(0.05, 0.2), rng.uniform(1.5, 3.0), rng.uniform(0.3, 1.0)
    one_leg, p_one = str(rng.choice(["pull", "recompute"])), rng.uniform(0.02, 0.10)
    bi_share, bi_ratio = rng.uniform(0.25, 0.5), rng.uniform(1.3, 2.0)
    if cls == "stalls":
        truth.rec_scale = truth.pull_scale = 1 + p * (factor - 1)
    elif cls == "skewed":
        truth.pull_scale = math.exp(sigma**2 / 2)
        truth.rec_scale = truth.pull_scale if both else 1.0
    elif cls == "slow-mode":
        truth.pull_scale = 1 + share * (ratio - 1)
    elif cls == "heavy-lognormal":
        mean = math.exp(heavy_sigma**2 / 2)
        truth.pull_scale = mean if heavy_legs in ("pull", "both") else 1.0
        truth.rec_scale = mean if heavy_legs in ("recompute", "both") else 1.0
    elif cls == "pareto-pull":
        truth.pull_scale = 1 + q * _pareto_mean(alpha, xm)
    elif cls == "stalls-one-leg":
        scale = 1 + p_one * (factor - 1)
        truth.pull_scale, truth.rec_scale = (scale, 1.0) if one_leg == "pull" else (1.0, scale)
    elif cls == "bimodal-pull":
        truth.pull_scale = 1 + bi_share * (bi_ratio - 1)

    def draw(n: int, leg: str, t: int, first: bool) -> float:
        base = max(1 + cv * rng.normal(), 0.05)
        if cls == "student-t":
            return max(1 + cv * rng.standard_t(3), 0.05)
        if cls == "stalls":
            return base * (factor if rng.random() < p else 1.0)
        if cls == "drift":
            return base * (1 + drift * (t / max(n_probes - 1, 1) - 0.5))
        if cls == "warm-up":
            return base * (1.5 if first else 1.0)
        if cls == "growing":
            grow = 1 + 3 * (math.log(n) - lo) / max(hi - lo, 1e-9)
            return max(1 + cv * grow * rng.normal(), 0.05)
        if cls == "skewed" and (leg == "pull" or both):
            return math.exp(sigma * rng.normal())
        if cls == "slow-lengths":
            return base * slow.get((n, leg), 1.0)
        if cls == "slow-mode" and leg == "pull":
            return base * (ratio if rng.random() < share else 1.0)
        if cls == "heavy-lognormal" and (heavy_legs == "both" or leg == heavy_legs):
            return math.exp(heavy_sigma * rng.normal())
        if cls == "pareto-pull" and leg == "pull":
            return base * (1 + xm * (1 + rng.pareto(alpha)) if rng.random() < q else 1.0)
        if cls == "stalls-one-leg" and leg == one_leg:
            return base * (factor if rng.random() < p_one else 1.0)
        if cls == "bimodal-pull" and leg == "pull":
            return base * (bi_ratio if rng.random() < bi_share else 1.0)
        return base
    return draw


def regret_pct(truth: Truth, lengths: list[int], threshold: int | None) -> float:
    """The true expected-TTFT regret of pulling from ``threshold`` up (None: never), % of the best threshold's."""
    edges = np.linspace(math.log(lengths[0]), math.log(lengths[-1]), DELTA_POINTS + 1)
    d = np.exp(0.5 * (edges[:-1] + edges[1:]))
    r, gap = truth.mean("recompute", d), truth.mean("recompute", d) - truth.mean("pull", d)
    suffix = np.concatenate([np.cumsum(gap[::-1])[::-1], [0.0]]) / len(d)
    best = suffix.max()
    taken = 0.0 if threshold is None else suffix[int(np.searchsorted(d, threshold, side="left"))]
    return 100.0 * (best - taken) / (r.mean() - best)


def crosses_inside(truth: Truth, lengths: list[int]) -> bool:
    """The true mean curves cross (pulling pays from some length on) inside the measured range."""
    d = np.geomspace(lengths[0], lengths[-1], DELTA_POINTS)
    gap = truth.mean("recompute", d) - truth.mean("pull", d)
    return bool(gap[-1] > 0 and gap[0] < 0)
