"""Peak memory and time of the cost model's bootstrap on a large loaded run (issue 32 item 3c).

Builds ``--requests`` synthetic requests (the recipe's model: pulled or not, three lengths,
queues drawn 0-2, busy at the threshold 1) and fits the cost model with ``--resamples``
resamples in a child process, whose peak resident memory (getrusage's ru_maxrss) and wall
time are printed with the fitted F and its interval. ``--pythonpath`` runs another tree's
kvcal (e.g. an export of the commit before the bootstrap was sliced), for a before/after.

    PYTHONPATH=. .venv/bin/python benchmarks/costmodel_memory.py --requests 100000 --resamples 2000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, resource, sys, time
import numpy as np
from kvcal.fit.costmodel import fit_cost_model
from kvcal.fit.costmodel_inputs import IdleCurves, LoadedProbes
from kvcal.records.fit import FitSettings

n, resamples = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
pulled = rng.random(n) < 0.5
length = rng.choice([256.0, 1024.0, 4096.0], n)
sw, cw = rng.integers(0, 3, n), rng.integers(0, 3, n)
ttft = (5 + np.where(pulled, 15 + 3 * length / 1e3, 25 * length / 1e3)) * rng.lognormal(0, 0.03, n)
ttft += 80 * (cw >= 1) + pulled * (30 * (sw >= 1) + 50 * (cw >= 1))
data = LoadedProbes(pulled=pulled, uncached=np.where(pulled, 0, length), delta=np.where(pulled, length, 0), ttft_ms=ttft,
                    source_waiting=sw, computing_waiting=cw, stratum=pulled.astype(int) * 10 + (length == 1024),
                    design="designed")
rec, pull = np.array([5.0, 25.0, 0.0]), np.array([20.0, 3.0, 0.0])
idle = IdleCurves(rec, pull, rec + rng.normal(0, 0.01, (2000, 3)) * rec, pull + rng.normal(0, 0.01, (2000, 3)) * pull, 700.0)
start = time.perf_counter()
fit = fit_cost_model(data, idle, settings=FitSettings(n_resamples=resamples, seed=0))
print(json.dumps({"wall_s": time.perf_counter() - start, "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
                  "F": fit.transferFixedMs.value, "F_ci": fit.transferFixedMs.ci}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--pythonpath", default=str(Path(__file__).resolve().parents[1]),
                        help="the kvcal tree to measure (default: this one)")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": args.pythonpath}
    done = subprocess.run([sys.executable, "-c", CHILD, str(args.requests), str(args.resamples)], env=env, cwd=args.pythonpath,
                          capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return 1
    row = json.loads(done.stdout)
    print(f"cost model, {args.requests:,} requests, {args.resamples:,} resamples, kvcal from {args.pythonpath}: "
          f"peak {row['peak_gb']:.2f} GB, {row['wall_s']:.1f} s, F {row['F']} ms {row['F_ci']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
