"""Time of `kvcal fit` plus `kvcal emit-config --format json` on a 100-row campaign (issue 50: under 1 s).

Writes a 100-row probe table from the simulated pair's curves (benchmarks/fit_memory.py's
generator), then prints two figures, medians of ``--runs``:

* in one process with the imports loaded (what the fit and the decision cost themselves):
  CPU seconds of fit and of emit, through ``kvcal.cli.app.main`` as the console script calls it;
* as two fresh ``kvcal`` processes (what a user waits for): CPU and wall seconds each, imports
  included (quote CPU seconds on a shared host).

    PYTHONPATH=. .venv/bin/python benchmarks/fit_emit_speed.py --runs 7
"""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fit_memory import write_table

from kvcal.cli.app import main as kvcal_main


def in_process(*args: str) -> float:
    """CPU seconds of one kvcal command run in this process."""
    sys.argv = ["kvcal", *args]
    start = time.process_time()
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        contextlib.suppress(SystemExit),
    ):
        kvcal_main()
    return time.process_time() - start


def fresh_process(*args: str) -> tuple[float, float]:
    """Wall and CPU seconds of one kvcal command in a fresh process (exit 0 or 3, no threshold, both count).

    CPU time is the figure to quote on a shared host: wall time there includes the neighbours' share."""
    script = Path(sys.executable).with_name("kvcal")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([str(script), *args], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 3):
        raise SystemExit(f"kvcal {args[0]} exited {done.returncode}: {done.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        table, fit = Path(tmp) / "probes.csv", Path(tmp) / "fit.json"
        write_table(table, 100, 0.0, args.seed)
        fit_args, emit_args = ("fit", str(table), "-o", str(fit)), ("emit-config", str(fit), "--format", "json")
        in_process(*fit_args), in_process(*emit_args)  # imports and first-call caches
        warm = [(in_process(*fit_args), in_process(*emit_args)) for _ in range(args.runs)]
        cold = [(fresh_process(*fit_args), fresh_process(*emit_args)) for _ in range(args.runs)]
    m = statistics.median
    cold_wall = [(fit_run[0], emit_run[0]) for fit_run, emit_run in cold]
    cold_cpu = [(fit_run[1], emit_run[1]) for fit_run, emit_run in cold]
    for label, unit, pairs in (
        ("in one process, imports loaded", "CPU s", warm),
        ("fresh processes", "CPU s", cold_cpu),
        ("fresh processes", "wall s", cold_wall),
    ):
        fits, emits = [a for a, _ in pairs], [b for _, b in pairs]
        total = m([a + b for a, b in pairs])
        print(f"{label}: fit {m(fits):.3f}, emit {m(emits):.3f}, fit + emit {total:.3f} {unit} (median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
