"""What ``kvcal compare`` produces: the runs loaded, compared (:mod:`kvcal.gate.regression`),
and shown as a table, a Markdown summary for a CI job page and an overlay plot.

The deployed threshold comes from ``--deployed`` or a Helm values file
(:func:`kvcal.emit.deployed_values.read_threshold`). The overlay draws each run with
:func:`kvcal.gate.plot.draw_run` (points, curves, bands and break-even) in its own
colour on one pair of axes, plus the deployed threshold if given.
"""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from kvcal.emit.deployed_values import read_threshold
from kvcal.files.writing import write_file
from kvcal.gate.compare_settings import CompareConfig
from kvcal.gate.loaded_runs import load_run
from kvcal.gate.plot import draw_run, grid, save
from kvcal.gate.regression import Comparison, Row, compare_runs
from kvcal.gate.text import fmt_ci, fmt_value

log = logging.getLogger(__name__)

PLOT_SIZE_IN = (10.0, 6.0)
PLOT_DPI = 100
BASELINE_COLOUR = "tab:blue"
CURRENT_COLOUR = "tab:red"


# ---------------------------------------------------------------- text


def fmt_change(row: Row) -> str:
    if row.change_rel is None:
        return "—"
    text = f"{row.change_rel * 100:+.1f}%"
    if row.change_ci is not None:
        text += f" [{row.change_ci[0] * 100:+.0f}%, {row.change_ci[1] * 100:+.0f}%]"
    return text


def fmt_significant(row: Row) -> str:
    return "n/a" if row.significant is None else "yes" if row.significant else "no"


QUANTITY_NAMES = {
    "break-even": "break-even (tokens)",
    "intercept_ms": "fixed cost (ms)",
    "per_token_us": "per token (us)",
    "per_token2_ns": "per token^2 (ns)",
    "pull bandwidth": "pull bandwidth (GB/s)",
}
TABLE_HEADER = ["quantity", "baseline [CI]", "current [CI]", "change [CI]", "significant"]


def quantity_name(row: Row) -> str:
    """'recompute per_token_us' -> 'recompute per token (us)'."""
    if row.quantity in QUANTITY_NAMES:
        return QUANTITY_NAMES[row.quantity]
    leg, _, coefficient = row.quantity.partition(" ")
    return f"{leg} {QUANTITY_NAMES.get(coefficient, coefficient)}"


def _with_ci(value: float | None, ci: tuple[float, float] | None, unit: str) -> str:
    return fmt_value(value, unit) + ("" if ci is None else f" {fmt_ci(ci, unit)}")


def table_rows(result: Comparison, *, notes: bool = False) -> list[list[str]]:
    """The comparison table as strings (TABLE_HEADER's columns, plus a note column if ``notes``)."""
    out = []
    for row in result.rows:
        cells = [
            quantity_name(row),
            _with_ci(row.baseline, row.baseline_ci, row.unit),
            _with_ci(row.current, row.current_ci, row.unit),
            fmt_change(row),
            fmt_significant(row),
        ]
        out.append(cells + [row.note] if notes else cells)
    return out


def row_notes(result: Comparison) -> list[str]:
    """Per-row notes as 'quantity: note', for a terminal table that has no room for them."""
    return [f"{quantity_name(row)}: {row.note}" for row in result.rows if row.note]


def render_markdown(result: Comparison, plot_path: Path | None = None, markdown_path: Path | None = None) -> str:
    """A summary for a CI job page (GitHub step summary or an artifact)."""
    b, c = result.baseline, result.current
    lines = [
        f"## kvcal compare: {'REGRESSION' if result.regression else 'no regression'}",
        "",
        f"**{result.verdict}**",
        "",
        f"- baseline: `{b.path}` ({b.fit.status}, {b.fit.n_probes} probes, fitted {b.fit.created_at})",
        f"- current: `{c.path}` ({c.fit.status}, {c.fit.n_probes} probes, fitted {c.fit.created_at})",
        f"- tolerance {result.tolerance:.0%}, confidence {result.confidence:.0%}; intervals are bootstrap percentiles",
    ]
    if result.deployed is not None:
        lines.append(f"- deployed threshold ({result.deployed.origin}): {result.deployed.message}")
    header = [*TABLE_HEADER, "note"]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cells in table_rows(result, notes=True):
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    if result.notes:
        lines += ["", *[f"- note: {note}" for note in result.notes]]
    if plot_path is not None:
        target = plot_path
        if markdown_path is not None:
            try:
                target = plot_path.resolve().relative_to(markdown_path.resolve().parent)
            except ValueError:
                target = plot_path
        lines += ["", f"![baseline vs current]({target.as_posix()})"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- plot


def plot_comparison(result: Comparison):
    """Overlay both runs (points, curves, bands, break-evens) on one Figure; the caller saves it.

    Per run, :func:`kvcal.gate.plot.draw_run` draws two fitted curves (recompute solid, pull
    dashed), their bootstrap bands, the probes when found, and the break-even line with
    its interval; the deployed threshold, when given, is one more dotted black line.
    """
    fig = Figure(figsize=PLOT_SIZE_IN, dpi=PLOT_DPI, layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    runs = ((result.baseline, BASELINE_COLOUR, "baseline"), (result.current, CURRENT_COLOUR, "current"))
    top = max(float(grid(run.fit)[-1]) for run, _, _ in runs)
    if result.deployed is not None:
        top = max(top, 1.05 * result.deployed.threshold_tokens)
    n = np.linspace(0.0, top, 240)  # one grid for both, so the curves span the same lengths
    for run, colour, role in runs:
        draw_run(ax, run.fit, run.probes, color=colour, label=role, n=n)
    if result.deployed is not None:
        ax.axvline(
            result.deployed.threshold_tokens,
            color="black",
            linestyle="-.",
            linewidth=1.2,
            label=f"deployed {result.deployed.threshold_tokens} ({result.deployed.verdict})",
        )
    ax.set_xlabel("prefix length (tokens)")
    ax.set_ylabel("time to first token (ms)")
    ax.set_title("\n".join(textwrap.wrap(result.verdict, 120)[:2]), fontsize=9)
    ax.legend(
        loc="upper left",
        fontsize=7,
        ncol=2,
        title=f"baseline: {result.baseline.label}   current: {result.current.label}",
        title_fontsize=8,
    )
    return fig


# ---------------------------------------------------------------- entry point


def run_compare(config: CompareConfig) -> Comparison:
    """Load both runs, compare them, and write the Markdown summary and plot if asked (``config``: checked when
    it was built, before this)."""
    deployed = None
    if config.deployed_tokens is not None:
        deployed = (config.deployed_tokens, "--deployed")
    elif config.values_file is not None:
        deployed = (read_threshold(config.values_file), str(config.values_file))
    with_probes = config.plot is not None or config.probes  # only the plot and a page show them
    result = compare_runs(
        load_run(config.baseline, probes=with_probes),
        load_run(config.current, probes=with_probes),
        tolerance=config.tolerance,
        force=config.force,
        deployed=deployed,
        seed=config.seed,
    )
    if config.plot is not None:
        save(plot_comparison(result), config.plot, dpi="figure")
    if config.markdown is not None:
        write_file(
            config.markdown, render_markdown(result, config.plot, config.markdown), f"--markdown {config.markdown}"
        )
    return result
