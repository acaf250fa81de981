"""Typed, versioned records for everything kvcal writes to disk.

Each record forbids unknown keys (a renamed key must fail loudly, not vanish) and is
immutable once built. Probes are appended to ``probes.jsonl`` one line each and never
rewritten; summaries are derived from them. A measurement that was not taken is
``None``, never ``0``.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from kvcal.records_base import Record
from kvcal.records_cost import MeanCostSummary
from kvcal.records_costmodel import CostModelDiagnostics, CostModelFit, Estimate  # noqa: F401  (re-exported)
from kvcal.records_links import ClassDifference, Session, SessionCost
from kvcal.records_v1 import upgrade_fit, upgrade_run
from kvcal.settings import SweepConfig

MAX_TOKENS = 10**9  # far above any real context, far below overflow (kvcal.fit.tables reads tables with it)
# Bounds of what a probe may say, the same wherever it is read (run folder, CSV, export):
# far above anything measured, far below where float sums overflow.
MAX_TTFT_MS = 86_400_000.0  # one day for one first token
MAX_BYTES_MOVED = 10**15  # a petabyte for one prefix
MAX_QUEUE = 10**9
MIN_RESAMPLES = 100  # fewer make a percentile interval's ends mostly noise

PROBE_SCHEMA: Final = "kvcal.probe/1"
RUN_SCHEMA: Final = "kvcal.run/4"
FIT_SCHEMA: Final = "kvcal.fit/2"


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
    prefix_tokens: int = Field(gt=0, le=MAX_TOKENS)
    leg: Leg
    rep: int = Field(ge=0)
    ttft_ms: float | None = Field(ge=0, le=MAX_TTFT_MS, allow_inf_nan=False,
                                  description="Consumer time to first streamed token, max_tokens=1.")
    bytes_moved: int | None = Field(ge=0, le=MAX_BYTES_MOVED, description="KV bytes the transport moved for this probe (metric delta); None if unknowable.")
    bytes_metric: str | None = Field(None, max_length=1000, description="The counter bytes_moved was read from, e.g. 'consumer/vllm:kv_offload_tiering_read_bytes_total{tier=\"1:p2p\"}' (the P2P tier's own) or a general load counter standing in on an engine without it; None where none was read.")
    expected_bytes: int | None = Field(None, ge=0, le=MAX_BYTES_MOVED, description="prefix_tokens x KV bytes per token, when the layout is known.")
    producer_ttft_ms: float | None = Field(None, ge=0, le=MAX_TTFT_MS, allow_inf_nan=False,
                                           description="Pull leg: time the producer took to hold the prefix.")
    overhead_ms: float | None = Field(None, ge=-MAX_TTFT_MS, le=MAX_TTFT_MS, allow_inf_nan=False,
                                      description="kvcal's own time for this probe beyond the engine's TTFT.")
    valid: bool
    invalid_reason: str | None = None
    started_at: str = Field(description="ISO-8601 UTC wall time the probe started.")
    metrics_delta: dict[str, Annotated[float, Field(allow_inf_nan=False)]] = Field(
        default_factory=dict, description="Raw engine counter deltas over the probe.")
    warmup: bool = Field(False, description="A discarded warm-up of a new (length, leg) shape; never fitted.")
    pair: str | None = Field(None, max_length=200, description="Multi-pair campaign: the pair's name; None: one pair.")
    link_class: str | None = Field(None, max_length=200, description="Multi-pair campaign: the pair's link class.")
    session: Session | None = Field(None, description="Pulls: cold (first pull on a session kvcal created) or warm; "
                                    "None for recompute probes, warm-ups and runs before sessions were recorded.")
    host_busy: float | None = Field(None, ge=0, allow_inf_nan=False, description="Share (0-1) of the engines' CPUs (or GPUs) other processes took "
                                    "since the previous probe; None where not measured (kvcal.sweep.disturbance).")
    load_state: str | None = Field(None, description="The load the sweep set up for this probe (idle, source-busy, computing-busy, both-busy); None in runs before load states.")
    source_waiting: int | None = Field(None, ge=0, le=MAX_QUEUE, description="vllm:num_requests_waiting of the producer (the KV source) just before the probe; None if not read.")
    computing_waiting: int | None = Field(None, ge=0, le=MAX_QUEUE, description="vllm:num_requests_waiting of the consumer (the computing pod) just before the probe; None if not read.")
    adaptive_round: int | None = Field(None, ge=0, description="Adaptive sweep: the round whose design chose this probe.")
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
    transport: str | None = Field(None, description="How the consumer pulled KV, e.g. 'nixl-pd', 'p2p-tier'; None for sim.")
    block_size: int | None = Field(None, gt=0, description="KV block size in tokens.")
    kv_bytes_per_token: int | None = Field(None, gt=0, description="KV bytes one token occupies on one engine.")
    kv_dtype: str | None = Field(None, description="KV cache dtype the engines were started with (--kv-cache-dtype); None: the model's.")
    max_num_batched_tokens: int | None = Field(None, gt=0, description="The engines' --max-num-batched-tokens (their prefill chunk), when kvcal passed one.")
    accelerator: str | None = Field(None, description="GPU name, or the CPU model on a CPU engine.")
    device_count: int | None = Field(None, ge=0, description="Devices each engine ran on.")
    tensor_parallel_size: int | None = Field(None, ge=1, description="Tensor-parallel size of each engine.")
    python_hash_seed: int | None = Field(None, ge=0, description="PYTHONHASHSEED of both engines (block hashes match only when equal).")
    kv_transfer_config: dict[str, dict[str, Any]] | None = Field(None, description="--kv-transfer-config per role ('producer', 'consumer').")
    engine_versions: dict[str, str | None] | None = Field(None, description="Versions of the engine stack (vllm, nixl, torch).")
    ucx_env: dict[str, str] | None = Field(None, description="UCX_* variables the launched engines inherited (they choose NIXL's link).")
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
    mode: Literal["launch", "attach"] | None = Field(None, description="Whether kvcal launched the engines or attached to them.")
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
    load_state: str | None = Field(None, description="The load state of a loaded sweep (kvcal.sweep.load); None otherwise.")
    adaptive_round: int | None = Field(None, ge=0, description="Adaptive sweep: the round that chose the probe.")
    adaptive_reason: str | None = Field(None, description="Adaptive sweep: why that round chose it.")
    pair: str | None = Field(None, max_length=200, description="Multi-pair campaign: the pair that serves the probe.")
    link_class: str | None = Field(None, max_length=200, description="Multi-pair campaign: that pair's link class.")


class RunManifest(Record):
    """``run.json``: resolved settings, setup and provenance of one sweep run.

    ``kvcal.run/1`` (setup facts at the top level and in the provenance), ``kvcal.run/2`` (no pair facts)
    and ``kvcal.run/3`` (no pairs or sessions) files are upgraded on read by :func:`kvcal.records_v1.upgrade_run`.
    """

    schema_: Literal["kvcal.run/4"] = Field(RUN_SCHEMA, alias="schema")
    name: str
    created_at: str
    settings: SweepConfig = Field(description="The resolved sweep settings (flags merged over the campaign file).")
    setup: RunSetup = Field(description="What the run measured on; fit.json copies it.")
    pair: PairFacts = Field(default_factory=PairFacts, description="What the pair was (mode, device, per-role placement); "
                            "a version 2 run's is read from its provenance.")
    provenance: dict[str, Any] = Field(description="Free-form: kvcal/vLLM/NIXL/torch versions, host, UCX env, command line, the pair's own account.")
    plan: list[PlannedProbe] = Field(description="The shuffled probe plan; resume replays it.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return upgrade_run(data)


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

    @model_validator(mode="after")
    def _finite_curve(self) -> CurveFit:
        for name in ("intercept_ms", "per_token_us", "per_token2_ns"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)}")
        return self

    @property
    def coefficients(self) -> tuple[float, float, float]:
        """(intercept_ms, per_token_us, per_token2_ns), the order :mod:`kvcal.cost_curve` takes."""
        return self.intercept_ms, self.per_token_us, self.per_token2_ns


class FitSettings(Record):
    """The fit's statistical settings, declared once with their bounds and passed whole through the fit:
    ``kvcal fit``'s and plot's defaults and the adaptive campaign's stop fits are :data:`FIT_DEFAULTS`."""

    confidence: float = Field(0.9, gt=0, lt=1, description="Level of the bootstrap intervals.")
    seed: int = Field(0, ge=0, json_schema_extra={"must": "be non-negative"}, description="Seeds the bootstrap.")
    # Past a million resamples a percentile interval has long settled and the bootstrap's memory is tens of GB.
    n_resamples: int = Field(2000, ge=0, le=1_000_000, description="Bootstrap resamples (0: no intervals).")

    @field_validator("n_resamples")
    @classmethod
    def _enough_for_an_interval(cls, n_resamples: int, info: ValidationInfo) -> int:
        if 0 < n_resamples < MIN_RESAMPLES:
            level = f"{info.data['confidence']:.0%} " if "confidence" in info.data else ""
            raise ValueError(f"{n_resamples} resamples are too few for a {level}interval; use at least {MIN_RESAMPLES}")
        return n_resamples


