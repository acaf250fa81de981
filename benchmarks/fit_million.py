"""CPU time and peak memory of `kvcal fit` on a 1,000,000-row probe table (issue 45: <= 60 s CPU, <= 2 GB).

The table: 200 lengths (256 to 32,768 tokens, geometric) x 2 legs x 2,500 reps drawn from
the simulated pair's curves (lognormal noise, cv 5 %), written as a probe CSV. `kvcal fit`
runs on it in a child process; its CPU seconds (user + system) and peak resident memory
come from getrusage(RUSAGE_CHILDREN), the same call for both figures. ``--row-path`` runs
the bootstrap row by row (what every fit did before the atoms; slow: use fewer
``--resamples`` and scale), to compare the two on the same table.

    PYTHONPATH=. .venv/bin/python benchmarks/fit_million.py [--reps 2500] [--resamples 2000] [--row-path]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from kvcal.engines.sim import SimCosts

FORCE_ROWS = "import kvcal.fit.bootstrap_atoms as atoms; atoms.ROW_PATH_ELEMENTS = float('inf'); "


def write_table(path: Path, lengths: int, reps: int, seed: int) -> None:
    costs = SimCosts()
    ladder = np.unique(np.geomspace(256, 32768, lengths).round().astype(int))
    n = np.tile(np.repeat(ladder, 2), reps)
    pull = np.tile([False, True], len(ladder) * reps)
    curve = np.where(pull, costs.pull_intercept_ms + costs.pull_per_token_us * n / 1e3,
                     costs.recompute_intercept_ms + costs.recompute_per_token_us * n / 1e3
                     + costs.recompute_per_token2_ns * n**2 / 1e6)
    sigma = np.sqrt(np.log1p(costs.noise_cv**2))
    ttft = curve * np.random.default_rng(seed).lognormal(-sigma**2 / 2, sigma, len(n))
    rep = np.repeat(np.arange(reps), 2 * len(ladder))
    pd.DataFrame({"prefix_tokens": n, "leg": np.where(pull, "pull", "recompute"), "ttft_ms": ttft.round(4),
                  "rep": rep}).to_csv(path, index=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, default=200)
    parser.add_argument("--reps", type=int, default=2500)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--row-path", action="store_true", help="bootstrap row by row (the path before issue 45)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        table, out = Path(folder) / "probes.csv", Path(folder) / "fit.json"
        write_table(table, args.lengths, args.reps, args.seed)
        rows = sum(1 for _ in table.open()) - 1
        argv = ["fit", str(table), "-o", str(out), "--resamples", str(args.resamples)]
        run_cli = f"import sys; from kvcal.cli.app import main; sys.exit(main({argv!r}))"
        code = (FORCE_ROWS if args.row_path else "") + run_cli
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        wall = time.perf_counter() - started
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            print(f"kvcal fit exited {done.returncode}: {done.stderr.strip()}")
            return 1
        fit = json.loads(out.read_text())
    path = "row by row" if args.row_path else "default"
    print(f"rows {rows:,}, resamples {args.resamples}, bootstrap {path}: cpu {usage.ru_utime + usage.ru_stime:.1f} s, "
          f"peak {usage.ru_maxrss * 1024 / 1e9:.2f} GB, wall {wall:.1f} s; break-even {fit['break_even_tokens']:.1f} "
          f"interval {[round(v, 1) for v in fit['break_even_ci']]}; target <= 60 s cpu, <= 2 GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
