"""Typed, versioned records for everything kvcal writes to disk.

Each record forbids unknown keys (a renamed key must fail loudly, not vanish) and is
immutable once built. Probes are appended to ``probes.jsonl`` one line each and never
rewritten; summaries are derived from them. A measurement that was not taken is
``None``, never ``0``.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PROBE_SCHEMA = "kvcal.probe/1"
RUN_SCHEMA = "kvcal.run/1"
FIT_SCHEMA = "kvcal.fit/1"


class Record(BaseModel):
    """Base for on-disk records: strict keys, frozen after construction."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Leg(str, Enum):
    """How the consumer obtains the prefix's KV for one probe."""

    RECOMPUTE = "recompute"
    PULL = "pull"


class ProbeRecord(Record):
    """One timed request: a fresh prompt of ``prefix_tokens`` tokens served by one leg."""

    schema_: Literal["kvcal.probe/1"] = Field(PROBE_SCHEMA, alias="schema")
    probe_id: str = Field(description="Stable id from the plan, e.g. 'p0007-L1024-pull-r1'; resume keys on it.")
    plan_index: int = Field(ge=0, description="Position of this probe in the shuffled plan.")
    attempt: int = Field(ge=0, description="0 for the first try; retries after a failed gate count up.")
    prefix_tokens: int = Field(gt=0)
    leg: Leg
    rep: int = Field(ge=0)
    ttft_ms: float | None = Field(description="Consumer time to first streamed token, max_tokens=1.")
    bytes_moved: int | None = Field(description="KV bytes the transport moved for this probe (metric delta); None if unknowable.")
    expected_bytes: int | None = Field(None, description="prefix_tokens x KV bytes per token, when the layout is known.")
    producer_ttft_ms: float | None = Field(None, description="Pull leg: time the producer took to hold the prefix.")
    overhead_ms: float | None = Field(None, description="kvcal's own time for this probe beyond the engine's TTFT.")
    valid: bool
    invalid_reason: str | None = None
    started_at: str = Field(description="ISO-8601 UTC wall time the probe started.")
    metrics_delta: dict[str, float] = Field(default_factory=dict, description="Raw engine counter deltas over the probe.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class RunManifest(Record):
    """``run.json``: resolved settings and provenance of one sweep run."""

    schema_: Literal["kvcal.run/1"] = Field(RUN_SCHEMA, alias="schema")
    name: str
    created_at: str
    engine: str
    transport: str | None
    model: str
    block_size: int
    kv_bytes_per_token: int | None
    settings: dict[str, Any] = Field(description="The resolved sweep settings (flags merged over the campaign file).")
    provenance: dict[str, Any] = Field(description="kvcal/vLLM/NIXL/torch versions, hardware, UCX env, command line.")
    plan: list[dict[str, Any]] = Field(description="The shuffled probe plan; resume replays it.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CurveFit(Record):
    """One leg's fitted cost curve: t(n) = intercept_ms + per_token_us*n/1e3 + per_token2_ns*n^2/1e6 (ms)."""

    model: Literal["affine", "quadratic"]
    intercept_ms: float
    per_token_us: float
    per_token2_ns: float
    ci: dict[str, list[float]] = Field(default_factory=dict, description="Bootstrap interval per coefficient.")
    alternatives: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Every candidate model's fit and score.")
    selection: str | None = Field(None, description="The criterion that chose ``model`` and its values.")
    downweighted: list[dict[str, Any]] = Field(default_factory=list, description="Probes the robust loss down-weighted.")
    noise_cv: float | None = Field(None, description="Robust (MAD) scale of the relative residuals: the probes' noise as a fraction of TTFT.")
    robust_f_scale: float | None = Field(None, description="Huber threshold in relative units; None when the fit was plain weighted least squares.")


class FitResult(Record):
    """``fit.json``: the fitted curves, the break-even and how sure we are of it."""

    schema_: Literal["kvcal.fit/1"] = Field(FIT_SCHEMA, alias="schema")
    status: Literal["crossover", "pull-always-wins", "recompute-always-wins"]
    break_even_tokens: float | None
    break_even_ci: list[float] | None
    confidence: float
    extrapolated: bool
    measured_range: list[int]
    recompute: CurveFit
    pull: CurveFit
    block_size: int | None
    warnings: list[str] = Field(default_factory=list)
    n_probes: int = 0
    n_invalid_excluded: int = 0
    smallest_pull_win_tokens: int | None = Field(None, description="Smallest measured length where the pull's median beat recompute's.")
    pull_bandwidth_gbps: float | None = Field(None, description="Achieved pull bandwidth from bytes moved, when known.")
    bootstrap: dict[str, Any] = Field(default_factory=dict, description="n_resamples, seed, method, no_crossover_share, break_even_samples.")
    source: dict[str, Any] = Field(default_factory=dict, description="Input path and kind; model, transport, hardware, provenance of the run.")
    kvcal_version: str
    created_at: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
