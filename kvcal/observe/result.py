"""``kvcal observe``'s output record (schema kvcal.observe/1): the window, each pod's and the fleet's figures."""

from __future__ import annotations

import math
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

OBSERVE_SCHEMA: Final = "kvcal.observe/1"
FIGURE_NAMES = (
    "pull_share",
    "local_hit_share",
    "computed_share",
    "bytes_per_pulled_token",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "queue_p90",
    "requests_per_s",
)
COST_NAMES = ("pull_ms_per_token", "pull_bytes_per_s", "pull_failure_rate", "prefill_ms_per_token")
"""The production costs (kvcal.observe.costs; their series and ratios in kvcal.observe.catalog)."""


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


class Observed(BaseModel):
    """One figure: its value, how many samples it rests on, and why it is missing (value None) when it is."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float | None
    samples: int = Field(ge=0, description="Counters and the queue: the scrapes read; TTFT: the requests observed.")
    missing: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_number_is_missing(cls, data: Any) -> Any:
        """A value that is not a finite number is no figure: missing, with the reason (never NaN in a record)."""
        if isinstance(data, dict) and data.get("value") is not None and not _finite(data["value"]):
            return {**data, "value": None, "missing": data.get("missing") or f"not a finite number ({data['value']})"}
        return data


class BaseFigures(BaseModel):
    """The shares, bytes, TTFT, queue and rate (kvcal.observe.figures)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    pull_share: Observed = Field(description="Share of prompt tokens served from a peer.")
    local_hit_share: Observed = Field(description="Share of prompt tokens from the pod's own caches.")
    computed_share: Observed = Field(description="Share of prompt tokens prefilled.")
    bytes_per_pulled_token: Observed = Field(description="Bytes the pulls moved per prompt token pulled.")
    ttft_p50_ms: Observed = Field(description="Median time to first token, from the engines' histogram.")
    ttft_p90_ms: Observed = Field(description="p90 of the time to first token, from the engines' histogram.")
    ttft_p99_ms: Observed = Field(description="p99 of the time to first token, from the engines' histogram.")
    queue_p90: Observed = Field(description="p90 of the waiting requests, every scrape of every pod pooled.")
    requests_per_s: Observed = Field(description="Requests the engines finished per second.")


class Figures(BaseFigures):
    """Every figure of a pod or of the fleet: the base figures and the production costs."""

    pull_ms_per_token: Observed = Field(
        description="The pulling engine's transfer time per pulled token (NIXL: over TP ranks, divided by TP): "
        "the wire's share of a pull, not its TTFT."
    )
    pull_bytes_per_s: Observed = Field(description="Bytes the pulls moved over their transfer time.")
    pull_failure_rate: Observed = Field(
        description="NIXL: failed over attempted transfers; P2P tier: failed promotion jobs over attempted chunks."
    )
    prefill_ms_per_token: Observed = Field(
        description="Prefill time per computed prompt token; missing on P/D decode pods."
    )


class _Named(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(description="The series' pod label, else its instance.")


class PodFigures(Figures, _Named):
    """One pod's figures, its name first (pydantic orders fields from the last base)."""


class TimeWindow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    start: str = Field(description="RFC 3339, UTC.")
    end: str


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    pod: str | None = Field(None, description="The pod the check is about; null: fleet-wide.")
    observed: float | None
    predicted: list[float] | None = Field(description="[low, high]: the prediction's interval, before the tolerance.")
    tolerance: str
    verdict: Literal["ok", "outside", "unknown"]
    reason: str

    @model_validator(mode="before")
    @classmethod
    def _no_value_is_unknown(cls, data: Any) -> Any:
        """NaN never passes a gate: a verdict on an observed value or a prediction that is not a finite number
        is ``unknown`` (every check of observe is built through here, whichever module judges it)."""
        if isinstance(data, dict) and data.get("verdict") in ("ok", "outside"):
            numbers = [data.get("observed"), *(data.get("predicted") or [])]
            if not all(_finite(x) for x in numbers):
                return {**data, "verdict": "unknown", "reason": f"no finite value to judge ({data.get('reason')})"}
        return data


class Proposal(BaseModel):
    """``--propose``: the threshold the production costs imply, beside the deployed one (kvcal.observe.propose)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    threshold: int | None = Field(description="emit-config's threshold on the fit adjusted to production costs.")
    interval: list[int | None] | None = Field(
        description="[low, high] from batch means over the window's sub-windows; null end: no P2P there."
    )
    deployed: int | None = Field(description="The deployed threshold (--deployed or --values), when given.")
    regret_pct_of_deployed: float | None = Field(
        description="Expected regret of the deployed threshold on the adjusted fit, % of TTFT: what the move is worth."
    )
    regret_ms_of_deployed: float | None = None
    pull_ms_per_token_delta: float | None = Field(
        description="Production minus calibration transfer time per token, added to the pull slope."
    )
    prefill_ratio: float | None = Field(description="Production over calibration prefill time per token.")
    batches: int = Field(ge=0, description="Sub-windows the interval's batch means are taken over.")
    pulls: float = Field(ge=0, description="Pulls in the window (NIXL transfers per rank, P2P-tier chunks).")
    refused: str | None = Field(None, description="Why no threshold is proposed (exit 3), when none is.")


class ObserveResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["kvcal.observe/1"] = Field(OBSERVE_SCHEMA, alias="schema")
    kvcal_version: str
    prometheus: str
    selector: str | None
    window: TimeWindow
    pods: list[PodFigures]
    fleet: Figures
    ttft_buckets_ms: dict[str, list[float | None]] = Field(
        description="The fleet's TTFT quantiles: the histogram bucket [low, high] each lies in (its resolution); "
        "null high: the +Inf bucket."
    )
    checks: list[Check] = Field(default_factory=list)
    remeasure: list[str] = Field(default_factory=list, description="What to measure again for each check outside.")
    notes: list[str] = Field(default_factory=list)
    proposal: Proposal | None = Field(None, description="--propose: the threshold the production costs imply.")
