"""The default rule, ``--rule expected-cost``: the threshold where pulling starts to pay on mean costs.

A router with threshold ``t`` pulls every request whose cached-token delta is at least
``t``; its expected TTFT changes with ``t`` at the rate ``w(t) (R(t) - P(t))`` (``w`` the
deltas' density, ``R`` and ``P`` the legs' mean costs), so whatever the deltas, the
cheapest threshold is where the mean gap ``R - P`` turns positive for good. The steps:

1. **Mean costs**: each leg's fitted curve times its mean-cost scale (:mod:`kvcal.fit.mean_cost`:
   skew, slow modes and stalls the robust fit set aside); the point fit decides (the
   bootstrap's t-widened draws are for intervals and for what the choice costs).
2. **Measured means where the curves misfit**: at a length whose measured mean (fit.json's
   ``mean_cost.per_length``) lies beyond the noise from its curve *and* flips the fitted
   decision there, the gap is the measured one, blended linearly into the fitted gap
   towards the neighbouring lengths.
3. **Inside the measured range interpolation is trusted**. Outside it nothing rests on
   the curves alone without ``--allow-extrapolation``: a crossing below the shortest
   length becomes that length, and no crossing by the longest length is no threshold.
4. **Rounding** to the cheaper of the two neighbouring block multiples, on the point mean
   curves over the deltas between them: a router's cached-token deltas come in whole blocks,
   so by default the lower multiple wins only where the gap there is already positive (a
   crossing inside a block rounds up); ``--deltas`` gives the deltas actually seen.
5. **Never at or below a length where the pull measurably lost** (:func:`kvcal.fit.wins.pull_lost_measurably`,
   the win test mirrored, on the measured mean costs): there the threshold is raised to the next measured length
   above it.

Refusals (before this rule, :mod:`kvcal.emit.threshold_parts`): a disturbed host, recompute
always winning, legs that tie. An interval open above is not one when the mean gap turns
positive in range.
"""

from __future__ import annotations

import math

import numpy as np

from kvcal.cost_curve import break_even_tokens, cost_ms
from kvcal.emit.regret import Deltas
from kvcal.emit.threshold_parts import Working, fmt, ladder_down, ladder_up, round_up
from kvcal.errors import NoThreshold
from kvcal.fit.ladder_steps import pull_floor
from kvcal.fit.mean_cost import mean_curves, mean_scales
from kvcal.fit.wins import pull_lost_measurably
from kvcal.fit_record import FitResult, LengthSummary

GRID = 2048  # log-spaced points over the measured range where a measured mean reshapes the gap


def expected_cost_threshold(w: Working, deltas: Deltas | None, allow_extrapolation: bool) -> int:
    """The rule (module docstring), its steps appended to ``w``."""
    rec, pull = mean_curves(w.fit)
    m_r, m_p = mean_scales(w.fit)
    crossing = float(break_even_tokens(rec, pull))
    w.steps.append(
        f"mean costs: recompute's curve x {m_r:.4g}, the pull's x {m_p:.4g} (what the router pays on "
        f"average); they cross for good at {_tokens(crossing)}"
    )
    crossing = _measured_means(w, rec, pull, crossing)
    crossing = _in_range(w, crossing, allow_extrapolation)
    threshold = _cheaper_block(w, rec, pull, crossing, deltas, allow_extrapolation)
    return _lost_floor(w, threshold)


def _tokens(value: float) -> str:
    return "never (the pull does not catch up)" if not math.isfinite(value) else f"{fmt(value)} tokens"


