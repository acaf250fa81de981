"""How long `kvcal --help` takes against a bare `import typer` (the floor of any typer CLI).

The target (issues 10, 45): `kvcal --help` and every `kvcal <command> --help` within 2x of
`import typer`. Each figure is the median wall time of fresh processes, measured here, on this machine; nothing is assumed.
Run: PYTHONPATH=. .venv/bin/python benchmarks/cli_startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kvcal.cli.commands import INDEX

SCRIPT = Path(sys.executable).with_name("kvcal")


def wall_s(argv: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    kvcal = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "kvcal.cli.app"]
    cases = {"python -c pass": [sys.executable, "-c", "pass"],
             "python -c 'import typer'": [sys.executable, "-c", "import typer"],
             "kvcal --help": [*kvcal, "--help"]}
    cases |= {f"kvcal {name} --help": [*kvcal, name, "--help"] for name, _ in INDEX}
    for argv in cases.values():
        wall_s(argv)  # warm the file cache and bytecode
    # Rounds interleave the cases, so a burst of load on a shared machine hits them alike.
    times: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(args.runs):
        for label, argv in cases.items():
            times[label].append(wall_s(argv))
    floor = statistics.median(times["python -c 'import typer'"])
    print(f"{'command':32} {'median s':>9} {'min s':>7} {'max s':>7} {'/ typer':>8}   ({args.runs} runs each)")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"{label:32} {median:9.3f} {min(values):7.3f} {max(values):7.3f} {median / floor:7.2f}x")
    worst = max((statistics.median(v) / floor, label) for label, v in times.items() if label.startswith("kvcal"))
    print(f"slowest: {worst[1]} = {worst[0]:.2f}x import typer (target: at most 2x); load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
