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


class ScaleParts(Record):
    """What one leg's scale is made of, so its draws can be redrawn (kvcal.fit.mean_cost.scale_draws):
    ``exp(bulk_log_mean + bulk_sd^2 / 2) x (1 + tail_rate x tail_size)``."""

    bulk_log_mean: float = Field(description="Mean log ratio of the bulk's probes to the curve.")
    bulk_sd: float = Field(ge=0, description="The bulk's spread (log scale): pure error within lengths.")
    bulk_df: int = Field(ge=1, description="Degrees of freedom of bulk_sd, the df of its chi-square draws.")
    n_probes: int = Field(ge=1, description="The leg's probes.")
    tail_probes: int = Field(0, ge=0, description="The leg's own tail (stalls, a slow mode's probes beyond 5.4 sd).")
    tail_rate: float = Field(0.0, ge=0, le=1, description="The tail's share charged: its own, or shrunk.")
    tail_weight: float = Field(
        0.0, ge=0, description="Probes behind tail_rate (n, plus the shrinkage prior's): its Beta draws' weight."
    )
    tail_size: float | None = Field(
        None,
        ge=-1,
        description="A tail probe's mean excess over the bulk, a ratio (None: no tail; below 0: fast outliers).",
    )
    tail_size_sd: float | None = Field(None, ge=0, description="Standard error of log(tail_size).")
    shrunk: bool = Field(False, description="The tail was shrunk towards the other leg's (both legs had one).")


class MeanCostSummary(Record):
    """Each leg's mean cost as its fitted curve times a scale (kvcal.fit.mean_cost), and the lengths where the
    curves misfit (where the threshold rule decides on measured means)."""

    recompute_scale: float = Field(gt=0, description="Mean cost over the fitted recompute curve (1: it is the mean).")
    pull_scale: float = Field(gt=0, description="Mean cost over the fitted pull curve.")
    recompute_scale_se: float = Field(0.0, ge=0, description="Standard error of log(recompute_scale).")
    pull_scale_se: float = Field(0.0, ge=0, description="Standard error of log(pull_scale).")
    per_length: list[MeanLength] = Field(default_factory=list, description="Measured mean costs per length, ascending.")
    recompute_parts: ScaleParts | None = Field(
        None, description="What recompute_scale is made of, for its draws; None in older files (lognormal draws)."
    )
    pull_parts: ScaleParts | None = Field(None, description="What pull_scale is made of, as for recompute.")
