"""The sweep's settings, declared once (a base module: run.json stores them, the engines launch from them).

Each field's type, bounds, default and description drive validation, the campaign-file
schema (:mod:`kvcal.sweep.validate` reads the file), the ``kvcal sweep`` flag's name and
help (:func:`flag_of`, :func:`flag_help`), the vLLM pair's launch settings
(:func:`kvcal.engines.vllm_launch.settings_from_config`) and the sweep command line a
Kubernetes Job runs (:func:`sweep_argv`). A field's
``json_schema_extra`` may name its flag when it is not ``--`` plus the field name with
dashes, and carries the marks validation (:mod:`kvcal.sweep.validate`) and the CLI read:
``launch_only`` (only when kvcal launches the engines: attach mode and the k8s Job refuse
them), ``engine_only`` (not for ``--engine sim``), ``producer_side_channel`` (only for a
transport whose pull names the producer's side channel), ``adaptive_rule`` (only an
adaptive campaign reads it; ``--resume`` may change it) and ``campaign_file_only`` (no
flag). ``tests/unit/test_settings_once.py`` holds the CLI's options to these fields. A campaign file (``--config FILE``, YAML) may set any field; flags
given on the command line override it; unknown keys are an error so that a renamed key
cannot vanish silently.

The transports' names and the P2P tier's deployed port are constants here, below the
engines that define the transports; a test holds them to ``kvcal.engines.transports``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kvcal.shared_constants import P2P_PORT
from kvcal.sim_costs import SimCosts
from kvcal.yaml_guard import refuse_bool_numbers

TRANSPORT_NAMES = ("nixl-pd", "p2p-tier")
"""Every KV transport's name, sorted (``kvcal.engines.transports.transport_names()``, held equal by a test)."""
DEFAULT_BLOCK_SIZE = 64
"""KV block size in tokens when nothing sets one (kvcal sweep's default; the llm-d guides use 64)."""

LoadState = Literal["idle", "source-busy", "computing-busy", "both-busy"]  # what each means: kvcal.sweep.load


class SimSettings(SimCosts):
    """The simulated pair (``--engine sim``): its true curves and noise, plus gate faults and the length limit."""

    fail_pull_rate: float = Field(0.0, ge=0, le=1, description="Share of pulls that move no bytes (to exercise gates).")
    max_model_len: int = Field(65536, gt=0, description="The simulated engines' max model length.")

    @property
    def costs(self) -> SimCosts:
        """The curves and noise alone."""
        return SimCosts.model_validate(self.model_dump(include=set(SimCosts.model_fields)))


