"""The threshold rule, stated and enforced in one place.

With ``B`` the index block size, ``upper`` the upper end of the fit's break-even interval
and ``L`` the shortest measured length from which the pull's median won at every longer
measured length:

    threshold = max( B x ceil(upper x (1 + margin) / B),      the interval, raised
                     B x ceil(L / B) )                        the data's floor (unless --allow-extrapolation)

and at least ``B``. Why each part:

* **Never below L** without ``--allow-extrapolation``: below the shortest length where the
  pull was seen to win, the data say nothing; a smaller number comes from the fitted
  curves' shape alone (the gpt-oss-120b ladder, measured from 2,048 up, fitted 256).
* **Never capped below the raised upper bound**: a cap at the shortest winning length can
  land below the true break-even when it sits just above that length (truth 1,126,
  interval [658, 1,166], a cap gave 1,024).
* **No threshold** (exit 3, :class:`~kvcal.errors.NoThreshold` or
  :class:`~kvcal.errors.NotRecommended`) when recomputing always won, when the interval is
  open above (the pull may never catch up: curves nearly parallel), when the pull never
  beat recompute by a measurable amount (ties), or when the run measured a disturbed host
  (unless ``--allow-disturbed``).

A pull with a slow mode (:mod:`kvcal.fit.modes`) arrives fitted to its mean cost, and one
with slow pulls too few to tell from a stall arrives with an interval whose upper end is
the mean cost's, so the same rule is safe for the mean the router pays; the steps say so
and a refusal names the slow pulls and what to measure.

Every warning names the command that would resolve it.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kvcal.emit.limits import DEFAULT_MARGIN, validate_block_size, validate_margin
from kvcal.errors import InputError, KvcalError, NoThreshold, NotRecommended
from kvcal.fit.ladder import pull_floor
from kvcal.fit.wins import pooled_win_z
from kvcal.records import FIT_DEFAULTS, FitResult
from kvcal.settings import DEFAULT_BLOCK_SIZE

log = logging.getLogger(__name__)

POOLED_Z = 1.645
"""One-sided 5 % for the pooled advantage over all lengths (the tie test)."""


@dataclass(frozen=True)
class Threshold:
    """The emitted ``minCachedTokenDelta`` and how it was reached (``steps``, for stderr)."""

    min_cached_token_delta: int
    status: str
    break_even_tokens: float | None
    break_even_ci: tuple[float, float] | None
    margin: float
    block_size: int
    steps: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The ``--format json`` object (the contract's keys, nothing else)."""
        return {
            "minCachedTokenDelta": self.min_cached_token_delta,
            "break_even_tokens": self.break_even_tokens,
            "break_even_ci": list(self.break_even_ci) if self.break_even_ci else None,
            "margin": self.margin,
            "block_size": self.block_size,
            "status": self.status,
        }


def resolve_block_size(fit: FitResult, override: int | None) -> tuple[int, str]:
    """The block size to round to, and where it came from (flag, run, or default)."""
    if override is not None:
        validate_block_size(override)
        if fit.block_size and fit.block_size != override:
            return override, f"block size {override} from --block-size (the run recorded {fit.block_size})"
        return override, f"block size {override} from --block-size"
    if fit.block_size:
        validate_block_size(fit.block_size)
        return fit.block_size, f"block size {fit.block_size} recorded in the run"
    return DEFAULT_BLOCK_SIZE, f"block size {DEFAULT_BLOCK_SIZE} (default; nothing records one: pass --block-size)"


