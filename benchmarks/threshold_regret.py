"""What does each threshold rule cost a fleet? Regret over simulated campaigns with known mean costs.

The campaigns (benchmarks/campaigns.py) are drawn apart from kvcal's simulator: four cost
scales, 3-6 lengths log-spaced around the crossing, and one noise class each (the first
round's ten and the tails round's six: campaigns.py lists them).

Each campaign is fitted (``fit_table``, default settings) and each rule's threshold scored
the way a fleet pays for it: deltas log-uniform over the measured range, the router
pulling from the threshold up on the *true mean* costs; regret = that expected TTFT minus
the best threshold's, as a share of the best (a refusal scores as "no P2P"). Rules:
``expected-cost`` (the default), ``upper`` (margin 0.25, the earlier default), ``recipe``
(the shortest measured length whose pull median won), ``be-up`` (the fit's break-even
rounded up to a block, a reference). ``refused-crossing`` counts the default's refusals
where the true mean curves cross inside the measured range.

    PYTHONPATH=. .venv/bin/python benchmarks/threshold_regret.py --seeds 7 --jobs 2 --classes all
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from campaigns import BLOCK, CLASSES, ROUND_1, SCALES, TAILS, campaign, crosses_inside, regret_pct
from kvcal.threshold.choose import compute_threshold, recipe_threshold, round_up
from kvcal.errors import KvcalError
from kvcal.fit import fit_table
from kvcal.fit.tables import from_rows
from kvcal.records.fit import FitSource
from kvcal.records.run import RunSetup

RULES = ("expected-cost", "upper", "recipe", "be-up")
SETS = {"round-1": ROUND_1, "tails": TAILS, "all": CLASSES}


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


def run_one(job: tuple[str, str, int]) -> tuple[str, str, int, dict[str, float], bool]:
    cls, scale, seed = job
    c = campaign(cls, scale, seed)
    chosen = thresholds(c.rows)
    scores = {rule: regret_pct(c.truth, c.lengths, chosen[rule]) for rule in RULES}
    refused_crossing = chosen["expected-cost"] is None and crosses_inside(c.truth, c.lengths)
    return cls, scale, seed, scores, refused_crossing


def summary(name: str, results: list[tuple]) -> str:
    cells = []
    for rule in RULES:
        v = np.array([r[3][rule] for r in results])
        cells.append(f"{np.median(v):6.2f} {np.percentile(v, 90):6.2f} {v.max():6.1f}")
    worse = np.mean([r[3]["expected-cost"] > r[3]["recipe"] + 0.5 for r in results])
    refused = sum(r[4] for r in results)
    return f"{name:<16} {len(results):>4}  " + "  ".join(cells) + f"  {worse:6.2f}  {refused:>3}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=7, help="campaigns per class and cost scale")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--classes", choices=SETS, default="all", help="which classes (benchmarks/campaigns.py)")
    parser.add_argument("--only", nargs="*", default=None, help="these classes alone")
    parser.add_argument("--worst", type=int, default=0, help="list the N costliest campaigns of the default rule")
    args = parser.parse_args(argv)
    classes = tuple(args.only) if args.only else SETS[args.classes]
    jobs = [(c, s, seed) for c in classes for s in SCALES for seed in range(args.seeds)]
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        done = list(pool.map(run_one, jobs, chunksize=4))
    print(f"threshold regret, % of the best expected TTFT, {len(done)} campaigns ({args.seeds} per class and scale)")
    heads = "  ".join(f"{rule + ' med/p90/max':<20}" for rule in RULES)
    print(f"{'class':<16} {'n':>4}  {heads}  worse>0.5pt  refused-crossing")
    for cls in classes:
        print(summary(cls, [r for r in done if r[0] == cls]))
    for scale in SCALES:
        print(summary(scale, [r for r in done if r[1] == scale]))
    print(summary("all", done))
    for cls, scale, seed, scores, refused in sorted(done, key=lambda r: -r[3]["expected-cost"])[: args.worst]:
        cells = " ".join(f"{rule}={scores[rule]:.3g}" for rule in RULES)
        print(f"worst: {cls} {scale} seed {seed}: {cells}" + (" (refused a crossing)" if refused else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
