"""A run folder's records as the fit reads them: every attempt of one run folder, or of the run folders a campaign
over pairs wrote one a pair (the k8s Job's), with where each lies, and their start times as instants."""

from __future__ import annotations

from pathlib import Path

from kvcal.errors import InputError
from kvcal.files.instants import instant
from kvcal.records.manifest import RunManifest
from kvcal.records.run import ProbeRecord
from kvcal.records.run_folder import RunFolder, run_folders_in


def start_times(
    chosen: dict[tuple[int, str], ProbeRecord], where: dict[int, tuple[Path, int]]
) -> tuple[dict[tuple[int, str], float], str | None]:
    """The chosen probes' started_at as instants by key; or none, and a warning naming the first line that cannot be
    read (``where``: each record's probes.jsonl and line, by ``id``).

    A run whose start times cannot all be read still fits: only what needs time order (drift, warm-up order) is off.
    """
    when = {}
    for key, record in chosen.items():
        try:
            when[key] = instant(record.started_at)
        except ValueError as err:
            path, line = where.get(id(record), ("probes.jsonl", "?"))
            return {}, (
                f"{path} line {line}: started_at {err}: the time analysis (drift, warm-up order) is off for this run"
            )
    return when, None


def run_records(
    folder: Path, link_class: str | None
) -> tuple[RunManifest, list[tuple[int, ProbeRecord]], list[str], dict[int, tuple[Path, int]]]:
    """The first run's manifest and every record (of ``link_class``) of the run folder, or of the run folders in
    ``folder`` (a campaign over pairs swept one folder a pair: the k8s Job's), each with its folder's index; and
    where each record lies (its probes.jsonl and line, by ``id``), for messages that name the line."""
    folders = run_folders_in(folder)
    if not folders:
        raise InputError(f"{folder}: not a run folder (no run.json)")
    manifests = [RunFolder(path).manifest() for path in folders]
    differ = {(m.setup.model, m.setup.block_size, m.setup.kv_bytes_per_token) for m in manifests}
    if len(differ) > 1:
        raise InputError(
            f"{folder}: its run folders measured different setups (model, block size, KV bytes per "
            f"token: {sorted(differ, key=str)}); fit them apart"
        )
    sourced: list[tuple[int, ProbeRecord]] = []
    notes = []
    located: dict[int, tuple[Path, int]] = {}
    for index, path in enumerate(folders):
        run = RunFolder(path)
        if not run.has_probes():
            raise InputError(f"{path}: no probes recorded yet (probes.jsonl is missing or empty)")
        if run.torn_tail():  # read_probes drops it; say so in fit.json too
            where = run.probes_path.name if path == folder else f"{path.name}/{run.probes_path.name}"
            notes.append(f"{where}: the last line is torn (an interrupted write?) and was skipped")
        for line, record in run.read_numbered_probes():
            if link_class is None or record.link_class == link_class:
                sourced.append((index, record))
                located[id(record)] = (run.probes_path, line)
    return manifests[0], sourced, notes, located
