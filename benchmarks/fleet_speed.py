"""How long one fleet run takes: 64 pods for 10 simulated minutes on one core (issue 31: under a minute).

The shipped example workload (docs/examples/fleet-workload.yaml) at a rate that keeps the
fleet busy, on curves like the simulated pair's (break-even near 680 tokens), with the
P2P rule at its idle threshold. Prints wall and CPU seconds, requests routed and pulled.

    PYTHONPATH=. .venv/bin/python benchmarks/fleet_speed.py --pods 64 --duration 600 --rate 16
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kvcal.fleet.costs import point_costs
from kvcal.fleet.router import Policy
from kvcal.fleet.sim import FleetSim
from kvcal.fleet.workload import load_workload
from kvcal.records.fit import CurveFit, FitResult

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "fleet-workload.yaml"
SIM_LIKE = FitResult(status="crossover", break_even_tokens=677.0, break_even_ci=[649.0, 704.0], confidence=0.9,
                     extrapolated=False, measured_range=[256, 65472], block_size=64, kvcal_version="bench",
                     created_at="2026-12-06T00:00:00+00:00",
                     recompute=CurveFit(model="affine", intercept_ms=4.87, per_token_us=25.3, per_token2_ns=0.0),
                     pull=CurveFit(model="affine", intercept_ms=19.9, per_token_us=3.05, per_token2_ns=0.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--rate", type=float, default=16.0, help="new sessions per second, fleet-wide")
    parser.add_argument("--threshold", type=int, default=896)
    args = parser.parse_args()
    workload = load_workload(EXAMPLE).with_overrides(rate=args.rate, duration_s=args.duration)
    wall, cpu = time.perf_counter(), time.process_time()
    stats = FleetSim(workload, args.pods, point_costs(SIM_LIKE), Policy("threshold", args.threshold), 64, seed=0).run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"pods {args.pods}, {args.duration:g} simulated s, {args.rate:g} sessions/s: wall {wall:.1f} s, cpu {cpu:.1f} s; "
          f"{stats.routed} requests routed in the window, {stats.pulled} pulled, engines busy {stats.busy_share:.0%}, "
          f"target < 60 s: {'met' if cpu < 60 else 'MISSED'}")


if __name__ == "__main__":
    main()
