"""``kvcal fit``'s settings: one model whose fields declare their bounds, checked before any probe is read.

The statistical settings are :class:`~kvcal.records.run.FitSettings` (confidence, seed, resamples),
declared once there and carried whole through the fit; :class:`FitConfig` adds what one
``kvcal fit`` is asked to do: which input, where fit.json goes, the setup a probe table does
not record, the cost model's busy threshold, or the three files of an observational fit.
:func:`run_fit` is the command's one library call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from kvcal.errors import InputError
from kvcal.fit import write_fit
from kvcal.fit.entry import fit_and_write
from kvcal.fit.observational import fit_observational
from kvcal.records.fit import FIT_DEFAULTS, FitResult, FitSettings
from kvcal.records.run import RunSetup
from kvcal.settings.from_flags import FlagModel, from_flags
from kvcal.settings.sweep_groups import DEFAULT_BUSY_QUEUE_THRESHOLD
from kvcal.transports import transport_names

# Field -> flag where the flag's name is not the field's (the rest are --field-name).
SETTINGS_FLAGS = {"n_resamples": "--resamples", "input": "INPUT"}


def fit_settings(**values: Any) -> FitSettings:
    """FitSettings from flags (``confidence``, ``seed``, ``n_resamples``); a value out of bounds is one InputError."""
    return from_flags(FitSettings, SETTINGS_FLAGS, **values)


class FitConfig(FlagModel):
    """One ``kvcal fit``: the input (or the observational fit's three files), the output and the settings."""

    FLAGS: ClassVar[dict[str, str]] = SETTINGS_FLAGS

    input: Path | None = Field(None, description="A run folder, probe CSV or llm-d Job log.")
    output: Path | None = Field(None, description="Where fit.json goes (None: beside the input).")
    settings: FitSettings = FIT_DEFAULTS
    model: str | None = Field(None, description="The model the probes measured (a probe table records none).")
    transport: str | None = Field(None, description="The pulls' transport (a probe table records none).")
    block_size: int | None = Field(
        None, ge=1, json_schema_extra={"must": "be a positive number of tokens"}, description="KV block size."
    )
    busy_queue_threshold: int | None = Field(None, ge=1, description="Cost model: a pod is busy at this queue.")
    per_request: list[Path] = Field(default_factory=list, description="inference-perf per-request files.")
    epp_log: Path | None = Field(None, description="The router's log with p2p decisions.")
    idle: Path | None = Field(None, description="The idle fit.json or run folder giving P and T.")

    @field_validator("transport")
    @classmethod
    def _known_transport(cls, transport: str | None) -> str | None:
        if transport is not None and transport not in transport_names():
            raise InputError(f"--transport must be one of {', '.join(transport_names())} (got {transport!r})")
        return transport

    @model_validator(mode="after")
    def _one_kind_of_input(self) -> FitConfig:
        if self.observational:
            if self.input is not None or not (self.per_request and self.epp_log and self.idle):
                raise InputError(
                    "the observational fit takes --per-request FILE (repeatable), --epp-log FILE and "
                    "--idle FIT_OR_RUN, and no INPUT"
                )
        elif self.input is None:
            raise InputError("give a run folder, probe CSV or llm-d table to fit (or --per-request/--epp-log/--idle)")
        return self

    @property
    def observational(self) -> bool:
        """Fit the cost model to production data (per-request timings and the router's log), not to a run."""
        return bool(self.per_request or self.epp_log or self.idle)

    @property
    def inputs(self) -> list[Path]:
        """Every file the command reads (an output may not be one of them)."""
        return [path for path in (self.input, *self.per_request, self.epp_log, self.idle) if path is not None]


def run_fit(config: FitConfig) -> tuple[FitResult, Path]:
    """What ``kvcal fit`` does: fit the input (or the production data) and write fit.json; the fit and its path."""
    if config.observational:
        assert config.epp_log is not None and config.idle is not None  # the model's validator holds it
        result = fit_observational(
            config.per_request,
            config.epp_log,
            config.idle,
            config.settings,
            threshold=config.busy_queue_threshold or DEFAULT_BUSY_QUEUE_THRESHOLD,
        )
        return result, write_fit(result, config.output or config.epp_log.with_name(f"{config.epp_log.stem}.fit.json"))
    assert config.input is not None
    supplied = RunSetup(model=config.model, transport=config.transport, block_size=config.block_size)
    return fit_and_write(
        config.input,
        config.output,
        config.settings,
        supplied=supplied,
        busy_queue_threshold=config.busy_queue_threshold,
    )
