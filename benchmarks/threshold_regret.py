"""What does each threshold rule cost a fleet? Regret over simulated campaigns with known mean costs.

Campaigns are drawn here, apart from kvcal's simulator: true curves at four cost scales
(a tiny CPU model near 700 tokens, a GPU 8B-like pair near 1.5K, a gpt-oss-like convex
recompute near 5K, a GLM-like flat pull near 13K; every coefficient x0.7-1.4), 4-6 lengths
log-spaced around the crossing (4x2 to 6x8 designs), and one noise class per campaign:

clean (normal, cv 2-8 %), student-t (3 df), stalls (1-5 % of probes x3-10), drift (+-30 %
over the run), warm-up (the first probe of each length and leg x1.5), chunked (recompute
steps by 5-10 % of a chunk's cost every 2K or 8K tokens, in the truth too), growing noise
(cv x1 to x4 over the range), skewed (lognormal sigma 0.3-0.6 on the pull, half the time
on recompute too), slow lengths (one or two measured lengths 20-50 % slower on one leg: a
measurement artefact, the truth stays smooth), slow-mode pulls (10-40 % of pulls x1.5-3).

Each campaign is fitted (``fit_table``, default settings) and each rule's threshold scored
the way a fleet pays for it: deltas log-uniform over the measured range, the router
pulling from the threshold up on the *true mean* costs; regret = that expected TTFT minus
the best threshold's, as a share of the best (a refusal scores as "no P2P"). Rules:
``expected-cost`` (the default), ``upper`` (margin 0.25, the earlier default), ``recipe``
(the shortest measured length whose pull median won), ``be-up`` (the fit's break-even
rounded up to a block, a reference).

    PYTHONPATH=. .venv/bin/python benchmarks/threshold_regret.py --seeds 7 --jobs 2
"""

from __future__ import annotations

import argparse
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from kvcal.emit.threshold import compute_threshold, recipe_threshold, round_up
from kvcal.errors import KvcalError
from kvcal.fit import fit_table
from kvcal.fit.tables import from_rows
from kvcal.fit_record import FitSource
from kvcal.records import RunSetup

BLOCK = 64
SCALES = {  # recompute (ms, us/token, ns/token^2), pull (ms, us/token)
    "cpu-tiny": ((5.0, 25.0, 0.012), (20.0, 3.0)),
    "gpu-8b": ((12.0, 40.0, 0.004), (60.0, 8.0)),
    "gpt-oss-like": ((10.0, 30.0, 0.3), (150.0, 5.0)),
    "glm-like": ((40.0, 136.0, 0.25), (1810.0, 5.2)),
}
CLASSES = ("clean", "student-t", "stalls", "drift", "warm-up", "chunked", "growing", "skewed", "slow-lengths",
           "slow-mode")
RULES = ("expected-cost", "upper", "recipe", "be-up")
DELTA_POINTS = 2000


@dataclass
class Truth:
    rec: np.ndarray
    pull: np.ndarray
    rec_scale: float = 1.0
    pull_scale: float = 1.0
    chunk: int | None = None
    step: float = 0.0

    def base(self, leg: str, n: np.ndarray) -> np.ndarray:
        c = self.rec if leg == "recompute" else self.pull
        n = np.asarray(n, dtype=float)
        out = c[0] + c[1] * n / 1e3 + c[2] * n**2 / 1e6
        if leg == "recompute" and self.chunk:
            out = out + self.step * np.floor(n / self.chunk)
        return out

    def mean(self, leg: str, n: np.ndarray) -> np.ndarray:
        return self.base(leg, n) * (self.rec_scale if leg == "recompute" else self.pull_scale)

    def crossing(self) -> float:
        grid = np.geomspace(32, 2e6, 20000)
        gap = self.mean("recompute", grid) - self.mean("pull", grid)
        losing = np.flatnonzero(gap <= 0)
        return float(grid[losing[-1]]) if losing.size else 32.0


def draw_truth(scale: str, rng: np.random.Generator) -> Truth:
    (r0, r1, r2), (p0, p1) = SCALES[scale]
    f = rng.uniform(0.7, 1.4, 5)
    return Truth(np.array([r0 * f[0], r1 * f[1], r2 * f[2]]), np.array([p0 * f[3], p1 * f[4], 0.0]))


