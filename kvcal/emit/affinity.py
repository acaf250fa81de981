"""The router's other calibrated constant: ``peakPrefillThroughput`` of ``prefix-cache-affinity-filter``.

The filter turns a pod's in-flight tokens into a predicted TTFT with it. The llm-d
recipe measures it as ``CHUNK / median TTFT`` of cold prompts of exactly ``CHUNK``
random tokens, ``CHUNK`` being the engine's ``--max-num-batched-tokens``. kvcal's
recompute leg is that probe at every swept length, so the fitted recompute curve gives

    peakPrefillThroughput = N / recompute(N)       (tokens/s; recompute in ms / 1000)

at ``N`` = ``--chunk-size``, else the run's recorded ``--max-num-batched-tokens``,
else :data:`DEFAULT_CHUNK` (the GPU default). The interval is the same formula over the
fit's bootstrap samples of the recompute curve, at the fit's confidence level. A chunk
outside the measured lengths is extrapolation of the curve, and is reported as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvcal.emit.run_context import RunContext
from kvcal.errors import InputError
from kvcal.fit.entry import curve_ms
from kvcal.records.fit import FitResult

AFFINITY_TYPE = "prefix-cache-affinity-filter"
AFFINITY_KEY = "peakPrefillThroughput"
DEFAULT_CHUNK = 8192
"""vLLM's GPU default for --max-num-batched-tokens (CPU vLLM defaults to 2048: pass --chunk-size)."""
_COEFS = ("intercept_ms", "per_token_us", "per_token2_ns")


@dataclass(frozen=True)
class PeakPrefill:
    chunk_size: int
    chunk_source: str
    recompute_ms: float
    interval: tuple[float, float] | None
    confidence: float
    extrapolated: bool
    warnings: tuple[str, ...] = ()

    # The value and the note that explains it are derived from the fields above, so they cannot disagree.
    @property
    def tokens_per_s(self) -> int:
        return int(round(self.chunk_size * 1e3 / self.recompute_ms))

    @property
    def notes(self) -> tuple[str, ...]:
        n = self.chunk_size
        return (
            f"{AFFINITY_KEY} = {n} tokens / recompute({n}) {self.recompute_ms:,.1f} ms = "
            f"{self.tokens_per_s:,} tokens/s (chunk size: {self.chunk_source})",
        )

    def as_json(self) -> dict[str, Any]:
        return {
            AFFINITY_KEY: self.tokens_per_s,
            "peak_prefill_chunk_size": self.chunk_size,
            "peak_prefill_ci": [round(v) for v in self.interval] if self.interval else None,
            "peak_prefill_extrapolated": self.extrapolated,
        }


def _recompute_ms(fit: FitResult, n: float) -> float:
    return float(curve_ms(fit.recompute, n))


def chunk_size(ctx: RunContext, flag: int | None) -> tuple[int, str]:
    if flag is not None:
        return flag, f"--chunk-size {flag}"
    if ctx.max_num_batched_tokens:
        return ctx.max_num_batched_tokens, f"the run's --max-num-batched-tokens {ctx.max_num_batched_tokens}"
    return DEFAULT_CHUNK, f"default {DEFAULT_CHUNK} (vLLM's GPU --max-num-batched-tokens; the run recorded none)"


def peak_prefill(fit: FitResult, ctx: RunContext, chunk: int | None = None) -> PeakPrefill:
    """``peakPrefillThroughput`` at the chunk size, with its bootstrap interval when the fit kept samples."""
    n, source = chunk_size(ctx, chunk)
    ms = _recompute_ms(fit, n)
    if not math.isfinite(ms) or ms <= 0:
        raise InputError(
            f"the fitted recompute curve gives {ms:.3g} ms at {n} tokens: no throughput can be derived "
            "(sweep lengths around the chunk size)"
        )
    warnings: list[str] = []
    lo, hi = (fit.measured_range[0], fit.measured_range[-1]) if fit.measured_range else (None, None)
    extrapolated = lo is None or hi is None or not lo <= n <= hi
    if extrapolated:
        where = f"outside the measured lengths {lo}-{hi}" if lo is not None else "with no measured range recorded"
        warnings.append(
            f"{AFFINITY_KEY} at chunk size {n} is extrapolated ({where}): sweep a length of {n} tokens "
            f"(kvcal sweep --prefix-lengths ...,{n}) to measure it"
        )
    interval = _interval(fit, n)
    if interval is None:
        warnings.append(
            f"the fit kept no bootstrap samples of the recompute curve: {AFFINITY_KEY} has no interval "
            "(rerun kvcal fit with its default --resamples)"
        )
    return PeakPrefill(n, source, ms, interval, fit.confidence, extrapolated, tuple(warnings))


def _interval(fit: FitResult, n: int) -> tuple[float, float] | None:
    samples = fit.bootstrap.leg_samples("recompute")
    if not isinstance(samples, dict) or not all(isinstance(samples.get(c), list) and samples[c] for c in _COEFS):
        return None
    coef = [np.array([np.nan if v is None else v for v in samples[c]], dtype=float) for c in _COEFS]
    ms = coef[0] + coef[1] * n / 1e3 + coef[2] * n * n / 1e6
    rate = n * 1e3 / ms[np.isfinite(ms) & (ms > 0)]
    if rate.size < 2:
        return None
    tail = (1.0 - fit.confidence) / 2.0 * 100.0
    low, high = np.percentile(rate, [tail, 100.0 - tail])
    return float(low), float(high)


def render_affinity(p: PeakPrefill, *, origin: str = "") -> str:
    """The filter entry as a one-item YAML list, with the interval and the chunk size in comments."""
    level = f"{p.confidence:.0%}" if p.confidence else "the"
    ci = (
        f"{level} interval [{p.interval[0]:,.0f}, {p.interval[1]:,.0f}] tokens/s"
        if p.interval
        else "no interval (no bootstrap)"
    )
    lines = [
        f"# kvcal: {AFFINITY_KEY} from the fitted recompute curve{' of ' + origin if origin else ''}: "
        f"{p.chunk_size} tokens in {p.recompute_ms:,.1f} ms; {ci}",
        f"# chunk size: {p.chunk_source}",
    ]
    if p.extrapolated:
        lines.append(f"# EXTRAPOLATED: chunk size {p.chunk_size} lies outside the measured lengths")
    lines += [f"- type: {AFFINITY_TYPE}", "  parameters:", f"    {AFFINITY_KEY}: {p.tokens_per_s}"]
    return "\n".join(lines) + "\n"
