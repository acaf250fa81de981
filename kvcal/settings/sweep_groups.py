"""The sweep's settings in groups, each field declared once with its bounds (the whole: :mod:`kvcal.settings.sweep`).

- :class:`AttachSettings`: the running engines a sweep attaches to (a campaign's pairs reuse it);
- :class:`EngineSettings`: the pair itself (kind, model, transport, launch placement), which the vLLM pair's
  launch settings extend (:class:`kvcal.engines.vllm_launch.VllmSettings`);
- :class:`ProbeSettings`: the probe protocol (lengths, repetitions, order, tries, warm-up, cold sessions);
- :class:`LoadSettings`: the load states and the background streams that make them;
- :class:`AdaptiveSettings`: whether rounds are chosen from the fit so far, and when they stop;
- :class:`SimSettings`: the simulated pair (``--engine sim``);
- :class:`OutputSettings`: where the run folder goes.

A field's ``json_schema_extra`` carries the marks :mod:`kvcal.settings.sweep` and :mod:`kvcal.sweep.validate` read:
``flag`` (its flag when not ``--`` plus its flat name with dashes), ``flat`` (its flat name, the flag's and the
campaign file's key, when it differs from the field's own: the group names it already), ``launch_only``,
``engine_only``, ``producer_side_channel``, ``adaptive_rule`` and ``campaign_file_only`` (meanings:
:mod:`kvcal.settings.sweep`).

The transports' names and the P2P tier's deployed port are the transports' own (:mod:`kvcal.transports`, a base
package below the settings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kvcal.costs.simulated import SimCosts
from kvcal.files.yaml_guard import refuse_bool_numbers
from kvcal.settings.engine_args import arg_value
from kvcal.transports import transport_names
from kvcal.transports.p2p_tier import P2P_PORT

TRANSPORT_NAMES = transport_names()
"""Every KV transport's name, sorted, as the transports declare them: what the transport setting accepts."""
DEFAULT_BLOCK_SIZE = 64
"""KV block size in tokens when nothing sets one (kvcal sweep's default; the llm-d guides use 64)."""
DEFAULT_BUSY_QUEUE_THRESHOLD = 1
"""Waiting requests at or above which an engine counts as busy when nothing sets it (the sweep's default, and the
cost model's fit of data that do not say: production logs)."""

LoadState = Literal["idle", "source-busy", "computing-busy", "both-busy"]  # what each means: kvcal.sweep.load

_ENGINE_ONLY: dict[str, Any] = {"engine_only": True}
_LAUNCH_ONLY: dict[str, Any] = {"launch_only": True}
_ENGINE_LAUNCH: dict[str, Any] = {"engine_only": True, "launch_only": True}
_FILE_ONLY: dict[str, Any] = {"campaign_file_only": True}
_RULE: dict[str, Any] = {"adaptive_rule": True}


