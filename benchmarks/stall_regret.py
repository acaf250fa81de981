"""Who pays for a stall? The default rule's regret when stalls hit both legs, the pull alone or recompute alone.

``threshold_regret.py``'s stalls class stalls both legs alike; a stall that is one leg's own (a
link's retransmits) moves only that leg's mean cost. This script draws campaigns as that
benchmark draws its stalls class (its truths at four cost scales, its ladders of 4-6 lengths x
2-8 reps, normal noise of cv 2-8 %, 1-5 % of probes stalled x3-10) with the stalls on both legs,
on the pull alone or on recompute alone, and scores the default threshold on the true mean
costs (regret, % of the best expected TTFT; a refusal scores as no P2P).

    PYTHONPATH=. .venv/bin/python benchmarks/stall_regret.py --seeds 15 --jobs 2
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

import threshold_regret as tr  # the truths, ladders and scoring (run from the repository root or benchmarks/)

WHERE = {"both legs": ("recompute", "pull"), "pull alone": ("pull",), "recompute alone": ("recompute",)}


def campaign(where: str, scale: str, seed: int) -> tuple[list[dict], tr.Truth, list[int]]:
    streams = [seed, 77, tr.CLASSES.index("stalls"), list(tr.SCALES).index(scale), list(WHERE).index(where)]
    rng = np.random.default_rng(streams)
    truth = tr.draw_truth(scale, rng)
    lengths = tr.draw_lengths(truth, rng)
    reps, cv = int(rng.choice([2, 3, 5, 8])), rng.uniform(0.02, 0.08)
    p, factor = rng.uniform(0.01, 0.05), rng.uniform(3, 10)
    hit = WHERE[where]
    truth.rec_scale = 1 + p * (factor - 1) if "recompute" in hit else 1.0
    truth.pull_scale = 1 + p * (factor - 1) if "pull" in hit else 1.0
    plan = [(n, leg, r) for r in range(reps) for n in lengths for leg in ("recompute", "pull")]
    rows = []
    for t, i in enumerate(rng.permutation(len(plan))):
        n, leg, r = plan[i]
        y = float(truth.base(leg, np.array([n]))[0]) * max(1 + cv * rng.normal(), 0.05)
        if leg in hit and rng.random() < p:
            y *= factor
        rows.append({"prefix_tokens": n, "leg": leg, "ttft_ms": y, "rep": r, "order": t})
    return rows, truth, lengths


def run_one(job: tuple[str, str, int]) -> tuple[str, float]:
    where, scale, seed = job
    rows, truth, lengths = campaign(where, scale, seed)
    return where, tr.regret_pct(truth, lengths, tr.thresholds(rows)["expected-cost"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=15, help="campaigns per class and cost scale")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    jobs = [(w, s, seed) for w in WHERE for s in tr.SCALES for seed in range(args.seeds)]
    with ProcessPoolExecutor(max(args.jobs, 1)) as pool:
        done = list(pool.map(run_one, jobs, chunksize=4))
    print(f"default threshold's regret, % of the best expected TTFT ({args.seeds} campaigns per class and scale)")
    for where in WHERE:
        v = np.array([r for w, r in done if w == where])
        print(f"{where:<16} {len(v):>4}  median {np.median(v):.3f}  p90 {np.percentile(v, 90):.3f}  max {v.max():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
