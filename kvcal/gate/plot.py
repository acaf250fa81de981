"""Plots of a fit: measured probes, both fitted curves with bands, the break-even, the saving.

Drawn with matplotlib's object API (``matplotlib.figure.Figure``, no pyplot, no
display), so it runs headless and leaves no global state. Two building blocks draw
one run onto a given Axes, so ``kvcal compare``/``history`` can overlay runs:

* :func:`draw_run` - probes, fitted curves, pointwise bootstrap bands, break-even
  line with its interval; a leg with a slow mode (:mod:`kvcal.fit.modes`) adds its
  fast and slow paths as thin lines and draws its slow probes hollow; pulls set aside
  but too few to call a mode (``unresolved_slow``) are drawn as crosses;
* :func:`draw_saving` - the pull's saving, 100 * (recompute - pull) / recompute, in
  percent of recompute's TTFT, with its band and the per-length measured medians.

Bands are pointwise percentile bands of the curves evaluated at every bootstrap
resample stored in fit.json (``bootstrap.<leg>_samples``), at the fit's confidence.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kvcal.costs.cost_curve import cost_ms
from kvcal.errors import InputError
from kvcal.files.writing import check_plot_name, replacing
from kvcal.fit.costmodel_inputs import coef_samples
from kvcal.fit.entry import curve_ms
from kvcal.fit.inputs import load_fit_input
from kvcal.fit.tables import ProbeTable, load_class_table
from kvcal.gate.plot_load import cost_model_line, draw_by_state
from kvcal.records.fit import FIT_DEFAULTS, FitResult, FitSettings, SlowMode
from kvcal.terminal_text import visible

log = logging.getLogger(__name__)

LEG_COLORS = {"recompute": "tab:red", "pull": "tab:blue"}
LEG_STYLE = {"recompute": ("-", "o"), "pull": ("--", "^")}
CLASS_COLORS = (
    "tab:blue",
    "tab:red",
    "tab:green",
    "tab:purple",
    "tab:brown",
    "tab:olive",
    "tab:cyan",
    "tab:pink",
    "tab:gray",
    "tab:orange",
) * 10  # one a link class


def plot_input(
    path: str | Path, output: str | Path, settings: FitSettings = FIT_DEFAULTS, *, log_x: bool | None = None
) -> Path:
    """Plot a run folder, probe CSV, llm-d table or fit.json into ``output`` (.png or .svg), fitting an input
    without a fit with ``settings``.

    ``log_x`` None: a log length axis when :func:`crossover_near_short_end`, else linear.
    """
    out = Path(output)
    check_plot_name(out, str(out))
    found = load_fit_input(path)
    fit, table = found.fitted(settings), found.table
    log_x = crossover_near_short_end(fit) if log_x is None else log_x
    if fit.classes:
        origin = table.origin if table is not None else None
        folder = Path(origin.path) if origin is not None and origin.kind == "run-folder" and origin.path else None
        return save(classes_figure(fit, folder, log_x=log_x), out)
    return save(figure_for(fit, table, log_x=log_x), out)


def classes_figure(fit: FitResult, folder: Path | None, *, log_x: bool = False) -> Figure:
    """A fit with link classes: each class's probes, curves and saving together, one colour a class."""
    figure = Figure(figsize=(8.0, 7.0), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    assert fit.classes is not None
    tops = [grid(cls.fit, log_x=log_x) for cls in fit.classes.values()]
    n = (
        np.geomspace(min(g[0] for g in tops), max(g[-1] for g in tops), 200)
        if log_x
        else np.linspace(0.0, max(g[-1] for g in tops), 200)
    )
    titles = []
    for colour, (name, cls) in zip(CLASS_COLORS, fit.classes.items()):
        table = load_class_table(folder, name) if folder is not None else None
        label = f"{name} ({len(cls.pairs)} pair{'s' if len(cls.pairs) != 1 else ''})"
        draw_run(top, cls.fit, table, color=colour, label=label, log_x=log_x, n=n)
        draw_saving(bottom, cls.fit, table, color=colour, label=name, log_x=log_x, n=n)
        be = "none" if cls.break_even_tokens is None else f"{cls.break_even_tokens:.0f}"
        titles.append(f"{name} {be}")
    _label_axes(top, bottom, log_x, legend_size="x-small")
    figure.suptitle(
        f"{default_title(fit).split(':')[0]}: link classes, break-even {', '.join(titles)} tokens", fontsize="medium"
    )
    return figure


SHORT_END = 0.05  # of the drawn length axis: a crossover (or its interval's top) below it is a sliver on a linear axis


def crossover_near_short_end(fit: FitResult) -> bool:
    """Whether the break-even and its interval lie in the shortest 5% of the linear axis (a ladder reaching 64K
    puts a 180-token crossover in its first 0.3%): a log axis gives each octave the same room."""
    be = fit.break_even_tokens
    if be is None or be <= 0:
        return False
    top = fit.break_even_ci[1] if fit.break_even_ci else be
    return top < SHORT_END * float(grid(fit)[-1])


def load_for_plot(path: str | Path, settings: FitSettings = FIT_DEFAULTS) -> tuple[FitResult, ProbeTable | None]:
    """The input's fit (made now with ``settings`` if it has none) and its probes when they can be found."""
    found = load_fit_input(path)
    return found.fitted(settings), found.table


def figure_for(
    fit: FitResult, table: ProbeTable | None = None, *, log_x: bool = False, title: str | None = None
) -> Figure:
    """A two-panel figure: TTFT against length (top) and the pull's saving (bottom); a loaded run adds TTFT by state."""
    loaded = table.loaded if table is not None else None
    if loaded is None:
        figure = Figure(figsize=(8.0, 7.0), layout="constrained")
        top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    else:
        figure = Figure(figsize=(8.0, 10.0), layout="constrained")
        top, bottom, by_state = figure.subplots(3, 1, height_ratios=[3, 2, 3])
        threshold = fit.cost_model.busyQueueThreshold if fit.cost_model else loaded.threshold
        draw_by_state(by_state, loaded, threshold, log_x=log_x)
        title = (title or default_title(fit)) + ("\n" + cost_model_line(fit) if fit.cost_model else "")
    draw_run(top, fit, table, log_x=log_x)
    draw_saving(bottom, fit, table, log_x=log_x)
    _label_axes(top, bottom, log_x, legend_size="small")
    figure.suptitle(title or default_title(fit), fontsize="medium")
    return figure


def _label_axes(top: Axes, bottom: Axes, log_x: bool, *, legend_size: str) -> None:
    top.set_ylabel("time to first token (ms)")
    top.legend(loc="upper left", fontsize=legend_size)
    bottom.set_xlabel("prefix length (tokens)" + (", log scale" if log_x else ""))
    bottom.set_ylabel("pull saving (% of recompute)")
    if log_x:
        bottom.set_xscale("log")
        top.set_yscale("log")  # log-log: the curves' crossing stays visible beside a 100x longer prefix


def default_title(fit: FitResult) -> str:
    setup = fit.setup
    what = " / ".join(str(v) for v in (setup.model, setup.transport, setup.engine) if v) or str(fit.source.path or "")
    what = visible(what)  # names from a file: shown as written, control characters escaped
    if fit.break_even_tokens is None:
        be = "no break-even"
    else:
        be = f"break-even {fit.break_even_tokens:.0f} tokens"
        if fit.break_even_ci:
            be += f" ({fit.confidence:.0%}: {fit.break_even_ci[0]:.0f}-{fit.break_even_ci[1]:.0f})"
    return f"{what}: {fit.status}, {be}".strip(": ")


def grid(fit: FitResult, *, log_x: bool = False, points: int = 200) -> np.ndarray:
    """Lengths to draw the curves at: the measured range, stretched to show an extrapolated break-even."""
    low, high = fit.measured_range
    ends: list[float] = [high]
    if fit.break_even_tokens is not None:
        ends.append(fit.break_even_tokens)
    if fit.break_even_ci:
        ends.append(fit.break_even_ci[1])
    top = 1.05 * max(ends)
    if log_x:
        bottom = min([low] + [b for b in (fit.break_even_tokens,) if b]) / 2
        return np.geomspace(max(bottom, 1.0), top, points)
    return np.linspace(0.0, top, points)


def curve_band(fit: FitResult, leg: str, n: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Pointwise percentile band of one leg's curve over the stored bootstrap samples, or None."""
    samples = _coef_samples(fit, leg)
    if samples is None:
        return None
    curves = cost_ms(samples, n)
    tail = 100 * (1 - fit.confidence) / 2
    return np.percentile(curves, tail, axis=0), np.percentile(curves, 100 - tail, axis=0)


def draw_run(
    ax: Axes,
    fit: FitResult,
    table: ProbeTable | None = None,
    *,
    color: str | None = None,
    label: str | None = None,
    log_x: bool = False,
    bands: bool = True,
    points: bool = True,
    n: np.ndarray | None = None,
) -> None:
    """Draw one run onto ``ax``: probes, both fitted curves, bands, break-even and its interval.

    With ``color`` both legs take that colour (recompute solid, pull dashed) so
    runs can be told apart in an overlay; ``label`` prefixes the legend entries.
    """
    n = grid(fit, log_x=log_x) if n is None else n
    prefix = f"{label}: " if label else ""
    for leg in ("recompute", "pull"):
        curve = getattr(fit, leg)
        c = color or LEG_COLORS[leg]
        line = LEG_STYLE[leg][0]
        mode = _mode_of(fit, leg)
        what = f"{curve.model}, mean cost" if mode is not None and mode.mean_fitted else curve.model
        ax.plot(n, curve_ms(curve, n), line, color=c, lw=1.8, label=f"{prefix}{leg} fit ({what})")
        band = curve_band(fit, leg, n) if bands else None
        if band is not None:
            ax.fill_between(n, band[0], band[1], color=c, alpha=0.15, lw=0)
        if color is None and mode is not None:  # one run: its modes' own curves (an overlay keeps one per leg and run)
            _draw_mode_paths(ax, mode, curve_ms(curve, n), n, c, prefix)
        if points and table is not None:
            _draw_probes(ax, fit, table, leg, mode, c, prefix)
    _break_even_marks(ax, fit, color or "black", prefix)
    if log_x:
        ax.set_xscale("log")
    ax.grid(True, alpha=0.3)


def _draw_probes(
    ax: Axes, fit: FitResult, table: ProbeTable, leg: str, mode: SlowMode | None, c: str, prefix: str
) -> None:
    """One leg's probes: the fast ones, its slow mode's apart, and those set aside as too few to tell."""
    rows = table.leg(leg)
    marker = LEG_STYLE[leg][1]
    slow = _probe_mask(rows, mode)
    aside = _probe_mask(rows, fit.unresolved_slow if leg == "pull" else None) & ~slow
    fast = ~slow & ~aside
    ax.plot(
        rows["prefix_tokens"][fast],
        rows["ttft_ms"][fast],
        marker,
        color=c,
        ms=4,
        alpha=0.6,
        ls="none",
        label=f"{prefix}{leg} probes",
    )
    if slow.any() and mode is not None:
        ax.plot(
            rows["prefix_tokens"][slow],
            rows["ttft_ms"][slow],
            marker,
            color=c,
            mfc="none",
            ms=7,
            ls="none",
            label=f"{prefix}{leg} slow mode ({mode.share:.0%} of probes, {mode.ratio:.2g}x)",
        )
    held = fit.unresolved_slow
    if aside.any() and held is not None:
        ax.plot(
            rows["prefix_tokens"][aside],
            rows["ttft_ms"][aside],
            "x",
            color=c,
            ms=8,
            mew=1.5,
            ls="none",
            label=f"{prefix}{leg} set aside ({held.n_slow} of {held.n_probes}, {held.ratio:.2g}x): "
            "a stall or a slow mode, too few to tell",
        )


def draw_saving(
    ax: Axes,
    fit: FitResult,
    table: ProbeTable | None = None,
    *,
    color: str | None = None,
    label: str | None = None,
    log_x: bool = False,
    n: np.ndarray | None = None,
) -> None:
    """Draw the pull's saving in percent of recompute's TTFT (positive: the pull wins)."""
    n = grid(fit, log_x=log_x) if n is None else n
    c = color or "tab:green"
    prefix = f"{label}: " if label else ""
    with np.errstate(divide="ignore", invalid="ignore"):
        rec, pull = curve_ms(fit.recompute, n), curve_ms(fit.pull, n)
        ax.plot(n, 100 * (rec - pull) / rec, color=c, lw=1.8, label=f"{prefix}fitted saving")
        rec_s, pull_s = _coef_samples(fit, "recompute"), _coef_samples(fit, "pull")
        if rec_s is not None and pull_s is not None:
            r, p = cost_ms(rec_s, n), cost_ms(pull_s, n)
            saving = 100 * (r - p) / r
            tail = 100 * (1 - fit.confidence) / 2
            ax.fill_between(
                n,
                np.nanpercentile(saving, tail, axis=0),
                np.nanpercentile(saving, 100 - tail, axis=0),
                color=c,
                alpha=0.15,
                lw=0,
            )
    if table is not None:
        med = table.medians().dropna()
        if len(med):
            ax.plot(
                med["prefix_tokens"],
                100 * (med["recompute_ms"] - med["pull_ms"]) / med["recompute_ms"],
                "s",
                color=c,
                ms=5,
                label=f"{prefix}measured (medians)",
            )
    ax.axhline(0.0, color="grey", lw=0.8)
    _break_even_marks(ax, fit, color or "black", prefix, legend=False)
    ax.set_ylim(max(ax.get_ylim()[0], -100.0), min(ax.get_ylim()[1], 100.0))
    if log_x:
        ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")


def save(figure: Figure, path: str | Path, *, dpi: float | str = 110) -> Path:
    """Write a figure (format from the extension; ``dpi="figure"`` keeps its own), creating the folder.

    InputError when the place cannot be written or the extension names no format.
    """
    p = Path(path)
    try:
        with replacing(p, f"plot {p}") as handle:  # whole image or the old one (kvcal/files/writing.py)
            figure.savefig(handle, dpi=dpi, format=p.suffix[1:].lower() or None)
    except ValueError as err:
        raise InputError(f"cannot write plot {p}: {err}") from None
    return p


def _coef_samples(fit: FitResult, leg: str) -> np.ndarray | None:
    return coef_samples(fit, leg)


def _mode_of(fit: FitResult, leg: str) -> SlowMode | None:
    return next((m for m in fit.slow_modes if m.leg == leg), None)


def _probe_mask(rows, found: SlowMode | None) -> np.ndarray:
    """The leg's probes listed in ``found`` (a slow mode, drawn hollow; or pulls set aside, drawn as crosses)."""
    if found is None:
        return np.zeros(len(rows), dtype=bool)
    slow = {(n, rep) for n, rep in found.slow_probes}
    return np.array([(int(n), int(r)) in slow for n, r in zip(rows["prefix_tokens"], rows["rep"])], dtype=bool)


def _draw_mode_paths(ax: Axes, mode: SlowMode, fitted: np.ndarray, n: np.ndarray, color: str, prefix: str) -> None:
    """A leg with a slow mode: its fast path and its slow path (the fast one x the ratio) as thin lines beside the
    fitted curve, which is the fast path (recompute) or the mean cost between them (the pull: the fast curve x
    (1 + share x (ratio - 1)), kvcal.fit.modes.MeanCost)."""
    fast = fitted / (1.0 + mode.n_slow / mode.n_probes * (mode.ratio - 1.0)) if mode.mean_fitted else fitted
    if mode.mean_fitted:
        ax.plot(n, fast, ":", color=color, lw=1.0, label=f"{prefix}{mode.leg} fast path")
    ax.plot(
        n,
        fast * mode.ratio,
        "-.",
        color=color,
        lw=1.0,
        alpha=0.7,
        label=f"{prefix}{mode.leg} slow path ({mode.ratio:.2g}x)",
    )


def _break_even_marks(ax: Axes, fit: FitResult, color: str, prefix: str, *, legend: bool = True) -> None:
    be = fit.break_even_tokens
    if be is None or be <= 0:
        return
    if fit.break_even_ci:
        ax.axvspan(
            fit.break_even_ci[0],
            fit.break_even_ci[1],
            color=color,
            alpha=0.08,
            lw=0,
            label=f"{prefix}{fit.confidence:.0%} interval" if legend else None,
        )
    text = f"{prefix}break-even {be:.0f} tokens" + (" (extrapolated)" if fit.extrapolated else "")
    ax.axvline(be, color=color, ls=":", lw=1.5, label=text if legend else None)
