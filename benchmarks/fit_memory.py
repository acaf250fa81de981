"""Peak memory and time of `kvcal fit` on a large probe table (issue 33 item 6: 1,000,000 rows under 2 GB).

Writes a probe CSV of ``--rows`` rows drawn from the simulated pair's curves (lognormal
noise, cv 5 %; six lengths, the legs alternating; optionally a share of pulls slowed
by 2x so the slow-mode check runs on the same table), runs the installed ``kvcal fit``
on it in a child process, and prints the child's peak resident memory (getrusage's
ru_maxrss) and wall time, with the fit's break-even and interval.

    PYTHONPATH=. .venv/bin/python benchmarks/fit_memory.py --rows 1000000 --resamples 2000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from kvcal.engines.sim import SimCosts

LADDER = np.array([256, 512, 1024, 2048, 4096, 8192])


def write_table(path: Path, rows: int, slow_share: float, seed: int) -> None:
    """``rows`` probes (legs alternating over the ladder) with a ``rep`` per (length, leg)."""
    costs = SimCosts()
    rng = np.random.default_rng(seed)
    index = np.arange(rows)
    n = LADDER[(index // 2) % len(LADDER)]
    pull = index % 2 == 1
    curve = np.where(pull, costs.pull_intercept_ms + costs.pull_per_token_us * n / 1e3,
                     costs.recompute_intercept_ms + costs.recompute_per_token_us * n / 1e3
                     + costs.recompute_per_token2_ns * n**2 / 1e6)
    sigma = np.sqrt(np.log1p(costs.noise_cv**2))
    ttft = curve * rng.lognormal(-sigma**2 / 2, sigma, rows)
    ttft = np.where(pull & (rng.random(rows) < slow_share), 2.0 * ttft, ttft)
    rep = index // (2 * len(LADDER))
    with path.open("w") as handle:
        handle.write("prefix_tokens,leg,ttft_ms,rep\n")
        legs = np.where(pull, "pull", "recompute")
        for chunk in range(0, rows, 200_000):
            end = min(rows, chunk + 200_000)
            handle.writelines(f"{a},{b},{c:.4f},{d}\n" for a, b, c, d in
                              zip(n[chunk:end], legs[chunk:end], ttft[chunk:end], rep[chunk:end]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--slow-share", type=float, default=0.0, help="share of pulls slowed 2x (a slow mode)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    kvcal = Path(sys.executable).with_name("kvcal")
    with tempfile.TemporaryDirectory() as folder:
        table, out = Path(folder) / "probes.csv", Path(folder) / "fit.json"
        write_table(table, args.rows, args.slow_share, args.seed)
        started = time.perf_counter()
        done = subprocess.run([str(kvcal), "fit", str(table), "-o", str(out), "--resamples", str(args.resamples)],
                              capture_output=True, text=True, env={**os.environ})
        wall = time.perf_counter() - started
        peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e9  # Linux: kilobytes
        if done.returncode != 0:
            print(f"kvcal fit exited {done.returncode}: {done.stderr.strip()}")
            return 1
        fit = json.loads(out.read_text())
    modes = ", ".join(f"{m['leg']} {m['share']:.0%} x{m['ratio']:.2g}" for m in fit["slow_modes"]) or "none"
    print(f"rows {args.rows:,}, resamples {args.resamples}, slow share {args.slow_share:.0%}: "
          f"peak {peak_gb:.2f} GB, {wall:.1f} s; break-even {fit['break_even_tokens']} {fit['break_even_ci']}; "
          f"slow modes: {modes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