def check_threshold(value: Any, block: int) -> int:
    """Validation of what is emitted: an int >= 1 and a multiple of the block size."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value % block:
        raise KvcalError(f"internal: refusing to emit minCachedTokenDelta={value!r} (must be an int >= 1 and a multiple of {block})")
    return value


def round_up(value: float, block: int) -> int:
    """Smallest multiple of ``block`` that is >= value and >= block (float-safe)."""
    out = max(block, math.ceil(value / block) * block)
    while out < value:  # guards value/block rounding down to an integer
        out += block
    return out


def fmt(n: float) -> str:
    return f"{n:,.0f}" if abs(n) >= 100 else f"{n:.3g}"


# ---------------------------------------------------------------- what the fit says


def pull_won_from(fit: FitResult) -> int | None:
    """L: the shortest measured length from which the pull won at every longer measured length.

    From the per-length medians when the fit records them; for an older fit.json, the
    status's meaning (``pull-always-wins``: the fitted pull won from the shortest length)
    and the smallest length where the pull's median won.
    """
    if fit.pull_won_from_tokens is not None:
        return int(fit.pull_won_from_tokens)
    if fit.per_length:
        return None  # recorded, and no winning tail: the pull lost at the longest length
    if fit.status == "pull-always-wins" and fit.measured_range:
        return max(int(fit.measured_range[0]), int(fit.smallest_pull_win_tokens or 0))
    return fit.smallest_pull_win_tokens


def legs_tie(fit: FitResult) -> tuple[bool, str]:
    """(tie, best advantage): the pull never beat recompute by a measurable amount.

    A tie: no length with a measurable win (:mod:`kvcal.fit.wins`) and no significant
    advantage over all lengths pooled (one-sided 5 %: a small win at every length is a
    win). Read from the per-length wins ``kvcal fit`` records; a fit.json written before
    they were recorded is not tested (its curves alone cannot tell a tie from a small,
    well-measured advantage).
    """
    rows = [r for r in fit.per_length if r.recompute_ms and r.pull_ms]
    if not rows:
        return False, ""
    best = max((r.recompute_ms - r.pull_ms) / r.recompute_ms for r in rows)  # type: ignore[operator]
    if any(r.pull_won_measurably for r in rows):
        return False, f"{best:+.1%}"
    cv_r, cv_p = fit.recompute.noise_cv or 0.0, fit.pull.noise_cv or 0.0
    pooled = pooled_win_z(rows, cv_r, cv_p) > POOLED_Z and best > 0.02
    return not pooled, f"{best:+.1%}"


def interval_open_above(fit: FitResult) -> bool:
    """The bootstrap ran and the interval's upper end is unbounded (some resamples never cross)."""
    if fit.break_even_ci and len(fit.break_even_ci) == 2 and math.isfinite(fit.break_even_ci[1]):
        return False
    bounds = fit.bootstrap.break_even_ci_bounds
    return bool(fit.bootstrap.n_resamples) and bounds is not None and len(bounds) == 2 and (
        bounds[1] is None or not math.isfinite(bounds[1]))


def _ladder_down(floor: int, block: int) -> str:
    # never under two blocks: a one-block pull moves nothing (kvcal.sweep.reach)
    lengths = sorted({max(pull_floor(block), round_up(floor / 2**k, block)) for k in range(5, -1, -1)})
    return ",".join(str(n) for n in lengths)


def _ladder_up(n_max: int, block: int) -> str:
    return ",".join(str(round_up(n_max * f, block)) for f in (1, 2, 4))


# ---------------------------------------------------------------- a pull's slow mode


def slow_mode_line(fit: FitResult) -> str | None:
    """The pull's slow mode, when the fit made the pull's curve its mean cost (kvcal.fit.modes), or its slow pulls
    too few to tell from a stall; else None."""
    mode = next((m for m in fit.slow_modes if m.mean_fitted), None)
    aside = fit.unresolved_slow
    if mode is None and aside is not None:
        return (f"{aside.n_slow} of {aside.n_probes} pulls took {aside.ratio:.2g}x the fitted time, too few to tell a "
                "stall from a slow mode, so the interval's upper end is that of the mean costs with them")
    if mode is None:
        return None
    return (f"the pull has a slow mode ({mode.n_slow} of {mode.n_probes} pulls, {mode.share:.0%}, took {mode.ratio:.2g}x "
            f"the fast time), so the break-even is that of the mean costs the router pays"
            + (f" (the fast pulls alone cross at {fmt(fit.fast_break_even_tokens)})" if fit.fast_break_even_tokens else ""))


def names_slow_mode(rule: Callable[..., Threshold]) -> Callable[..., Threshold]:
    """The rule, with the pull's slow mode in its steps and in any refusal (what to measure when the data cannot tell)."""
    @functools.wraps(rule)
    def apply(fit: FitResult, **kw: Any) -> Threshold:
        line = slow_mode_line(fit)
        try:
            threshold = rule(fit, **kw)
        except (NoThreshold, NotRecommended) as err:
            if line is None:
                raise
            raise type(err)(f"{err}; {line}: find the slow path (link congestion, a fallback transport) or measure "
                            "more reps (`kvcal sweep --reps 5`) to pin its share down") from None
        return threshold if line is None else replace(threshold, steps=(line, *threshold.steps))
    return apply


# ---------------------------------------------------------------- the rule


