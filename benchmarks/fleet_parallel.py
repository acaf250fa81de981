"""Wall time of one fleet study on 1 and N processes (and on a local Ray instance), and whether the JSON is identical.

Issue 45's target: a study of at least 100 runs, ``--jobs 2`` in at most 0.6x the wall time
of ``--jobs 1`` on a 2-core machine, byte-identical ``--json``; ``--ray local`` the same JSON.
Runs the installed ``kvcal`` script as a user would (a sim sweep and fit first, in a
temporary folder) and prints the load average beside the times: on a shared machine the
ratio only means something at a low load.

    PYTHONPATH=. .venv/bin/python benchmarks/fleet_parallel.py [--jobs 2] [--ray] [--seeds 2 --resamples 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("kvcal")
EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "fleet-workload.yaml"


def _kvcal(*args: str, cwd: Path) -> tuple[float, str]:
    began = time.perf_counter()
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        raise SystemExit(f"kvcal {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return time.perf_counter() - began, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (("--jobs", 2), ("--seeds", 2), ("--resamples", 4), ("--pods", 4), ("--duration", 120)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--ray", action="store_true", help="also run on a local Ray instance (--ray local)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _kvcal("sweep", "--engine", "sim", "--prefix-lengths", "256,512,1024,2048,4096", "--reps", "3",
               "--output-dir", tmp, "--name", "r", cwd=root)
        _kvcal("fit", str(root / "r"), "--resamples", "200", cwd=root)
        study = ["fleet", str(root / "r" / "fit.json"), "--workload", str(EXAMPLE), "--pods", str(args.pods),
                 "--rate", "2", "--duration", str(args.duration), "--seeds", str(args.seeds),
                 "--resamples", str(args.resamples), "--json"]
        print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        one_s, one = _kvcal(*study, "--jobs", "1", cwd=root)
        runs = one.count('"policy"') * args.seeds * max(1, args.resamples)
        print(f"{runs} runs; --jobs 1: {one_s:.1f} s wall")
        many_s, many = _kvcal(*study, "--jobs", str(args.jobs), cwd=root)
        print(f"--jobs {args.jobs}: {many_s:.1f} s wall = {many_s / one_s:.2f}x --jobs 1; "
              f"identical JSON: {many == one}")
        if args.ray:
            ray_s, on_ray = _kvcal(*study, "--ray", "local", cwd=root)
            print(f"--ray local: {ray_s:.1f} s wall (Ray's start included); identical JSON: {on_ray == one}")
        print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
