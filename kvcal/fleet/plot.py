"""The fleet plot: TTFT p90 and goodput against the threshold, one line per load, the flat policies as flat lines."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from kvcal.fleet.policies import policy_class, policy_classes
from kvcal.fleet.result import FleetResult, FleetRow
from kvcal.gate.plot import save

LINE_WORDS = {":": "dotted", "--": "dashed", "-.": "dash-dotted", "-": "solid"}


def _draw(axes, rows: list[FleetRow], label: str, color: str) -> None:
    points = sorted((r for r in rows if policy_class(r.policy).swept), key=lambda r: r.threshold or 0)
    xs = [r.threshold for r in points]
    for ax, key in zip(axes, ("ttft_p90_ms", "goodput_rps")):
        ys = [getattr(r, key).value for r in points]
        lows = [getattr(r, key).ci[0] for r in points]
        highs = [getattr(r, key).ci[1] for r in points]
        ax.plot(xs, ys, "o-", color=color, label=label, ms=3)
        ax.fill_between(xs, lows, highs, color=color, alpha=0.15)
        for r, flat in ((r, policy_class(r.policy).flat_line) for r in rows):
            if flat:
                ax.axhline(getattr(r, key).value, color=color, ls=flat[0], lw=0.8)


def fleet_figure(result: FleetResult) -> Figure:
    figure = Figure(figsize=(10, 4.2))
    axes = figure.subplots(1, 2)
    loads = [(result.rows, f"rate {result.rate:g}/s" if result.rate else "given load")]
    loads += [(load.rows, f"rate {load.rate:g}/s") for load in result.loads]
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray"]
    for i, (rows, label) in enumerate(loads):
        _draw(axes, rows, label, colors[i % len(colors)])
    for ax, title in zip(axes, ("TTFT p90 (ms)", "goodput (requests/s within SLO)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("minCachedTokenDelta (tokens)")
        ax.set_title(title)
        if result.idle_threshold:
            ax.axvline(result.idle_threshold, color="black", lw=0.8, label="idle threshold")
        if result.recommended_threshold:
            ax.axvline(result.recommended_threshold, color="black", ls="--", lw=0.8, label="recommended")
    flat = ", ".join(f"{LINE_WORDS[c.flat_line[0]]}: {c.name}" for c in policy_classes() if c.flat_line)
    axes[0].legend(fontsize=7, title=flat, title_fontsize=7)
    figure.suptitle(f"kvcal fleet: {result.pods} pods, {result.seeds} seeds x {max(1, result.resamples)} cost sets")
    figure.tight_layout()
    return figure


def write_plot(result: FleetResult, path: Path) -> Path:
    return save(fleet_figure(result), path)
