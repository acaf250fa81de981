"""What an adaptive stop must hold: a threshold emit-config gives, a target met beyond the Monte Carlo error.

The stop rules of :mod:`kvcal.sweep.adaptive` read two figures of the bootstrap, and a
bootstrap's figures move with its seed: a campaign that stopped at a width of 0.0998 under
seed 0 refitted at 0.108 under another (issue 40). So each figure comes with its Monte
Carlo error, ``MC_Z`` standard errors of the figure over the bootstrap's own draws, and a
target counts as met only when the figure *plus* that error is within it: the stop then
holds under another seed unless the seed lands beyond ``MC_Z`` standard errors (3, not 2:
the stop is taken on a refit whose draws happen to run favourable).

* the **width**'s error: each end of the interval is a quantile of the break-even draws;
  the standard error of the q-quantile of B draws is half the span of the order statistics
  ``B q +- sqrt(B q (1 - q))`` (the binomial count of draws below it), the two ends added
  in quadrature, over the break-even;
* the **regret**'s error: the standard deviation of the per-draw regret share over sqrt(B)
  (the figure is their mean).

The threshold and its expected regret come from emit-config's default rule: the caller hands in
a :data:`Judge` (the CLI hands in :func:`kvcal.sweep.judge.emit_judge`, which asks :mod:`kvcal.threshold`).
Without one the campaign stops on the width alone, as before.

A campaign whose fit meets its target while emit-config refuses it ("the legs tie": the
pull never won measurably at one length) is not done: :func:`win_proof` places a pair of
each leg at twice the break-even, where the pull's margin is widest for a probe that costs
little more than one at the crossover, until the pull wins there measurably.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvcal.records.fit import FitResult
from kvcal.records.run import Leg

# Monte Carlo standard errors a figure must clear its target by. At 2 a campaign stopped at 0.0957 with an error of
# 0.0039 (sim defaults, 10 % target, seed 0) and refitted under 10 other seeds at 0.0957-0.1007: a stop is taken on
# the refit whose draws happen to run narrow, so the figure sits at the low end of its seed spread, not its middle.
MC_Z = 3.0
PROOF_SPAN = 2.0  # the win proof's length over the break-even: the pull's margin grows with the length


@dataclass(frozen=True)
class Verdict:
    """emit-config's answer on one fit: the threshold (None: a refusal, ``refusal`` says why) and what it costs.

    ``regret``: the expected regret as a fraction of the expected TTFT; ``regret_mc_error``: its
    Monte Carlo error (MC_Z standard errors); both None without bootstrap draws.
    """

    threshold: int | None
    regret: float | None = None
    regret_mc_error: float | None = None
    refusal: str | None = None


Judge = Callable[[FitResult], Verdict]


def width_mc_error(fit: FitResult, confidence: float) -> float | None:
    """MC_Z Monte Carlo standard errors of the relative width (module docstring); None without draws or a width."""
    values = np.array([math.inf if v is None else v for v in fit.bootstrap.break_even_samples], dtype=float)
    if values.size < 10 or not fit.break_even_tokens:
        return None
    values.sort()
    tail = 0.5 * (1.0 - confidence)
    errors = []
    for q in (tail, 1.0 - tail):
        spread = math.sqrt(values.size * q * (1.0 - q))
        low = values[max(int(math.floor(values.size * q - spread)), 0)]
        high = values[min(int(math.ceil(values.size * q + spread)), values.size - 1)]
        if not (math.isfinite(low) and math.isfinite(high)):
            return None
        errors.append(0.5 * (high - low))
    return MC_Z * math.hypot(*errors) / fit.break_even_tokens


def regret_mc_error(shares: np.ndarray) -> float:
    """MC_Z standard errors of a mean over bootstrap draws."""
    if shares.size < 2:
        return math.inf
    return MC_Z * float(np.std(shares, ddof=1)) / math.sqrt(shares.size)


def meets(figure: float | None, error: float | None, target: float) -> bool:
    """The figure, with its Monte Carlo error added, is within the target."""
    return figure is not None and figure + (error or 0.0) <= target


def proof_length(fit: FitResult, grid: list[int]) -> int | None:
    """Where the pull's win is to be proved: the grid length nearest PROOF_SPAN x the break-even; None without one."""
    if fit.break_even_tokens is None or not math.isfinite(fit.break_even_tokens):
        return None
    aim = min(fit.break_even_tokens * PROOF_SPAN, grid[-1])
    above = [n for n in grid if n > fit.break_even_tokens] or [grid[-1]]
    return min(above, key=lambda n: (abs(math.log(n / aim)), n))


def win_proof(fit: FitResult, grid: list[int], pair: int) -> list[tuple[int, Leg, int, str]]:
    """(length, leg, count, reason): a pair per leg at :func:`proof_length`, for a fit emit-config refuses."""
    n = proof_length(fit, grid)
    if n is None:
        return []
    be = fit.break_even_tokens
    why = (
        f"win proof: the target is met but emit-config refuses (no measurable pull win at one length); both legs at "
        f"{n} tokens" + (f", {n / be:.1f}x the break-even" if be else "")
    )
    return [(n, leg, pair, why) for leg in (Leg.RECOMPUTE, Leg.PULL)]
