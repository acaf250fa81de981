"""A run folder on disk: its files, run.json, and the append-only probe log, read and appended.

Layout of ``results/<name>/``::

    run.json        RunManifest (kvcal.run_manifest): resolved settings, provenance, the shuffled plan
    probes.jsonl    one ProbeRecord per line, appended and fsynced as each probe ends
    summary.csv     per (length, leg) statistics, derived from probes.jsonl (:mod:`kvcal.sweep.summary`)
    logs/           engine logs (launch mode)
    fit.json        written by ``kvcal fit``

A base module: the sweep writes a run folder, the engines put their logs in it, the fit,
the reports and ``kvcal export`` (the interchange CSV) read it. Probe lines are never rewritten. A line torn by a crash
mid-write (no trailing newline) is the only damage repaired on resume; anything else is
reported as corrupt.

Reading probes checks each line against run.json's plan alone (:class:`StoredPlan`), so it
never loads the run manifest's settings (the sweep's :mod:`kvcal.settings` and the simulator's curves).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import ConfigDict, Field, ValidationError, model_validator

from kvcal.errors import InputError
from kvcal.instants import instant
from kvcal.outputs import is_stdout, write_file
from kvcal.probe_checks import contradiction
from kvcal.records import RUN_SCHEMA, Leg, PlannedProbe, ProbeRecord, Record
from kvcal.records_v1 import upgrade_run
from kvcal.userfiles import read_bytes, read_text

if TYPE_CHECKING:
    from kvcal.run_manifest import RunManifest

log = logging.getLogger(__name__)
_Stored = TypeVar("_Stored", bound=Record)

INTERCHANGE_COLUMNS = ["prefix_tokens", "leg", "ttft_ms", "rep", "bytes_moved", "started_at"]  # started_at: time order
PAIR_COLUMNS = ["pair", "link_class"]  # a campaign over pairs: each row's pair and link class (fit reads them back)


class StoredPlan(Record):
    """run.json's plan alone: what checking a probe line needs, read without the settings beside it."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    schema_: Literal["kvcal.run/4"] = Field(RUN_SCHEMA, alias="schema")
    plan: list[PlannedProbe]

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return upgrade_run(data)


