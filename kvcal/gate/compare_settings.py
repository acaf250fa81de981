"""``kvcal compare``'s settings: one model whose fields declare their bounds, checked before either run is loaded.

Loading a run folder without a fit.json fits it (slow), so a bad tolerance or a threshold given
twice is refused here, by :class:`CompareConfig`'s construction, not after the fits.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, model_validator

from kvcal.errors import InputError
from kvcal.settings.from_flags import FlagModel

MAX_TOLERANCE = 10.0  # a tenfold move: past it, "tolerated" says nothing


class CompareConfig(FlagModel):
    """What ``kvcal compare`` was asked to do."""

    FLAGS: ClassVar[dict[str, str]] = {"deployed_tokens": "--deployed", "values_file": "--values"}

    baseline: Path
    current: Path
    tolerance: float = Field(
        0.1,
        gt=0,
        lt=MAX_TOLERANCE,
        json_schema_extra={"must": f"be a relative change in (0, {MAX_TOLERANCE:g})"},
        description="Relative break-even move tolerated.",
    )
    force: bool = False
    deployed_tokens: int | None = Field(
        None,
        ge=1,
        json_schema_extra={"must": "be >= 1 token (minCachedTokenDelta)"},
        description="The minCachedTokenDelta in production.",
    )
    values_file: Path | None = None
    markdown: Path | None = None
    plot: Path | None = None
    seed: int = Field(0, ge=0, description="Seeds the draws that estimate the change's interval.")
    probes: bool = False  # also load the probes (an HTML page shows them; the plot always does)

    @model_validator(mode="after")
    def _deployed_once(self) -> CompareConfig:
        if self.deployed_tokens is not None and self.values_file is not None:
            raise InputError("give the deployed threshold once: --deployed N or --values FILE, not both")
        return self
