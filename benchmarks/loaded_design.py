"""Designed experiment against the recipe's observational fit: how narrow are F, S and Q?

On the simulated pair with known load delays (``source_wait_ms``, ``requeue_ms``,
``busy_computing_ms``), for each seed:

* **designed**: ``kvcal sweep --engine sim --load-states idle,source-busy,computing-busy,both-busy``
  (lengths x 2 legs x 4 states x reps probes), then ``kvcal fit``: the cost model from
  the run's own idle curves and its loaded probes;
* **observational**: a simulated production run of the *same number of requests* in the
  recipe's formats (inference-perf per-request records + router ``p2p decision`` lines;
  one pull size, queues busy as they happen to be: see kvcal.engines.sim_fleet), fitted
  by ``kvcal fit --per-request --epp-log --idle`` with P and T from the same idle run.

Printed: median interval width of F, S and Q for each, the ratio observational /
designed, and how often each interval held the truth. Done when S and Q are at least
3x narrower designed.

    .venv/bin/python benchmarks/loaded_design.py             # 10 seeds
    .venv/bin/python benchmarks/loaded_design.py --seeds 3
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
from pathlib import Path

from kvcal.engines.sim import SimCosts
from kvcal.engines.sim_fleet import FleetShape, write_production
from kvcal.fit import fit_input
from kvcal.fit.observational import fit_observational
from kvcal.sweep.validate import resolve_config
from kvcal.sweep.load import LOAD_STATES
from kvcal.sweep.runner import run_sweep
from kvcal.records.fit import FitSettings

DELAYS = {"source_wait_ms": 30.0, "requeue_ms": 50.0, "busy_computing_ms": 80.0}
LENGTHS = [256, 1024, 4096]
KEYS = ("transferFixedMs", "sourceWaitMs", "requeueMs")


def truth(costs: SimCosts) -> dict[str, float]:
    return {"transferFixedMs": costs.pull_intercept_ms - costs.recompute_intercept_ms,
            "sourceWaitMs": costs.source_wait_ms, "requeueMs": costs.requeue_ms}


def one_seed(seed: int, reps: int, resamples: int, shape: FleetShape) -> dict[str, dict[str, tuple[float, bool]]]:
    with tempfile.TemporaryDirectory() as tmp:
        config = resolve_config({"sim": DELAYS}, dict(engine="sim", load_states=list(LOAD_STATES), prefix_lengths=LENGTHS,
                                                      reps=reps, seed=seed, output_dir=tmp, name="designed"))
        outcome = run_sweep(config)
        designed = fit_input(outcome.run_dir, settings=FitSettings(seed=seed, n_resamples=resamples))
        n_requests = designed.cost_model.n_requests
        costs = SimCosts(**DELAYS)
        per_request, epp = write_production(Path(tmp) / "prod", costs, n_requests, shape=shape, seed=seed)
        observed = fit_observational([per_request], epp, outcome.run_dir, settings=FitSettings(seed=seed, n_resamples=resamples))
    out: dict[str, dict[str, tuple[float, bool]]] = {}
    true = truth(costs)
    for name, fit in (("designed", designed), ("observational", observed)):
        cm = fit.cost_model
        out[name] = {}
        for key in KEYS:
            ci = getattr(cm, key).ci
            out[name][key] = (ci[1] - ci[0], ci[0] <= true[key] <= ci[1])
    out["n"] = {"requests": (float(n_requests), True)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--pull-tokens", type=int, default=49152,
                        help="The observational run's one pull size (the recipe's published run: 48K tokens).")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    shape = FleetShape(prefix_tokens=args.pull_tokens)
    runs = [one_seed(seed, args.reps, args.resamples, shape) for seed in range(args.seeds)]
    n = int(runs[0]["n"]["requests"][0])
    print(f"{args.seeds} seeds, {n} requests each (designed: {len(LENGTHS)} lengths x 2 legs x 4 states x {args.reps} reps; "
          f"observational: one {args.pull_tokens}-token pull size, {shape.busy_source_share:.0%} busy sources, "
          f"{shape.busy_computing_share:.0%} busy computing pods); truth {DELAYS}")
    print(f"{'constant':<16} {'designed width':>15} {'observ. width':>14} {'ratio':>7} {'designed cover':>15} {'observ. cover':>14}")
    ratios = {}
    for key in KEYS:
        widths = {d: statistics.median(r[d][key][0] for r in runs) for d in ("designed", "observational")}
        cover = {d: sum(r[d][key][1] for r in runs) / len(runs) for d in ("designed", "observational")}
        ratios[key] = widths["observational"] / widths["designed"]
        print(f"{key:<16} {widths['designed']:>12.2f} ms {widths['observational']:>11.2f} ms {ratios[key]:>6.1f}x "
              f"{cover['designed']:>15.0%} {cover['observational']:>14.0%}")
    done = ratios["sourceWaitMs"] >= 3 and ratios["requeueMs"] >= 3
    print(f"done-when (S and Q at least 3x narrower designed): {'met' if done else 'NOT met'}")
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
