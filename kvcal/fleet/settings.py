"""``kvcal fleet``'s settings: every flag declared once here with its bounds, checked before any work.

A value out of bounds is one InputError naming the flag (exit 2, :class:`kvcal.settings.from_flags.FlagModel`),
before the fit is read or a run starts: a threshold of 10^400 tokens or a million seeds is refused here, not
after a simulation. ``max_simulated_requests`` is the cap on the study's size
(:mod:`kvcal.fleet.size`): a bigger study is refused unless the flag raises it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field, field_validator

from kvcal.files.writing import check_plot_name
from kvcal.fleet.help_facts import DEFAULT_MAX_SIMULATED_REQUESTS, MAX_PODS  # declared there for --help
from kvcal.fleet.parallel import MAX_JOBS, Executor, default_jobs
from kvcal.settings.from_flags import FlagModel

MAX_RATE = 1e5  # sessions per second, as the workload file's arrival.rate
MAX_THRESHOLD_TOKENS = 10**7  # as the workload's longest system prompt: no prompt reaches further
AUTO_THRESHOLDS = "auto"  # --thresholds' word for None: a spread around the break-even (kvcal.fleet.study)


class FleetConfig(FlagModel):
    """One ``kvcal fleet`` study: the files, the fleet's size, the policies tried and how many runs each."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
    FLAGS: ClassVar[dict[str, str]] = {
        "duration_s": "--duration",
        "ray_address": "--ray",
    }  # the others are --field-name

    fit_path: Path
    workload_path: Path
    pods: int = Field(8, ge=1, le=MAX_PODS, description="Engines in the fleet.")
    thresholds: list[Annotated[int, Field(ge=1, le=MAX_THRESHOLD_TOKENS)]] | None = Field(
        None, min_length=1, max_length=200, description=f"minCachedTokenDelta values to try (None: {AUTO_THRESHOLDS})."
    )
    rate: float | None = Field(None, gt=0, le=MAX_RATE, description="New sessions per second (replaces the arrival).")
    loads: list[Annotated[float, Field(gt=0, le=MAX_RATE)]] | None = Field(
        None, min_length=1, max_length=32, description="Rates of the load sweep (sessions per second)."
    )
    duration_s: float | None = Field(None, gt=0, le=86_400, description="Simulated seconds (replaces duration_s).")
    seeds: int = Field(3, ge=1, le=1000, description="Simulation seeds per policy.")
    resamples: int = Field(0, ge=0, le=1000, description="The calibration's bootstrap resamples per seed.")
    max_simulated_requests: int = Field(
        DEFAULT_MAX_SIMULATED_REQUESTS, ge=1, le=10**12, description="The most requests the whole study may simulate."
    )
    jobs: int | None = Field(None, ge=1, le=MAX_JOBS, description="Worker processes (None: the cores kvcal may use).")
    ray_address: str | None = Field(None, min_length=1, description="Run as Ray tasks: auto, local or an address.")
    plot: Path | None = Field(
        None, description="Where the plot goes; .png or .svg (the format is the extension; - : PNG on stdout)."
    )

    @field_validator("plot")
    @classmethod
    def _plot_format(cls, plot: Path | None) -> Path | None:
        if plot is not None:
            check_plot_name(plot, f"--plot {plot}")
        return plot

    def executor(self) -> Executor:
        """Where the study's runs execute (kvcal.fleet.parallel); checked (bounds, Ray importable) before work."""
        return Executor(jobs=self.jobs if self.jobs is not None else default_jobs(), ray_address=self.ray_address)

    def unique_thresholds(self) -> tuple[list[int] | None, str | None]:
        """The thresholds once each, in order, and a note naming the repeats (None when there are none)."""
        if self.thresholds is None:
            return None, None
        kept = list(dict.fromkeys(self.thresholds))
        if len(kept) == len(self.thresholds):
            return kept, None
        repeated = sorted({t for t in self.thresholds if self.thresholds.count(t) > 1})
        return kept, f"--thresholds repeated {', '.join(map(str, repeated))}: each is simulated once"
