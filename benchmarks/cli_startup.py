"""How long `kvcal --help` takes against a bare `import typer` (the floor of any typer CLI), and what each help imports.

The target (issues 10, 45): `kvcal --help` and every `kvcal <command> --help` within 2x of
`import typer`. Each figure is the median wall time of fresh processes, measured here, on this machine; nothing is
assumed. Rounds interleave the cases, so a burst of load on a shared machine hits them alike; the load average is
printed with the figures (rerun on a quiet machine before quoting them).
With --bytecode, every process (the `import typer` floor too) reads its modules from bytecode written by the warm-up
run into a temporary PYTHONPYCACHEPREFIX, as an installed kvcal does: where PYTHONDONTWRITEBYTECODE is set and the
source tree has no __pycache__ (a checkout), kvcal's own modules are otherwise compiled from source in every run
while typer's and rich's come from their installed bytecode. The line above the table says which applies.
With --imports, each help's import time (python -X importtime, one run) is split by top-level package: what each
help still imports and what that costs (docs/architecture.md, "Startup").
With --against KVCAL (another checkout's kvcal script, main's for a baseline), each of its helps runs right after the
same help of this tree, in the same rounds, so a change is measured against the baseline under the same load.
Run: PYTHONPATH=. .venv/bin/python benchmarks/cli_startup.py [--runs 5] [--bytecode] [--against KVCAL] [--imports]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from kvcal.cli.commands import INDEX

SCRIPT = Path(sys.executable).with_name("kvcal")
SUBCOMMANDS = {"profiles": ("list", "show", "from-config")}  # groups: each subcommand's help is measured too
FLOOR = "python -c 'import typer'"
HELP_ENV = {"COLUMNS": "100"}  # what a help renders to is the same in every run


BASELINES: set[str] = set()  # --against's script: run without PYTHONPATH, which names this tree


def wall_s(argv: list[str]) -> float:
    env = {**os.environ, **HELP_ENV}
    if argv[0] in BASELINES:  # else `PYTHONPATH=. ...` would have the baseline's script import this tree's kvcal
        env.pop("PYTHONPATH", None)
    began = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - began


def use_bytecode(folder: str) -> str:
    """Let every measured process write and read bytecode under ``folder``; says what the runs load."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    return f"every module from bytecode (written by the warm-up run under {folder})"


def how_loaded() -> str:
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return ("PYTHONDONTWRITEBYTECODE is set: kvcal's modules load from bytecode only where a __pycache__ "
                "exists (a checkout has none), typer's and rich's from their installed bytecode; see --bytecode")
    return "modules from bytecode where Python could write it"


def help_cases(kvcal: list[str]) -> dict[str, list[str]]:
    """`kvcal --help` and the help of every command and subcommand."""
    cases = {"kvcal --help": [*kvcal, "--help"]}
    for name, _ in INDEX:
        cases[f"kvcal {name} --help"] = [*kvcal, name, "--help"]
        cases |= {f"kvcal {name} {sub} --help": [*kvcal, name, sub, "--help"] for sub in SUBCOMMANDS.get(name, ())}
    return cases


def import_split(argv: list[str], top: int = 6) -> str:
    """The packages ``python ARGV`` imports (a script or ``-c``), by their own import time (ms), the largest first."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, check=True,
                          env={**os.environ, **HELP_ENV})
    spent: Counter[str] = Counter()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "[us]" not in line:
            own_us, _, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
            spent[name.split(".")[0]] += int(own_us)
    total = sum(spent.values()) / 1e3
    shown = ", ".join(f"{name} {us / 1e3:.0f}" for name, us in spent.most_common(top))
    return f"{total:5.0f} ms: {shown}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--imports", action="store_true", help="also split each help's import time by package")
    parser.add_argument("--bytecode", action="store_true", help="every process reads bytecode (see the docstring)")
    parser.add_argument("--against", metavar="KVCAL", help="another tree's kvcal script (a baseline): its helps are "
                        "timed in the same rounds, interleaved, and shown as 'against: ...'")
    args = parser.parse_args()
    loaded = use_bytecode(tempfile.mkdtemp(prefix="cli-startup-pyc-")) if args.bytecode else how_loaded()
    kvcal = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "kvcal.cli.app"]
    cases = {"python -c pass": [sys.executable, "-c", "pass"], FLOOR: [sys.executable, "-c", "import typer"],
             **help_cases(kvcal)}
    if args.against:  # the same helps of the baseline, each right after this tree's: load hits both alike
        BASELINES.add(args.against)
        theirs = help_cases([args.against])
        cases = {k: v for label, argv in cases.items()
                 for k, v in [(label, argv), *([(f"against: {label}", theirs[label])] if label in theirs else [])]}
    for argv in cases.values():
        wall_s(argv)  # warm the file cache and bytecode
    times: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(args.runs):
        for label, argv in cases.items():
            times[label].append(wall_s(argv))
    floor = statistics.median(times[FLOOR])
    print(f"loading: {loaded}")
    print(f"{'command':50} {'median s':>9} {'min s':>7} {'max s':>7} {'/ typer':>8}   ({args.runs} runs each)")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"{label:50} {median:9.3f} {min(values):7.3f} {max(values):7.3f} {median / floor:7.2f}x")
    worst = max((statistics.median(v) / floor, label) for label, v in times.items() if label.startswith("kvcal"))
    if args.against:
        print(f"(lines 'against: ...' are {args.against}; 'slowest' is of this tree)")
    print(f"slowest: {worst[1]} = {worst[0]:.2f}x import typer (target: at most 2x); load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if args.imports:
        print("\nimport time by package (-X importtime, one run; own time of each package's modules):")
        for label, argv in cases.items():
            print(f"{label:40} {import_split(argv[1:] if argv[0] == sys.executable else argv)}")


if __name__ == "__main__":
    main()
