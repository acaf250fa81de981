"""Memory and time of ``kvcal emit-config --deltas`` on a router log, by the number of decisions it holds.

The log is written here: ``p2p decision`` lines in the router's JSON shape, deltas in whole
blocks of 64 up to 128K tokens (what a router sees), and with ``--distinct`` arbitrary whole
numbers (the worst case for the histogram: every line a new value). Each size runs the installed
``kvcal`` in a fresh process; the figure is that process's peak resident memory (ru_maxrss)
and wall time. The bound stated in docs/emit.md: memory flat in the log's length (the
histogram holds at most 2^18 values, the decision only their moments).

    PYTHONPATH=. .venv/bin/python benchmarks/deltas_memory.py --sizes 1000,100000,1000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINE = {"level": "info", "ts": "2026-12-07T10:00:00Z", "logger": "p2p-source-producer", "msg": "p2p decision",
        "outcome": "pulled", "bestCachedTokens": 0, "computingCachedTokens": 0, "sourceWaiting": 0,
        "computingWaiting": 1}


def write_log(path: Path, n: int, distinct: bool, seed: int = 0) -> None:
    rng = random.Random(seed)
    with path.open("w") as out:
        for i in range(n):
            delta = rng.randint(1, 10**8) if distinct else 64 * rng.randint(2, 2048)
            entry = dict(LINE, requestID=f"req-{i}", deltaTokens=delta, bestCachedTokens=delta)
            out.write("I1207 10:00:00.000000 1 decision.go:88] " + json.dumps(entry) + "\n")


def measure(kvcal: Path, fit: Path, log: Path) -> tuple[float, float, int]:
    """(peak MB, wall s, exit code) of one emit-config run in its own process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run([str(kvcal), "emit-config", str(fit), "--format", "json", "--deltas", str(log)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(peak, before) / 1024, wall, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000,1000000", help="decisions per log, comma-separated")
    parser.add_argument("--fit", default="results/baselines/cpu-tiny", help="the fit (or run folder) to emit from")
    parser.add_argument("--distinct", action="store_true", help="every delta a new whole number (worst case)")
    args = parser.parse_args(argv)
    kvcal = Path(sys.executable).with_name("kvcal")
    print(f"emit-config --deltas on a router log, {'distinct deltas' if args.distinct else 'whole blocks'}")
    print(f"{'decisions':>10} {'log MB':>8} {'peak MB':>8} {'wall s':>7}")
    with tempfile.TemporaryDirectory() as folder:
        for n in (int(s) for s in args.sizes.split(",")):
            log = Path(folder) / f"epp-{n}.log"
            write_log(log, n, args.distinct)
            # each size in a fresh child so ru_maxrss is that run's own peak
            pid = os.fork()
            if pid == 0:
                peak, wall, code = measure(kvcal, Path(args.fit), log)
                print(f"{n:>10,} {log.stat().st_size / 1e6:>8.1f} {peak:>8.0f} {wall:>7.1f}" + ("" if code == 0 else
                      f"  exit {code}"), flush=True)
                os._exit(0)
            os.waitpid(pid, 0)
            log.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