class RunFolder:
    """One sweep run on disk."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.manifest_path = self.path / "run.json"
        self.probes_path = self.path / "probes.jsonl"
        self.summary_path = self.path / "summary.csv"
        self.fit_path = self.path / "fit.json"
        self.logs_dir = self.path / "logs"

    @staticmethod
    def is_run_folder(path: Path | str) -> bool:
        path = Path(path)
        return path.is_dir() and (path / "run.json").is_file()

    def has_probes(self) -> bool:
        return self.probes_path.is_file() and self.probes_path.stat().st_size > 0

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)

    def write_manifest(self, manifest: RunManifest) -> None:
        atomic_write(self.manifest_path, manifest.model_dump_json(by_alias=True, indent=2) + "\n")

    def manifest(self) -> RunManifest:
        # Imported here, not at the top: run.json's settings are the sweep's (kvcal.settings, the simulator's curves),
        # which reading probes never needs (stored_plan).
        from kvcal.run_manifest import RunManifest

        return self._stored(RunManifest)

    def stored_plan(self) -> list[PlannedProbe]:
        """run.json's plan, read without its settings (what checking a probe line against the plan needs)."""
        return self._stored(StoredPlan).plan

    def _stored(self, model: type[_Stored]) -> _Stored:
        """run.json read as ``model``; InputError with one line when the folder has none or it is not valid."""
        if not self.manifest_path.is_file():
            raise InputError(f"{self.path} is not a kvcal run folder (no run.json)")
        try:
            return model.model_validate_json(read_text(self.manifest_path))
        except ValidationError as err:
            raise InputError(f"{self.manifest_path} is not a valid run manifest: {_first_error(err)}") from None

    def append_probe(self, record: ProbeRecord) -> None:
        """Append one probe and make it durable before returning."""
        line = record.model_dump_json(by_alias=True) + "\n"
        try:
            with open(self.probes_path, "a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as err:  # a full disk: say which write failed, not the summary written after it
            raise InputError(
                f"{self.probes_path}: cannot append probe {record.probe_id} ({err.strerror or err}); "
                "the probes before it are kept: free space and rerun with --resume"
            ) from None

    def read_probes(self, *, repair_torn_tail: bool = False) -> list[ProbeRecord]:
        """Every probe attempt in the log, in the order written.

        A last line without its newline is a write torn by a crash: it is dropped (and,
        with ``repair_torn_tail``, cut from the file so appends stay line-aligned).
        """
        if not self.probes_path.exists():
            return []
        raw = read_bytes(self.probes_path)
        if raw and not raw.endswith(b"\n"):
            keep = raw.rfind(b"\n") + 1
            if _is_torn(raw[keep:]):
                log.warning("dropping a torn last line in %s (a crash mid-write)", self.probes_path)
                if repair_torn_tail:
                    with open(self.probes_path, "r+b") as handle:
                        handle.truncate(keep)
                raw = raw[:keep]
            elif repair_torn_tail:  # a whole record that only lacks its newline: kept, and the newline added
                with open(self.probes_path, "ab") as handle:
                    handle.write(b"\n")
                    handle.flush()
                    os.fsync(handle.fileno())
        return [record for _, record in self._parse(raw)]

    def read_numbered_probes(self) -> list[tuple[int, ProbeRecord]]:
        """Every probe attempt with its line number in probes.jsonl (for messages that name the line)."""
        raw = read_bytes(self.probes_path) if self.probes_path.exists() else b""
        if raw and not raw.endswith(b"\n") and _is_torn(raw[raw.rfind(b"\n") + 1 :]):
            raw = raw[: raw.rfind(b"\n") + 1]  # the torn last line that read_probes drops
        return self._parse(raw)

    def _parse(self, raw: bytes) -> list[tuple[int, ProbeRecord]]:
        plan = {p.probe_id: p for p in self.stored_plan()} if self.manifest_path.is_file() else {}
        records = []
        for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                _refuse_repeated_keys(line)
                record = ProbeRecord.model_validate_json(line)
            except (ValidationError, ValueError) as err:
                why = _first_error(err) if isinstance(err, ValidationError) else str(err)
                raise InputError(
                    f"{self.probes_path} line {number} is corrupt ({why}); "
                    "move the file aside or fix that line to resume"
                ) from None
            if (reason := contradiction(record, plan)) is not None:
                raise InputError(f"{self.probes_path} line {number} is refused: {reason}; fix or remove that line")
            records.append((number, record))
        return records

    def torn_tail(self) -> bool:
        """Whether probes.jsonl ends in a line cut by a crash mid-write (which :meth:`read_probes` drops)."""
        raw = read_bytes(self.probes_path) if self.probes_path.is_file() else b""
        return bool(raw) and not raw.endswith(b"\n") and _is_torn(raw[raw.rfind(b"\n") + 1 :])


def run_folders_in(path: Path) -> list[Path]:
    """``path`` itself when it is a run folder, else the run folders directly inside it, sorted (a campaign over pairs
    swept one folder a pair, as ``kvcal k8s-job --pairs`` does); [] for neither."""
    if RunFolder.is_run_folder(path):
        return [path]
    return sorted(p for p in path.iterdir() if RunFolder.is_run_folder(p)) if path.is_dir() else []


def valid_probes(records: Iterable[ProbeRecord]) -> list[ProbeRecord]:
    return [r for r in records if r.valid and r.ttft_ms is not None]


def pulls_by_proof(records: Iterable[ProbeRecord]) -> tuple[tuple[str, int], ...]:
    """Valid pulls counted by the counter that proved their bytes (``bytes_metric``), sorted by counter."""
    counts = Counter(r.bytes_metric for r in records if r.valid and r.leg is Leg.PULL and r.bytes_metric)
    return tuple(sorted(counts.items()))


def export_interchange(run: RunFolder, output: Path) -> int:
    """Write the valid probes as the interchange CSV (``output`` ``-``: stdout); return the row count."""
    # One row per probe, its last valid attempt, warm-ups and cold pulls left out: the rows fit would use.
    valid = [r for r in valid_probes(run.read_probes()) if not r.off_curve]
    last = {r.probe_id: (line, r) for line, r in enumerate(valid)}
    # In time order, (started_at as an instant, line in probes.jsonl): a reader ranks the 1 s stamps by row, so ties
    # keep their order. A start time that cannot be read leaves the column empty: the table then has no time order.
    when = start_instants([r for _, r in last.values()])
    rows = [r for _, r in sorted(last.values(), key=lambda lr: (when[lr[1].probe_id] if when else 0.0, lr[0]))]
    if len(rows) < len(valid):
        log.info("%d repeated records of one probe collapsed to the last, as fit does", len(valid) - len(rows))
    if any(r.load_state not in (None, "idle") for r in rows):
        # The interchange format has no load columns: a loaded run exports its idle probes only.
        threshold = run.manifest().settings.load.busy_queue_threshold
        rows = [r for r in rows if probe_counts_as_idle(r, threshold)]
    if not rows:
        raise InputError(f"{run.path} has no valid probes to export")
    pairs = any(r.pair is not None or r.link_class is not None for r in rows)
    buffer: list[list[object]] = [[*INTERCHANGE_COLUMNS, *(PAIR_COLUMNS if pairs else [])]]
    for r in rows:
        buffer.append(
            [
                r.prefix_tokens,
                r.leg.value,
                f"{r.ttft_ms:.4f}",
                r.rep,
                "" if r.bytes_moved is None else r.bytes_moved,
                r.started_at if when else "",
                *([r.pair or "", r.link_class or ""] if pairs else []),
            ]
        )
    text = io.StringIO()
    csv.writer(text, lineterminator="\n" if is_stdout(output) else "\r\n").writerows(buffer)
    write_file(output, text.getvalue(), f"-o {output}")
    return len(rows)


def start_instants(records: Iterable[ProbeRecord]) -> dict[str, float]:
    """Each probe's started_at as epoch seconds, by probe id; empty when any cannot be read (see kvcal/instants.py)."""
    out = {}
    for record in records:
        try:
            out[record.probe_id] = instant(record.started_at)
        except ValueError:
            return {}
    return out


def completed_probe_ids(records: Iterable[ProbeRecord]) -> set[str]:
    return {r.probe_id for r in records if r.valid}


def attempts_so_far(records: Iterable[ProbeRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        counts[r.probe_id] = max(counts.get(r.probe_id, 0), r.attempt + 1)
    return counts


def legs_present(records: Iterable[ProbeRecord]) -> set[Leg]:
    return {r.leg for r in records if r.valid}


def probe_counts_as_idle(record: ProbeRecord, threshold: int) -> bool:
    """Whether a probe may feed the idle curves: asked for idle and measured idle (unknown queues count as idle)."""
    if record.load_state not in (None, "idle"):
        return False
    return all(q is None or q < threshold for q in (record.source_waiting, record.computing_waiting))


def atomic_write(path: Path, text: str) -> None:
    write_file(path, text, str(path))


def _is_torn(last_line: bytes) -> bool:
    """A last line without its newline is torn unless it is one whole JSON value (then only the newline is missing)."""
    try:
        json.loads(last_line)
    except (ValueError, RecursionError):
        return True
    return False


def _refuse_repeated_keys(line: str) -> None:
    """A key given twice in one record (the last would silently win): ValueError naming it."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in items]
        if len(set(keys)) != len(keys):
            raise ValueError(f"the key '{next(k for k in keys if keys.count(k) > 1)}' is given twice")
        return dict(items)

    try:
        json.loads(line, object_pairs_hook=pairs)
    except (json.JSONDecodeError, RecursionError):
        pass  # not JSON at all: the record's own validation says how


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "record"
    return f"{where}: {first.get('msg', 'invalid')}"
