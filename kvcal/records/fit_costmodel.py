"""The router's ``costModel`` constants as fit.json holds them (a part of :class:`kvcal.records.fit.FitResult`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kvcal.records.run import Record


class Estimate(Record):
    """A fitted constant and its bootstrap interval (``ci`` None when no interval was computed)."""

    value: float
    ci: list[float] | None = Field(None, description="[low, high] at the fit's confidence.")


class CostModelDiagnostics(Record):
    """How well the data separate the cost model's constants (see kvcal.fit.costmodel)."""

    condition_number: float | None = Field(
        None,
        description=(
            "Condition of the column-scaled design with T free: huge when F and T are collinear (one pull size)."
        ),
    )
    n_pull_sizes: int = Field(0, description="Distinct pulled token counts.")
    busy_source_pull_share: float | None = Field(None, description="Share of pulls whose source queue was busy.")
    busy_computing_pull_share: float | None = Field(None, description="Share of pulls whose computing pod was busy.")
    busy_computing_share: float | None = Field(None, description="Share of all requests whose computing pod was busy.")
    counts: dict[str, int] = Field(
        default_factory=dict, description="Requests per measured class, e.g. 'pull/source-busy'."
    )


class CostModelFit(Record):
    """The router's ``costModel`` constants fitted under load, each with its interval.

    Model (ms): ttft = base + recompute_shape(uncached) + q*busy(c)
    + pulled*(F + S*busy(s) + Q*busy(c) + T*delta), with recompute_shape and T from the
    idle curves; busy(x) = waiting queue of x >= busyQueueThreshold, as measured.
    """

    transferFixedMs: Estimate = Field(description="F: fixed cost of a pull above the request's base, ms.")
    sourceWaitMs: Estimate = Field(description="S: extra pull cost when the source's queue is busy, ms.")
    requeueMs: Estimate = Field(description="Q: extra pull cost when the computing pod's queue is busy, ms.")
    prefillMicrosecondsPerToken: Estimate = Field(description="P: recompute cost per uncached token (idle curve), us.")
    transferMicrosecondsPerToken: Estimate = Field(description="T: pull cost per pulled token (idle curve), us.")
    busyQueueThreshold: int = Field(ge=1, description="Waiting requests at or above which a pod counts as busy.")
    base_ms: Estimate = Field(description="base: the request's fixed cost, ms.")
    busy_computing_ms: Estimate = Field(description="q: extra cost of any request on a busy computing pod, ms.")
    design: Literal["designed", "observational"]
    confidence: float
    n_requests: int
    n_resamples: int
    diagnostics: CostModelDiagnostics = Field(default_factory=CostModelDiagnostics)
    inputs: list[str] = Field(
        default_factory=list,
        description="Observational fits: the per-request files, the EPP log and the idle fit read.",
    )
    warnings: list[str] = Field(default_factory=list)
