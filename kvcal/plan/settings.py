"""``kvcal plan``'s settings: one model whose fields declare their bounds, checked before the prior is built.

Building the prior from a run folder without a fit.json fits it (slow), and each campaign is a
simulation, so a bad value is refused by :class:`PlanConfig`'s construction first. This module
loads no numbers (``kvcal plan --help`` shows its bounds); the command's one library call is
:func:`kvcal.plan.run.plan_from_config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, model_validator

from kvcal.errors import InputError
from kvcal.plan.limits import MAX_CAMPAIGNS, MAX_PLAN_MODEL_LEN
from kvcal.settings.from_flags import FlagModel


class PlanConfig(FlagModel):
    """What ``kvcal plan`` simulates: the prior (a run or fit, or profiles), the targets and how many campaigns."""

    FLAGS: ClassVar[dict[str, str]] = {"source": "--from"}

    source: Path | None = Field(None, description="An earlier run folder or fit.json: its curves are the prior.")
    model: str | None = Field(None, description="Model profile (as in kvcal predict), with hardware.")
    hardware: str | None = Field(None, description="Accelerator profile.")
    link: str | None = Field(None, description="Link profile; None: the accelerator's.")
    target_regret: float | None = Field(None, gt=0, lt=1, description="Adaptive: stop on this expected regret.")
    noise_cv: float | None = Field(None, gt=0, lt=2, description="Probe noise as a fraction of TTFT.")
    block_size: int | None = Field(
        None, ge=1, json_schema_extra={"must": "be a positive number of tokens"}, description="KV block size."
    )  # 0 once fell back to the default
    max_model_len: int | None = Field(
        None,
        ge=1,
        le=MAX_PLAN_MODEL_LEN,
        json_schema_extra={"low": "be a positive number of tokens"},
        description="Longest prompt allowed.",
    )
    target_width: float = Field(0.10, gt=0, lt=10, description="Relative interval width to reach.")
    campaigns: int = Field(10, ge=1, le=MAX_CAMPAIGNS, description="Simulated campaigns per design.")
    seed: int = Field(0, ge=0, description="Seed of the first simulated campaign.")

    @model_validator(mode="after")
    def _one_prior(self) -> PlanConfig:
        if self.source is not None and (self.model or self.hardware):
            raise InputError("give either --from (a run or fit) or --model with --hardware, not both")
        if self.source is None and not (self.model and self.hardware):
            raise InputError("no prior: give --from RUN_OR_FIT, or --model and --hardware (as for kvcal predict)")
        return self
