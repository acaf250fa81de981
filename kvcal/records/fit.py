"""``fit.json``: the fit's record (curves, break-even, interval, and what they rest on) and its reader.

A base module because the fit's readers stand in every stage: the estimate's sanity
check, the host's disturbance summary, emit, the reports, the fleet and the pages all read a
fit.json. It stands on the ground floor (:mod:`kvcal.records.run`) and the record's parts
(:mod:`kvcal.records.fit_mean_cost`, :mod:`kvcal.records.fit_costmodel`, :mod:`kvcal.records.fit_links`,
:mod:`kvcal.records.fit_engine`),
and never on the sweep's settings or the simulator: reading a fit.json loads neither.
Older ``kvcal.fit/1`` files are upgraded on read (:mod:`kvcal.records.old_schemas`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from kvcal.errors import InputError
from kvcal.files.reading import load_json, read_text
from kvcal.records.fit_costmodel import CostModelFit
from kvcal.records.fit_engine import EngineSide, ProposedFrom
from kvcal.records.fit_links import ClassDifference, SessionCost
from kvcal.records.fit_mean_cost import MeanCostSummary
from kvcal.records.old_schemas import FIT_V1, upgrade_fit
from kvcal.records.run import MAX_TOKENS, Record, RunSetup

FIT_SCHEMA: Final = "kvcal.fit/2"
FIT_SCHEMAS = (FIT_V1, FIT_SCHEMA)
MIN_RESAMPLES = 100  # fewer make a percentile interval's ends mostly noise


class CurveFit(Record):
    """One leg's fitted cost curve: t(n) = intercept_ms + per_token_us*n/1e3 + per_token2_ns*n^2/1e6 (ms)."""

    model: Literal["affine", "quadratic"]
    intercept_ms: float
    per_token_us: float
    per_token2_ns: float
    ci: dict[str, list[float]] = Field(default_factory=dict, description="Bootstrap interval per coefficient.")
    alternatives: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Every candidate model's fit and score."
    )
    selection: str | None = Field(None, description="The criterion that chose ``model`` and its values.")
    downweighted: list[dict[str, Any]] = Field(
        default_factory=list, description="Probes the robust loss down-weighted."
    )
    noise_cv: float | None = Field(
        None, description="Robust (MAD) scale of the relative residuals: the probes' noise as a fraction of TTFT."
    )
    robust_f_scale: float | None = Field(
        None, description="Huber threshold in relative units; None when the fit was plain weighted least squares."
    )

    @model_validator(mode="after")
    def _finite_curve(self) -> CurveFit:
        for name in ("intercept_ms", "per_token_us", "per_token2_ns"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)}")
        return self

    @property
    def coefficients(self) -> tuple[float, float, float]:
        """(intercept_ms, per_token_us, per_token2_ns), the order :mod:`kvcal.costs.cost_curve` takes."""
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

    path: str | None = Field(
        None, description="The input: a run folder, probe CSV or llm-d Job log; None when built in memory."
    )
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
    break_even_ci_bounds: list[float | None] | None = Field(
        None, description="Unrounded interval ends; None above means open."
    )
    break_even_samples: list[float | None] = Field(
        default_factory=list, description="Per resample; None where no break-even."
    )
    recompute_samples: dict[str, list[float | None]] | None = Field(
        None, description="Coefficient name -> per-resample value."
    )
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
    """How much of the engines' compute other processes took during the sweep (kvcal.sweep.host_monitors)."""

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
    mean_fitted: bool = Field(
        description=(
            "True when the leg's curve is its mean cost (the fast curve x (1 + share x (ratio - 1))) instead of the "
            "robust fast curve."
        )
    )


class TimeTrend(Record):
    """A drift of one leg's residuals over the run's time order (the host slowing down or speeding up)."""

    leg: Literal["recompute", "pull"]
    change: float = Field(description="Fitted relative change of TTFT from the first probe to the last.")
    p_value: float
    order_source: str = Field(description="Where the time order came from: order, started_at.")


