"""The mean-cost records in ``fit.json``: what the router pays per leg, beside the robust curves.

Kept apart from :mod:`kvcal.fit_record` (which holds them in :class:`~kvcal.fit_record.FitResult`)
so that each module stays readable; :mod:`kvcal.fit.mean_cost` builds them and says how.
"""

from __future__ import annotations

from pydantic import Field

from kvcal.records import Record


class MeanLength(Record):
    """One measured length: each leg's measured mean cost and whether it contradicts the fitted mean curve."""

    prefix_tokens: int
    recompute_ms: float | None = Field(
        description="Measured mean cost of recompute at this length (ms): the fitted "
        "mean curve moved by this length's own residuals."
    )
    pull_ms: float | None = Field(description="Measured mean cost of the pull at this length (ms), as for recompute.")
    recompute_misfit: bool = Field(False, description="Recompute's residuals here lie beyond the noise: a misfit.")
    pull_misfit: bool = Field(False, description="The pull's residuals here lie beyond the noise: the curve misfits.")


class MeanCostSummary(Record):
    """Each leg's mean cost as its fitted curve times a scale (kvcal.fit.mean_cost), and the lengths where the
    curves misfit (where the threshold rule decides on measured means)."""

    recompute_scale: float = Field(gt=0, description="Mean cost over the fitted recompute curve (1: it is the mean).")
    pull_scale: float = Field(gt=0, description="Mean cost over the fitted pull curve.")
    recompute_scale_se: float = Field(0.0, ge=0, description="Standard error of log(recompute_scale).")
    pull_scale_se: float = Field(0.0, ge=0, description="Standard error of log(pull_scale).")
    per_length: list[MeanLength] = Field(default_factory=list, description="Measured mean costs per length, ascending.")
