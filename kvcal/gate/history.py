"""The break-even over time: a trend of fits, ordered by run time, labelled by what changed.

This stage owns ``kvcal history``. Each input (a ``fit.json`` or a run folder) is loaded
by :func:`kvcal.gate.loaded_runs.load_run`; runs are ordered by the time the run was made (the run's
``created_at`` from run.json or the fit's setup, else the fit's own time), and each is
labelled by the provenance keys that differ from the run before it (versions of vLLM,
NIXL, torch and kvcal; transport; model; CPU/GPU; UCX settings; engine settings), so a
jump in the trend sits next to its likely cause.
"""

from __future__ import annotations

import logging
import textwrap
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from kvcal.errors import InputError
from kvcal.files.writing import write_file
from kvcal.gate.loaded_runs import LoadedRun, load_run
from kvcal.gate.plot import save
from kvcal.gate.text import fmt_ci, fmt_value

log = logging.getLogger(__name__)

#: Provenance keys that change on every run and say nothing about the setup.
NOISY_KEYS = ("command_line", "created_at", "started_at", "pid", "run_dir", "path", "name", "run", "cwd", "kind")
PLOT_SIZE_IN = (10.0, 8.0)
PLOT_DPI = 100
MAX_CHANGES_IN_LABEL = 3


@dataclass(frozen=True)
class HistoryEntry:
    """One run in the trend: the fit, when it was made, and what changed since the run before."""

    run: LoadedRun
    run_time: str
    provenance: dict[str, Any]
    changes: list[str] = field(default_factory=list)

    @property
    def change_label(self) -> str:
        if not self.changes:
            return "no change"
        shown = self.changes[:MAX_CHANGES_IN_LABEL]
        more = len(self.changes) - len(shown)
        return "; ".join(shown) + (f"; +{more} more" if more else "")


@dataclass(frozen=True)
class HistoryConfig:
    """What ``kvcal history`` was asked to do."""

    inputs: list[Path]
    plot: Path | None = None
    markdown: Path | None = None


def run_history(config: HistoryConfig) -> list[HistoryEntry]:
    """Load, order and label the runs; write the plot and Markdown table if asked."""
    entries = build_history([load_run(path, probes=False) for path in config.inputs])
    if config.plot is not None:
        save(plot_history(entries), config.plot, dpi="figure")
    if config.markdown is not None:
        write_file(config.markdown, render_markdown(entries), f"--markdown {config.markdown}")
    return entries


def build_history(runs: list[LoadedRun]) -> list[HistoryEntry]:
    """Order runs by run time (stable for ties) and label each with its provenance changes."""
    if not runs:
        raise InputError("kvcal history needs at least one fit.json or run folder")
    timed = [(run_time(run), run) for run in runs]
    timed.sort(key=lambda pair: _sort_key(pair[0]))
    entries: list[HistoryEntry] = []
    previous: dict[str, Any] | None = None
    for when, run in timed:
        prov = flat_provenance(run)
        changes = ["first run"] if previous is None else provenance_changes(previous, prov)
        entries.append(HistoryEntry(run=run, run_time=when, provenance=prov, changes=changes))
        previous = prov
    return entries


def run_time(run: LoadedRun) -> str:
    """When the measurement was made: run.json's created_at, the fit's setup's, else the fit's own time."""
    for value in (run.manifest.created_at if run.manifest else None, run.fit.setup.created_at):
        if value:
            return value
    return run.fit.created_at


def _sort_key(stamp: str) -> tuple[int, float, str]:
    try:
        parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return (1, 0.0, stamp)  # unparseable times sort last, by text
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return (0, parsed.timestamp(), stamp)


def flat_provenance(run: LoadedRun) -> dict[str, Any]:
    """The setup a run measured, as dotted keys: the fit's setup, then the run's provenance when run.json is at hand."""
    merged: dict[str, Any] = run.fit.setup.model_dump(mode="json")
    if run.manifest is not None:
        merged.update(run.manifest.provenance)
    flat: dict[str, Any] = {}
    _flatten("", merged, flat)
    return {k: v for k, v in flat.items() if k.rsplit(".", 1)[-1] not in NOISY_KEYS}


def _flatten(prefix: str, node: Any, out: dict[str, Any]) -> None:
    """Nested dicts become dotted keys; an empty dict (e.g. no UCX_* set) adds nothing."""
    if isinstance(node, dict):
        for key, value in node.items():
            _flatten(f"{prefix}{key}.", value, out)
    else:
        out[prefix.rstrip(".")] = node


def provenance_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """'key old->new' for each key whose value differs; versions and transport first."""
    changed = []
    for key in sorted(set(before) | set(after), key=_importance):
        old, new = before.get(key), after.get(key)
        if old != new:
            changed.append(f"{_short(key)} {_text(old)}->{_text(new)}")
    return changed