class FitResult(Record):
    """``fit.json``: the fitted curves, the break-even and how sure we are of it.

    A ``kvcal.fit/1`` file (a free-form ``source``) is upgraded on read by
    :func:`kvcal.records.old_schemas.upgrade_fit`.
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
    smallest_pull_win_tokens: int | None = Field(
        None, description="Smallest measured length where the pull's median beat recompute's."
    )
    pull_bandwidth_gbps: float | None = Field(None, description="Achieved pull bandwidth from bytes moved, when known.")
    pulls_by_proof: dict[str, int] = Field(
        default_factory=dict,
        description=(
            "Valid pulls fitted, counted by the counter that proved their bytes (probes' bytes_metric); empty where "
            "probes name none."
        ),
    )
    bootstrap: BootstrapSummary = Field(default_factory=BootstrapSummary)
    setup: RunSetup = Field(default_factory=RunSetup, description="For a run folder: run.json's setup, unchanged.")
    source: FitSource = Field(
        default_factory=FitSource, description="The input the probes came from (path, kind, run)."
    )
    per_length: list[LengthSummary] = Field(default_factory=list, description="Medians and wins per measured length.")
    pull_won_from_tokens: int | None = Field(
        None, description="Shortest measured length from which the pull's median won at every longer length."
    )
    n_duplicates_collapsed: int = Field(
        0, description="Rows identical to another in length, leg, rep and TTFT, dropped."
    )
    n_warmup_excluded: int = Field(0, description="First-in-time probes excluded for a significant warm-up effect.")
    host_disturbance: HostDisturbance | None = Field(
        None, description="Other processes' share of the engines' compute, when measured."
    )
    cost_model: CostModelFit | None = Field(
        None,
        description="The router's costModel constants fitted under load (loaded runs, or --per-request/--epp-log).",
    )
    slow_modes: list[SlowMode] = Field(
        default_factory=list, description="Legs whose slow probes form a common mode (kvcal.fit.modes)."
    )
    fast_break_even_tokens: float | None = Field(
        None, description="Break-even of the fast modes (robust fits) when a slow mode made the curves mean costs."
    )
    unresolved_slow: SlowMode | None = Field(
        None,
        description=(
            "Slow pulls the robust fit set aside, too few to tell a stall from a mode: the break-even is the robust "
            "one and its interval reaches up to the mean cost with them (kvcal.fit.modes)."
        ),
    )
    time_trends: list[TimeTrend] = Field(
        default_factory=list, description="Significant drifts of the residuals in time order."
    )
    mean_cost: MeanCostSummary | None = Field(
        None, description="Each leg's mean cost (what the router pays) over its curve; None in older files: the curves."
    )
    session_cost: SessionCost | None = Field(
        None, description="What a fresh session adds to the first pull (cold probes); None where none was measured."
    )
    classes: dict[str, ClassFit] | None = Field(
        None,
        description="Multi-class campaign: each link class's own fit; "
        "None for one class (docs/method.md, link classes).",
    )
    class_difference: ClassDifference | None = Field(
        None, description="Multi-class campaign: whether the classes' pull curves differ (pool them when not)."
    )
    engine_side: EngineSide | None = Field(
        None,
        description="Per-token pull and prefill costs the engines themselves counted over the probes "
        "(kvcal.fit.engine_side); None in older files.",
    )
    proposed_from: ProposedFrom | None = Field(
        None, description="A fit kvcal observe --propose adjusted to production costs: the window and the server."
    )
    kvcal_version: str
    created_at: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return upgrade_fit(data)

    @model_validator(mode="after")
    def _plausible(self) -> FitResult:
        """What emit-config and compare act on must be a number kvcal could have written (a hand-edited file
        may not be)."""
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
            raise ValueError(
                f"measured_range must be [shortest, longest] within 1-{MAX_TOKENS} tokens, got {self.measured_range}"
            )
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


def load_fit(path: str | Path) -> FitResult:
    """Read a fit.json (version 2, or version 1 upgraded); InputError with one line if it is missing or not one."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise InputError(f"{p}: no such file or folder")
    text = read_text(p, bom=True)  # FIFOs, folders, binary and unreadable files named (kvcal/files/reading.py)
    try:
        data = load_json(text)
    except RecursionError:
        raise InputError(f"{p}: not a kvcal fit.json (JSON nested too deeply)") from None
    except json.JSONDecodeError as err:
        truncated = " (truncated?)" if err.pos >= len(text.rstrip()) else ""
        raise InputError(
            f"{p}: not a kvcal fit.json (corrupt fit: not JSON{truncated}, {err.msg} at {err.pos})"
        ) from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema not in FIT_SCHEMAS:
        raise InputError(
            f"{p}: not a kvcal fit.json (schema {schema!r}, expected {' or '.join(map(repr, FIT_SCHEMAS))}); "
            "pass a fit.json or a run folder"
        )
    try:
        return FitResult.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(part) for part in first.get("loc", ()))
        where = f"{loc}: " if loc else ""
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise InputError(f"{p}: not a kvcal fit.json (corrupt fit: {where}{message})") from None
