"""Size and build time of `kvcal report` for a large run (issue 44: under 2 MB for a 1,000-probe run).

Sweeps the simulated pair (``--lengths`` lengths x ``--reps`` reps x 2 legs), fits it, and
writes its page with the installed ``kvcal``; then again with every probe record carrying
what a real GPU run's does (the P2P tier's counter name, a host load, a load state), the
longest tooltips a page draws. Prints the probes, the page's bytes and the seconds each took.

    PYTHONPATH=. .venv/bin/python benchmarks/report_size.py --lengths 20 --reps 25
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvcal.records.run import ProbeRecord

SCRIPT = Path(sys.executable).with_name("kvcal")
REAL_COUNTER = 'consumer/vllm:kv_offload_tiering_read_bytes_total{tier="1:p2p",model_name="openai/gpt-oss-120b"}'


def kvcal(*args: str) -> float:
    started = time.monotonic()
    subprocess.run([str(SCRIPT), *args], check=True, capture_output=True, text=True)
    return time.monotonic() - started


def with_real_records(run: Path) -> None:
    """Every probe as a real run records it: the counter that proved its bytes, the host's load, its load state."""
    path = run / "probes.jsonl"
    records = [ProbeRecord.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]
    lines = [
        r.model_copy(update={"bytes_metric": REAL_COUNTER, "host_busy": 0.031, "load_state": "idle"}).model_dump_json(
            by_alias=True
        )
        for r in records
    ]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, default=20)
    parser.add_argument("--reps", type=int, default=25)
    args = parser.parse_args()
    lengths = ",".join(str(256 * i) for i in range(1, args.lengths + 1))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        kvcal(
            "sweep",
            "--engine",
            "sim",
            "--prefix-lengths",
            lengths,
            "--reps",
            str(args.reps),
            "--output-dir",
            str(root),
            "--name",
            "big",
        )
        run = root / "big"
        probes = len((run / "probes.jsonl").read_text().splitlines())
        kvcal("fit", str(run))
        for label in ("simulated records", "records as a real run writes them"):
            if label.startswith("records"):
                with_real_records(run)
            seconds = kvcal("report", str(run), "-o", str(root / "report.html"))
            size = (root / "report.html").stat().st_size
            print(
                f"{probes} probes, {label}: {size:,} bytes ({size / 2**20:.2f} MiB), kvcal report took {seconds:.1f} s"
            )


if __name__ == "__main__":
    main()
