"""Predict the pull-versus-recompute curves and the break-even from profiles alone (an estimate).

Stage owned: ``kvcal predict``. No engine runs; the curves come from a model profile,
an accelerator and a link (see docs/predict.md for every assumption):

    recompute(n) = overhead_ms + F(n) / (peak x devices x mfu)                    [ms]
    F(n)         = 2 x matmul_params x n + sum_t w_t x P_{window_t}(n)            [FLOP]
    pull(n)      = floor_ms + bytes(n) / (nominal x efficiency)                   [ms]
    bytes(n)     = kv_bytes_per_token x n + window_bytes_per_token x min(n, window)
    floor_ms     = overhead_ms + link.setup_ms   (the consumer still pays its fixed TTFT)
    min_transfer(n) = bytes(n) / nominal         (the wire alone: no prediction beats it)

Both curves are piecewise polynomials in n (quadratic recompute, linear pull) whose
pieces change only at window and top-k sizes, so the break-even, the smallest n with
recompute(n) >= pull(n), is solved exactly piece by piece with the quadratic formula.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from kvcal import __version__
from kvcal.costs.cost_curve import real_roots
from kvcal.errors import InputError
from kvcal.estimate.profiles import (
    Accelerator,
    KvLayout,
    Link,
    ModelProfile,
    attention_terms,
    kv_layout,
    matmul_params_per_token,
    prefill_flops,
)
from kvcal.settings.bounds import bounds_in_words, within

PREDICT_SCHEMA = "kvcal.estimate.predict/1"
DEFAULT_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)

Status = Literal["crossover", "pull-always-wins", "recompute-always-wins"]


def _bounded(default: Any = None, **bounds: float) -> Any:
    """A setting with its bounds (gt, ge, lt, le), declared once: ``__post_init__`` checks them and
    scripts/gen_help_tables.py writes them into PREDICT_SETTINGS, which ``--help`` quotes."""
    return field(default=default, metadata=bounds)


@dataclass(frozen=True)
class PredictSettings:
    """Overrides of the profile defaults; None means 'use the profile's value'."""

    kv_dtype: str | None = None
    mfu: float | None = _bounded(gt=0, le=1)
    devices: int = _bounded(1, ge=1)
    overhead_ms: float | None = _bounded(ge=0)
    pull_floor_ms: float | None = _bounded(ge=0)
    link_efficiency: float | None = _bounded(gt=0, le=1)
    sliding_window_full: bool = False
    lengths: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if value is not None and not within(value, item.metadata):
                flag = "--" + item.name.replace("_", "-")
                raise InputError(f"{flag} must {bounds_in_words(item.metadata)}, got {value}")
        if self.lengths is not None and (not self.lengths or min(self.lengths) < 1):
            raise InputError("--lengths needs positive token counts")


@dataclass(frozen=True)
class CostModel:
    """The two predicted curves of one (model, accelerator, link) setup; all times in ms."""

    model: ModelProfile
    layout: KvLayout
    flops_per_s: float
    overhead_ms: float
    pull_floor_ms: float
    pull_bytes_per_s: float
    nominal_bytes_per_s: float

    def recompute_ms(self, n: float) -> float:
        return self.overhead_ms + prefill_flops(self.model, n) / self.flops_per_s * 1e3

    def pull_ms(self, n: float) -> float:
        return self.pull_floor_ms + self.layout.bytes_for_prefix(n) / self.pull_bytes_per_s * 1e3

    def min_transfer_ms(self, n: float) -> float:
        return self.layout.bytes_for_prefix(n) / self.nominal_bytes_per_s * 1e3

    def breakpoints(self) -> list[int]:
        """Token counts where a piece of either curve ends (windows, top-k)."""
        points = {win for _, win in attention_terms(self.model) if win}
        if self.layout.window_tokens:
            points.add(self.layout.window_tokens)
        return sorted(points)

    def difference_poly(self, n_inside: float) -> tuple[float, float, float]:
        """(c0, c1, c2) of recompute(n) - pull(n) on the piece that holds ``n_inside``: exact, not fitted."""
        scale = 1e3 / self.flops_per_s
        c0 = self.overhead_ms - self.pull_floor_ms
        c1 = (
            2.0 * matmul_params_per_token(self.model) * scale
            - self.layout.bytes_per_token / self.pull_bytes_per_s * 1e3
        )
        c2 = 0.0
        for weight, window in attention_terms(self.model):
            if window is None or n_inside <= window:  # n(n+1)/2
                c1 += weight * scale / 2
                c2 += weight * scale / 2
            else:  # w(w+1)/2 + (n - w) w
                c0 += weight * scale * (window * (window + 1) / 2 - window * window)
                c1 += weight * scale * window
        if self.layout.window_tokens:
            per_ms = self.layout.window_bytes_per_token / self.pull_bytes_per_s * 1e3
            if n_inside <= self.layout.window_tokens:
                c1 -= per_ms
            else:
                c0 -= per_ms * self.layout.window_tokens
        return c0, c1, c2

    def difference_ms(self, n: float) -> float:
        return self.recompute_ms(n) - self.pull_ms(n)


