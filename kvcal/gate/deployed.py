"""Is a deployed ``minCachedTokenDelta`` still right? Judged by what it costs the fleet.

With bootstrap draws in the current fit (every ``kvcal fit`` with resamples records them), the
threshold is priced the way emit-config prices its own (:mod:`kvcal.threshold.regret`: expected
regret over deltas log-uniform in the measured range, and ``p_break_even_above``, the
share of draws whose mean costs cross above it):

* **safe**: its expected regret is at most ``REGRET_TOLERANCE_PCT`` of the best expected TTFT;
* **unsafe**: it costs more, and the break-even more likely lies above it (``p >= 0.5``): it
  sends pulls that lose latency (or the pull never wins any more);
* **uncertain**: it costs more, and it lies above the break-even: pulls that would win are
  recomputed (the savings P2P exists for are lost).

A fit without draws (an old fit.json, ``--resamples 0``) falls back to the interval: safe at
or above its upper end, uncertain inside it, unsafe below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from kvcal.errors import InputError
from kvcal.fit.entry import curve_ms
from kvcal.records.fit import FitResult
from kvcal.threshold.choose import regret_model

REGRET_TOLERANCE_PCT = 0.5
"""% of the best expected TTFT a deployed threshold may cost: the 90th percentile the default rule's own
choice stays under on simulated campaigns (docs/method.md, "What a threshold costs")."""


@dataclass(frozen=True)
class DeployedCheck:
    """What a deployed ``minCachedTokenDelta`` costs against a fit (module docstring for the verdicts)."""

    threshold_tokens: int
    origin: str
    verdict: Literal["safe", "uncertain", "unsafe"]
    message: str
    baseline_verdict: Literal["safe", "uncertain", "unsafe"]
    pull_minus_recompute_ms: float | None = None
    expected_regret_pct: float | None = None
    p_break_even_above: float | None = None


def _be_interval(fit: FitResult) -> tuple[float, float] | None:
    """The break-even interval, else its bounds with an open (inf) upper end, else the point twice, else None."""
    ci = pair(fit.break_even_ci)
    if ci is not None:
        return ci
    bounds = fit.bootstrap.break_even_ci_bounds
    if bounds is not None and len(bounds) == 2 and bounds[0] is not None:
        return float(bounds[0]), math.inf if bounds[1] is None else float(bounds[1])
    value = as_tokens(fit.break_even_tokens)
    return (value, value) if value is not None else None


def _placement(fit: FitResult, threshold: int) -> Literal["safe", "uncertain", "unsafe"]:
    if fit.status == "recompute-always-wins":
        return "unsafe"
    interval = _be_interval(fit)
    if interval is None:
        return "safe" if fit.status == "pull-always-wins" else "uncertain"
    lo, hi = interval
    return "safe" if threshold >= hi else "unsafe" if threshold < lo else "uncertain"


def deployed_check(base: FitResult, cur: FitResult, threshold: int, origin: str) -> DeployedCheck:
    """Judge a deployed ``minCachedTokenDelta`` against the current (and baseline) fit: by what it costs when the
    fit has bootstrap draws (:func:`_by_regret`), else by its place in the break-even interval.
    ``pull_minus_recompute_ms`` is the current curves' pull(n) - recompute(n) at n = threshold."""
    if threshold < 1:
        raise InputError(f"deployed threshold must be >= 1 token (minCachedTokenDelta), got {threshold}")
    priced = _by_regret(base, cur, threshold, origin)
    if priced is not None:
        return priced
    verdict, was = _placement(cur, threshold), _placement(base, threshold)
    delta_ms = float(curve_ms(cur.pull, threshold) - curve_ms(cur.recompute, threshold))
    block = cur.block_size or 1
    interval = _be_interval(cur)
    if cur.status == "recompute-always-wins":
        message = (
            f"deployed {threshold} is UNSAFE: the pull no longer wins at any measured length; disable P2P or re-measure"
        )
    elif interval is None:
        message = f"deployed {threshold} is {verdict}: the fit records no break-even to place it against"
    else:
        lo, hi = interval
        raise_to = (
            f"raise it to >= {int(math.ceil(hi / block) * block)}"
            if math.isfinite(hi)
            else "the interval is open above: extend the sweep to longer prefixes"
        )
        if verdict == "safe":
            message = f"deployed {threshold} is safe: at or above the break-even's upper bound {hi:.0f}"
            if cur.status == "pull-always-wins":
                message += (
                    " (the fitted curves cross below the shortest measured length; a lower threshold would save more)"
                )
        elif verdict == "uncertain":
            message = (
                f"deployed {threshold} is inside the break-even interval [{lo:.0f}, {hi:.0f}]: "
                f"pulls just above it may lose; {raise_to}"
            )
        else:
            message = (
                f"deployed {threshold} is UNSAFE: below the break-even interval [{lo:.0f}, {hi:.0f}]; a pull at "
                f"{threshold} tokens costs {delta_ms:+.1f} ms vs recompute; {raise_to}"
            )
    if was != verdict:
        message += f" (it was {was} against the baseline)"
    return DeployedCheck(threshold, origin, verdict, message, was, round(delta_ms, 3))


def _verdict_by_regret(fit: FitResult, threshold: int) -> tuple[str, float, float] | None:
    model = regret_model(fit)
    if model is None:
        return None
    figures = model.figures(threshold)
    pct, above = figures.expected_regret_pct, figures.p_break_even_above
    assert pct is not None and above is not None
    if fit.status == "recompute-always-wins":
        return "unsafe", pct, above
    return ("safe" if pct <= REGRET_TOLERANCE_PCT else "unsafe" if above >= 0.5 else "uncertain"), pct, above


def _by_regret(base: FitResult, cur: FitResult, threshold: int, origin: str) -> DeployedCheck | None:
    """The verdict by expected regret and P(break-even above) (module docstring); None without draws."""
    now = _verdict_by_regret(cur, threshold)
    if now is None:
        return None
    verdict, pct, above = now
    was_found = _verdict_by_regret(base, threshold)
    was = was_found[0] if was_found else _placement(base, threshold)
    delta_ms = float(curve_ms(cur.pull, threshold) - curve_ms(cur.recompute, threshold))
    cost = f"expected regret {pct:.3g}% of TTFT, P(break-even above it) {above:.2f}"
    if cur.status == "recompute-always-wins":
        message = (
            f"deployed {threshold} is UNSAFE: the pull no longer wins at any measured length; disable P2P or re-measure"
        )
    elif verdict == "safe":
        message = f"deployed {threshold} is safe: {cost}, within {REGRET_TOLERANCE_PCT:g}%"
    elif verdict == "unsafe":
        message = (
            f"deployed {threshold} is UNSAFE: {cost}; it pulls where recompute wins (a pull at {threshold} "
            f"tokens costs {delta_ms:+.1f} ms): raise it to `kvcal emit-config`'s threshold"
        )
    else:
        message = (
            f"deployed {threshold} is costly: {cost}; it recomputes prefixes a pull would serve faster: lower "
            "it to `kvcal emit-config`'s threshold"
        )
    if was != verdict:
        message += f" (it was {was} against the baseline)"
    return DeployedCheck(threshold, origin, verdict, message, was, round(delta_ms, 3), pct, above)  # type: ignore[arg-type]


def pair(value: Any) -> tuple[float, float] | None:
    """A stored [low, high] as floats, None when it is not one."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(v is not None for v in value):
        return float(value[0]), float(value[1])
    return None


def as_tokens(value: Any) -> float | None:
    """A break-even as stored: a number, or None/'inf' for 'the pull never catches up' (infinite)."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