def _measured_means(w: Working, rec: np.ndarray, pull: np.ndarray, crossing: float) -> float:
    """Where a misfit length's measured mean flips the fitted decision, decide there on it (module step 2)."""
    rows = [
        r
        for r in (w.fit.mean_cost.per_length if w.fit.mean_cost else [])
        if r.recompute_ms is not None and r.pull_ms is not None
    ]
    lengths, corrections = [], []
    for r in rows:
        fitted_r, fitted_p = float(cost_ms(rec, r.prefix_tokens)), float(cost_ms(pull, r.prefix_tokens))
        measured_r = r.recompute_ms if r.recompute_misfit and r.recompute_ms is not None else fitted_r
        measured_p = r.pull_ms if r.pull_misfit and r.pull_ms is not None else fitted_p
        measured = measured_r - measured_p
        fitted = fitted_r - fitted_p
        flip = (r.recompute_misfit or r.pull_misfit) and (measured > 0) != (fitted > 0)
        lengths.append(float(r.prefix_tokens))
        corrections.append(measured - fitted if flip else 0.0)
        if flip:
            w.steps.append(
                f"at {r.prefix_tokens} tokens the curves misfit: measured mean costs recompute "
                f"{r.recompute_ms:.4g} ms, pull {r.pull_ms:.4g} ms (fitted {fitted_r:.4g}, {fitted_p:.4g}): "
                f"the {'pull' if measured > 0 else 'recompute'} wins there on the measured means"
            )
    if not any(corrections):
        return crossing
    grid = np.unique(np.concatenate([np.geomspace(w.n_min, w.n_max, GRID), lengths]))
    gap = cost_ms(rec, grid) - cost_ms(pull, grid) + np.interp(grid, lengths, corrections)
    losing = np.flatnonzero(gap <= 0)
    if not losing.size:
        return min(crossing, float(w.n_min))
    j = int(losing[-1])
    if j == len(grid) - 1:
        return crossing if crossing > w.n_max else math.inf
    return float(grid[j] + (grid[j + 1] - grid[j]) * (-gap[j]) / (gap[j + 1] - gap[j]))


def _in_range(w: Working, crossing: float, allow_extrapolation: bool) -> float:
    """Inside the measured range the crossing stands; outside it only with --allow-extrapolation."""
    up = ladder_up(w.n_max, w.block)
    if crossing > w.n_max:
        where = "never catch up" if not math.isfinite(crossing) else f"cross only at {fmt(crossing)} tokens"
        if not allow_extrapolation or not math.isfinite(crossing):
            raise NoThreshold(
                f"no threshold: on mean costs the pull does not win by the longest measured length "
                f"({w.lo_hi}; the curves {where}); measure next: `kvcal sweep --reps 5 --prefix-lengths "
                f"{up}`"
                + (
                    ""
                    if not math.isfinite(crossing)
                    else ", or pass --allow-extrapolation to trust the curves beyond it"
                )
            )
        w.warnings.append(
            f"--allow-extrapolation: the mean costs cross at {fmt(crossing)} tokens, beyond the longest "
            f"measured length ({w.n_max}); confirm it with `kvcal sweep --prefix-lengths {up}`"
        )
        return crossing
    if crossing >= w.n_min:
        return crossing
    down = ladder_down(w.n_min, w.block)
    if allow_extrapolation:
        w.warnings.append(
            f"--allow-extrapolation: the mean costs cross at {fmt(crossing)} tokens, below the shortest "
            f"measured length ({w.n_min}); confirm it with `kvcal sweep --prefix-lengths {down}`"
        )
        return crossing
    if w.n_min <= pull_floor(w.block):
        w.steps.append(
            f"the crossing lies below the shortest measured length, {w.n_min} tokens, which is the floor "
            f"(two blocks of {w.block}: a one-block pull moves nothing): the threshold rests there"
        )
        return float(w.n_min)
    w.steps.append(
        f"the crossing lies below the shortest measured length: raised to {w.n_min} (below it rests on "
        "the curves alone; --allow-extrapolation trusts them)"
    )
    w.warnings.append(
        f"the pull won on mean costs at every measured length down to {w.n_min} tokens, so the true "
        f"break-even is at or below the sweep: run `kvcal sweep --prefix-lengths {down}` to locate it "
        "and lower this threshold"
    )
    return float(w.n_min)