FIT_DEFAULTS = FitSettings()


class FitSource(Record):
    """Where a fit's probes came from (the setup they measured is :class:`RunSetup`)."""

    path: str | None = Field(None, description="The input: a run folder, probe CSV or llm-d Job log; None when built in memory.")
    kind: Literal["run-folder", "probe-csv", "llmd-table", "sim", "test", "observational"] | None = None
    run: str | None = Field(None, description="The run's name (run folders).")


class BootstrapSummary(Record):
    """How the intervals were made, and the resamples behind them (bands, compare)."""

    n_resamples: int = Field(0, ge=0)
    seed: int = 0
    method: str | None = None
    methods: dict[str, str] = Field(default_factory=dict, description="Resampling scheme per leg.")
    no_crossover_share: float | None = None
    status_shares: dict[str, float] = Field(default_factory=dict)
    quadratic_share: float | None = None
    residual_df: int | None = None
    t_expansion: float | None = None
    break_even_ci_bounds: list[float | None] | None = Field(None, description="Unrounded interval ends; None above means open.")
    break_even_samples: list[float | None] = Field(default_factory=list, description="Per resample; None where no break-even.")
    recompute_samples: dict[str, list[float | None]] | None = Field(None, description="Coefficient name -> per-resample value.")
    pull_samples: dict[str, list[float | None]] | None = None

    def leg_samples(self, leg: str) -> dict[str, list[float | None]] | None:
        """The coefficient samples of ``leg`` ('recompute' or 'pull'), if kept."""
        return self.recompute_samples if leg == "recompute" else self.pull_samples if leg == "pull" else None


