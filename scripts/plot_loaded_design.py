"""Regenerate docs/img/loaded-sim.png: a designed loaded sweep on the simulated pair, fitted and plotted.

    .venv/bin/python scripts/plot_loaded_design.py            # writes docs/img/loaded-sim.png

The sim's truth: F = 15 ms (pull floor 20 ms above a 5 ms base), S = 30 ms, Q = 50 ms,
q = 80 ms, T = 3 us/token, recompute 25 us/token (+ a small quadratic term).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kvcal.gate.plot import plot_input
from kvcal.sweep.validate import resolve_config
from kvcal.sweep.load import LOAD_STATES
from kvcal.sweep.runner import run_sweep

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "loaded-sim.png"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = resolve_config({"sim": {"source_wait_ms": 30, "requeue_ms": 50, "busy_computing_ms": 80}},
                                dict(engine="sim", load_states=list(LOAD_STATES), prefix_lengths=[256, 1024, 4096],
                                     reps=3, seed=0, output_dir=tmp, name="loaded-sim"))
        outcome = run_sweep(config)
        print(f"wrote {plot_input(outcome.run_dir, OUT)}")


if __name__ == "__main__":
    main()
