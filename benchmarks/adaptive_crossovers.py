"""Where the crossover sits: the adaptive campaign against the oracle as the break-even moves.

``adaptive_efficiency.py`` judges the design on five fixed truths. This script keeps a
truth's curve shapes (its recompute curve and its pull slope) and moves the pull's
floor so that the break-even lands at each of ``--at`` tokens, then runs ``--seeds``
adaptive campaigns at one noise level and target width (default 5% noise, 10% target:
the setting where the oracle is cheapest for a given truth, so finding the crossover
weighs most). Per truth it prints the median engine time of the campaign, of its search (the
seed and the climb: the rounds that look for the crossover before any probe is placed
on it), both over the oracle (every probe at the true break-even, slopes and noise
known) and over ``oracle-t`` (the same oracle estimating its noise, Student's t), and
the coverage of the final 90% intervals.

The search is a cost no oracle pays: a campaign whose search alone costs as much as the
oracle's whole campaign cannot be within 1.5x of it, however well it places the rest.

    PYTHONPATH=. .venv/bin/python benchmarks/adaptive_crossovers.py            # about 3 min on 2 cores
    PYTHONPATH=. .venv/bin/python benchmarks/adaptive_crossovers.py --seeds 10 --at 700,7000

With ``--target-regret R`` it prints instead the engine time to an expected regret of R (a share of
the expected TTFT) of ``--target-regret R`` against ``--target-width --target`` (give 0.05), the
uniform ladder and the oracle (``regret_targets.py`` says how each is run):

    PYTHONPATH=. .venv/bin/python benchmarks/adaptive_crossovers.py --target-regret 0.001 --target 0.05 --seeds 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial

from adaptive_efficiency import TRUTHS  # the benchmark's curve shapes (run from the repository root or benchmarks/)

from kvcal.engines.sim import SimCosts
from kvcal.sweep.lengths.adaptive_design import allowed_range
from kvcal.plan.priors import Prior
from kvcal.plan.simulate_designs import oracle, simulate_adaptive

SHAPES = ("sim default", "steep attention", "glm-like flat pull")
DEFAULT_AT = (450, 1100, 2700, 4500, 7500)


def with_break_even_at(costs: SimCosts, tokens: float) -> SimCosts | None:
    """The same recompute curve and pull slope, the pull's floor moved so the curves cross at ``tokens``."""
    recompute_ms = (costs.recompute_intercept_ms + costs.recompute_per_token_us * tokens / 1e3
                    + costs.recompute_per_token2_ns * tokens**2 / 1e6)
    floor = recompute_ms - costs.pull_per_token_us * tokens / 1e3
    return costs.model_copy(update={"pull_intercept_ms": floor}) if floor > 0 else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=40, help="campaigns per truth")
    parser.add_argument("--at", default=",".join(map(str, DEFAULT_AT)), help="break-evens to place, in tokens")
    parser.add_argument("--noise", type=float, default=0.05, help="relative noise of every probe")
    parser.add_argument("--target", type=float, default=0.10, help="target relative width of the 90%% interval")
    parser.add_argument("--target-regret", type=float, default=None,
                        help="print the engine time to this expected regret instead (regret_targets.py)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="campaigns simulated in parallel")
    args = parser.parse_args()
    if args.target_regret is not None:
        return regret_table(args)
    began = time.perf_counter()
    print("| shape | n* | oracle probes | oracle s | adaptive probes | adaptive s | a/oracle | search s "
          "| search/oracle | a/oracle-t | coverage |")
    print("|" + "|".join("---" for _ in range(11)) + "|")
    ratios, covered_all = [], []
    with ProcessPoolExecutor(max(args.jobs, 1)) as pool:
        for shape, prior in _truths(args):
            runs = list(pool.map(partial(simulate_adaptive, prior, args.target), range(args.seeds)))
            floor, floor_t = oracle(prior, args.target), oracle(prior, args.target, noise_known=False)
            spent = statistics.median(c.engine_s for c in runs)
            search = statistics.median(c.search_s for c in runs)
            covered = [c.covered for c in runs if c.covered is not None]
            covered_all += covered
            ratios.append(spent / floor.engine_s)
            print(f"| {shape} | {prior.truth:.0f} | {floor.n_probes} | {floor.engine_s:.2f} "
                  f"| {statistics.median(c.n_probes for c in runs):.0f} | {spent:.2f} | {spent / floor.engine_s:.2f} "
                  f"| {search:.2f} | {search / floor.engine_s:.2f} | {spent / floor_t.engine_s:.2f} "
                  f"| {sum(covered) / max(len(covered), 1):.2f} |", flush=True)
    print(f"\nmedian a/oracle over {len(ratios)} truths: {statistics.median(ratios):.2f} (max {max(ratios):.2f}); "
          f"coverage {sum(covered_all) / max(len(covered_all), 1):.3f} over {len(covered_all)} campaigns; "
          f"{time.perf_counter() - began:.0f} s")
    return 0


def _truths(args):
    """(shape, prior) for each shape and break-even the arguments ask for (skipping those no pull floor gives)."""
    for shape in SHAPES:
        base, limit = TRUTHS[shape]
        low, high = allowed_range(None, 64, limit)
        for tokens in (int(x) for x in args.at.split(",")):
            costs = with_break_even_at(base.model_copy(update={"noise_cv": args.noise}), tokens)
            if costs is None or not low < tokens < high:
                print(f"  ({shape}: no pull floor puts the crossover at {tokens} tokens; skipped)", file=sys.stderr)
                continue
            yield shape, Prior(costs, shape, low, high, 64)


def regret_table(args) -> int:
    """Engine time to an expected regret of --target-regret: the regret stop, the width stop, ladder, oracle."""
    import regret_targets as rt

    began, target = time.perf_counter(), args.target_regret
    print(f"| shape | n* | oracle s | ladder s | regret-stop s | its regret | share <= {target:.2%} "
          f"| width-stop ({args.target:g}) s | its regret | share <= {target:.2%} | regret/width time |")
    print("|" + "|".join("---" for _ in range(11)) + "|")
    faster = []
    with ProcessPoolExecutor(max(args.jobs, 1)) as pool:
        for shape, prior in _truths(args):
            seeds = range(args.seeds)
            by_regret = list(pool.map(partial(rt.adaptive, prior, args.target, target), seeds))
            by_width = list(pool.map(partial(rt.adaptive, prior, args.target, None), seeds))
            ladder = list(pool.map(partial(rt.ladder, prior, target), seeds))
            floor = rt.oracle(prior, target)
            cells = []
            for runs in (by_regret, by_width):
                regrets = [r.regret for r in runs if r.regret is not None]
                cells.append((statistics.median(r.engine_s for r in runs),
                               statistics.median(regrets) if regrets else float("nan"),
                               sum(r is not None and r <= target for r in (x.regret for x in runs)) / len(runs)))
            (t_r, g_r, s_r), (t_w, g_w, s_w) = cells
            faster.append(t_r < t_w)
            print(f"| {shape} | {prior.truth:.0f} | {'-' if floor is None else f'{floor:.2f}'} "
                  f"| {statistics.median(r.engine_s for r in ladder):.2f} | {t_r:.2f} | {g_r:.3%} | {s_r:.0%} "
                  f"| {t_w:.2f} | {g_w:.3%} | {s_w:.0%} | {t_r / t_w:.2f} |", flush=True)
    print(f"\nthe regret stop took less engine time than the width stop on {sum(faster)} of {len(faster)} truths; "
          f"{args.seeds} campaigns a truth; {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