class Group(BaseModel):
    """A group of settings: frozen, no unknown keys, no NaN, and no true/false where a number is wanted."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        return refuse_bool_numbers(cls, data)


class AttachSettings(Group):
    """The running engines a sweep attaches to instead of launching a pair (one pair of a campaign too)."""

    producer_url: str | None = Field(
        None,
        description="Attach to a running producer at this URL instead of launching one.",
        json_schema_extra=_ENGINE_ONLY,
    )
    consumer_url: str | None = Field(
        None,
        description="Attach to a running consumer at this URL instead of launching one.",
        json_schema_extra=_ENGINE_ONLY,
    )
    producer_p2p_host: str | None = Field(
        None,
        description="p2p-tier attach: the producer's P2P side-channel host.",
        json_schema_extra={"engine_only": True, "producer_side_channel": True},
    )
    producer_p2p_port: int | None = Field(
        P2P_PORT,
        gt=0,
        lt=65536,
        description=f"p2p-tier attach: the producer's P2P listener port (the llm-d guide's {P2P_PORT}; rank r of a "
        f"data-parallel engine listens on {P2P_PORT} + r).",
        json_schema_extra={"engine_only": True, "producer_side_channel": True},
    )
    dp_ranks: int = Field(
        1,
        ge=1,
        le=256,
        description="Attach mode: the producer's --data-parallel-size; every rank is seeded before "
        "a pull, which asks rank 0.",
    )

    @property
    def attach(self) -> bool:
        """Whether these engines already run (a URL is given) rather than being launched by kvcal."""
        return self.producer_url is not None or self.consumer_url is not None


class EngineSettings(AttachSettings):
    """The pair: which engines, which model and transport, and how kvcal launches them when it does."""

    kind: Literal["vllm", "sim"] = Field(
        "vllm",
        description="vllm: real engines; sim: simulated curves, never a measurement.",
        json_schema_extra={"flat": "engine"},
    )
    model: str | None = Field(
        None, description="Hub id or local model folder; default: the embedded tiny CPU model (vllm) or 'sim'."
    )
    transport: str = Field(
        "nixl-pd",
        description=f"How the consumer pulls KV from the producer: {' or '.join(TRANSPORT_NAMES)}.",
        json_schema_extra=_ENGINE_ONLY,
    )
    share_gpu: list[float] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="Launch mode: run both engines on the same GPU(s) with these "
        "--gpu-memory-utilization fractions, producer,consumer (e.g. 0.45,0.45).",
        json_schema_extra=_LAUNCH_ONLY,
    )
    cpu_bytes_to_use: int | None = Field(
        None,
        gt=0,
        description="p2p-tier launch: CPU tier bytes per engine (default 8 GiB); /dev/shm must hold both "
        "engines' tiers.",
        json_schema_extra=_LAUNCH_ONLY,
    )
    block_size: int = Field(
        DEFAULT_BLOCK_SIZE, gt=0, description="KV block size in tokens (engines are started with it)."
    )
    max_model_len: int | None = Field(
        None, gt=0, description="Engine max model length; default: the model's own.", json_schema_extra=_ENGINE_ONLY
    )
    producer_gpus: str | None = Field(
        None, description="CUDA_VISIBLE_DEVICES for the producer (GPU hosts).", json_schema_extra=_ENGINE_LAUNCH
    )
    consumer_gpus: str | None = Field(
        None, description="CUDA_VISIBLE_DEVICES for the consumer (GPU hosts).", json_schema_extra=_ENGINE_LAUNCH
    )
    producer_cpus: str | None = Field(
        None,
        description="VLLM_CPU_OMP_THREADS_BIND for the producer (CPU hosts); default: core 0.",
        json_schema_extra=_ENGINE_LAUNCH,
    )
    consumer_cpus: str | None = Field(
        None,
        description="VLLM_CPU_OMP_THREADS_BIND for the consumer (CPU hosts); default: core 1.",
        json_schema_extra=_ENGINE_LAUNCH,
    )
    engine_args: list[str] = Field(
        default_factory=list,
        description="Extra argument passed to both `vllm serve` processes (repeatable).",
        json_schema_extra={"flag": "--engine-arg", **_ENGINE_LAUNCH},
    )
    python_hash_seed: int = Field(
        0,
        ge=0,
        le=4294967295,
        description="PYTHONHASHSEED kvcal sets for both launched engines (prefix-cache block "
        "hashes match only when it is equal); recorded in run.json.",
        json_schema_extra=_LAUNCH_ONLY,
    )
    startup_timeout_s: float = Field(
        900.0,
        gt=0,
        description="How long to wait for the engines to become ready, in seconds.",
        json_schema_extra={"flag": "--startup-timeout", **_ENGINE_ONLY},
    )
    probe_timeout_s: float = Field(
        300.0, gt=0, description="How long one request may take.", json_schema_extra=_FILE_ONLY
    )

    @field_validator("transport")
    @classmethod
    def _known_transport(cls, value: str) -> str:
        if value not in TRANSPORT_NAMES:
            raise ValueError(f"unknown transport {value!r}; choose one of {', '.join(TRANSPORT_NAMES)}")
        return value

    def engine_arg(self, *names: str) -> str | None:
        """The value of an engine argument (``--name value`` or ``--name=value``) in ``engine_args``, or None."""
        return arg_value(self.engine_args, *names)

    @property
    def model_label(self) -> str:
        """The model's name in run names and reports: the setting, else the tiny model's or the simulator's."""
        return self.model or ("sim" if self.kind == "sim" else "tiny-llama")