def _importance(key: str) -> tuple[int, str]:
    order = ("vllm", "nixl", "transport", "model", "gpu", "cpu", "ucx", "torch", "kvcal", "block")
    for rank, word in enumerate(order):
        if word in key.lower():
            return (rank, key)
    return (len(order), key)


def _short(key: str) -> str:
    leaf = key.split(".")[-1] if key.startswith(("ucx_env.", "engine.sim_costs.")) else key
    return leaf.removesuffix("_version")


def _text(value: Any) -> str:
    if value is None:
        return "unset"
    text = str(value)
    return text if len(text) <= 32 else text[:29] + "..."


# ---------------------------------------------------------------- table and plot


HEADER = [
    "#",
    "run",
    "run time",
    "status",
    "break-even",
    "CI",
    "recompute us/tok",
    "pull us/tok",
    "pull ms",
    "GB/s",
    "changed",
]


def table_rows(entries: list[HistoryEntry]) -> list[list[str]]:
    rows = []
    for index, entry in enumerate(entries, start=1):
        fit = entry.run.fit
        ci = tuple(fit.break_even_ci) if fit.break_even_ci else None
        rows.append(
            [
                str(index),
                entry.run.label,
                entry.run_time,
                fit.status,
                fmt_value(fit.break_even_tokens, "tokens"),
                fmt_ci(ci, "tokens"),
                fmt_value(fit.recompute.per_token_us),
                fmt_value(fit.pull.per_token_us),
                fmt_value(fit.pull.intercept_ms),
                fmt_value(fit.pull_bandwidth_gbps),
                entry.change_label,
            ]
        )
    return rows


def render_markdown(entries: list[HistoryEntry]) -> str:
    lines = ["## kvcal history", "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in table_rows(entries)]
    return "\n".join(lines) + "\n"


def plot_history(entries: list[HistoryEntry]):
    """Three panels over runs: break-even with its interval, per-token costs, fixed costs.

    Series: break-even (one errorbar series, crossover runs only), recompute and pull
    us/token, recompute and pull intercept ms (one line each).
    """
    fig = Figure(figsize=PLOT_SIZE_IN, dpi=PLOT_DPI)
    ax_be, ax_slope, ax_fixed = fig.subplots(3, 1, sharex=True)
    x = np.arange(len(entries))
    fits = [e.run.fit for e in entries]
    crossing = [i for i, f in enumerate(fits) if f.status == "crossover" and f.break_even_tokens is not None]
    points = [float(fits[i].break_even_tokens or 0.0) for i in crossing]  # crossing: break-even not None
    be = np.array(points, dtype=float)
    lo = np.array([(fits[i].break_even_ci or [p, p])[0] for i, p in zip(crossing, points)], dtype=float)
    hi = np.array([(fits[i].break_even_ci or [p, p])[1] for i, p in zip(crossing, points)], dtype=float)
    open_above = ~np.isfinite(hi)
    hi = np.where(open_above, be * 3.0, hi)  # an interval open above is drawn to 3x and marked
    ax_be.errorbar(
        x[crossing], be, yerr=np.vstack([be - lo, hi - be]), fmt="o-", color="tab:purple", capsize=4, label="break-even"
    )
    for i, point, is_open in zip(crossing, points, open_above):
        if is_open:
            ax_be.annotate("interval open above", (i, point * 3.0), fontsize=7, ha="center")
    for i, fit in enumerate(fits):
        if fit.status != "crossover":
            ax_be.annotate(
                fit.status,
                (i, 0),
                xycoords=("data", "axes fraction"),
                xytext=(0, 4),
                textcoords="offset points",
                ha="center",
                fontsize=7,
                rotation=90,
            )
    ax_be.set_ylabel("break-even (tokens)")
    ax_be.legend(loc="best", fontsize=8)
    for leg, colour in (("recompute", "tab:orange"), ("pull", "tab:green")):
        ax_slope.plot(x, [getattr(f, leg).per_token_us for f in fits], "o-", color=colour, label=f"{leg} us/token")
        ax_fixed.plot(x, [getattr(f, leg).intercept_ms for f in fits], "s--", color=colour, label=f"{leg} intercept ms")
    ax_slope.set_ylabel("us / token")
    ax_fixed.set_ylabel("ms")
    for ax in (ax_slope, ax_fixed):
        ax.legend(loc="best", fontsize=8)
        ax.grid(alpha=0.3)
    ax_be.grid(alpha=0.3)
    ax_fixed.set_xticks(x, [f"{e.run.label}\n{_wrap(e.change_label)}" for e in entries], fontsize=7)
    ax_be.set_title("break-even and coefficients over runs (ordered by run time)", fontsize=10)
    fig.tight_layout()
    return fig


def _wrap(text: str, width: int = 28) -> str:
    return "\n".join(textwrap.wrap(text, width)[:3])
