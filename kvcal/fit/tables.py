"""Loading probe tables: the one stage that turns any accepted input into rows to fit.

Three inputs are accepted and detected by shape, not by file name:

* a **run folder** (a directory holding ``run.json`` and ``probes.jsonl``, as
  ``kvcal sweep`` writes it), read through :class:`kvcal.records.run_folder.RunFolder`; probes
  marked invalid are excluded and counted; when one probe id has several attempts,
  its valid attempt counts; a torn last line is skipped with a warning;
* a **probe CSV** in the interchange format, one row per probe, read by :mod:`kvcal.fit.probe_csv`;
* the **llm-d calibration Job table** (its log), one row of 5-rep medians a length, read by
  :mod:`kvcal.fit.llmd_table`.

A user's mistake raises :class:`~kvcal.errors.InputError` naming the file and line or row.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from kvcal.errors import InputError
from kvcal.files.reading import read_text
from kvcal.fit.costmodel_inputs import LoadedProbes, split_loaded
from kvcal.fit.engine_side import summarise as engine_side_of
from kvcal.fit.fields import ParsedRows
from kvcal.fit.hygiene import collapse_duplicates, duplicate_warning
from kvcal.fit.llmd_table import TABLE_HEADER, looks_like_row, read_llmd_table
from kvcal.fit.probe_csv import read_probe_csv
from kvcal.fit.recipe import unstamped
from kvcal.fit.run_records import run_records, start_times
from kvcal.records.disturbance_bounds import resource_of, summarise
from kvcal.records.fit import FitSource, HostDisturbance
from kvcal.records.fit_engine import EngineSide
from kvcal.records.run import Leg, ProbeRecord, RunSetup
from kvcal.records.run_folder import pulls_by_proof

log = logging.getLogger(__name__)

COLUMNS = ["prefix_tokens", "leg", "ttft_ms", "rep", "bytes_moved", "order", "pair", "link_class"]
LEGS = (Leg.RECOMPUTE.value, Leg.PULL.value)


@dataclass(frozen=True)
class ProbeTable:
    """Valid probes of one campaign, ready to fit.

    ``probes`` has one row per valid probe with columns ``prefix_tokens`` (int),
    ``leg`` (str), ``ttft_ms`` (float), ``rep`` (int) and ``bytes_moved``
    (nullable Int64: unknown is <NA>, never 0), ``order`` (the probe's rank in time
    when recorded, else NaN), and ``pair``, ``link_class`` (a campaign over pairs' tags from
    a probe CSV, else None; a run folder's classes are read from its records).
    """

    probes: pd.DataFrame
    n_invalid_excluded: int = 0
    setup: RunSetup = field(default_factory=RunSetup)
    origin: FitSource = field(default_factory=FitSource)
    warnings: tuple[str, ...] = ()
    n_duplicates: int = 0
    verdict: str | None = None  # the llm-d recipe's NO CROSSOVER line: recompute always won
    host: HostDisturbance | None = None
    loaded: LoadedProbes | None = None  # a loaded run's probes in every state, for the cost model
    pulls_by_proof: tuple[tuple[str, int], ...] = ()  # valid pulls per counter that proved their bytes (run folders)
    order_source: str | None = (
        None  # where ``order`` came from: started_at (a run folder's or a CSV's), order (a CSV's)
    )
    engine_side: EngineSide | None = None  # the engines' own per-token costs over these probes (run folders)

    @property
    def block_size(self) -> int | None:
        return self.setup.block_size

    @property
    def kv_bytes_per_token(self) -> int | None:
        return self.setup.kv_bytes_per_token

    def with_setup(self, setup: RunSetup) -> ProbeTable:
        """The same probes under another setup (e.g. one the flags supplied); length warnings follow its block size."""
        warnings = tuple(w for w in self.warnings if w not in _length_warnings(self.probes, self.block_size))
        # replace(): the time order's source, the duplicates and the rest travel with the probes
        return replace(self, setup=setup, warnings=warnings + tuple(_length_warnings(self.probes, setup.block_size)))

    def leg(self, leg: str | Leg) -> pd.DataFrame:
        """The rows of one leg, sorted by length then rep."""
        name = leg.value if isinstance(leg, Leg) else leg
        rows = self.probes[self.probes["leg"] == name]
        return rows.sort_values(["prefix_tokens", "rep"], kind="stable").reset_index(drop=True)

    def link_classes(self) -> list[str]:
        """The link classes the rows are tagged with (a probe CSV of a campaign over pairs), sorted."""
        return sorted({c for c in self.probes["link_class"] if c is not None})

    def of_class(self, link_class: str) -> ProbeTable:
        """The rows of one link class, as a table of their own (its notes and setup kept)."""
        rows = self.probes[self.probes["link_class"] == link_class].reset_index(drop=True)
        return replace(self, probes=rows)

    @property
    def lengths(self) -> list[int]:
        return sorted(int(n) for n in self.probes["prefix_tokens"].unique())

    def medians(self) -> pd.DataFrame:
        """Per-length medians: columns prefix_tokens, recompute_ms, pull_ms (NaN where a leg lacks the length)."""
        med = self.probes.groupby(["prefix_tokens", "leg"])["ttft_ms"].median().unstack("leg")
        med = med.reindex(columns=list(LEGS))
        med.columns = [f"{c}_ms" for c in med.columns]
        return med.reset_index()


def load_probe_table(path: str | Path) -> ProbeTable:
    """Read a run folder, a probe CSV or an llm-d Job table (detected by content)."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise InputError(f"{p}: no such file or folder")
    if p.is_dir():
        return _load_run_folder(p)
    text = read_text(
        p, bom=True
    )  # bom: a spreadsheet's byte-order mark; FIFOs, binary files refused (kvcal/files/reading.py)
    if not text.strip():
        raise InputError(f"{p}: file is empty")
    first = next(line for line in text.splitlines() if line.strip())
    if "," in first and "prefix_tokens" in first:
        return _table_of(read_probe_csv(p, text), FitSource(path=str(p), kind="probe-csv"))
    if any(TABLE_HEADER.match(unstamped(line)) or looks_like_row(line) for line in text.splitlines()):
        return _table_of(read_llmd_table(p, text), FitSource(path=str(p), kind="llmd-table"))
    raise InputError(
        f"{p}: unrecognised format (expected a run folder, a CSV with a prefix_tokens,leg,ttft_ms header, "
        "or the llm-d calibration table 'tokens recompute_ms pull_ms delta pulled_MB')"
    )


def from_rows(
    rows: list[dict[str, Any]],
    *,
    setup: RunSetup | None = None,
    origin: FitSource | None = None,
    n_invalid_excluded: int = 0,
    warnings: list[str] | None = None,
    verdict: str | None = None,
    host: HostDisturbance | None = None,
) -> ProbeTable:
    """Build a table from dicts with the COLUMNS keys (rep, bytes_moved and order may be missing); duplicates
    collapse."""
    rows, n_duplicates = collapse_duplicates(rows)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame = _normalise(frame)
    setup = setup or RunSetup()
    notes = list(warnings or [])
    if n_duplicates:
        notes.append(duplicate_warning(n_duplicates))
    notes += _length_warnings(frame, setup.block_size)
    return ProbeTable(
        frame,
        n_invalid_excluded,
        setup,
        origin or FitSource(),
        tuple(notes),
        n_duplicates=n_duplicates,
        verdict=verdict,
        host=host,
    )


# --- run folder -------------------------------------------------------------------------------


def load_class_table(folder: Path, link_class: str) -> ProbeTable:
    """A multi-pair run's probes of one link class (kvcal.fit.classes fits each class on its own)."""
    return _load_run_folder(folder, link_class)


def _load_run_folder(folder: Path, link_class: str | None = None) -> ProbeTable:
    manifest, sourced, notes, where = run_records(folder, link_class)
    records = [r for _, r in sourced]
    chosen: dict[tuple[int, str], ProbeRecord] = {}  # by (run folder, probe id): merged folders may share ids
    n_invalid = n_warmup = 0
    idle, loaded = split_loaded(records, manifest)  # probes under load feed the cost model, not the idle curves
    source_of = {id(r): source for source, r in sourced}
    line_of: dict[tuple[int, str], int] = {}  # a probe's place in probes.jsonl: breaks ties of started_at's 1 s stamps
    for line, record in enumerate(idle):
        if record.warmup:
            n_warmup += 1  # the sweep protocol's discarded warm-up: neither data nor a failure
            continue
        if record.session == "cold":
            continue  # the first pull on a fresh session: the session cost (kvcal.fit.session_cost), not the warm curve
        usable = record.valid and record.ttft_ms is not None and math.isfinite(record.ttft_ms) and record.ttft_ms > 0
        if not usable:
            n_invalid += 1
            continue
        key = (source_of[id(record)], record.probe_id)
        chosen[key] = record  # a later valid attempt of one probe id replaces an earlier one
        line_of[key] = line
    when, unreadable = start_times(chosen, where)
    if unreadable:
        notes.append(unreadable)
    # Rank in time by (started_at as an instant, line): probes stamped in one second keep file order.
    timed = [chosen[k] for k in sorted(chosen, key=lambda k: (when.get(k, 0.0), line_of[k]))]
    rows = [
        {
            "prefix_tokens": r.prefix_tokens,
            "leg": r.leg.value,
            "ttft_ms": r.ttft_ms,
            "rep": r.rep,
            "bytes_moved": r.bytes_moved,
            "order": rank if when else None,
            "pair": r.pair,
            "link_class": r.link_class,
        }
        for rank, r in enumerate(timed)
    ]
    if not rows:
        raise InputError(f"{folder}: no valid probes ({n_invalid} invalid excluded)")
    if n_invalid:
        notes.append(f"{n_invalid} invalid probe record(s) excluded (see invalid_reason in probes.jsonl)")
    if n_warmup:
        notes.append(f"{n_warmup} warm-up probe(s) of the sweep protocol discarded (one per new length and leg)")
    host = summarise(records, resource_of(manifest.pair))
    table = from_rows(
        rows,
        setup=manifest.setup,
        origin=FitSource(path=str(folder), kind="run-folder", run=manifest.name),
        n_invalid_excluded=n_invalid,
        warnings=notes,
        host=host,
    )
    return replace(
        table,
        loaded=loaded,
        pulls_by_proof=pulls_by_proof(chosen.values()),
        order_source="started_at" if when else None,
        engine_side=engine_side_of(timed, manifest.setup),
    )


def _table_of(parsed: ParsedRows, origin: FitSource) -> ProbeTable:
    """A probe file's rows as a table: its duplicates collapsed, its notes, counts and time order's source kept."""
    table = from_rows(
        parsed.rows,
        origin=origin,
        n_invalid_excluded=parsed.n_invalid_excluded,
        warnings=parsed.notes,
        verdict=parsed.verdict,
    )
    return replace(table, order_source=parsed.order_source, n_duplicates=table.n_duplicates + parsed.n_repeated)


# --- shared -----------------------------------------------------------------------------------


def _normalise(frame: pd.DataFrame) -> pd.DataFrame:
    """Types, and reps numbered in file order within (length, leg) where the input gave none."""
    frame = frame.copy()
    frame["prefix_tokens"] = frame["prefix_tokens"].astype("int64")
    frame["leg"] = frame["leg"].astype(str)
    frame["ttft_ms"] = frame["ttft_ms"].astype("float64")
    order = frame.groupby(["prefix_tokens", "leg"]).cumcount()
    frame["rep"] = frame["rep"].where(frame["rep"].notna(), order).astype("int64")
    frame["order"] = pd.to_numeric(frame["order"], errors="coerce").astype("float64")
    for tag in ("pair", "link_class"):  # text or None (a row without the column: None, never NaN)
        frame[tag] = frame[tag].astype(object).where(frame[tag].notna(), None)
    frame["bytes_moved"] = pd.array(
        [None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) for v in frame["bytes_moved"]],
        dtype="Int64",
    )
    return frame.reset_index(drop=True)


def _length_warnings(frame: pd.DataFrame, block_size: int | None) -> list[str]:
    if not block_size or frame.empty:
        return []
    odd = sorted({int(n) for n in frame["prefix_tokens"] if int(n) % block_size})
    if not odd:
        return []
    shown = ", ".join(str(n) for n in odd[:5]) + (" ..." if len(odd) > 5 else "")
    return [
        f"length(s) {shown} are not multiples of the block size {block_size}: a partial last block "
        "cannot be cached or pulled, so those pulls carry some recompute"
    ]
