"""What kvcal fleet's size estimate assumes (kvcal/fleet/size.py), measured: seconds and bytes per simulated request,
and the memory a replayed trace takes.

Each case runs in a fresh interpreter so that its peak resident memory is its own. Prints, per case, the requests the
estimate expected and the requests the run simulated, CPU seconds per simulated request, and peak memory.

    PYTHONPATH=. .venv/bin/python benchmarks/fleet_size.py
    PYTHONPATH=. .venv/bin/python benchmarks/fleet_size.py --trace-mb 205
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = """
import json, resource, sys, time
from pathlib import Path
from kvcal.emit.formats import load_input
from kvcal.fleet.costs import point_costs
from kvcal.fleet.router import Policy
from kvcal.fleet.sim import FleetSim
from kvcal.fleet.size import requests_per_run
from kvcal.fleet.workload import load_workload
fit = load_input(Path("results/baselines/cpu-tiny"))
rate, pods, duration = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
w = load_workload(Path("docs/examples/fleet-workload.yaml")).with_overrides(rate=rate, duration_s=duration)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.process_time()
sim = FleetSim(w, pods, point_costs(fit), Policy("threshold", 896), 64, seed=0)
sim.run()
wall = time.process_time() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"expected": requests_per_run(w, fit.recompute.intercept_ms), "simulated": sim.traffic.next_request,
                  "steps": sum(p.step_no for p in sim.pods),
                  "wall_s": wall, "base_mib": base / 1024, "peak_mib": peak / 1024}))
"""
TRACE = """
import json, resource, sys
from kvcal.fleet.traffic import read_trace
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
records = read_trace(sys.argv[1])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"records": len(records), "base_mib": base / 1024, "peak_mib": peak / 1024}))
"""


def _python(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          check=True)
    return json.loads(done.stdout)


def _trace_file(folder: Path, megabytes: float) -> Path:
    """inference-perf-shaped records (128 output token times each) up to about ``megabytes``."""
    path = folder / "per_request.json"
    record = {"start_time": 0.0, "end_time": 1.0, "error": None,
              "info": {"input_tokens": 2048,
                       "response_metrics": {"output_token_times": [0.001 * k for k in range(128)]}}}
    one = len(json.dumps(record))
    count = int(megabytes * 1e6 / (one + 2))
    with path.open("w") as out:
        out.write("[")
        for i in range(count):
            record["start_time"] = i * 0.01
            out.write(("," if i else "") + json.dumps(record))
        out.write("]")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1,2,4", help="sessions per second of the example workload")
    parser.add_argument("--pods", default="4", help="comma-separated: every rate at each")
    parser.add_argument("--duration", type=float, default=180.0)
    parser.add_argument("--trace-mb", type=float, default=0.0, help="also read a synthetic trace of this size")
    args = parser.parse_args()
    for rate, pods in ((r, p) for p in args.pods.split(",") for r in args.rates.split(",")):
        r = _python(RUN, rate, pods, str(args.duration))
        print(f"rate {rate}/s, {pods} pods: expected {r['expected']:,.0f} requests, simulated {r['simulated']:,}, "
              f"{r['steps']:,} engine steps, {r['wall_s']:.2f} s of CPU; "
              f"{1e6 * r['wall_s'] / r['simulated']:.0f} us of CPU a request; peak {r['peak_mib']:.0f} MiB "
              f"({1024 * 1024 * (r['peak_mib'] - r['base_mib']) / r['simulated']:.0f} B a request over the start)")
    if args.trace_mb:
        with tempfile.TemporaryDirectory() as folder:
            path = _trace_file(Path(folder), args.trace_mb)
            r = _python(TRACE, str(path))
            print(f"trace of {path.stat().st_size / 1e6:.0f} MB, {r['records']:,} records: "
                  f"peak {r['peak_mib']:.0f} MiB (start {r['base_mib']:.0f} MiB)")


if __name__ == "__main__":
    main()
