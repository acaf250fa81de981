"""How accurate and how honest is ``kvcal fit``? Synthetic campaigns with known truth.

For each true cost model x ladder x noise level, ``--seeds`` campaigns are drawn from
the simulated pair (:class:`kvcal.engines.sim.SimPair`), fitted with the default
settings, and compared with ``SimCosts.true_break_even()``:

* ``med_rel_err``: median of |fitted - true| / true break-even;
* ``coverage``: share of campaigns whose interval (at ``--confidence``) holds the
  truth; an interval open above counts when its lower bound is below the truth;
* ``+-se``: its binomial standard error; ``vs_nominal``: ``ok`` within 0.03 of the
  nominal level, else the gap (the target for every cell, one rep per length included);
* ``med_width``: median interval width relative to the truth;
* ``quad``: share of campaigns whose recompute model was quadratic;
* ``status_ok``: share whose status was ``crossover`` (every ladder straddles the truth).

Then the timing of one fit + 2,000 resamples on 500 probes.

    .venv/bin/python benchmarks/fit_accuracy.py            # full grid, 100 seeds each (~3 min on 2 cores)
    .venv/bin/python benchmarks/fit_accuracy.py --quick    # 30 seeds, fewer cells
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
import time

from kvcal.engines.sim import SimCosts
from kvcal.fit import fit_table
from kvcal.records.fit import FitSettings
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the simulator helper lives with the tests
from factories import sim_table  # noqa: E402

TRUTHS = {
    # Defaults resemble the tiny CPU model: a 20 ms pull floor, a break-even near 680 tokens.
    "cpu-tiny": (SimCosts(), {
        "6x3": ([256, 512, 1024, 2048, 4096, 8192], 3),
        "4x5": ([256, 1024, 4096, 8192], 5),
        "9x1": ([128, 256, 512, 768, 1024, 2048, 3072, 4096, 8192], 1),
    }),
    # A convex recompute against a 150 ms pull floor: the break-even near 14.9K tokens.
    "convex-far": (SimCosts(recompute_intercept_ms=2.0, recompute_per_token_us=12.0, recompute_per_token2_ns=0.4,
                            pull_intercept_ms=150.0, pull_per_token_us=8.0), {
        "7x3": ([1024, 2048, 4096, 8192, 16384, 32768, 49152], 3),
        "5x5": ([2048, 8192, 16384, 32768, 49152], 5),
        "8x1": ([1024, 2048, 4096, 8192, 12288, 16384, 32768, 49152], 1),
    }),
}
NOISES = (0.02, 0.05, 0.10)


def run_cell(costs: SimCosts, lengths: list[int], reps: int, seeds: int, confidence: float) -> dict[str, float]:
    truth = costs.true_break_even()
    errors, covered, widths, quad, status_ok = [], 0, [], 0, 0
    for seed in range(seeds):
        table = sim_table(costs, lengths, reps, seed=10_000 + seed)
        fit = fit_table(table, settings=FitSettings(confidence=confidence, seed=seed))
        quad += fit.recompute.model == "quadratic"
        status_ok += fit.status == "crossover"
        if fit.break_even_tokens is None:
            errors.append(math.inf)
        else:
            errors.append(abs(fit.break_even_tokens - truth) / truth)
        low, high = fit.bootstrap.break_even_ci_bounds or [None, None]
        if low is not None and low <= truth and (high is None or truth <= high):
            covered += 1
        if low is not None and high is not None:
            widths.append((high - low) / truth)
    return {
        "med_rel_err": statistics.median(errors),
        "coverage": covered / seeds,
        "med_width": statistics.median(widths) if widths else math.inf,
        "quad": quad / seeds,
        "status_ok": status_ok / seeds,
    }


def _se(p: float, n: int) -> float:
    """Binomial standard error of a coverage share: within 0.03 needs a few hundred campaigns to be seen."""
    return math.sqrt(max(p * (1 - p), 1e-9) / n)


def _verdict(coverage: float, nominal: float) -> str:
    """Within 0.03 of nominal ('ok'), or how far off and which way."""
    gap = coverage - nominal
    return "ok" if abs(gap) <= 0.03 else f"{gap:+.2f}"


def timing(repeats: int = 5) -> tuple[float, float, float, int]:
    """Seconds for fit + 2,000 resamples on 500 probes: (best wall, median wall, median CPU, probes)."""
    lengths = [256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384]
    table = sim_table(SimCosts(), lengths, 25, seed=1)  # 10 lengths x 25 reps x 2 legs = 500 probes
    runs, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fit_table(table, settings=FitSettings(n_resamples=2000, seed=0))
        runs.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return min(runs), statistics.median(runs), statistics.median(cpu), len(table.probes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=None, help="campaigns per cell (default 100; 30 with --quick)")
    parser.add_argument("--confidence", type=float, default=0.9)
    parser.add_argument("--quick", action="store_true", help="noise 0.05 only (plus the outlier cells)")
    parser.add_argument("--timing-only", action="store_true")
    parser.add_argument("--only", default=None, help="only ladders with this name, e.g. 9x1")
    args = parser.parse_args(argv)
    seeds = args.seeds or (30 if args.quick else 100)
    noises = (0.05,) if args.quick else NOISES

    if not args.timing_only:
        print(f"break-even accuracy and {args.confidence:.0%} interval coverage, {seeds} seeds per cell")
        print(f"{'truth':<11} {'ladder':<6} {'noise':>5} {'outliers':>8} {'true_BE':>8} {'med_rel_err':>11} "
              f"{'coverage':>8} {'+-se':>5} {'vs_nominal':>10} {'med_width':>9} {'quad':>5} {'crossover':>9}")
        for name, (base, ladders) in TRUTHS.items():
            for ladder, (lengths, reps) in ladders.items():
                if args.only and ladder not in args.only.split(","):
                    continue
                cells = [(cv, 0.0) for cv in noises] + ([(0.05, 0.03)] if reps >= 3 else [])
                for cv, outliers in cells:
                    costs = base.model_copy(update=dict(noise_cv=cv, outlier_rate=outliers))
                    row = run_cell(costs, lengths, reps, seeds, args.confidence)
                    print(f"{name:<11} {ladder:<6} {cv:>5.2f} {outliers:>8.2f} {costs.true_break_even():>8.0f} "
                          f"{row['med_rel_err']:>11.3f} {row['coverage']:>8.2f} {_se(row['coverage'], seeds):>5.2f} "
                          f"{_verdict(row['coverage'], args.confidence):>10} {row['med_width']:>9.3f} "
                          f"{row['quad']:>5.2f} {row['status_ok']:>9.2f}", flush=True)
    best, median, cpu, probes = timing()
    print(f"timing: fit + 2,000 resamples on {probes} probes: wall best {best * 1e3:.0f} ms, median {median * 1e3:.0f} ms; "
          f"CPU median {cpu * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
