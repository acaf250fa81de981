"""Link classes and session cost as fit.json holds them (parts of :class:`kvcal.records.fit.FitResult`).

A *session* is the transport's state between one producer and one consumer (the NIXL
handshake, the memory registration): the first pull on a fresh one pays for it once.
A probe record (:data:`kvcal.records.run.Session`) says ``session: cold`` for that first pull, ``warm`` for later pulls.
"""

from __future__ import annotations

from pydantic import Field

from kvcal.records.run import Record


class SessionCost(Record):
    """What a fresh session adds to a pull: cold TTFT minus the warm pull curve at the same length (ms)."""

    value_ms: float = Field(allow_inf_nan=False, description="Mean of the cold samples' excess over the warm curve.")
    ci: list[float] | None = Field(
        None, description="[low, high] at the fit's confidence (Student t over the samples); None with one sample."
    )
    n_cold: int = Field(ge=0, description="Cold samples in the estimate (first pulls on fresh sessions, bytes proven).")
    n_retried: int = Field(
        0,
        ge=0,
        description="Cold pulls that followed a failed handshake: recorded, kept out "
        "(a retry may find the set-up half done).",
    )
    lengths: list[int] = Field(default_factory=list, description="Prefix lengths of the cold samples.")
    pulls_by_proof: dict[str, int] = Field(
        default_factory=dict, description="Cold samples by the counter that proved their bytes."
    )


class ClassDifference(Record):
    """Whether the link classes' pull curves differ: if not, the classes may be pooled into one fit."""

    test: str = Field(
        description="How: an F test of one affine pull curve for all classes against one per class, "
        "on relative residuals."
    )
    statistic: float = Field(allow_inf_nan=False)
    p_value: float = Field(ge=0, le=1)
    differ: bool = Field(description="p_value below 1 - the fit's confidence.")
    classes: list[str]