@dataclass
class _Working:
    """What the rule's steps share: the fit, the block, the measured span, and the steps and warnings so far."""

    fit: FitResult
    block: int
    n_min: int
    n_max: int
    lo_hi: str
    steps: list[str]
    warnings: list[str] = field(default_factory=list)


@names_slow_mode
def compute_threshold(fit: FitResult, *, margin: float = DEFAULT_MARGIN, block_size: int | None = None,
                      allow_extrapolation: bool = False, allow_disturbed: bool = False) -> Threshold:
    """Apply the rule (module docstring) to ``fit``; NotRecommended or NoThreshold (exit 3) when there is none.

    The steps, in order: the disturbance gate, the refusals, the bound (the interval's upper end), the margin
    (rounded up to a block), the floor (the shortest length from which the pull was measured to win), the advice.
    """
    margin = validate_margin(margin)
    block, block_note = resolve_block_size(fit, block_size)
    n_min, n_max = (int(fit.measured_range[0]), int(fit.measured_range[-1])) if fit.measured_range else (block, block)
    w = _Working(fit, block, n_min, n_max, f"{n_min}-{n_max} tokens" if fit.measured_range else "the measured range",
                 [block_note])
    _disturbance_gate(w, allow_disturbed)
    _refusals(w)
    ci = tuple(fit.break_even_ci) if fit.break_even_ci and len(fit.break_even_ci) == 2 else None
    upper = _bound(w, ci)
    threshold = _with_margin(w, upper, margin)
    threshold = _floor(w, threshold, allow_extrapolation)
    _advice(w, upper)
    assert threshold is not None
    check_threshold(threshold, block)
    log.info("threshold %s: %s (block %s, margin %s)", fit.status, threshold, block, margin)
    w.steps.append(f"minCachedTokenDelta = {threshold}")
    return Threshold(
        min_cached_token_delta=threshold, status=fit.status, break_even_tokens=fit.break_even_tokens, break_even_ci=ci,
        margin=margin, block_size=block, steps=tuple(w.steps), warnings=tuple(w.warnings),
    )


def _disturbance_gate(w: _Working, allow_disturbed: bool) -> None:
    """A disturbed host refuses, unless --allow-disturbed (then it warns)."""
    host = w.fit.host_disturbance
    if host is None or not host.disturbed:
        return
    figure = (f"other processes took up to {host.max:.0%} (median {host.median:.0%}) of {host.resource} "
              f"in {len(host.disturbed_probes)} of {host.n_measured} probes")
    if not allow_disturbed:
        raise NoThreshold(f"no threshold: the sweep measured a disturbed host ({figure}); rerun `kvcal sweep` "
                          "when the machine is quiet (check with `top`), or pass --allow-disturbed to emit anyway")
    w.warnings.append(f"the sweep measured a disturbed host ({figure}); emitted because of --allow-disturbed: "
                      "rerun `kvcal sweep` on a quiet machine before trusting it")


def _refusals(w: _Working) -> None:
    """No threshold when recompute always won, the legs tie, or the interval is open above."""
    fit, up = w.fit, _ladder_up(w.n_max, w.block)
    if fit.status == "recompute-always-wins":
        raise NotRecommended(
            f"P2P is not recommended on this setup: recomputing beat the pull at every measured length ({w.lo_hi}); "
            f"no threshold emitted (leave p2p-source-producer off; if a longer prefix may win, run "
            f"`kvcal sweep --prefix-lengths {up}`, or re-measure on a faster transport)"
        )
    tie, best = legs_tie(fit)
    if tie:
        raise NoThreshold(
            f"no threshold: the legs tie (the pull never beat recompute by a measurable amount over {w.lo_hi}; "
            f"best advantage {best}); measure next: `kvcal sweep --reps 5 --prefix-lengths {up}` "
            "to see whether the pull pulls ahead at longer prefixes"
        )
    if interval_open_above(fit):
        raise NoThreshold(
            f"no threshold: the {fit.confidence:.0%} interval of the break-even is open above (point "
            f"{fmt(fit.break_even_tokens) if fit.break_even_tokens is not None else 'n/a'} tokens, but "
            f"{fit.bootstrap.no_crossover_share or 0:.0%} of resamples never cross: the curves are nearly parallel); "
            f"measure next: `kvcal sweep --reps 5 --prefix-lengths {up}` to bound it"
        )


