"""How long `kvcal --help` takes against a bare `import typer` (the floor of any typer CLI).

The target (issue 10): `kvcal --help` within 2x of `import typer`. Each figure is the
median wall time of fresh processes, measured here, on this machine; nothing is assumed.
Run: python benchmarks/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("kvcal")


def wall_s(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    kvcal = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "kvcal.cli.app"]
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import typer'": [sys.executable, "-c", "import typer"],
        "kvcal --help": [*kvcal, "--help"],
        "kvcal sweep --help": [*kvcal, "sweep", "--help"],
        "kvcal fit --help": [*kvcal, "fit", "--help"],
    }
    wall_s(cases["kvcal --help"], 2)  # warm the file cache and bytecode
    medians = {}
    print(f"{'command':28} {'median s':>9} {'min s':>7} {'max s':>7}   ({args.runs} runs each)")
    for label, argv in cases.items():
        times = wall_s(argv, args.runs)
        medians[label] = statistics.median(times)
        print(f"{label:28} {medians[label]:9.3f} {min(times):7.3f} {max(times):7.3f}")
    ratio = medians["kvcal --help"] / medians["python -c 'import typer'"]
    print(f"kvcal --help / import typer = {ratio:.2f}x (target: at most 2x)")


if __name__ == "__main__":
    main()
