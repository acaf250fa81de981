"""TTFT by measured load state, the third panel of a loaded run's plot (kvcal.gate.plot).

The panel shows every probe of a loaded run against its length, coloured by
the state its *measured* queues put it in (busy = waiting >= the cost model's
threshold), recompute as circles and pulls as triangles, with the per-length medians
joined: the vertical gaps between the idle and busy lines are q, S and Q.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes

from kvcal.fit.costmodel_inputs import LoadedProbes
from kvcal.records.fit import FitResult

STATE_COLORS = {
    "idle": "tab:grey",
    "source-busy": "tab:blue",
    "computing-busy": "tab:orange",
    "both-busy": "tab:purple",
}
NAMES = {(0, 0): "idle", (1, 0): "source-busy", (0, 1): "computing-busy", (1, 1): "both-busy"}


def draw_by_state(ax: Axes, data: LoadedProbes, threshold: int, *, log_x: bool = False) -> None:
    bs = (data.source_waiting >= threshold).astype(int)
    bc = (data.computing_waiting >= threshold).astype(int)
    n = data.uncached + data.delta
    for (s, c), state in NAMES.items():
        for pulled, marker, line, leg in ((False, "o", "-", "recompute"), (True, "^", "--", "pull")):
            mask = (bs == s) & (bc == c) & (data.pulled == pulled)
            if not mask.any():
                continue
            color = STATE_COLORS[state]
            ax.plot(n[mask], data.ttft_ms[mask], marker, color=color, ms=4, alpha=0.5, ls="none")
            lengths = np.unique(n[mask])
            medians = [np.median(data.ttft_ms[mask & (n == x)]) for x in lengths]
            ax.plot(lengths, medians, line, color=color, lw=1.5, label=f"{leg}, {state}")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel("prefix length (tokens)" + (", log scale" if log_x else ""))
    ax.set_ylabel("time to first token (ms)")
    ax.set_title(f"TTFT by measured load state (busy = waiting >= {threshold})", fontsize="small")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", ncol=2, loc="upper left")


def cost_model_line(fit: FitResult) -> str:
    """F, S, Q and q of a fit's cost model, for a title ('' without one)."""
    cm = fit.cost_model
    if cm is None:
        return ""
    return (
        f"F {cm.transferFixedMs.value:.3g} ms, S {cm.sourceWaitMs.value:.3g} ms, "
        f"Q {cm.requeueMs.value:.3g} ms, q {cm.busy_computing_ms.value:.3g} ms"
    )