def _bound(w: _Working, ci: tuple[float, ...] | None) -> float | None:
    """The interval's upper end; the point estimate (with a warning) when the fit has no interval."""
    fit = w.fit
    level = f"{fit.confidence:.0%}" if fit.confidence else "the"
    if ci is not None:
        upper = float(ci[1])
        point = fmt(fit.break_even_tokens) if fit.break_even_tokens is not None else "n/a"
        w.steps.append(f"break-even {point} tokens, {level} interval [{fmt(ci[0])}, {fmt(ci[1])}]: upper bound {fmt(upper)}")
        return max(upper, 0.0)
    if fit.break_even_tokens is not None and math.isfinite(fit.break_even_tokens):
        upper = float(fit.break_even_tokens)
        w.steps.append(f"break-even {fmt(upper)} tokens, no interval recorded: using the point estimate as the bound")
        w.warnings.append("the fit has no break-even interval; the margin is the only safety: run `kvcal fit` with "
                          f"its bootstrap (--resamples {FIT_DEFAULTS.n_resamples}) and emit from that fit.json")
        return max(upper, 0.0)
    if fit.status == "crossover":
        raise InputError("the fit says 'crossover' but records no finite break-even or interval; "
                         "run `kvcal fit` again (sweeping more --reps narrows it)")
    return None


def _with_margin(w: _Working, upper: float | None, margin: float) -> int | None:
    """The bound times (1 + margin), rounded up to a whole block."""
    if upper is None:
        return None
    raised = upper * (1.0 + margin)
    threshold = round_up(raised, w.block)
    w.steps.append(f"{fmt(upper)} x (1 + margin {margin:g}) = {fmt(raised)} tokens, "
                   f"rounded up to a multiple of block size {w.block}: {threshold}")
    return threshold


def _floor(w: _Working, threshold: int | None, allow_extrapolation: bool) -> int | None:
    """Never below the shortest length from which the pull was measured to win (unless --allow-extrapolation)."""
    floor = pull_won_from(w.fit)
    lost_at_longest = floor is None and bool(w.fit.per_length)
    threshold = _raise_to_floor(w, floor, threshold, allow_extrapolation)
    if lost_at_longest:
        w.warnings.append(f"the pull's median lost at the longest measured length ({w.n_max} tokens), so the data show "
                          f"no length from which pulling keeps winning: run `kvcal sweep --reps 5 --prefix-lengths "
                          f"{_ladder_up(w.n_max, w.block)}` to confirm the crossover")
    return threshold


def _raise_to_floor(w: _Working, floor: int | None, threshold: int | None, allow_extrapolation: bool) -> int | None:
    fit = w.fit
    if fit.status == "pull-always-wins" and floor is None:
        if not fit.measured_range:
            raise InputError("the fit says 'pull-always-wins' but records neither the lengths where the pull won nor a measured range")
        floor = max(w.n_min, int(fit.smallest_pull_win_tokens or 0))  # the fitted pull won from n_min; a median lost
    if floor is None:
        return threshold
    floor_b = round_up(floor, w.block)
    if threshold is not None and threshold >= floor_b:
        return threshold
    if allow_extrapolation and threshold is not None:
        w.warnings.append(
            f"--allow-extrapolation: {threshold} lies below {floor} tokens, the shortest length from which the "
            f"pull was measured to win; confirm it with `kvcal sweep --prefix-lengths {_ladder_down(floor, w.block)}`")
        return threshold
    why = "no break-even estimate" if threshold is None else f"{threshold} would rest on the fitted curves alone"
    w.steps.append(f"{why}: raised to {floor_b}, the shortest measured length from which the pull won at "
                   f"every longer length ({floor} tokens, rounded up to a block); --allow-extrapolation "
                   "drops this floor")
    return floor_b


def _advice(w: _Working, upper: float | None) -> None:
    """What to sweep next when the threshold rests on lengths the sweep did not cover."""
    fit = w.fit
    if fit.status == "pull-always-wins":
        w.warnings.append(
            f"the pull won at every measured length down to {w.n_min} tokens, so the true break-even is at or below the "
            f"sweep: run `kvcal sweep --prefix-lengths {_ladder_down(w.n_min, w.block)}` to locate it and lower this threshold")
    elif upper is not None and upper > w.n_max:
        w.warnings.append(f"the break-even's upper bound ({fmt(upper)}) lies beyond the longest measured prefix ({w.n_max}): "
                          f"run `kvcal sweep --prefix-lengths {_ladder_up(w.n_max, w.block)}` to confirm it")
    elif fit.extrapolated:
        w.warnings.append("the break-even is extrapolated outside the measured range: run `kvcal sweep` with "
                          "--prefix-lengths around it to cover it")