def solve_break_even(cost: CostModel, upper_tokens: float) -> tuple[Status, float | None]:
    """Smallest n in [1, upper] where recompute(n) >= pull(n), solved exactly piece by piece."""
    if cost.difference_ms(1.0) >= 0:
        return "pull-always-wins", None
    edges = [1.0, *[float(b) for b in cost.breakpoints() if 1 < b < upper_tokens], float(upper_tokens)]
    for lo, hi in itertools.pairwise(edges):
        poly = cost.difference_poly((lo + hi) / 2)
        for root in real_roots(*poly):
            if lo <= root <= hi and cost.difference_ms(min(hi, root + max(1e-6, root * 1e-9))) >= 0:
                return "crossover", root
    return "recompute-always-wins", None


@dataclass(frozen=True)
class Prediction:
    """Everything ``kvcal predict`` reports; ``to_dict`` is the JSON contract."""

    model: str
    hardware: str
    link: str
    devices: int
    kv_dtype: str
    compute_dtype: str
    kv_bytes_per_token: int
    kv_bytes_window: int
    window_tokens: int | None
    kv_bytes_breakdown: dict[str, int]
    dense_flops_per_token: float
    status: Status
    break_even_tokens: float | None
    lengths: tuple[int, ...]
    recompute_ms_at: dict[str, float]
    pull_ms_at: dict[str, float]
    min_transfer_ms_at: dict[str, float]
    prefill_flops_per_token_at: dict[str, float]
    min_transfer_us_per_token: float
    pull_us_per_token: float
    assumptions: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"schema": PREDICT_SCHEMA, "estimate": True, "kvcal_version": __version__}
        out.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()})
        return out


def build_cost_model(model: ModelProfile, accelerator: Accelerator, link: Link, settings: PredictSettings) -> CostModel:
    """Resolve defaults and overrides into the two curves."""
    layout = kv_layout(model, settings.kv_dtype, sliding_window_full=settings.sliding_window_full)
    mfu = settings.mfu if settings.mfu is not None else accelerator.default_mfu
    overhead = settings.overhead_ms if settings.overhead_ms is not None else accelerator.fixed_overhead_ms
    floor = settings.pull_floor_ms if settings.pull_floor_ms is not None else overhead + link.setup_ms
    efficiency = settings.link_efficiency if settings.link_efficiency is not None else link.efficiency
    return CostModel(
        model=model,
        layout=layout,
        flops_per_s=accelerator.peak_tflops(model.compute_dtype) * 1e12 * settings.devices * mfu,
        overhead_ms=overhead,
        pull_floor_ms=floor,
        pull_bytes_per_s=link.nominal_bytes_per_s * efficiency,
        nominal_bytes_per_s=link.nominal_bytes_per_s,
    )


def predict(
    model: ModelProfile, accelerator: Accelerator, link: Link, settings: PredictSettings | None = None
) -> Prediction:
    """Predicted curves and break-even for ``model`` on ``devices`` x ``accelerator`` pulling over ``link``."""
    settings = settings or PredictSettings()
    cost = build_cost_model(model, accelerator, link, settings)
    upper = model.max_position_embeddings
    lengths = tuple(sorted(set(settings.lengths or [n for n in DEFAULT_LENGTHS if n <= upper] or [upper])))
    status, break_even = solve_break_even(cost, upper)

    def at(fn: Any) -> dict[str, float]:
        return {str(n): round(float(fn(n)), 6) for n in lengths}

    fp8_fallback = model.compute_dtype == "fp8" and accelerator.fp8_dense_tflops is None
    return Prediction(
        model=model.name,
        hardware=accelerator.name,
        link=link.name,
        devices=settings.devices,
        kv_dtype=cost.layout.kv_dtype,
        compute_dtype="bf16" if fp8_fallback else model.compute_dtype,
        kv_bytes_per_token=cost.layout.bytes_per_token,
        kv_bytes_window=cost.layout.window_bytes,
        window_tokens=cost.layout.window_tokens,
        kv_bytes_breakdown=dict(cost.layout.breakdown),
        dense_flops_per_token=2.0 * matmul_params_per_token(model),
        status=status,
        break_even_tokens=None if break_even is None else round(break_even, 1),
        lengths=lengths,
        recompute_ms_at=at(cost.recompute_ms),
        pull_ms_at=at(cost.pull_ms),
        min_transfer_ms_at=at(cost.min_transfer_ms),
        prefill_flops_per_token_at=at(lambda n: prefill_flops(model, n) / n),
        min_transfer_us_per_token=cost.layout.bytes_per_token / cost.nominal_bytes_per_s * 1e6,
        pull_us_per_token=cost.layout.bytes_per_token / cost.pull_bytes_per_s * 1e6,
        assumptions={
            "peak_tflops_per_device": accelerator.peak_tflops(model.compute_dtype),
            "mfu": cost.flops_per_s / (accelerator.peak_tflops(model.compute_dtype) * 1e12 * settings.devices),
            "overhead_ms": cost.overhead_ms,
            "pull_floor_ms": cost.pull_floor_ms,
            "link_nominal_gbit_s": link.nominal_gbit_s,
            "link_efficiency": cost.pull_bytes_per_s / cost.nominal_bytes_per_s,
            "sliding_window_full": settings.sliding_window_full,
            "fp8_compute_fell_back_to_bf16": fp8_fallback,
            "search_upper_tokens": upper,
        },
    )
