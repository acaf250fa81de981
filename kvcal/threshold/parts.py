"""What every threshold rule shares: the block, the data's facts (where the pull won, ties, an open interval),
the disturbance gate and the refusals, and the working state the rules' steps append to.

The rules themselves: :mod:`kvcal.threshold.rules.upper` (``--rule upper``, the interval's upper end
with a margin) and :mod:`kvcal.threshold.rules.expected_cost` (the default); :mod:`kvcal.threshold.choose`
chooses between them and says what the choice costs.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from kvcal.errors import KvcalError, NoThreshold, NotRecommended
from kvcal.fit.ladder_steps import pull_floor
from kvcal.fit.wins import pooled_win_z
from kvcal.records.fit import FitResult
from kvcal.settings.sweep import DEFAULT_BLOCK_SIZE
from kvcal.threshold.limits import validate_block_size

log = logging.getLogger(__name__)

POOLED_Z = 1.645
"""One-sided 5 % for the pooled advantage over all lengths (the tie test)."""


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
        raise KvcalError(
            f"internal: refusing to emit minCachedTokenDelta={value!r} (must be an int >= 1 and a multiple of {block})"
        )
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


def medians_won(fit: FitResult) -> tuple[int, int]:
    """(lengths where the pull's median won, lengths with both medians), from fit.json's per-length summaries."""
    rows = [r for r in fit.per_length if r.pull_won is not None]
    return sum(bool(r.pull_won) for r in rows), len(rows)


def where_the_pull_won(fit: FitResult, lo_hi: str) -> str:
    """What the medians say over the measured lengths, for a sentence about a status read off the curves."""
    won, total = medians_won(fit)
    if not total:
        return f"over {lo_hi} (no per-length medians recorded)"
    if won == 0:
        return f"the pull's median lost at every measured length ({lo_hi})"
    if won == total:
        return f"the pull's median won at every measured length ({lo_hi})"
    return f"the pull's median won at {won} of {total} measured lengths ({lo_hi})"


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
    return (
        bool(fit.bootstrap.n_resamples)
        and bounds is not None
        and len(bounds) == 2
        and (bounds[1] is None or not math.isfinite(bounds[1]))
    )


def ladder_down(floor: int, block: int) -> str:
    # never under two blocks: a one-block pull moves nothing (kvcal.sweep.lengths.grow_below)
    lengths = sorted({max(pull_floor(block), round_up(floor / 2**k, block)) for k in range(5, -1, -1)})
    return ",".join(str(n) for n in lengths)


def ladder_up(n_max: int, block: int) -> str:
    return ",".join(str(round_up(n_max * f, block)) for f in (1, 2, 4))


# ---------------------------------------------------------------- a pull's slow mode


def slow_mode_line(fit: FitResult) -> str | None:
    """The pull's slow mode, when the fit made the pull's curve its mean cost (kvcal.fit.modes), or its slow pulls
    too few to tell from a stall; else None."""
    mode = next((m for m in fit.slow_modes if m.mean_fitted), None)
    aside = fit.unresolved_slow
    if mode is None and aside is not None:
        return (
            f"{aside.n_slow} of {aside.n_probes} pulls took {aside.ratio:.2g}x the fitted time, too few to tell a "
            "stall from a slow mode, so the interval's upper end is that of the mean costs with them"
        )
    if mode is None:
        return None
    return (
        f"the pull has a slow mode ({mode.n_slow} of {mode.n_probes} pulls, {mode.share:.0%}, took {mode.ratio:.2g}x "
        f"the fast time), so the break-even is that of the mean costs the router pays"
        + (f" (the fast pulls alone cross at {fmt(fit.fast_break_even_tokens)})" if fit.fast_break_even_tokens else "")
    )


@dataclass
class Working:
    """What the rule's steps share: the fit, the block, the measured span, and the steps and warnings so far."""

    fit: FitResult
    block: int
    n_min: int
    n_max: int
    lo_hi: str
    steps: list[str]
    warnings: list[str] = field(default_factory=list)


def disturbance_gate(w: Working, allow_disturbed: bool) -> None:
    """A disturbed host refuses, unless --allow-disturbed (then it warns)."""
    host = w.fit.host_disturbance
    if host is None or not host.disturbed:
        return
    figure = (
        f"other processes took up to {host.max:.0%} (median {host.median:.0%}) of {host.resource} "
        f"in {len(host.disturbed_probes)} of {host.n_measured} probes"
    )
    if not allow_disturbed:
        raise NoThreshold(
            f"no threshold: the sweep measured a disturbed host ({figure}); rerun `kvcal sweep` "
            "when the machine is quiet (check with `top`), or pass --allow-disturbed to emit anyway"
        )
    w.warnings.append(
        f"the sweep measured a disturbed host ({figure}); emitted because of --allow-disturbed: "
        "rerun `kvcal sweep` on a quiet machine before trusting it"
    )


def refuse_never_or_tie(w: Working) -> None:
    """No threshold when the fitted curves never cross or the legs tie (``--rule upper``'s gates)."""
    fit, up = w.fit, ladder_up(w.n_max, w.block)
    if fit.status == "recompute-always-wins":
        raise NotRecommended(
            f"P2P is not recommended on this setup: the fitted curves never cross in the measured range "
            f"({where_the_pull_won(fit, w.lo_hi)}); no threshold emitted (leave p2p-source-producer off; if a "
            f"longer prefix may win, run `kvcal sweep --prefix-lengths {up}`, or re-measure on a faster transport)"
        )
    tie, best = legs_tie(fit)
    if tie:
        raise NoThreshold(
            f"no threshold: the legs tie (the pull never beat recompute by a measurable amount over {w.lo_hi}; "
            f"best advantage {best}); measure next: `kvcal sweep --reps 5 --prefix-lengths {up}` "
            "to see whether the pull pulls ahead at longer prefixes"
        )


def refuse_open_above(w: Working) -> None:
    """The upper rule has no bound when the interval is open above (some resamples never cross)."""
    fit, up = w.fit, ladder_up(w.n_max, w.block)
    if interval_open_above(fit):
        raise NoThreshold(
            f"no threshold: the {fit.confidence:.0%} interval of the break-even is open above (point "
            f"{fmt(fit.break_even_tokens) if fit.break_even_tokens is not None else 'n/a'} tokens, but "
            f"{fit.bootstrap.no_crossover_share or 0:.0%} of resamples never cross: the curves are nearly parallel); "
            f"measure next: `kvcal sweep --reps 5 --prefix-lengths {up}` to bound it"
        )
