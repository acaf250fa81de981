"""The engine side in ``fit.json``: what the engines themselves counted a pull and a prefill cost, per token.

The fit's curves come from TTFT; these figures come from the engines' own counters over
the same probes (:mod:`kvcal.engines.engine_costs` reads them, :mod:`kvcal.fit.engine_side`
summarises them): the pulling engine's transfer time (the wire's share of a pull) and the
computing engine's prefill time. ``kvcal observe`` compares a deployed fleet's counters
with them (:mod:`kvcal.observe.drift`), because the fleet exports the same counters and no TTFT
per leg. Kept apart from :mod:`kvcal.fit_record` so that each module stays readable.
"""

from __future__ import annotations

from pydantic import Field

from kvcal.records import Record


class EngineCost(Record):
    """One per-token cost as the engines counted it: the median over the probes, and how many probes."""

    value: float = Field(ge=0, allow_inf_nan=False, description="ms per token (median over the probes).")
    samples: int = Field(ge=1, description="Probes the median is taken over.")


class EngineSide(Record):
    """Per-token costs the engines counted during the calibration (None where they did not export them)."""

    pull_ms_per_token: EngineCost | None = Field(
        description="The pulling engine's transfer time per pulled token (NIXL: summed over TP ranks, divided by "
        "the TP size): the wire's share of a pull, not the TTFT slope."
    )
    prefill_ms_per_token: EngineCost | None = Field(
        description="The computing engine's prefill time per computed token, on the recompute probes."
    )


class ProposedFrom(Record):
    """A fit ``kvcal observe --propose`` adjusted to production costs: where they were read and how it moved."""

    prometheus: str = Field(description="The Prometheus server the production costs were read from.")
    selector: str | None = Field(description="The label matchers added to every query.")
    window_start: str = Field(description="RFC 3339, UTC.")
    window_end: str
    base_fit: str | None = Field(description="The calibration the adjustment started from (--fit).")
    pull_ms_per_token_delta: float = Field(
        allow_inf_nan=False,
        description="Production minus calibration transfer time per token, added to the pull slope.",
    )
    prefill_ratio: float = Field(
        gt=0,
        allow_inf_nan=False,
        description="Production over calibration prefill time per token: recompute's per-token terms scaled by it.",
    )