def draw_lengths(truth: Truth, rng: np.random.Generator) -> list[int]:
    k = int(rng.integers(4, 7))
    span = rng.uniform(8, 64)
    lo = truth.crossing() / math.exp(rng.uniform(0.15, 0.85) * math.log(span))
    grid = np.geomspace(max(lo, 2 * BLOCK), max(lo, 2 * BLOCK) * span, k)
    return sorted({max(2 * BLOCK, int(round(n / BLOCK)) * BLOCK) for n in grid})


def campaign(cls: str, scale: str, seed: int) -> tuple[list[dict], Truth, list[int]]:
    rng = np.random.default_rng([seed, CLASSES.index(cls), list(SCALES).index(scale)])
    truth = draw_truth(scale, rng)
    if cls == "chunked":
        truth.chunk = int(rng.choice([2048, 8192]))
        truth.step = float(rng.uniform(0.05, 0.10) * truth.base("recompute", np.array([truth.chunk]))[0])
    lengths = draw_lengths(truth, rng)
    reps = int(rng.choice([2, 3, 5, 8]))
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
    return rows, truth, lengths


def _noise(cls: str, truth: Truth, lengths: list[int], n_probes: int, cv: float, rng: np.random.Generator):
    """The class's noise: (length, leg, time index, first of its shape) -> multiplier; sets the truth's mean."""
    lo, hi = math.log(lengths[0]), math.log(lengths[-1])
    p, factor, drift = rng.uniform(0.01, 0.05), rng.uniform(3, 10), rng.uniform(-0.3, 0.3)
    sigma, both = rng.uniform(0.3, 0.6), rng.random() < 0.5
    slow = {(int(n), str(rng.choice(["recompute", "pull"]))): rng.uniform(1.2, 1.5)
            for n in rng.choice(lengths, size=int(rng.integers(1, 3)), replace=False)}
    share, ratio = rng.uniform(0.1, 0.4), rng.uniform(1.5, 3.0)
    if cls == "stalls":
        truth.rec_scale = truth.pull_scale = 1 + p * (factor - 1)
    elif cls == "skewed":
        truth.pull_scale = math.exp(sigma**2 / 2)
        truth.rec_scale = truth.pull_scale if both else 1.0
    elif cls == "slow-mode":
        truth.pull_scale = 1 + share * (ratio - 1)

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


def thresholds(rows: list[dict]) -> dict[str, int | None]:
    table = from_rows(rows, setup=RunSetup(block_size=BLOCK), origin=FitSource(kind="sim"))
    fit = fit_table(table)
    out: dict[str, int | None] = {}
    for rule in ("expected-cost", "upper"):
        try:
            out[rule] = compute_threshold(fit, rule=rule).min_cached_token_delta
        except KvcalError:
            out[rule] = None
    out["recipe"] = recipe_threshold(fit, BLOCK)
    be = fit.break_even_tokens
    out["be-up"] = round_up(be, BLOCK) if be is not None and fit.status != "recompute-always-wins" else None
    return out


def run_one(job: tuple[str, str, int]) -> tuple[str, str, dict[str, float]]:
    cls, scale, seed = job
    rows, truth, lengths = campaign(cls, scale, seed)
    chosen = thresholds(rows)
    return cls, scale, {rule: regret_pct(truth, lengths, chosen[rule]) for rule in RULES}


def summary(name: str, results: list[dict[str, float]]) -> str:
    cells = []
    for rule in RULES:
        v = np.array([r[rule] for r in results])
        cells.append(f"{np.median(v):6.2f} {np.percentile(v, 90):6.2f} {v.max():6.1f}")
    worse = np.mean([r["expected-cost"] > r["recipe"] + 1e-9 for r in results])
    return f"{name:<14} {len(results):>4}  " + "  ".join(cells) + f"  {worse:6.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=7, help="campaigns per class and cost scale")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    jobs = [(c, s, seed) for c in CLASSES for s in SCALES for seed in range(args.seeds)]
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        done = list(pool.map(run_one, jobs, chunksize=4))
    print(f"threshold regret, % of the best expected TTFT, {len(done)} campaigns ({args.seeds} per class and scale)")
    heads = "  ".join(f"{rule + ' med/p90/max':<20}" for rule in RULES)
    print(f"{'class':<14} {'n':>4}  {heads}  worse-than-recipe")
    for cls in CLASSES:
        print(summary(cls, [r for c, _, r in done if c == cls]))
    for scale in SCALES:
        print(summary(scale, [r for _, s, r in done if s == scale]))
    print(summary("all", [r for _, _, r in done]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
