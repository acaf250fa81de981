"""What a run's page shows, gathered once: the fit, what ``emit-config --format json`` says of it, and the probes.

The page's numbers come from the records the commands write, not from a second
computation: the fit is the run's ``fit.json`` (or the fit ``kvcal fit`` would make now),
the threshold is :func:`kvcal.emit.formats.emit` with ``--format json``'s options (the same
call ``kvcal emit-config`` makes, so its JSON object, keys added later included, is shown
as printed), and the probes are the run folder's records.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvcal.emit.formats import emit
from kvcal.emit.options import EmitOptions
from kvcal.errors import KvcalError, NoThreshold, NotRecommended
from kvcal.fit.inputs import load_fit_input
from kvcal.fit.tables import ProbeTable
from kvcal.gate.loaded_runs import LoadedRun, run_label
from kvcal.records.fit import FitResult
from kvcal.records.manifest import RunManifest
from kvcal.records.run import ProbeRecord
from kvcal.records.run_folder import RunFolder
from kvcal.threshold.choose import Threshold

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbePoint:
    """One fitted probe as the plot's tooltip tells it; unknown is None."""

    prefix_tokens: int
    leg: str
    rep: int
    ttft_ms: float
    bytes_moved: int | None = None
    bytes_metric: str | None = None
    host_busy: float | None = None
    probe_id: str | None = None
    load_state: str | None = None

    def tooltip(self) -> str:
        lines = [
            f"{self.prefix_tokens:,} tokens, {self.leg}, rep {self.rep}",
            f"TTFT {self.ttft_ms:.3f} ms",
            "bytes moved " + ("unknown" if self.bytes_moved is None else f"{self.bytes_moved:,}"),
            "proved by " + (self.bytes_metric or "no counter named"),
            "host load " + ("not measured" if self.host_busy is None else f"{self.host_busy:.1%}"),
        ]
        if self.load_state:
            lines.append(f"load state {self.load_state}")
        if self.probe_id:
            lines.append(f"probe {self.probe_id}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Emitted:
    """What ``kvcal emit-config --format json`` says about a fit: its JSON object, or why there is none."""

    json: dict[str, Any] | None
    threshold: Threshold | None
    refusal: str | None = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunData:
    path: Path
    label: str
    fit: FitResult
    emitted: Emitted
    probes: tuple[ProbePoint, ...]
    manifest: RunManifest | None


def emitted_for(fit: FitResult) -> Emitted:
    """The emit stage's JSON for ``fit`` (default margin and block), or its refusal (emit-config's exit 3)."""
    try:
        result = emit(fit, EmitOptions(format="json"))
    except (NoThreshold, NotRecommended) as err:
        return Emitted(None, None, str(err))
    return Emitted(json.loads(result.stdout), result.threshold, None, result.notes, result.warnings)


def load_run_data(path: Path) -> RunData:
    """A run folder, fit.json or probe table, with its fit (made now if it has none), threshold and probes."""
    found = load_fit_input(path, probes=True)
    return run_data_of(LoadedRun(path, found.fitted(), run_label(path), found.table, found.manifest))


def run_data_of(run: LoadedRun) -> RunData:
    """A run a report loaded (compare's sides, history's entries), with its threshold and its probes' records."""
    records = _records(run.path, run.fit)
    probes = _from_records(records) if records else _from_table(run.probes)
    return RunData(run.path, run.label, run.fit, emitted_for(run.fit), probes, run.manifest)


def _records(path: Path, fit: FitResult) -> list[ProbeRecord]:
    """The run folder's probe records behind the input, when there is one (a fit.json beside them, or naming them)."""
    named = [Path(fit.source.path)] if fit.source.path else []
    for folder in ([path] if path.is_dir() else [path.parent]) + named:
        if folder.is_dir() and RunFolder.is_run_folder(folder) and RunFolder(folder).has_probes():
            try:
                return RunFolder(folder).read_probes()
            except KvcalError as err:  # the fit still stands; the plot then shows what the table holds
                log.warning("cannot read the probes of %s (%s)", folder, err)
    return []


def _from_records(records: list[ProbeRecord]) -> tuple[ProbePoint, ...]:
    """The valid, timed probes that are not warm-ups, the last valid attempt of each probe id."""
    kept: dict[str, ProbeRecord] = {}
    for record in records:
        if record.valid and not record.warmup and record.ttft_ms is not None:
            kept[record.probe_id] = record
    return tuple(
        ProbePoint(
            r.prefix_tokens,
            r.leg.value,
            r.rep,
            float(r.ttft_ms or 0.0),
            r.bytes_moved,
            r.bytes_metric,
            r.host_busy,
            r.probe_id,
            r.load_state,
        )
        for r in kept.values()
    )


def _from_table(table: ProbeTable | None) -> tuple[ProbePoint, ...]:
    if table is None:
        return ()
    out = []
    for row in table.probes.itertuples(index=False):
        moved = None if _missing(row.bytes_moved) else int(row.bytes_moved)
        out.append(ProbePoint(int(row.prefix_tokens), str(row.leg), int(row.rep), float(row.ttft_ms), moved))
    return tuple(out)


def _missing(value: Any) -> bool:
    try:
        return value is None or value != value or str(value) == "<NA>"
    except TypeError:  # pandas' NA refuses comparison
        return True
