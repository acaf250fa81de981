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
from kvcal.fit.ladder_steps import floor_reason, lengths_to_add_above, lengths_to_add_below, pull_floor
from kvcal.settings import DEFAULT_BLOCK_SIZE

__all__ = ["STATUSES", "break_even_tokens", "classify", "classify_many", "interval", "status_warning"]

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
    return np.where(
        ~np.isfinite(break_even) | (break_even > n_max),
        RECOMPUTE_ALWAYS,
        np.where(break_even <= n_min, PULL_ALWAYS, CROSSOVER),
    )


def status_warning(
    status: str, break_even: float, extrapolated: bool, n_min: int, n_max: int, block_size: int | None = None
) -> str | None:
    """Advice for a break-even outside the measured lengths: the block-multiple lengths to add, and why."""
    block = block_size or DEFAULT_BLOCK_SIZE  # kvcal sweep's, for a table that does not say its own
    assumed = "" if block_size else f" (block size {block} assumed: --block-size sets it)"
    if status == PULL_ALWAYS:
        add = lengths_to_add_below(n_min, break_even, block)
        where = (
            f"the fitted curves cross at {break_even:.0f} tokens, below the shortest measured length {n_min}: "
            "the break-even is extrapolated"
            if break_even > 0
            else f"the fitted pull is faster than recompute at every length, down to the shortest measured, {n_min}"
        )
        if not add:
            return (
                f"the pull won at every measured length; {where}; that is already the floor, "
                f"{floor_reason(block)}: pulling pays from there up"
            )
        return (
            f"the pull won at every measured length; {where}; add shorter lengths to locate it: "
            f"--prefix-lengths {','.join(map(str, add))}{assumed} (the floor is {pull_floor(block)} tokens)"
        )
    if status == RECOMPUTE_ALWAYS:
        if extrapolated:
            add = lengths_to_add_above(n_max, min(2 * break_even, 8 * n_max), block)
            return (
                f"recompute won at every measured length; the fitted curves cross at {break_even:.0f} tokens, "
                f"beyond the longest measured length {n_max}: the break-even is extrapolated; add longer lengths "
                f"as far as the model's max length allows: --prefix-lengths {','.join(map(str, add))}{assumed}"
            )
        return (
            "the fitted pull never catches up with recompute: no break-even at any length; "
            "check the transport (was the pull moving bytes?) before extending the sweep"
        )
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
