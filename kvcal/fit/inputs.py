"""The one loader: any input a command accepts becomes a :class:`FitInput`.

Accepted, told apart by shape (never by file name):

* a **run folder** (``run.json`` + ``probes.jsonl``): its setup is run.json's; its
  ``fit.json`` is the existing fit when present;
* a **fit.json** (first non-blank character ``{``, see :func:`kvcal.fit.io.looks_like_json`):
  the fit and its setup; the probes are looked for in the run folder holding it,
  ``probes.csv`` beside it (a committed baseline), or the input its ``source.path`` names;
* a **probe CSV** or an **llm-d Job log** (:mod:`kvcal.fit.tables`): the probes, with
  a setup of what the command's flags supply (``supplied``), the rest ``None``.

``fit``, ``plot``, ``compare``, ``history`` and ``emit-config`` all read their input here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvcal.errors import InputError, KvcalError
from kvcal.files.reading import check_input
from kvcal.fit.io import looks_like_json
from kvcal.records.fit import FIT_DEFAULTS, FitResult, FitSettings, load_fit
from kvcal.records.manifest import RunManifest
from kvcal.records.run import RunSetup
from kvcal.records.run_folder import RunFolder, run_folders_in

if TYPE_CHECKING:
    from kvcal.fit.tables import ProbeTable

log = logging.getLogger(__name__)


def load_probe_table(path: Path) -> ProbeTable:
    """The probes at ``path``, read with pandas; imported here so that reading a stored fit (emit-config) loads
    neither pandas nor the fitting code (about half a second of a fresh process)."""
    from kvcal.fit.tables import load_probe_table as load

    return load(path)


@dataclass(frozen=True)
class FitInput:
    """What one input holds: its setup, its probes (when at hand) and its fit (when one exists)."""

    path: Path
    setup: RunSetup
    table: ProbeTable | None = None
    fit: FitResult | None = None
    manifest: RunManifest | None = None

    def fitted(self, settings: FitSettings = FIT_DEFAULTS) -> FitResult:
        """The existing fit, else a fit of the probes made now."""
        return self.fit if self.fit is not None else self.fresh_fit(settings)

    def fresh_fit(self, settings: FitSettings = FIT_DEFAULTS, *, busy_queue_threshold: int | None = None) -> FitResult:
        """A fit of the probes made now (``kvcal fit``); InputError when no probes were found."""
        if self.table is None:
            raise InputError(f"{self.path}: no probes to fit (give a run folder, a probe CSV or an llm-d Job log)")
        from kvcal.fit.classes import with_links, with_table_classes  # the fitting code (see load_probe_table)
        from kvcal.fit.fitting import fit_table

        result = fit_table(self.table, settings, busy_queue_threshold=busy_queue_threshold)
        origin = self.table.origin
        if self.manifest is None or origin.kind != "run-folder" or origin.path is None:
            return with_table_classes(result, self.table, settings, busy_queue_threshold=busy_queue_threshold)
        return with_links(result, Path(origin.path), settings, busy_queue_threshold=busy_queue_threshold)


def load_fit_input(
    path: str | Path, *, supplied: RunSetup | None = None, probes: bool = True, stored_fit: bool = True
) -> FitInput:
    """Load ``path`` as a run folder, fit.json, probe CSV or llm-d Job log.

    ``supplied``: setup facts from flags for a probe table; a run folder or fit.json records
    its own setup, so supplying any there is an InputError.
    ``probes``: also look for the probes behind an existing fit (plots need them; emit does not).
    ``stored_fit``: read a run folder's fit.json; ``kvcal fit``, which replaces it, reads only
    the probes, so a damaged fit.json does not stand in the way of the one command that remakes it.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file or folder")
    if not p.is_dir():
        check_input(p)  # a FIFO or device would block the peek below (kvcal/files/reading.py)
    is_table = not p.is_dir() and not looks_like_json(p)
    if supplied is not None and supplied != RunSetup() and not is_table:
        raise InputError(
            f"{p} records its own setup; --model, --transport and --block-size describe a probe CSV or an llm-d Job log"
        )
    if p.is_dir():
        return _run_folder(p, probes, stored_fit)
    if not is_table:
        return _fit_file(p, probes)
    table = load_probe_table(p)
    if supplied is not None:
        table = table.with_setup(supplied)
    return FitInput(path=p, setup=table.setup, table=table)


def _run_folder(folder: Path, probes: bool, stored_fit: bool = True) -> FitInput:
    """A run folder, or a folder of run folders (a campaign over pairs swept one folder a pair), fitted as one run."""
    run = RunFolder(folder)
    folders = run_folders_in(folder)
    if not folders:
        raise InputError(f"{folder}: not a run folder (no run.json)")
    manifest = RunFolder(folders[0]).manifest()
    fit = load_fit(run.fit_path) if stored_fit and run.fit_path.is_file() else None
    table = None
    if fit is None:
        table = load_probe_table(folder)
    elif probes and any(RunFolder(path).has_probes() for path in folders):
        table = _probes_or_none(folder)
    return FitInput(path=folder, setup=manifest.setup, table=table, fit=fit, manifest=manifest)


def _fit_file(path: Path, probes: bool) -> FitInput:
    fit = load_fit(path)
    named = Path(fit.source.path) if fit.source.path else None
    folders = [path.parent] + ([named] if named is not None and named.is_dir() else [])
    manifest = next((RunFolder(f).manifest() for f in folders if RunFolder.is_run_folder(f)), None)
    table = None
    if probes:
        candidates = [f for f in folders if RunFolder(f).has_probes() and RunFolder.is_run_folder(f)]
        candidates.append(path.parent / "probes.csv")
        if named is not None and named.is_file():
            candidates.append(named)
        found = next((c for c in candidates if c.exists()), None)
        table = _probes_or_none(found) if found is not None else None
    return FitInput(path=path, setup=fit.setup, table=table, fit=fit, manifest=manifest)


def _probes_or_none(path: Path) -> ProbeTable | None:
    """The probes behind a fit, for plots; a fit whose probes cannot be read still loads (curves only)."""
    try:
        return load_probe_table(path)
    except KvcalError as err:
        log.warning("cannot read probes %s (%s); using the fit alone", path, err)
        return None