class ProbeSettings(Group):
    """The probe protocol: which lengths, how many probes of each, in which order, and what makes one valid."""

    prefix_lengths: list[int] | None = Field(
        None, description="Prefix lengths in tokens (block multiples); default: a ladder up to the model's limit."
    )
    reps: int = Field(3, ge=1, le=1000, description="Probes per length and leg.")
    seed: int = Field(0, ge=0, description="Seeds the probe order and the prompts.")
    max_attempts: int = Field(3, ge=1, le=20, description="Tries per probe before a failed gate fails the run.")
    min_pull_fraction: float = Field(
        0.5,
        gt=0,
        le=1,
        description="A pull must move at least this share of the expected KV bytes.",
        json_schema_extra=_FILE_ONLY,
    )
    warmup_probes: bool | None = Field(
        None,
        description="Send one discarded warm-up probe before the first of each (length, leg); default: on for "
        "GPU engines, off on CPU and sim.",
    )
    cold_sessions: int = Field(
        1,
        ge=1,
        le=100,
        description="Launch mode: cold samples of the session cost (the first pull on a fresh "
        "session); the consumer is restarted between them.",
        json_schema_extra=_LAUNCH_ONLY,
    )

    @field_validator("prefix_lengths")
    @classmethod
    def _positive(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(n <= 0 for n in value):
            raise ValueError("prefix lengths must be positive")
        if value is not None and (problem := repeated_lengths_problem(value)):
            raise ValueError(problem)
        return value


class LoadSettings(Group):
    """The load states probed under and the background request streams that hold an engine busy."""

    load_states: list[LoadState] = Field(
        default_factory=lambda: list[LoadState](["idle"]),
        description="Load states to probe under; idle alone is the plain idle sweep.",
    )
    background_concurrency: int | None = Field(
        None, ge=1, le=256, description="Background request streams per busy engine; default: busy_queue_threshold + 2."
    )
    busy_queue_threshold: int = Field(
        DEFAULT_BUSY_QUEUE_THRESHOLD, ge=1, description="Waiting requests at or above which an engine counts as busy."
    )
    background_prompt_tokens: int | None = Field(
        None,
        gt=0,
        description="Prompt length of background requests; default: min(4096, the model's limit).",
        json_schema_extra=_FILE_ONLY,
    )
    background_max_tokens: int = Field(
        1,
        ge=1,
        description="Tokens each background request generates (1: pure prefill keeps the queue longest).",
        json_schema_extra=_FILE_ONLY,
    )
    load_settle_timeout_s: float = Field(
        60.0, gt=0, description="How long to wait for the queues to reach a load state.", json_schema_extra=_FILE_ONLY
    )

    @field_validator("load_states")
    @classmethod
    def _distinct_states(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one load state is needed")
        if len(set(value)) != len(value):
            raise ValueError("a load state is listed twice")
        return value

    @property
    def loaded(self) -> bool:
        """Whether any state but idle is probed (background streams run)."""
        return self.load_states != ["idle"]


class AdaptiveSettings(Group):
    """An adaptive campaign: each round of probes chosen from the fit so far, until one of these rules stops it."""

    enabled: bool = Field(
        False,
        description="Choose each round of probes from the fit so far (docs/method.md, adaptive campaigns).",
        json_schema_extra={"flat": "adaptive"},
    )
    target_width: float = Field(
        0.10,
        gt=0,
        lt=10,
        description="Adaptive: stop once the break-even interval's (upper - lower) / break-even is at most this.",
        json_schema_extra=_RULE,
    )
    target_regret: float | None = Field(
        None,
        gt=0,
        lt=1,
        json_schema_extra=_RULE,
        description="Adaptive: stop instead once the expected regret of emit-config's threshold is at most this "
        "fraction of the expected TTFT (0.001: 0.1 %).",
    )
    max_probes: int | None = Field(
        None, ge=8, description="Adaptive: stop after this many valid probes (default 400).", json_schema_extra=_RULE
    )
    max_engine_seconds: float | None = Field(
        None,
        gt=0,
        description="Adaptive: stop once the probes' summed TTFT reaches this many seconds.",
        json_schema_extra=_RULE,
    )


class SimSettings(SimCosts):
    """The simulated pair (``--engine sim``): its true curves and noise, plus gate faults and the length limit."""

    fail_pull_rate: float = Field(0.0, ge=0, le=1, description="Share of pulls that move no bytes (to exercise gates).")
    max_model_len: int = Field(65536, gt=0, description="The simulated engines' max model length.")

    @property
    def costs(self) -> SimCosts:
        """The curves and noise alone."""
        return SimCosts.model_validate(self.model_dump(include=set(SimCosts.model_fields)))


class OutputSettings(Group):
    """Where the run folder goes."""

    output_dir: Path = Field(Path("results"), description="Folder that holds run folders.")
    name: str | None = Field(None, description="Run folder name; default: time stamp plus model.")


def repeated_lengths_problem(lengths: list[int]) -> str | None:
    """Why a list that names a length twice is refused, or None: a ladder lists each length once, reps are --reps."""
    repeated = sorted({n for n in lengths if lengths.count(n) > 1})
    if not repeated:
        return None
    return (
        f"{', '.join(map(str, repeated))} listed more than once; list each length once and "
        "set --reps for more probes a length"
    )