class SweepConfig(BaseModel):
    """Everything ``kvcal sweep`` needs; stored resolved in run.json."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str | None = Field(None, description="Hub id or local model folder; default: the embedded tiny CPU model (vllm) or 'sim'.")
    engine: Literal["vllm", "sim"] = Field("vllm", description="vllm: real engines; sim: simulated curves, never a measurement.")
    transport: str = Field("nixl-pd", description=f"How the consumer pulls KV from the producer: {' or '.join(TRANSPORT_NAMES)}.",
                                      json_schema_extra={"engine_only": True})
    producer_url: str | None = Field(None, description="Attach to a running producer at this URL instead of launching one.",
                                      json_schema_extra={"engine_only": True})
    consumer_url: str | None = Field(None, description="Attach to a running consumer at this URL instead of launching one.",
                                        json_schema_extra={"engine_only": True})
    producer_p2p_host: str | None = Field(None, description="p2p-tier attach: the producer's P2P side-channel host.",
                                          json_schema_extra={"engine_only": True, "producer_side_channel": True})
    producer_p2p_port: int | None = Field(P2P_PORT, gt=0, lt=65536, description=f"p2p-tier attach: the producer's P2P listener port (the llm-d guide's {P2P_PORT}; rank r of a data-parallel engine listens on {P2P_PORT} + r).",
                                          json_schema_extra={"engine_only": True, "producer_side_channel": True})
    dp_ranks: int = Field(1, ge=1, le=256, description="Attach mode: the producer's --data-parallel-size; every rank is seeded before a pull, which asks rank 0.")
    share_gpu: list[float] | None = Field(None, min_length=2, max_length=2, description="Launch mode: run both engines on the same GPU(s) with these --gpu-memory-utilization fractions, producer,consumer (e.g. 0.45,0.45).",
                                        json_schema_extra={"launch_only": True})
    cpu_bytes_to_use: int | None = Field(None, gt=0, description="p2p-tier launch: CPU tier bytes per engine (default 8 GiB); /dev/shm must hold both engines' tiers.",
                                         json_schema_extra={"launch_only": True})
    prefix_lengths: list[int] | None = Field(None, description="Prefix lengths in tokens (block multiples); default: a ladder up to the model's limit.")
    reps: int = Field(3, ge=1, le=1000, description="Probes per length and leg.")
    block_size: int = Field(DEFAULT_BLOCK_SIZE, gt=0, description="KV block size in tokens (engines are started with it).")
    seed: int = Field(0, ge=0, description="Seeds the probe order and the prompts.")
    output_dir: Path = Field(Path("results"), description="Folder that holds run folders.")
    name: str | None = Field(None, description="Run folder name; default: time stamp plus model.")
    max_model_len: int | None = Field(None, gt=0, description="Engine max model length; default: the model's own.",
                                      json_schema_extra={"engine_only": True})
    producer_gpus: str | None = Field(None, description="CUDA_VISIBLE_DEVICES for the producer (GPU hosts).", json_schema_extra={"engine_only": True, "launch_only": True})
    consumer_gpus: str | None = Field(None, description="CUDA_VISIBLE_DEVICES for the consumer (GPU hosts).", json_schema_extra={"engine_only": True, "launch_only": True})
    producer_cpus: str | None = Field(None, description="VLLM_CPU_OMP_THREADS_BIND for the producer (CPU hosts); default: core 0.", json_schema_extra={"engine_only": True, "launch_only": True})
    consumer_cpus: str | None = Field(None, description="VLLM_CPU_OMP_THREADS_BIND for the consumer (CPU hosts); default: core 1.", json_schema_extra={"engine_only": True, "launch_only": True})
    engine_args: list[str] = Field(default_factory=list, description="Extra argument passed to both `vllm serve` processes (repeatable).",
                                   json_schema_extra={"flag": "--engine-arg", "engine_only": True, "launch_only": True})
    python_hash_seed: int = Field(0, ge=0, le=4294967295, description="PYTHONHASHSEED kvcal sets for both launched engines (prefix-cache block hashes match only when it is equal); recorded in run.json.",
                                  json_schema_extra={"launch_only": True})
    startup_timeout_s: float = Field(900.0, gt=0, description="How long to wait for the engines to become ready, in seconds.",
                                     json_schema_extra={"flag": "--startup-timeout", "engine_only": True})
    probe_timeout_s: float = Field(300.0, gt=0, description="How long one request may take.",
                                      json_schema_extra={"campaign_file_only": True})
    max_attempts: int = Field(3, ge=1, le=20, description="Tries per probe before a failed gate fails the run.")
    min_pull_fraction: float = Field(0.5, gt=0, le=1, description="A pull must move at least this share of the expected KV bytes.",
                                      json_schema_extra={"campaign_file_only": True})
    warmup_probes: bool | None = Field(None, description="Send one discarded warm-up probe before the first of each "
                                       "(length, leg); default: on for GPU engines, off on CPU and sim.")
    sim: SimSettings = Field(default_factory=SimSettings, description="Simulated pair curves (engine sim).",
                                      json_schema_extra={"campaign_file_only": True})
    load_states: list[LoadState] = Field(
        default_factory=lambda: list[LoadState](["idle"]), description="Load states to probe under; idle alone is the plain idle sweep.")
    background_concurrency: int | None = Field(None, ge=1, le=256, description="Background request streams per busy engine; default: busy_queue_threshold + 2.")
    busy_queue_threshold: int = Field(1, ge=1, description="Waiting requests at or above which an engine counts as busy.")
    background_prompt_tokens: int | None = Field(None, gt=0, description="Prompt length of background requests; default: min(4096, the model's limit).",
                                      json_schema_extra={"campaign_file_only": True})
    background_max_tokens: int = Field(1, ge=1, description="Tokens each background request generates (1: pure prefill keeps the queue longest).",
                                      json_schema_extra={"campaign_file_only": True})
    load_settle_timeout_s: float = Field(60.0, gt=0, description="How long to wait for the queues to reach a load state.",
                                      json_schema_extra={"campaign_file_only": True})
    pairs: list[PairSpec] | None = Field(
        None, description="A campaign over several pairs (kvcal sweep --pairs FILE): their probes interleaved in one "
        "seeded order, each tagged with its pair and class.", json_schema_extra={"campaign_file_only": True})
    cold_sessions: int = Field(
        1, ge=1, le=100, description="Launch mode: cold samples of the session cost (the first pull on a fresh "
        "session); the consumer is restarted between them.", json_schema_extra={"launch_only": True})
    adaptive: bool = Field(False, description="Choose each round of probes from the fit so far (docs/method.md, adaptive campaigns).")
    target_width: float = Field(0.10, gt=0, lt=10, description="Adaptive: stop once the break-even interval's (upper - lower) / break-even is at most this.",
                                      json_schema_extra={"adaptive_rule": True})
    target_regret: float | None = Field(
        None, gt=0, lt=1, json_schema_extra={"adaptive_rule": True},
        description="Adaptive: stop instead once the expected regret of emit-config's threshold is at most this "
                    "fraction of the expected TTFT (0.001: 0.1 %).")
    max_probes: int | None = Field(None, ge=8, description="Adaptive: stop after this many valid probes (default 400).",
                                      json_schema_extra={"adaptive_rule": True})
    max_engine_seconds: float | None = Field(None, gt=0, description="Adaptive: stop once the probes' summed TTFT reaches this many seconds.",
                                              json_schema_extra={"adaptive_rule": True})

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        return refuse_bool_numbers(cls, data)

    @field_validator("transport")
    @classmethod
    def _known_transport(cls, value: str) -> str:
        if value not in TRANSPORT_NAMES:
            raise ValueError(f"unknown transport {value!r}; choose one of {', '.join(TRANSPORT_NAMES)}")
        return value

    @field_validator("prefix_lengths")
    @classmethod
    def _positive(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(n <= 0 for n in value):
            raise ValueError("prefix lengths must be positive")
        if value is not None and (problem := repeated_lengths_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("load_states")
    @classmethod
    def _distinct_states(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one load state is needed")
        if len(set(value)) != len(value):
            raise ValueError("a load state is listed twice")
        return value

    @model_validator(mode="after")
    def _pairs_alone(self) -> SweepConfig:
        if self.pairs is None:
            return self
        if self.producer_url is not None or self.consumer_url is not None:
            raise ValueError("--pairs names each pair's URLs; drop --producer-url/--consumer-url")
        names = [p.name for p in self.pairs]
        if len(set(names)) != len(names):
            twice = ", ".join(sorted({n for n in names if names.count(n) > 1}))
            raise ValueError(f"a pair name is listed twice in pairs: {twice}")
        if self.adaptive or self.load_states != ["idle"]:
            raise ValueError("a campaign over pairs is a planned idle sweep: drop --adaptive and --load-states")
        return self

    @property
    def attach(self) -> bool:
        return self.producer_url is not None or self.consumer_url is not None or self.pairs is not None

    def engine_arg(self, *names: str) -> str | None:
        """The value of an engine argument (``--name value`` or ``--name=value``) in ``engine_args``, or None."""
        return arg_value(self.engine_args, *names)

    @property
    def model_label(self) -> str:
        if self.engine == "sim":
            return self.model or "sim"
        return self.model or "tiny-llama"


_ATTACH_KEYS = ("producer_url", "consumer_url", "producer_p2p_host", "producer_p2p_port", "dp_ranks")
_PAIR_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


def _as_in_sweep(name: str) -> Any:
    """The attach flag's own field (type, bounds, default, description): a pair's key is declared once, there."""
    return SweepConfig.model_fields[name]


class PairSpec(BaseModel):
    """One pair of a multi-pair campaign: its name, its link class and the attach settings of its engines.

    The attach keys are SweepConfig's own fields (one declaration, one set of bounds).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True)

    name: str = Field(pattern=_PAIR_NAME, description="The pair's name (tags its probes; letters, digits, . _ -).")
    link_class: str = Field(alias="class", pattern=_PAIR_NAME, description="The link class, e.g. same-node, tcp.")
    producer_url: str | None = _as_in_sweep("producer_url")
    consumer_url: str | None = _as_in_sweep("consumer_url")
    producer_p2p_host: str | None = _as_in_sweep("producer_p2p_host")
    producer_p2p_port: int | None = _as_in_sweep("producer_p2p_port")
    dp_ranks: int = _as_in_sweep("dp_ranks")
    sim: SimSettings | None = Field(None, description="--engine sim: the pair's true curves (default: the campaign's).")

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        return refuse_bool_numbers(cls, data)

    def attach_settings(self) -> dict[str, Any]:
        """The SweepConfig fields this pair sets (its engines' URLs and side channel)."""
        return {key: getattr(self, key) for key in _ATTACH_KEYS}


