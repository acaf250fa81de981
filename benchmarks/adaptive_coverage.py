"""Do adaptive campaigns' intervals cover? Truths drawn apart from kvcal's simulator, the campaign run to its stop.

``adaptive_crossovers.py`` moves three of kvcal's own simulated truths; this script draws its
own: a recompute curve ``r0 + r1 n + r2 n^2`` and an affine pull at one of four cost scales
(a tiny CPU pair, an 8B-like GPU pair, a convex gpt-oss-like recompute, a GLM-like flat pull;
every coefficient x0.7-1.4, the pull's floor then set so that the curves cross at a
log-uniform length within the range), a model limit of 16K-128K tokens, and one noise family
per campaign, multiplicative and symmetric so that the typical and the mean curves agree
(normal with cv 3-10 %, Student-t with 5 df scaled to the same cv, or normal whose cv grows
x1-x2 over the range). Each campaign runs :class:`kvcal.sweep.adaptive.Controller` (what
``kvcal sweep --adaptive --target-width W`` does, probes chosen on the 200-resample screen,
every stop on the standard fit) against that pair until it stops, and the final 90 %
interval is checked against the true crossing.

Printed per noise family and scale: campaigns, coverage (with its binomial 90 % spread at
nominal), median probes and median relative width.

    PYTHONPATH=. .venv/bin/python benchmarks/adaptive_coverage.py --campaigns 160 --jobs 2
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from kvcal.fit.tables import from_rows
from kvcal.records.run import RunSetup
from kvcal.sweep.adaptive import Controller, StopRules
from kvcal.sweep.lengths.adaptive_design import allowed_range

BLOCK = 64
SCALES = {  # recompute (ms, us/token, ns/token^2), pull us/token
    "cpu-tiny": ((5.0, 25.0, 0.012), 3.0),
    "gpu-8b": ((12.0, 40.0, 0.004), 8.0),
    "gpt-oss-like": ((10.0, 30.0, 0.3), 5.0),
    "glm-like": ((40.0, 136.0, 0.25), 5.2),
}
FAMILIES = ("normal", "student-t", "growing")
SCREEN = 200


@dataclass(frozen=True)
class Truth:
    rec: tuple[float, float, float]
    pull: tuple[float, float]
    crossing: float
    limit: int
    family: str
    cv: float

    def cost(self, leg: str, n: float) -> float:
        if leg == "recompute":
            return self.rec[0] + self.rec[1] * n / 1e3 + self.rec[2] * n * n / 1e6
        return self.pull[0] + self.pull[1] * n / 1e3


def draw_truth(scale: str, family: str, rng: np.random.Generator) -> Truth | None:
    """A truth whose curves cross at a log-uniform length inside the range (None: no positive pull floor does)."""
    (r0, r1, r2), p1 = SCALES[scale]
    f = rng.uniform(0.7, 1.4, 4)
    rec = (r0 * f[0], r1 * f[1], r2 * f[2])
    limit = int(rng.choice([16384, 32768, 65536, 131072]))
    low, high = allowed_range(None, BLOCK, limit)
    crossing = float(math.exp(rng.uniform(math.log(2.5 * low), math.log(high / 3))))
    floor = rec[0] + rec[1] * crossing / 1e3 + rec[2] * crossing**2 / 1e6 - p1 * f[3] * crossing / 1e3
    if floor <= 0:
        return None
    return Truth(rec, (floor, p1 * f[3]), crossing, limit, family, float(rng.uniform(0.03, 0.10)))


def noise(truth: Truth, n: int, low: int, high: int, rng: np.random.Generator) -> float:
    """A multiplicative, symmetric noise factor (mean and median 1)."""
    cv = truth.cv
    if truth.family == "student-t":
        return max(1.0 + cv * math.sqrt(3 / 5) * float(rng.standard_t(5)), 0.05)
    if truth.family == "growing":
        cv *= 1.0 + (math.log(n) - math.log(low)) / max(math.log(high) - math.log(low), 1e-9)
    return max(1.0 + cv * float(rng.normal()), 0.05)


def campaign(job: tuple[str, str, int, float]) -> dict | None:
    scale, family, seed, target = job
    rng = np.random.default_rng([seed, list(SCALES).index(scale), FAMILIES.index(family)])
    truth = draw_truth(scale, family, rng)
    if truth is None:
        return None
    low, high = allowed_range(None, BLOCK, truth.limit)
    controller = Controller(low, high, BLOCK, StopRules(target_width=target, max_probes=1500), screen_resamples=SCREEN)
    rows: list[dict] = []
    reps: dict[tuple[int, str], int] = {}
    for round_index in range(200):
        table = from_rows(rows, setup=RunSetup(engine="sim", model="sim", block_size=BLOCK)) if rows else None
        step = controller.step(table, engine_seconds=0.0, round_index=round_index)
        if step.stop:
            ci = step.fit.break_even_ci if step.fit else None
            covered = None if ci is None else bool(ci[0] <= truth.crossing <= ci[1])
            width = None if ci is None else (ci[1] - ci[0]) / truth.crossing
            return {"scale": scale, "family": family, "covered": covered, "probes": len(rows), "width": width,
                    "stop": step.stop}
        for choice in step.choices:
            leg = choice.leg.value
            for _ in range(choice.count):
                rep = reps.get((choice.prefix_tokens, leg), 0)
                reps[(choice.prefix_tokens, leg)] = rep + 1
                y = truth.cost(leg, choice.prefix_tokens) * noise(truth, choice.prefix_tokens, low, high, rng)
                rows.append({"prefix_tokens": choice.prefix_tokens, "leg": leg, "ttft_ms": y, "rep": rep})
    return None


def _line(name: str, runs: list[dict]) -> str:
    covered = [r["covered"] for r in runs if r["covered"] is not None]
    share = sum(covered) / max(len(covered), 1)
    spread = 1.645 * math.sqrt(0.09 / max(len(covered), 1))
    widths = [r["width"] for r in runs if r["width"] is not None]
    return (f"| {name} | {len(covered)} | {share:.2f} (+-{spread:.2f}) | {statistics.median(r['probes'] for r in runs):.0f} "
            f"| {statistics.median(widths) if widths else float('nan'):.3f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--campaigns", type=int, default=160, help="campaigns per noise family (spread over scales)")
    parser.add_argument("--target", type=float, default=0.10, help="target relative width of the 90%% interval")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    began = time.perf_counter()
    per_scale = max(args.campaigns // len(SCALES), 1)
    jobs = [(scale, family, args.first_seed + seed, args.target)
            for family in FAMILIES for scale in SCALES for seed in range(per_scale)]
    with ProcessPoolExecutor(max(args.jobs, 1)) as pool:
        runs = [r for r in pool.map(campaign, jobs, chunksize=2) if r is not None]
    print(f"adaptive campaigns to a {args.target:.0%} target, truths drawn apart from kvcal's simulator (90 % intervals)")
    print("| group | campaigns | coverage | median probes | median width |")
    print("|---|---|---|---|---|")
    for family in FAMILIES:
        print(_line(family, [r for r in runs if r["family"] == family]))
    for scale in SCALES:
        print(_line(scale, [r for r in runs if r["scale"] == scale]))
    print(_line("all", runs))
    print(f"\n{time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
