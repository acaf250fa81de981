"""Memory of a fleet study's worker processes: the peak PSS of kvcal and its workers at --jobs 1 and --jobs N.

``kvcal fleet --jobs N`` forks N workers that share the parent's pages copy-on-write; what
each adds is its private memory (the pages it writes: its run's records, Python's own
bookkeeping touching shared objects). PSS (proportional set size, /proc/PID/smaps_rollup)
charges shared pages to their sharers in proportion, so the tree's summed PSS is what the
study costs the machine. The figure per worker, (peak at N - peak at 1) / N, is what
``kvcal.fleet.size.BYTES_PER_WORKER`` rounds up.

Runs the installed ``kvcal`` script as a user would (a sim sweep and fit first, in a
temporary folder) on a study long enough for every worker to start and run.

    PYTHONPATH=. .venv/bin/python benchmarks/fleet_workers.py [--jobs 16] [--seeds 4]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("kvcal")
EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "fleet-workload.yaml"


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found + [g for c in found for g in _children(c)]


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_tree(argv: list[str], cwd: Path) -> tuple[int, int]:
    """(the peak summed PSS of the process and its descendants in KiB, the most processes seen at once)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = most = 0
    while proc.poll() is None:
        tree = [proc.pid, *_children(proc.pid)]
        peak, most = max(peak, sum(_pss_kib(p) for p in tree)), max(most, len(tree))
        time.sleep(0.05)
    if proc.returncode != 0:
        raise SystemExit(f"kvcal exit {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
    return peak, most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for step in (["sweep", "--engine", "sim", "--prefix-lengths", "256,1024,4096", "--reps", "3",
                      "--output-dir", tmp, "--name", "r"], ["fit", str(root / "r"), "--resamples", "100"]):
            subprocess.run([str(SCRIPT), *step], cwd=root, check=True, capture_output=True)
        study = [str(SCRIPT), "fleet", str(root / "r" / "fit.json"), "--workload", str(EXAMPLE), "--pods", "2",
                 "--rate", "1", "--duration", "60", "--seeds", str(args.seeds), "--thresholds", "256,512,1024",
                 "--json"]
        one, _ = peak_tree([*study, "--jobs", "1"], root)
        many, processes = peak_tree([*study, "--jobs", str(args.jobs)], root)
        workers = processes - 1
        print(f"--jobs 1: peak PSS {one / 1024:.0f} MiB; --jobs {args.jobs}: {many / 1024:.0f} MiB "
              f"with {workers} workers seen at once")
        if workers:
            print(f"per worker: {(many - one) / workers / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
