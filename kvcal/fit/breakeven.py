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

The status also answers to the fit's own per-length medians (:func:`reconcile`): fitted
curves that cross below the shortest length while the pull's median *lost* there (and won
further up) do not make the pull win "always"; the medians cross inside the measured range,
so the status is ``crossover``, with the fitted point ``extrapolated`` and a warning that says
both facts. Mirrored above the longest length (a finite root beyond it while the pull's median
won there). The three statuses keep their names: stages and tools outside kvcal read them, and
``crossover`` with ``extrapolated: true`` already says "a crossing, whose fitted point lies
outside the data".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvcal.cost_curve import break_even_tokens
from kvcal.fit.ladder_steps import floor_reason, lengths_to_add_above, lengths_to_add_below, pull_floor
from kvcal.fit_record import LengthSummary
from kvcal.settings import DEFAULT_BLOCK_SIZE

__all__ = ["STATUSES", "break_even_tokens", "classify", "classify_many", "interval", "reconcile", "status_warning"]

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


def _wins(rows: Sequence[LengthSummary]) -> list[tuple[int, bool]]:
    """(length, the pull's median won) where both legs were measured, ascending."""
    return [(r.prefix_tokens, bool(r.pull_won)) for r in rows if r.pull_won is not None]


def reconcile(status: str, extrapolated: bool, break_even: float, rows: Sequence[LengthSummary]) -> tuple[str, bool]:
    """(status, extrapolated) agreeing with the per-length medians ``rows`` (module docstring): a fitted crossing
    outside the measured range whose medians cross inside it is a ``crossover`` with its point extrapolated."""
    won = _wins(rows)
    if not won or all(w for _, w in won) or not any(w for _, w in won):
        return status, extrapolated  # the medians never cross: nothing to reconcile
    if status == PULL_ALWAYS and not won[0][1]:
        return CROSSOVER, extrapolated  # the pull's median lost at the shortest length
    if status == RECOMPUTE_ALWAYS and np.isfinite(break_even) and won[-1][1]:
        return CROSSOVER, extrapolated  # the pull's median won at the longest length
    return status, extrapolated


def status_warning(
    status: str,
    break_even: float,
    extrapolated: bool,
    n_min: int,
    n_max: int,
    block_size: int | None = None,
    rows: Sequence[LengthSummary] = (),
) -> str | None:
    """Advice for a break-even outside the measured lengths: the block-multiple lengths to add, and why; each
    sentence about the medians checked against ``rows`` (the per-length wins)."""
    block = block_size or DEFAULT_BLOCK_SIZE  # kvcal sweep's, for a table that does not say its own
    assumed = "" if block_size else f" (block size {block} assumed: --block-size sets it)"
    won = _wins(rows)
    if status == PULL_ALWAYS:
        return _pull_always(break_even, n_min, block, assumed, won)
    if status == RECOMPUTE_ALWAYS:
        wins = [n for n, w in won if w]
        lead = (
            "recompute won at every measured length"
            if not wins
            else f"the fitted curves do not cross up to the longest measured length, though the pull's median won "
            f"at {_listed(wins)} tokens"
        )
        if extrapolated:
            add = lengths_to_add_above(n_max, min(2 * break_even, 8 * n_max), block)
            return (
                f"{lead}; the fitted curves cross at {break_even:.0f} tokens, "
                f"beyond the longest measured length {n_max}: the break-even is extrapolated; add longer lengths "
                f"as far as the model's max length allows: --prefix-lengths {','.join(map(str, add))}{assumed}"
            )
        return (
            f"{lead + '; ' if wins else ''}the fitted pull never catches up with recompute: no break-even at any "
            "length; check the transport (was the pull moving bytes?) before extending the sweep"
        )
    if status == CROSSOVER and extrapolated:
        return _medians_cross(break_even, n_min, n_max, block, won)
    return None


def _pull_always(break_even: float, n_min: int, block: int, assumed: str, won: list[tuple[int, bool]]) -> str:
    lost = [n for n, w in won if not w]
    lead = (
        "the pull won at every measured length"
        if not lost
        else f"the fitted pull is faster at every measured length, though its median lost at {_listed(lost)} tokens"
    )
    add = lengths_to_add_below(n_min, break_even, block)
    where = (
        f"the fitted curves cross at {break_even:.0f} tokens, below the shortest measured length {n_min}: "
        "the break-even is extrapolated"
        if break_even > 0
        else f"the fitted pull is faster than recompute at every length, down to the shortest measured, {n_min}"
    )
    if not add:
        return f"{lead}; {where}; that is already the floor, {floor_reason(block)}: pulling pays from there up"
    return (
        f"{lead}; {where}; add shorter lengths to locate it: "
        f"--prefix-lengths {','.join(map(str, add))}{assumed} (the floor is {pull_floor(block)} tokens)"
    )


def _medians_cross(break_even: float, n_min: int, n_max: int, block: int, won: list[tuple[int, bool]]) -> str:
    """A crossover of the medians inside the measured range whose fitted point lies outside it."""
    below = break_even <= n_min
    if below:
        lo, hi = n_min, next((n for n, w in won if w), n_max)
        side = f"below the shortest measured length {n_min}, but the pull's median lost there and won at {hi}"
    else:
        lo, hi = max((n for n, w in won if not w), default=n_min), n_max
        side = f"beyond the longest measured length {n_max}, but the pull's median won there and lost at {lo}"
    mid = round((lo + hi) / 2 / block) * block
    between = ",".join(str(n) for n in sorted({lo, mid, hi}))
    return (
        f"the fitted curves cross at {break_even:.0f} tokens, {side}: the medians cross between {lo} and {hi} "
        f"tokens, inside the measured range, so the status is a crossover whose fitted point is extrapolated (the "
        f"curves misfit that end); measure around it: kvcal sweep --reps 5 --prefix-lengths {between}"
    )


def _listed(lengths: list[int]) -> str:
    return ", ".join(str(n) for n in lengths[:4]) + (" ..." if len(lengths) > 4 else "")


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
