"""``--rule upper``: the break-even interval's upper end, raised by a margin (kvcal's rule before 0.x).

With ``B`` the index block size, ``upper`` the upper end of the fit's break-even interval
and ``L`` the shortest measured length from which the pull's median won at every longer
measured length:

    threshold = max( B x ceil(upper x (1 + margin) / B),      the interval, raised
                     B x ceil(L / B) )                        the data's floor (unless --allow-extrapolation)

and at least ``B``. Each layer guards against a threshold below the break-even and ignores
the pulls it forgoes above it (docs/emit.md, "How the threshold is chosen", has what that
costs); the default rule is :mod:`kvcal.threshold.rules.expected_cost`. An interval open above has no
upper end, so this rule refuses it.
"""

from __future__ import annotations

import math

from kvcal.errors import InputError
from kvcal.records.fit import FIT_DEFAULTS
from kvcal.threshold.decision import decide
from kvcal.threshold.delta_weights import Deltas
from kvcal.threshold.parts import (
    Working,
    fmt,
    ladder_down,
    ladder_up,
    pull_won_from,
    refuse_never_or_tie,
    refuse_open_above,
    round_up,
    where_the_pull_won,
)
from kvcal.threshold.rules import Chosen


def choose(w: Working, *, margin: float | None, deltas: Deltas | None, allow_extrapolation: bool) -> Chosen:
    """The rule's entry (kvcal.threshold.rules): the earlier gates, then the rule; priced on the default decision's
    draws and deltas, which the result does not carry (this rule did not decide by them)."""
    threshold = threshold_alone(w, margin=margin, allow_extrapolation=allow_extrapolation)
    decision = decide(w.fit, block_size=w.block, deltas=deltas, allow_extrapolation=allow_extrapolation)
    return Chosen(threshold, decision, carries_decision=False)


def threshold_alone(w: Working, *, margin: float | None, allow_extrapolation: bool) -> int:
    """The table marks this rule an alternative: its threshold, unpriced, that every other rule's is priced beside."""
    assert margin is not None  # the table says this rule takes one: resolve_rule gave its default
    refuse_never_or_tie(w)
    return upper_threshold(w, margin, allow_extrapolation)


def upper_threshold(w: Working, margin: float, allow_extrapolation: bool) -> int:
    """The rule (module docstring): the bound, the margin (rounded up to a block), the floor, the advice."""
    refuse_open_above(w)
    fit = w.fit
    ci = tuple(fit.break_even_ci) if fit.break_even_ci and len(fit.break_even_ci) == 2 else None
    upper = _bound(w, ci)
    threshold = _with_margin(w, upper, margin)
    threshold = _floor(w, threshold, allow_extrapolation)
    _advice(w, upper)
    assert threshold is not None
    return threshold


def _bound(w: Working, ci: tuple[float, ...] | None) -> float | None:
    """The interval's upper end; the point estimate (with a warning) when the fit has no interval."""
    fit = w.fit
    level = f"{fit.confidence:.0%}" if fit.confidence else "the"
    if ci is not None:
        upper = float(ci[1])
        point = fmt(fit.break_even_tokens) if fit.break_even_tokens is not None else "n/a"
        w.steps.append(
            f"break-even {point} tokens, {level} interval [{fmt(ci[0])}, {fmt(ci[1])}]: upper bound {fmt(upper)}"
        )
        return max(upper, 0.0)
    if fit.break_even_tokens is not None and math.isfinite(fit.break_even_tokens):
        upper = float(fit.break_even_tokens)
        w.steps.append(f"break-even {fmt(upper)} tokens, no interval recorded: using the point estimate as the bound")
        w.warnings.append(
            "the fit has no break-even interval; the margin is the only safety: run `kvcal fit` with "
            f"its bootstrap (--resamples {FIT_DEFAULTS.n_resamples}) and emit from that fit.json"
        )
        return max(upper, 0.0)
    if fit.status == "crossover":
        raise InputError(
            "the fit says 'crossover' but records no finite break-even or interval; "
            "run `kvcal fit` again (sweeping more --reps narrows it)"
        )
    return None


def _with_margin(w: Working, upper: float | None, margin: float) -> int | None:
    """The bound times (1 + margin), rounded up to a whole block."""
    if upper is None:
        return None
    raised = upper * (1.0 + margin)
    threshold = round_up(raised, w.block)
    w.steps.append(
        f"{fmt(upper)} x (1 + margin {margin:g}) = {fmt(raised)} tokens, "
        f"rounded up to a multiple of block size {w.block}: {threshold}"
    )
    return threshold


def _floor(w: Working, threshold: int | None, allow_extrapolation: bool) -> int | None:
    """Never below the shortest length from which the pull was measured to win (unless --allow-extrapolation)."""
    floor = pull_won_from(w.fit)
    lost_at_longest = floor is None and bool(w.fit.per_length)
    threshold = _raise_to_floor(w, floor, threshold, allow_extrapolation)
    if lost_at_longest:
        w.warnings.append(
            f"the pull's median lost at the longest measured length ({w.n_max} tokens), so the data show "
            f"no length from which pulling keeps winning: run `kvcal sweep --reps 5 --prefix-lengths "
            f"{ladder_up(w.n_max, w.block)}` to confirm the crossover"
        )
    return threshold


def _raise_to_floor(w: Working, floor: int | None, threshold: int | None, allow_extrapolation: bool) -> int | None:
    fit = w.fit
    if fit.status == "pull-always-wins" and floor is None:
        if not fit.measured_range:
            raise InputError(
                "the fit says 'pull-always-wins' but records neither the lengths where the pull won "
                "nor a measured range"
            )
        floor = max(w.n_min, int(fit.smallest_pull_win_tokens or 0))  # the fitted pull won from n_min; a median lost
    if floor is None:
        return threshold
    floor_b = round_up(floor, w.block)
    if threshold is not None and threshold >= floor_b:
        return threshold
    if allow_extrapolation and threshold is not None:
        w.warnings.append(
            f"--allow-extrapolation: {threshold} lies below {floor} tokens, the shortest length from which the "
            f"pull was measured to win; confirm it with `kvcal sweep --prefix-lengths {ladder_down(floor, w.block)}`"
        )
        return threshold
    why = "no break-even estimate" if threshold is None else f"{threshold} would rest on the fitted curves alone"
    w.steps.append(
        f"{why}: raised to {floor_b}, the shortest measured length from which the pull won at "
        f"every longer length ({floor} tokens, rounded up to a block); --allow-extrapolation "
        "drops this floor"
    )
    return floor_b


def _advice(w: Working, upper: float | None) -> None:
    """What to sweep next when the threshold rests on lengths the sweep did not cover."""
    fit = w.fit
    if fit.status == "pull-always-wins":
        w.warnings.append(
            f"the fitted curves cross below the shortest measured length ({w.n_min} tokens; "
            f"{where_the_pull_won(fit, w.lo_hi)}), so the true break-even may lie below the sweep: run "
            f"`kvcal sweep --prefix-lengths {ladder_down(w.n_min, w.block)}` to locate it and lower this threshold"
        )
    elif upper is not None and upper > w.n_max:
        w.warnings.append(
            f"the break-even's upper bound ({fmt(upper)}) lies beyond the longest measured prefix ({w.n_max}): "
            f"run `kvcal sweep --prefix-lengths {ladder_up(w.n_max, w.block)}` to confirm it"
        )
    elif fit.extrapolated:
        w.warnings.append(
            "the break-even is extrapolated outside the measured range: run `kvcal sweep` with "
            "--prefix-lengths around it to cover it"
        )