def _cheaper_block(
    w: Working, rec: np.ndarray, pull: np.ndarray, crossing: float, deltas: Deltas | None, allow_extrapolation: bool
) -> int:
    """The block multiple next to ``crossing`` (below or above) with the lower expected cost."""
    block = w.block
    upper = round_up(crossing, block)
    lower = max(block, upper - block) if upper > crossing else upper
    if lower < w.n_min and not allow_extrapolation:
        lower = upper
    if lower == upper:
        choice = upper
    else:
        between = _gap_between(rec, pull, lower, upper, deltas)
        choice = lower if between > 0 or (between == 0 and crossing - lower < upper - crossing) else upper
    w.steps.append(f"rounded to the cheaper neighbouring multiple of block size {block} ({lower} or {upper}): {choice}")
    return choice


def _gap_between(rec: np.ndarray, pull: np.ndarray, lower: int, upper: int, deltas: Deltas | None) -> float:
    """The expected saving of pulling the deltas in [lower, upper): positive favours the lower threshold.

    A router's cached-token deltas come in whole blocks (prefix caching counts blocks), so by default the only
    delta between two neighbouring multiples is ``lower`` itself; a ``--deltas`` file says which it saw there.
    """
    if deltas is None:
        points, weights = np.array([float(lower)]), np.array([1.0])
    else:
        inside = (deltas.points >= lower) & (deltas.points < upper)
        points, weights = deltas.points[inside], deltas.weights[inside]
    return float(np.sum(weights * (cost_ms(rec, points) - cost_ms(pull, points))))


def _lost_floor(w: Working, threshold: int) -> int:
    """Never at or below a measured length where the pull measurably lost (module step 5)."""
    fit = w.fit
    measured = _measured(fit)
    lost = pull_lost_measurably(measured, fit.recompute.noise_cv or 0.0, fit.pull.noise_cv or 0.0)
    below = [n for n in lost if n >= threshold]
    if not below:
        return _tie_floor(w, threshold, measured)
    worst = max(below)
    longer = [r.prefix_tokens for r in fit.per_length if r.prefix_tokens > worst]
    if not longer:
        w.warnings.append(
            f"the pull's median lost measurably at the longest measured length ({worst} tokens), which "
            "the mean curves do not: run `kvcal sweep --reps 5 --prefix-lengths "
            f"{ladder_up(w.n_max, w.block)}`"
        )
        return threshold
    raised = round_up(min(longer), w.block)
    w.steps.append(f"the pull's median lost measurably at {worst} tokens: raised to {raised}, the next measured length")
    return raised


def _tie_floor(w: Working, threshold: int, measured: list[LengthSummary]) -> int:
    """Not below the first measured length above the threshold when the pull did not win there on measured means
    (a tie, or a loss within the noise): the data's own verdict at the length next to the crossing."""
    above = [r for r in measured if r.prefix_tokens > threshold and r.recompute_ms and r.pull_ms]
    if not above or above[0].pull_ms < above[0].recompute_ms:  # type: ignore[operator]
        return threshold
    raised = round_up(above[0].prefix_tokens, w.block)
    w.steps.append(
        f"the pull did not win at {above[0].prefix_tokens} tokens on the measured means (a tie within the "
        f"noise): raised to {raised}"
    )
    return raised


def _measured(fit: FitResult) -> list[LengthSummary]:
    """Each length's measured costs for the floor: the mean costs of fit.json's ``mean_cost`` (their bulk, so a slow
    mode or a stall in a median of two does not read as a loss), else (an older file) the medians."""
    means = {r.prefix_tokens: r for r in (fit.mean_cost.per_length if fit.mean_cost else [])}
    out = []
    for row in fit.per_length:
        mean = means.get(row.prefix_tokens)
        out.append(
            row if mean is None else row.model_copy(update={"recompute_ms": mean.recompute_ms, "pull_ms": mean.pull_ms})
        )
    return out
