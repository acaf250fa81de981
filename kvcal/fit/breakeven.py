"""The break-even: where fitted recompute reaches fitted pull, solved exactly, and its status.

The break-even itself, sup{n > 0 : recompute(n) < pull(n)}, is solved in
:func:`kvcal.cost_curve.break_even_tokens` (exactly, vectorised over resamples) and
re-exported here.

Status against the measured range [n_min, n_max]:

* ``crossover``: n_min < break-even <= n_max;
* ``pull-always-wins``: break-even <= n_min (the fitted pull wins at every measured
  length; a root below n_min is reported and flagged ``extrapolated``);
* ``recompute-always-wins``: break-even > n_max (no crossing within the measured
  lengths; a finite root beyond n_max is reported and flagged ``extrapolated``) or
  infinite (reported as null).
"""

from __future__ import annotations

import numpy as np

from kvcal.cost_curve import break_even_tokens

__all__ = ["break_even_tokens", "classify", "classify_many", "interval", "status_warning", "STATUSES"]

CROSSOVER = "crossover"
PULL_ALWAYS = "pull-always-wins"
RECOMPUTE_ALWAYS = "recompute-always-wins"
STATUSES = (CROSSOVER, PULL_ALWAYS, RECOMPUTE_ALWAYS)


def classify(break_even: float, n_min: float, n_max: float) -> tuple[str, bool]:
    """(status, extrapolated) of a break-even against the measured lengths."""
    if not np.isfinite(break_even):
        return RECOMPUTE_ALWAYS, False
    if break_even <= n_min:
        return PULL_ALWAYS, break_even < n_min
    if break_even <= n_max:
        return CROSSOVER, False
    return RECOMPUTE_ALWAYS, True


def classify_many(break_even: np.ndarray, n_min: float, n_max: float) -> np.ndarray:
    """Status strings for an array of break-evens (vectorised :func:`classify`)."""
    return np.where(~np.isfinite(break_even) | (break_even > n_max), RECOMPUTE_ALWAYS,
                    np.where(break_even <= n_min, PULL_ALWAYS, CROSSOVER))


def status_warning(status: str, break_even: float, extrapolated: bool, n_min: int, n_max: int) -> str | None:
    """Advice for a break-even outside the measured lengths: which way to extend the sweep."""
    if status == PULL_ALWAYS:
        if break_even > 0:
            return (f"the pull won at every measured length; the fitted curves cross at {break_even:.0f} tokens, "
                    f"below the shortest measured length {n_min}: the break-even is extrapolated; "
                    f"extend the sweep to shorter prefixes (e.g. {max(n_min // 8, 1)}-{n_min} tokens) to locate it")
        return (f"the fitted pull is faster than recompute at every length: no crossing above 0 tokens; "
                f"the shortest measured length is {n_min}: extend the sweep to shorter prefixes to confirm")
    if status == RECOMPUTE_ALWAYS:
        if extrapolated:
            return (f"recompute won at every measured length; the fitted curves cross at {break_even:.0f} tokens, "
                    f"beyond the longest measured length {n_max}: the break-even is extrapolated; "
                    f"extend the sweep to longer prefixes (up to about {int(min(2 * break_even, 8 * n_max))} tokens)")
        return ("the fitted pull never catches up with recompute: no break-even at any length; "
                "check the transport (was the pull moving bytes?) before extending the sweep")
    return None


def interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval of samples that may contain inf (no break-even); bounds may be inf.

    Uses the inverted empirical CDF (no interpolation), so an inf sample never makes a
    finite bound NaN.
    """
    ordered = np.sort(np.asarray(samples, dtype=float))
    tail = (1.0 - confidence) / 2.0
    low = np.quantile(ordered, tail, method="inverted_cdf")
    high = np.quantile(ordered, 1.0 - tail, method="inverted_cdf")
    return float(low), float(high)
