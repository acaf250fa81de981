"""Loading the runs a report shows: a fit.json, a run folder or a probe table, through the one loader.

:func:`kvcal.fit.load_fit_input` does the work; a :class:`LoadedRun` adds the label a
report prints and keeps the probes (for plots) and run.json (for history) when at hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvcal.fit.inputs import load_fit_input
from kvcal.fit.tables import ProbeTable
from kvcal.records.fit import FitResult
from kvcal.records.manifest import RunManifest


@dataclass(frozen=True)
class LoadedRun:
    """One side of a comparison: the fit, where it came from, and its probes if found."""

    path: Path
    fit: FitResult
    label: str
    probes: ProbeTable | None = None  # when the probes were found (and asked for)
    manifest: RunManifest | None = None  # run.json of the run behind the fit, when at hand


def load_run(path: Path | str, *, probes: bool = True) -> LoadedRun:
    """Load a ``fit.json``, a run folder (its fit.json, or a fit made now) or a probe table (fitted now).

    With ``probes`` the run's probes are looked for too (for plots); a fit without them still loads.
    """
    path = Path(path)
    found = load_fit_input(path, probes=probes)
    return LoadedRun(
        path=path,
        fit=found.fitted(),
        label=run_label(path),
        probes=found.table if probes else None,
        manifest=found.manifest,
    )


def run_label(path: Path) -> str:
    """A short name for a run: its folder (also for a fit.json inside one, e.g. a baseline's), else the file stem."""
    if path.is_file():
        return path.parent.name if path.name == "fit.json" else path.stem
    return path.resolve().name
