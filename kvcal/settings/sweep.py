"""The sweep's settings, declared once in groups (a base module: run.json stores them, the engines launch from them).

:class:`SweepConfig` holds one model per group (:mod:`kvcal.settings.sweep_groups`: ``engine``, ``probe``, ``load``,
``adaptive``, ``sim``, ``output``) and a multi-pair campaign's ``pairs``. Each field's type, bounds, default and
description drive validation, the campaign-file schema (:mod:`kvcal.sweep.validate` reads the file), the
``kvcal sweep`` flag's name and help (:mod:`kvcal.settings.sweep_flags`), the vLLM pair's launch settings (which extend
the engine group: :class:`kvcal.engines.vllm_launch.VllmSettings`) and the sweep command line a Kubernetes Job runs.

Flags and campaign files name each setting by its *flat* name (``reps``, ``engine``, ``adaptive``), as run.json
did before ``kvcal.run/4``; :func:`grouped_from_flat` puts flat keys in their groups, and :class:`SweepConfig`
accepts either shape. The marks a field may carry (its ``json_schema_extra``): ``launch_only`` (only when kvcal
launches the engines: attach mode and the k8s Job refuse them), ``engine_only`` (not for ``--engine sim``),
``producer_side_channel`` (only for a transport whose pull names the producer's side channel), ``adaptive_rule``
(only an adaptive campaign reads it; ``--resume`` may change it) and ``campaign_file_only`` (no flag).
``tests/unit/base/test_settings_once.py`` holds the CLI's options to these fields. A campaign file (``--config FILE``,
YAML) may set any setting; flags given on the command line override it; unknown keys are an error so that a
renamed key cannot vanish silently.
The transports' names and the P2P tier's deployed port are the transports' own
(:mod:`kvcal.transports`, a base package: it imports nothing of kvcal but errors).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.fields import FieldInfo

from kvcal.settings.sweep_groups import (
    DEFAULT_BLOCK_SIZE,
    P2P_PORT,
    TRANSPORT_NAMES,
    AdaptiveSettings,
    AttachSettings,
    EngineSettings,
    LoadSettings,
    LoadState,
    OutputSettings,
    ProbeSettings,
    SimSettings,
    arg_value,
    repeated_lengths_problem,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "P2P_PORT",
    "TRANSPORT_NAMES",
    "AdaptiveSettings",
    "AttachSettings",
    "EngineSettings",
    "LoadSettings",
    "LoadState",
    "OutputSettings",
    "PairSpec",
    "ProbeSettings",
    "SimSettings",
    "SweepConfig",
    "arg_value",
    "flat_field",
    "grouped_from_flat",
    "repeated_lengths_problem",
]

_PAIR_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"

GROUPS: dict[str, type[BaseModel]] = {
    "engine": EngineSettings,
    "probe": ProbeSettings,
    "load": LoadSettings,
    "adaptive": AdaptiveSettings,
    "output": OutputSettings,
}
"""The groups whose fields have flat names of their own (``sim`` and ``pairs`` are one setting each)."""

FLAT_ORDER = (
    "model",
    "engine",
    "transport",
    "producer_url",
    "consumer_url",
    "producer_p2p_host",
    "producer_p2p_port",
    "dp_ranks",
    "share_gpu",
    "cpu_bytes_to_use",
    "prefix_lengths",
    "reps",
    "block_size",
    "seed",
    "output_dir",
    "name",
    "max_model_len",
    "producer_gpus",
    "consumer_gpus",
    "producer_cpus",
    "consumer_cpus",
    "engine_args",
    "python_hash_seed",
    "startup_timeout_s",
    "probe_timeout_s",
    "max_attempts",
    "min_pull_fraction",
    "warmup_probes",
    "sim",
    "load_states",
    "background_concurrency",
    "busy_queue_threshold",
    "background_prompt_tokens",
    "background_max_tokens",
    "load_settle_timeout_s",
    "pairs",
    "cold_sessions",
    "adaptive",
    "target_width",
    "target_regret",
    "max_probes",
    "max_engine_seconds",
)
"""Every setting's flat name, in the order ``kvcal sweep --help`` lists their flags (the order of run.json's flat
settings before ``kvcal.run/4``; a test holds it to the groups' fields)."""


def _flat_name(group: type[BaseModel], field: str) -> str:
    extra = group.model_fields[field].json_schema_extra
    return str(extra.get("flat", field)) if isinstance(extra, dict) else field


PATHS: dict[str, tuple[str, str | None]] = {
    **{_flat_name(model, field): (group, field) for group, model in GROUPS.items() for field in model.model_fields},
    "sim": ("sim", None),
    "pairs": ("pairs", None),
}
"""Flat name -> (group, field in it); a setting that is a group of its own has no field (None)."""


