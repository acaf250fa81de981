"""What every output format's renderer gets (:class:`Render`) and the helpers several of them share."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from kvcal.emit.options import EmitOptions, EmitResult, canonical_transport
from kvcal.emit.renderers import FORMATS
from kvcal.emit.run_context import RunContext
from kvcal.emit.work_range import WorkRange, work_range
from kvcal.errors import InputError
from kvcal.records.fit import FitResult
from kvcal.threshold.choose import Threshold
from kvcal.threshold.class_mix import MixThreshold
from kvcal.threshold.delta_weights import Deltas


@dataclass(frozen=True)
class Render:
    """What every format's renderer gets: the fit, its run facts, the threshold (None for affinity), the options."""

    fit: FitResult
    ctx: RunContext
    t: Threshold | None
    options: EmitOptions
    origin: str
    notes: list[str]
    warnings: list[str]
    mix: MixThreshold | None = None  # a fit with link classes: the common threshold and each class's
    deltas: Deltas | None = None  # --deltas: what the threshold was priced over

    @property
    def threshold(self) -> Threshold:
        assert self.t is not None
        return self.t

    def result(
        self, text: str, notes: list[str] | tuple[str, ...] = (), warnings: list[str] | tuple[str, ...] = ()
    ) -> EmitResult:
        return EmitResult(text, self.t, tuple(self.notes + list(notes)), tuple(self.warnings + list(warnings)))


@dataclass(frozen=True)
class OutputFormat:
    """One --format: its renderer and what else differs per format (each module's ``FORMAT``)."""

    name: str
    render: Callable[[Render], EmitResult]
    needs_threshold: bool = True  # False: the renderer reads only the recompute curve (affinity)
    router_side: bool = True  # read by the EPP, which loads p2p-source-producer only with the alpha flag


def get_format(name: str) -> OutputFormat:
    """The format called ``name`` (its module loaded now); InputError naming the choices if unknown."""
    if name not in FORMATS:
        raise InputError(f"unknown --format {name!r}; choose one of {', '.join(FORMATS)}")
    fmt: OutputFormat = importlib.import_module(FORMATS[name].module).FORMAT
    return fmt


def with_threshold_comment(text: str, t: Threshold) -> str:
    """``text`` with a comment line after its first (their label): the threshold, its rule and what it costs."""
    first, _, rest = text.partition("\n")
    return f"{first}\n# kvcal: minCachedTokenDelta {t.min_cached_token_delta} ({t.cost_line()})\n{rest}"


def transport_of(ctx: RunContext, options: EmitOptions) -> str | None:
    name = options.transport or ctx.transport
    try:
        return canonical_transport(name) if name else None
    except InputError:
        return None


def work_range_of(r: Render) -> WorkRange:
    o = r.options
    assert o.ttft_penalty_ms is not None
    return work_range(r.fit, r.threshold, o.ttft_penalty_ms, o.max_model_len or r.ctx.max_model_len, r.deltas)