class LengthSummary(Record):
    """One measured length in ``fit.json``: each leg's median and whether the pull won there."""

    prefix_tokens: int
    recompute_ms: float | None = Field(description="Median recompute TTFT (ms); None when the leg lacks the length.")
    pull_ms: float | None = Field(description="Median pull TTFT (ms); None when the leg lacks the length.")
    n_recompute: int
    n_pull: int
    pull_won: bool | None = Field(description="The pull's median beat recompute's.")
    pull_won_measurably: bool | None = Field(description="...by more than the noise allows (kvcal.fit.wins).")


class HostDisturbance(Record):
    """How much of the engines' compute other processes took during the sweep (kvcal.sweep.disturbance)."""

    resource: str = Field(description="What was watched, e.g. 'cpu cores 0,1' or 'gpu 0,1'.")
    bound: float = Field(description="Per-probe share above which a probe counts as disturbed.")
    run_bound: float = Field(description="Share of disturbed probes above which the run is disturbed.")
    n_measured: int
    median: float | None
    max: float | None
    disturbed_probes: list[str] = Field(default_factory=list, description="Probe ids over the bound, with their share.")
    disturbed: bool


class SlowMode(Record):
    """A leg whose slow probes are a common second mode, not a rare stall (kvcal.fit.modes)."""

    leg: Literal["recompute", "pull"]
    share: float = Field(description="Share of the leg's probes in the slow mode (0-1).")
    ratio: float = Field(description="Slow/fast TTFT ratio (the slow mode's typical time over the fast curve's).")
    n_slow: int
    n_probes: int
    lengths: list[int] = Field(description="Prefix lengths at which slow probes were measured.")
    separation_sd: float = Field(description="The slow mode's excess in units of the fast mode's noise sd.")
    slow_probes: list[list[int]] = Field(default_factory=list, description="[prefix_tokens, rep] of each slow probe.")
    mean_fitted: bool = Field(description="True when the leg's curve is its mean cost (the fast curve x (1 + share x (ratio - 1))) instead of the robust fast curve.")


class TimeTrend(Record):
    """A drift of one leg's residuals over the run's time order (the host slowing down or speeding up)."""

    leg: Literal["recompute", "pull"]
    change: float = Field(description="Fitted relative change of TTFT from the first probe to the last.")
    p_value: float
    order_source: str = Field(description="Where the time order came from: order, started_at.")


