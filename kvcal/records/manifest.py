"""``run.json``: the run manifest, the resolved sweep settings, setup, pair facts, provenance and plan of one run.

Beside the run folder (:mod:`kvcal.records.run_folder` reads and writes it) and apart from the
ground floor because its ``settings`` are the sweep's (:class:`kvcal.settings.sweep.SweepConfig`):
reading probes or a fit.json never loads this module, so never the settings or the
simulator. Older ``kvcal.run/1``-``/3`` files are upgraded on read (:mod:`kvcal.records.old_schemas`), and
settings written flat
(every version before 4, and version 4 before the groups) are grouped (:func:`kvcal.settings.sweep.grouped_from_flat`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from kvcal.records.old_schemas import upgrade_run
from kvcal.records.run import RUN_SCHEMA, PairFacts, PlannedProbe, Record, RunSetup
from kvcal.settings.sweep import SweepConfig, grouped_from_flat


class RunManifest(Record):
    """``run.json``: resolved settings, setup and provenance of one sweep run.

    ``kvcal.run/1`` (setup facts at the top level and in the provenance), ``kvcal.run/2`` (no pair facts)
    and ``kvcal.run/3`` (no pairs or sessions) files are upgraded on read by
    :func:`kvcal.records.old_schemas.upgrade_run`.
    """

    schema_: Literal["kvcal.run/4"] = Field(RUN_SCHEMA, alias="schema")
    name: str
    created_at: str
    settings: SweepConfig = Field(description="The resolved sweep settings (flags merged over the campaign file).")
    setup: RunSetup = Field(description="What the run measured on; fit.json copies it.")
    pair: PairFacts = Field(
        default_factory=PairFacts,
        description="What the pair was (mode, device, per-role placement); "
        "a version 2 run's is read from its provenance.",
    )
    provenance: dict[str, Any] = Field(
        description="Free-form: kvcal/vLLM/NIXL/torch versions, host, UCX env, command line, the pair's own account."
    )
    plan: list[PlannedProbe] = Field(description="The shuffled probe plan; resume replays it.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        upgraded = upgrade_run(data)
        if isinstance(upgraded, dict) and isinstance(upgraded.get("settings"), dict):
            upgraded = {**upgraded, "settings": grouped_from_flat(upgraded["settings"])}  # flat before version 4
        return upgraded
