"""The threshold decision over the fit's own draws: what each draw of the mean costs would choose.

The one entry other stages build on for the threshold's uncertainty: the remaining-work
boundary's interval (``--format work-range``) and observe's proposal read each draw's own
best threshold from :func:`draw_thresholds`, and the threshold itself from
:func:`kvcal.emit.threshold.compute_threshold`.

A router with threshold ``t`` pulls every delta ``d >= t``; over the deltas' weights ``w``
a draw's saving is ``S(t) = sum_{d >= t} w(d) (R(d) - P(d))`` (:mod:`kvcal.emit.regret`),
and that draw's own best threshold is the candidate that maximises it: block multiples from
the shortest measured length (the two-block floor when that is the shortest) to the longest,
the highest of those that tie, and infinity where no candidate saves anything ("no P2P").
"""

from __future__ import annotations

import math

import numpy as np

from kvcal.cost_curve import cost_ms
from kvcal.emit.regret import Deltas, draws, log_uniform
from kvcal.emit.threshold_parts import resolve_block_size
from kvcal.fit_record import FitResult

TIE_RELATIVE = 1e-9
"""Savings that agree within this share of the draw's total cost are a tie; the highest threshold wins it."""


def candidates(fit: FitResult, block: int) -> np.ndarray:
    """The thresholds compared: block multiples from the shortest measured length up to the longest."""
    shortest, longest = (int(fit.measured_range[0]), int(fit.measured_range[-1]))
    start = block * math.ceil(shortest / block)
    return np.arange(max(start, block), max(longest, start) + 1, block, dtype=float)


def draw_thresholds(
    fit: FitResult, *, block_size: int | None = None, deltas: Deltas | None = None
) -> np.ndarray | None:
    """Each bootstrap draw's own best threshold in tokens (``inf`` where no P2P is cheapest in that draw).

    None when the fit keeps no draws (an older fit.json, ``--resamples 0``).
    """
    found = draws(fit)
    if found is None:
        return None
    recompute, pull = found
    block, _ = resolve_block_size(fit, block_size)
    points = candidates(fit, block)
    grid = deltas or log_uniform(fit.measured_range[0], fit.measured_range[-1])
    r = cost_ms(recompute, grid.points)
    gap = (r - cost_ms(pull, grid.points)) * grid.weights
    suffix = np.concatenate([np.cumsum(gap[:, ::-1], axis=1)[:, ::-1], np.zeros((len(gap), 1))], axis=1)
    at = np.searchsorted(grid.points, points, side="left")
    saving = suffix[:, at]  # (draws, candidates)
    total = np.maximum((r * grid.weights).sum(axis=1), 1e-12)
    best = saving.max(axis=1)
    tied = saving >= (best - TIE_RELATIVE * total)[:, None]
    highest = saving.shape[1] - 1 - np.argmax(tied[:, ::-1], axis=1)
    chosen = points[highest]
    return np.where(best > TIE_RELATIVE * total, chosen, np.inf)