class FitResult(Record):
    """``fit.json``: the fitted curves, the break-even and how sure we are of it.

    A ``kvcal.fit/1`` file (a free-form ``source``) is upgraded on read by
    :func:`kvcal.records_v1.upgrade_fit`.
    """

    schema_: Literal["kvcal.fit/2"] = Field(FIT_SCHEMA, alias="schema")
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
    pulls_by_proof: dict[str, int] = Field(default_factory=dict, description="Valid pulls fitted, counted by the counter that proved their bytes (probes' bytes_metric); empty where probes name none.")
    bootstrap: BootstrapSummary = Field(default_factory=BootstrapSummary)
    setup: RunSetup = Field(default_factory=RunSetup, description="For a run folder: run.json's setup, unchanged.")
    source: FitSource = Field(default_factory=FitSource, description="The input the probes came from (path, kind, run).")
    per_length: list[LengthSummary] = Field(default_factory=list, description="Medians and wins per measured length.")
    pull_won_from_tokens: int | None = Field(None, description="Shortest measured length from which the pull's median won at every longer length.")
    n_duplicates_collapsed: int = Field(0, description="Rows identical to another in length, leg, rep and TTFT, dropped.")
    n_warmup_excluded: int = Field(0, description="First-in-time probes excluded for a significant warm-up effect.")
    host_disturbance: HostDisturbance | None = Field(None, description="Other processes' share of the engines' compute, when measured.")
    cost_model: CostModelFit | None = Field(None, description="The router's costModel constants fitted under load (loaded runs, or --per-request/--epp-log).")
    slow_modes: list[SlowMode] = Field(default_factory=list, description="Legs whose slow probes form a common mode (kvcal.fit.modes).")
    fast_break_even_tokens: float | None = Field(None, description="Break-even of the fast modes (robust fits) when a slow mode made the curves mean costs.")
    unresolved_slow: SlowMode | None = Field(None, description="Slow pulls the robust fit set aside, too few to tell a stall from a mode: the break-even is the robust one and its interval reaches up to the mean cost with them (kvcal.fit.modes).")
    time_trends: list[TimeTrend] = Field(default_factory=list, description="Significant drifts of the residuals in time order.")
    mean_cost: MeanCostSummary | None = Field(None, description="Each leg's mean cost (what the router pays) over its curve; None in older files: the curves.")
    session_cost: SessionCost | None = Field(
        None, description="What a fresh session adds to the first pull (cold probes); None where none was measured.")
    classes: dict[str, ClassFit] | None = Field(None, description="Multi-class campaign: each link class's own fit; "
                                                  "None for one class (docs/method.md, link classes).")
    class_difference: ClassDifference | None = Field(
        None, description="Multi-class campaign: whether the classes' pull curves differ (pool them when not).")
    kvcal_version: str
    created_at: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return upgrade_fit(data)

    @model_validator(mode="after")
    def _plausible(self) -> FitResult:
        """What emit-config and compare act on must be a number kvcal could have written (a hand-edited file may not be)."""
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must lie between 0 and 1, got {self.confidence}")
        be, ci = self.break_even_tokens, self.break_even_ci
        if be is not None and not (math.isfinite(be) and abs(be) <= MAX_TOKENS * 1e3):
            raise ValueError(f"break_even_tokens {be} is not a plausible token count")
        if ci is not None and (len(ci) != 2 or not all(math.isfinite(v) for v in ci) or ci[0] > ci[1]):
            raise ValueError(f"break_even_ci must be [lower, upper] with lower <= upper, got {ci}")
        if self.status == "crossover" and (be is None or be < 0 or (ci is not None and ci[0] < 0)):
            raise ValueError(f"a crossover needs a break-even and an interval of 0 tokens or more, got {be} in {ci}")
        if len(self.measured_range) != 2 or not 0 < self.measured_range[0] <= self.measured_range[1] <= MAX_TOKENS:
            raise ValueError(f"measured_range must be [shortest, longest] within 1-{MAX_TOKENS} tokens, got {self.measured_range}")
        for name in ("smallest_pull_win_tokens", "pull_won_from_tokens", "block_size"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= MAX_TOKENS:
                raise ValueError(f"{name} must lie within 1-{MAX_TOKENS} tokens, got {value}")
        return self


class ClassFit(Record):
    """One link class of a multi-pair campaign: the contract's figures and the class's whole fit (emit reads it)."""

    pairs: list[str] = Field(description="The campaign's pairs of this class.")
    break_even_tokens: float | None
    break_even_ci: list[float] | None
    pull_fixed_ms: float = Field(allow_inf_nan=False, description="The warm pull curve's fixed cost.")
    pull_us_per_token: float = Field(allow_inf_nan=False, description="The warm pull curve's cost per token.")
    session_cost_ms: float | None = Field(description="What a fresh session adds to a first pull; None if unmeasured.")
    session_cost_ci: list[float] | None = Field(description="Its interval; None with fewer than two cold samples.")
    fit: FitResult = Field(description="The class's own fit (its probes alone), as one-class fit.json holds it.")


FitResult.model_rebuild()