SweepConfig.model_rebuild()


def arg_value(args: tuple[str, ...] | list[str], *names: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` in an argument list, or None."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def declared(model: type[BaseModel], name: str) -> dict[str, Any]:
    """The marks a settings field declares in its ``json_schema_extra`` (flag, launch_only, ...)."""
    extra = model.model_fields[name].json_schema_extra
    return extra if isinstance(extra, dict) else {}


def flag_for(model: type[BaseModel], name: str) -> str:
    """How a setting is given: its declared flag, ``--`` plus the name with dashes, or its campaign-file key."""
    marks = declared(model, name)
    if marks.get("campaign_file_only"):
        return f"{name} (campaign file)"
    return str(marks.get("flag") or "--" + name.replace("_", "-"))


def marked(model: type[BaseModel], mark: str) -> tuple[str, ...]:
    """The fields of ``model`` that carry ``mark`` (e.g. ``launch_only``), in declaration order."""
    return tuple(name for name in model.model_fields if declared(model, name).get(mark))


def repeated_lengths_problem(lengths: list[int]) -> str | None:
    """Why a list that names a length twice is refused, or None: a ladder lists each length once, reps are --reps."""
    repeated = sorted({n for n in lengths if lengths.count(n) > 1})
    if not repeated:
        return None
    return (f"{', '.join(map(str, repeated))} listed more than once; list each length once and "
            "set --reps for more probes a length")


def field_help(name: str) -> str:
    """The description of a SweepConfig field, for the CLI flag's help text."""
    return SweepConfig.model_fields[name].description or ""


def flag_of(name: str) -> str:
    """The ``kvcal sweep`` flag of a field: its declared flag, else ``--`` plus the name with dashes
    (a campaign-file-only setting: its key, marked so)."""
    return flag_for(SweepConfig, name)


def flag_fields() -> tuple[str, ...]:
    """The fields that ``kvcal sweep`` takes as flags (every field but the campaign-file-only ones)."""
    return tuple(name for name in SweepConfig.model_fields if name not in marked(SweepConfig, "campaign_file_only"))


def adaptive_rule_fields() -> tuple[str, ...]:
    """The adaptive stop rules: only an adaptive campaign reads them, and ``--resume`` may change them."""
    return marked(SweepConfig, "adaptive_rule")


def flag_help(name: str) -> str:
    """A flag's help: the field's description and, when it has one, its default (never copied by hand)."""
    info = SweepConfig.model_fields[name]
    default = info.get_default(call_default_factory=True)
    shown = "" if default is None or default == [] or isinstance(default, BaseModel) else f" (default: {default})"
    return (info.description or "") + shown


def launch_only_flags() -> tuple[str, ...]:
    """Flags of settings that only matter when kvcal launches the engines (an attached sweep ignores them)."""
    return tuple(flag_of(name) for name in marked(SweepConfig, "launch_only"))


def sweep_argv(values: dict[str, Any]) -> list[str]:
    """``kvcal sweep`` arguments that set these fields (in this order); None is left out, lists are comma-joined
    (a repeatable flag is repeated instead)."""
    argv: list[str] = []
    for name, value in values.items():
        flag = flag_of(name)
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            if flag == "--engine-arg":
                argv += [f"{flag}={item}" for item in value]
            elif value:
                argv += [flag, ",".join(map(str, value))]
        else:
            argv += [flag, str(value)]
    return argv
