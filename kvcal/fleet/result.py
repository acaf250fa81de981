"""``kvcal fleet``'s output record (schema kvcal.fleet/1): rows per policy and threshold, the chosen thresholds, why.

Every figure is ``{"value", "ci"}``: the mean over the runs (simulation seeds x the
calibration's bootstrap resamples) and the interval at the fit's confidence over them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kvcal.errors import InputError
from kvcal.fleet.policies import policy_names

FLEET_SCHEMA: Final = "kvcal.fleet/1"


class Figure(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float
    ci: list[float] = Field(description="[low, high] over seeds and resamples, at the fit's confidence.")


class FleetRow(BaseModel):
    """One policy at one load."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: str = Field(description="The policy's name (kvcal.fleet.policies.POLICIES).")
    threshold: int | None = Field(description="minCachedTokenDelta for 'threshold' rows; else None.")
    goodput_rps: Figure = Field(
        description="Completed requests per second that met the TTFT SLO (all completed when none is set)."
    )
    completed_rps: Figure = Field(description="Completed requests per second, SLO or not.")
    input_tokens_per_s: Figure = Field(description="Prompt tokens of the completed requests per second.")
    ttft_p50_ms: Figure
    ttft_p90_ms: Figure
    ttft_p99_ms: Figure
    ttft_mean_ms: Figure
    prefill_queue_p90: Figure = Field(description="p90 of every pod's waiting requests, sampled each second.")
    pull_share: Figure = Field(description="Share of routed requests that pulled from a peer.")
    pulled_token_share: Figure | None = Field(
        None,
        description="Share of the prompt tokens the engines counted that "
        "came from a peer (what kvcal observe reads; None in older results).",
    )
    tokens_moved_per_s: Figure = Field(description="KV tokens pulled per second, fleet-wide.")
    busy_share: Figure = Field(description="Share of the window the engines spent in steps.")

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        if name not in policy_names():
            raise ValueError(f"unknown policy {name!r}; known: {', '.join(policy_names())}")
        return name


class LoadResult(BaseModel):
    """Every policy at one arrival rate (the load sweep behind the plot)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rate: float | None = Field(description="New sessions per second; None for a closed loop or a replayed trace.")
    rows: list[FleetRow]
    best_threshold: int | None


class FleetResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["kvcal.fleet/1"] = Field(FLEET_SCHEMA, alias="schema")
    kvcal_version: str
    fit: str
    workload: str
    pods: int
    rate: float | None = Field(description="New sessions per second at the given load (None: closed loop or trace).")
    concurrency: int | None
    duration_s: float
    seeds: int
    resamples: int = Field(description="Bootstrap resamples of the calibration used (0: the point fit only).")
    block_size: int
    best_threshold: int | None = Field(description="The fleet optimum by best_rule.")
    best_threshold_ci: list[int] | None = Field(
        description="The lowest and highest threshold tied with the best (a paired comparison over the same runs)."
    )
    best_rule: str
    recommended_threshold: int | None = Field(description="The simulated threshold recommended_rule picks (no margin).")
    recommended_steps: list[str] = Field(description="How recommended_threshold was chosen, step by step.")
    recommended_rule: str | None = Field(
        None,
        description="The rule behind recommended_threshold, as a sentence "
        "(None in a result written before the rule was recorded).",
    )
    recommended_reason: str | None = Field(
        description="Why recommended_threshold is not within one block of idle_threshold, or why there is none."
    )
    idle_threshold: int | None = Field(description="What kvcal emit-config FIT --format json gives.")
    idle_threshold_reason: str | None
    rows: list[FleetRow]
    loads: list[LoadResult] = Field(default_factory=list, description="--loads: every policy at each rate.")
    notes: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


def _figures(result: FleetResult) -> Iterator[tuple[str, Figure]]:
    """Every figure of every row, named as a message names it (``rows[2] (threshold 1024).ttft_p90_ms``)."""
    tables = [("rows", result.rows)] + [(f"loads[{i}].rows", load.rows) for i, load in enumerate(result.loads)]
    for where, rows in tables:
        for i, row in enumerate(rows):
            label = f"{where}[{i}] ({row.policy}{'' if row.threshold is None else f' {row.threshold}'})"
            for key in type(row).model_fields:
                figure = getattr(row, key)
                if isinstance(figure, Figure):
                    yield f"{label}.{key}", figure


def checked_result(result: FleetResult, name: str) -> FleetResult:
    """A fleet result read from a file, refused (naming the row and the figure) when a figure is no finite number
    or its interval is not two finite numbers in order, or its block size or a threshold is below 1: a damaged or
    hand-edited file is never judged as if valid (kvcal observe's gates, kvcal report's page)."""
    if result.block_size < 1 or any(r.threshold is not None and r.threshold < 1 for r in result.rows):
        raise InputError(f"{name}: its block size and thresholds must be positive (a damaged kvcal fleet result)")
    for where, figure in _figures(result):
        ci = figure.ci
        if not math.isfinite(figure.value) or len(ci) != 2 or not all(math.isfinite(x) for x in ci) or ci[0] > ci[1]:
            raise InputError(
                f"{name}: {where} is {figure.value} with the interval {ci}: a figure must be a finite number "
                "with an interval [low, high] of finite numbers, low <= high (a damaged kvcal fleet result)"
            )
    return result
