"""The simulated pair's true curves and noise, declared once.

The sweep's ``sim`` settings (:class:`kvcal.settings.sweep.SimSettings`) extend this record,
so the campaign file, the run.json settings and the simulated pair share one
declaration of every field, its bounds and its default (they resemble the tiny CPU
model's curves).

The curve arithmetic (numpy, through :mod:`kvcal.costs.cost_curve`) is imported inside the
methods: ``kvcal --help`` builds every flag from ``SweepConfig``, which extends this
record, and must not load the numeric stack.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvcal.files.yaml_guard import refuse_bool_numbers


class SimCosts(BaseModel):
    """True cost curves of the simulated pair: recompute quadratic, pull affine (ms at n tokens)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        return refuse_bool_numbers(cls, data)

    recompute_intercept_ms: float = Field(5.0, ge=0, description="Recompute's fixed cost.")
    recompute_per_token_us: float = Field(25.0, ge=0, description="Recompute's linear cost per token.")
    recompute_per_token2_ns: float = Field(
        0.012, ge=0, description="Recompute's quadratic (attention) cost per token^2."
    )
    pull_intercept_ms: float = Field(20.0, ge=0, description="The pull's fixed cost (handshake, producer round trip).")
    pull_per_token_us: float = Field(3.0, ge=0, description="The pull's cost per token (bytes over the link).")
    session_ms: float = Field(0.0, ge=0, description="The first pull on a fresh session pays this much more.")
    noise_cv: float = Field(
        0.05, ge=0, le=2, description="Coefficient of variation of the lognormal noise on every probe."
    )
    outlier_rate: float = Field(
        0.0, ge=0, le=1, description="Share of probes slowed by outlier_factor (scheduler hiccups)."
    )
    outlier_factor: float = Field(3.0, ge=1, description="How much an outlier probe is slowed.")
    source_wait_ms: float = Field(0.0, ge=0, description="Load states: a pull from a busy source gains this much.")
    requeue_ms: float = Field(
        0.0, ge=0, description="Load states: a pull onto a busy computing pod gains this much more."
    )
    busy_computing_ms: float = Field(
        0.0, ge=0, description="Load states: every probe on a busy computing pod gains this much."
    )

    @model_validator(mode="after")
    def _each_leg_costs_something(self) -> SimCosts:
        # All-zero coefficients made every probe 0 ms: the sweep recorded them and the fit
        # then refused them all as invalid, a run with nothing in it.
        for leg, coef in (("recompute", self.recompute_coef), ("pull", self.pull_coef)):
            if not any(coef):
                raise ValueError(
                    f"the simulated {leg} curve is 0 ms at every length; give it a positive intercept or per-token cost"
                )
        return self

    @property
    def recompute_coef(self) -> tuple[float, float, float]:
        return self.recompute_intercept_ms, self.recompute_per_token_us, self.recompute_per_token2_ns

    @property
    def pull_coef(self) -> tuple[float, float, float]:
        return self.pull_intercept_ms, self.pull_per_token_us, 0.0

    def recompute_ms(self, n: Any) -> Any:
        from kvcal.costs import cost_curve  # not at the top: see the module docstring

        return cost_curve.cost_ms(self.recompute_coef, n)

    def pull_ms(self, n: Any) -> Any:
        from kvcal.costs import cost_curve  # not at the top: see the module docstring

        return cost_curve.cost_ms(self.pull_coef, n)

    def true_break_even(self, upper: float = 1e7) -> float | None:
        """The exact break-even of the true curves (as the fit defines it); None if there is none below ``upper``."""
        from kvcal.costs import cost_curve  # not at the top: see the module docstring

        value = float(cost_curve.break_even_tokens(self.recompute_coef, self.pull_coef))
        return value if value <= upper else None