def grouped_from_flat(data: dict[str, Any], *, flat_only: bool = False) -> dict[str, Any]:
    """Flat settings (flags, a campaign file, run.json before ``kvcal.run/4``) in their groups.

    A group already given as a mapping is kept and flat keys of it merged in, so grouped settings come back as
    they are (``flat_only``: a mapping under ``engine`` or ``adaptive`` is that flat setting's value, which
    validation refuses); a key that names no setting stays at the top level, where validation refuses it by name.
    """
    grouped: dict[str, Any] = {}
    for key, value in data.items():
        if key in GROUPS and isinstance(value, dict) and not flat_only:
            grouped[key] = {**grouped.get(key, {}), **value}
        elif key in PATHS and (path := PATHS[key])[1] is not None:
            group, field = path
            grouped.setdefault(group, {})[field] = value
        else:
            grouped[key] = value
    return grouped


def flat_field(name: str) -> FieldInfo:
    """The declaration (type, bounds, default, description, marks) of the setting with this flat name."""
    group, field = PATHS[name]
    return GROUPS[group].model_fields[field] if field is not None else SweepConfig.model_fields[group]


class PairSpec(AttachSettings):
    """One pair of a multi-pair campaign: its name, its link class and the attach settings of its engines.

    The attach keys are the engine group's own fields (:class:`AttachSettings`: one declaration, one set of bounds).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True)

    name: str = Field(pattern=_PAIR_NAME, description="The pair's name (tags its probes; letters, digits, . _ -).")
    link_class: str = Field(alias="class", pattern=_PAIR_NAME, description="The link class, e.g. same-node, tcp.")
    sim: SimSettings | None = Field(None, description="--engine sim: the pair's true curves (default: the campaign's).")

    def attach_settings(self) -> dict[str, Any]:
        """The attach settings this pair sets (its engines' URLs and side channel), by field."""
        return {key: getattr(self, key) for key in AttachSettings.model_fields}


class SweepConfig(BaseModel):
    """Everything ``kvcal sweep`` needs, in groups; stored resolved in run.json. Flat keys are accepted too."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    engine: EngineSettings = Field(default_factory=EngineSettings, description="The pair and how it runs.")
    probe: ProbeSettings = Field(default_factory=ProbeSettings, description="The probe protocol.")
    load: LoadSettings = Field(default_factory=LoadSettings, description="Load states and background streams.")
    adaptive: AdaptiveSettings = Field(default_factory=AdaptiveSettings, description="Adaptive rounds and stops.")
    sim: SimSettings = Field(
        default_factory=SimSettings,
        description="Simulated pair curves (engine sim).",
        json_schema_extra={"campaign_file_only": True},
    )
    output: OutputSettings = Field(default_factory=OutputSettings, description="Where the run folder goes.")
    pairs: list[PairSpec] | None = Field(
        None,
        description="A campaign over several pairs (kvcal sweep --pairs FILE): their probes interleaved in one "
        "seeded order, each tagged with its pair and class.",
        json_schema_extra={"campaign_file_only": True},
    )

    @model_validator(mode="before")
    @classmethod
    def _grouped(cls, data: Any) -> Any:
        return grouped_from_flat(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _pairs_alone(self) -> SweepConfig:
        if self.pairs is None:
            return self
        if self.engine.attach:
            raise ValueError("--pairs names each pair's URLs; drop --producer-url/--consumer-url")
        names = [p.name for p in self.pairs]
        if len(set(names)) != len(names):
            twice = ", ".join(sorted({n for n in names if names.count(n) > 1}))
            raise ValueError(f"a pair name is listed twice in pairs: {twice}")
        if self.adaptive.enabled or self.load.loaded:
            raise ValueError("a campaign over pairs is a planned idle sweep: drop --adaptive and --load-states")
        return self

    @property
    def attached(self) -> bool:
        """Whether the sweep attaches to running engines: its own URLs, or a campaign's pairs (each names its own)."""
        return self.engine.attach or self.pairs is not None

    def value(self, name: str) -> Any:
        """The setting with this flat name (``reps``, ``engine``, ``sim``)."""
        group, field = PATHS[name]
        return getattr(self, group) if field is None else getattr(getattr(self, group), field)

    def given(self) -> set[str]:
        """The flat names of the settings a flag or the campaign file set (defaults never count)."""
        given: set[str] = {name for name in ("sim", "pairs") if name in self.model_fields_set}
        for name, (group, field) in PATHS.items():
            if field is not None and field in getattr(self, group).model_fields_set:
                given.add(name)
        return given

    def with_output(self, **update: Any) -> SweepConfig:
        """These settings with the output group's fields updated (where the run folder is)."""
        return self.model_copy(update={"output": self.output.model_copy(update=update)})


SweepConfig.model_rebuild()
