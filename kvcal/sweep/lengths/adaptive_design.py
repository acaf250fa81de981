"""Adaptive design: where the next probes go so the break-even's interval shrinks fastest per ms of engine time.

The break-even n* solves D(n*) = R(n*) - P(n*) = 0 for the fitted recompute and pull
curves. By the delta method its variance is

    Var(n*) ~= [Var R^(n*) + Var P^(n*)] / D'(n*)^2

(the legs are fitted independently). Each leg's fitted value at n has variance
f(n)' I^-1 f(n), f(n) = (1, u, u^2)[:p] with u = n / n_scale, p the coefficients of
the model the fit chose (recompute: quadratic once it has 3 lengths, see QUAD_DESIGN),
and I = sum_i f(n_i) f(n_i)' / (cv T(n_i))^2 the Fisher information of the
relative-noise weighted fit (cv the leg's fitted noise, T its fitted curve: the same
weights :mod:`kvcal.fit.curves` uses). A pair of probes at
length x of leg L adds w f(x) f(x)' with w = 2 / (cv T_L(x))^2, so by
Sherman-Morrison the variance at a target t drops by

    w (f(t)' I^-1 f(x))^2 / (1 + w f(x)' I^-1 f(x))

and costs 2 T_L(x) ms of engine time (the fitted curve predicts it). The fit reports
that spread expanded by t_df / z, df the weaker leg's pure-error degrees of freedom
(:mod:`kvcal.fit.bootstrap`), so the squared width goes as Var(n*) t_df^2, and that is
what a pick shrinks: a pair at a length its leg has measured adds 2 df, at a new one 1
(:func:`t_weighted_cut`). On the variance alone the design left one leg with few df
and paid for it in t: counting t lowered the median engine time on 9 of the
benchmark's 12 rows (docs/method.md) and raised the pooled coverage. The targets are
quantiles of the current bootstrap samples of n* (clamped to the allowed range),
so the design covers where the break-even may still be, not only the point
estimate. Pairs are picked greedily by variance cut per ms, updating I after each
pick, among lengths within a factor LOCAL_SPAN of the targets: the variance alone
would sometimes lever the line from far away, which is only as good as the model
is there; near the crossover a smooth curve is locally what the fit assumes. Designed
probes come in pairs because a pair at a new length adds a pure-error degree of freedom to
the leg's pooled noise (:mod:`kvcal.fit.bootstrap`), where a single probe (the climb's,
CLIMB_REPS) adds none. A round stops picking at the size :func:`batch_size` allows,
or sooner once the picks so far bring Var(n*) t_df^2 down by (W / width)^2, the share
that takes the current width to the target W, or the model's own width to W.

The candidate lengths are a grid of block multiples, 2^(1/4) apart, over the allowed
range: coarse enough that repeated picks pool reps at the same lengths (more pure
error degrees of freedom, a smaller t expansion), fine enough to sit within 10% of
any crossover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvcal.errors import InputError
from kvcal.fit.bootstrap import t_quantile
from kvcal.fit.ladder_steps import pull_floor
from kvcal.records.fit import FitResult
from kvcal.records.run import Leg

GRID_RATIO = 2**0.25
# The seed's second length is 2x the shortest; the climb then looks 4x longer while the
# pull has not won. A 4x second length spent a quarter of the oracle's engine time on
# recompute probes at 1K tokens when the crossover sits near the shortest length (the
# benchmark's short-end truth). At 2x (100 campaigns a row, ROUND_AIM 0.8) the two rows
# nearest the 1.5x-the-oracle bar fell: short end 5%/10% 1.37x -> 1.22x, GLM-like
# 5%/10% 1.54x -> 1.49x; the other ten rows moved by -0.08x to +0.08x.
SEED_SECOND = 2
SEED_STEP = 4  # the climb's step while the pull has not won
PAIR = 2  # probes per pick: two reps keep every length resampleable within itself
# A climb step buys one probe per leg, not a pair: it only asks whether the pull wins
# further up, and its lengths (4x apart) mostly lie past the crossover the design then
# works at, so a second rep there bought df at the dearest lengths of the campaign. Until
# the design revisits such a length its leg is bootstrapped from residuals (its df
# N - p, kvcal.fit.bootstrap). On the benchmark's 5%-noise, 10%-target rows (100
# campaigns a row) the median engine time fell from 1.60x to 1.36x the oracle (steep
# attention), 1.50x to 1.33x (GLM-like) and 1.41x to 1.30x (long crossover), coverage
# 0.86/0.90/0.86 -> 0.88/0.87/0.88; the truths that never climb (sim default, short end)
# are unchanged.
CLIMB_REPS = 1
TARGET_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
CV_FLOOR = 0.005  # a fit that happens to be exact must not make one probe look infinitely informative
# A round aims at 80% of the squared-width cut the 1/sqrt(N) rule asks for: the width falls
# faster than that rule (designed probes tell more than the seed's, and the t factor
# shrinks as the legs gain df), so rounds sized on it overshot the target. Aiming short
# costs a round more now and then; against 1.05 it cut the median engine time on all 12
# benchmark rows (100 campaigns a row, by under 1% to 15%; seed 4x; pooled coverage
# 0.88 -> 0.89).
ROUND_AIM = 0.8
# A round also ends once the design's own model (Var(n*) x t^2, below) predicts the
# target: after a seed and climb whose probes sit far from the crossover, well-placed
# pairs narrow the interval several times faster than 1/sqrt(N), and a first design
# round sized on that rule (capped at doubling) overshot. On two truths the constants
# were not tuned on (benchmark: long crossover, steep attention) the 5%/10% rows fell
# from 1.66x to 1.36x and from 1.85x to 1.58x the oracle; the tuned rows moved +-0.04x.
# And once that model's own width, 2 t sqrt(Var(n*)) over the break-even, is at the target:
# the ratio above is taken against the bootstrap's width, which, before probes near the
# crossover pin the recompute's curvature, also carries the affine/quadratic choice that
# the delta method does not see, so the ratio asked for more than the target needed. On
# truths whose oracle needs 8-16 probes (a steep attention term, the crossover at 4.5K
# and 7.5K of 32K, 5% noise, 10% target; 40 campaigns each) it cut the median engine time
# from 1.61x to 1.56x and from 2.16x to 1.99x the oracle; ten sim-default and GLM-like
# crossovers from 450 to 7.5K tokens moved by -0.09x to +0.02x (30 campaigns each).
MIN_ROUND_PAIRS = 2  # a round holds at least 4 probes, as batch_size's floor
# The recompute leg is designed on the quadratic basis once it has 3 lengths, whatever the
# point fit chose: the bootstrap re-selects affine or quadratic on every resample, so a
# design blind to curvature (all probes to one side of n*) leaves that choice, and the
# interval, loose. In the benchmark this cut the GLM-like truth's engine time by 5-20%.
QUAD_DESIGN = True
LOCAL_SPAN = 2.0  # candidates within this factor of the targets: the curves need only hold near the crossover


@dataclass(frozen=True)
class Choice:
    """One (length, leg) the design wants ``count`` more probes at, and why."""

    prefix_tokens: int
    leg: Leg
    count: int
    reason: str


def allowed_range(lengths: list[int] | None, block_size: int, max_model_len: int) -> tuple[int, int]:
    """[shortest, longest] block multiples the campaign may probe: the given lengths' span, else the floor to the limit.

    The floor is the shortest length a pull can prove (:func:`kvcal.fit.ladder_steps.pull_floor`, two blocks).
    """
    longest = ((max_model_len - 1) // block_size) * block_size
    if lengths:
        low, high = min(lengths), max(lengths)
    else:
        low, high = pull_floor(block_size), longest
    if high < low * SEED_SECOND and not lengths:
        raise InputError(
            f"a max model length of {max_model_len} tokens leaves too short a range to search "
            f"({low}-{high} tokens at block size {block_size}; the seed design needs {low} and "
            f"{low * SEED_SECOND}): an adaptive campaign needs a longer one (--max-model-len) or a smaller block"
        )
    if high <= low or high - low < block_size:
        raise InputError(
            f"an adaptive sweep needs a range of lengths to search, got {low}-{high} tokens; "
            "give --prefix-lengths with a shortest and a longest length (e.g. 256,65472)"
        )
    return low, high


def candidate_lengths(low: int, high: int, block_size: int) -> list[int]:
    """Block multiples 2^(1/4) apart from ``low`` to ``high`` (both included)."""
    out = {low, high}
    value = float(low)
    while value < high:
        value *= GRID_RATIO
        out.add(min(high, max(low, int(round(value / block_size)) * block_size)))
    return sorted(out)


def nearest(grid: list[int], value: float) -> int:
    return min(grid, key=lambda n: (abs(math.log(n / max(value, 1.0))), n))


def seed_design(grid: list[int]) -> list[Choice]:
    """Round 0: the shortest length and SEED_SECOND times it, a pair of probes per leg at each."""
    low = grid[0]
    second = nearest(grid, low * SEED_SECOND)
    if second == low:
        second = grid[1]
    why = f"seed: the shortest allowed length and {second / low:.1f}x above it"
    return [Choice(n, leg, PAIR, why) for n in (low, second) for leg in (Leg.RECOMPUTE, Leg.PULL)]


def extension(
    grid: list[int], medians: dict[int, tuple[float, float]], fitted_break_even: float | None
) -> list[Choice]:
    """Climb SEED_STEP longer, CLIMB_REPS probes a leg, while the pull has not won at the longest length both legs
    measured.

    ``medians``: n -> (recompute, pull) median TTFT; ``fitted_break_even``: the current
    fit's point estimate (None without a fit or when the pull never wins). A fit that
    puts the break-even within LOCAL_SPAN of the top stops the climb: a near tie there,
    which two reps' noise tipped the recompute's way, is for the design to resolve; the
    next step up would buy probes SEED_STEP longer (8K tokens for the GLM-like truth's
    3.8K crossover seen from 2K, 2.2 s of engine time) to learn what the fit already says.
    """
    if not medians:
        return []
    top = max(medians)
    recompute_ms, pull_ms = medians[top]
    if pull_ms < recompute_ms or top >= grid[-1]:
        return []
    if fitted_break_even is not None and fitted_break_even <= top * LOCAL_SPAN:
        return []
    nxt = nearest(grid, top * SEED_STEP)
    if nxt <= top:
        nxt = grid[-1]
    why = f"extend: the pull has not won up to {top} tokens; look {nxt / top:.1f}x longer"
    return [Choice(nxt, leg, CLIMB_REPS, why) for leg in (Leg.RECOMPUTE, Leg.PULL)]


def batch_size(n_valid: int, width: float | None, target: float) -> int:
    """Probes for the next round: ROUND_AIM of what 1/sqrt(N) says the target needs, between 4 and doubling."""
    if width is None or not math.isfinite(width):
        extra = n_valid / 2
    else:
        extra = n_valid * ((width / target) ** 2 * ROUND_AIM - 1.0)
    return int(PAIR * math.ceil(min(max(extra, 2 * PAIR), n_valid) / PAIR))


@dataclass
class _LegState:
    leg: Leg
    coef: np.ndarray  # physical (3,)
    p: int
    cv: float
    info: np.ndarray  # (p, p)

    def cost_ms(self, n: np.ndarray) -> np.ndarray:
        c = self.coef
        return np.maximum(c[0] + c[1] * n / 1e3 + c[2] * n**2 / 1e6, 1e-3)

    def basis(self, n: np.ndarray, scale: float) -> np.ndarray:
        u = np.asarray(n, dtype=float) / scale
        return np.stack([u**j for j in range(self.p)], axis=-1)


def _leg_state(fit: FitResult, leg: Leg, probes: dict[int, int], scale: float) -> _LegState:
    curve = fit.recompute if leg is Leg.RECOMPUTE else fit.pull
    coef = np.array([curve.intercept_ms, curve.per_token_us, curve.per_token2_ns])
    p = 3 if curve.model == "quadratic" or (QUAD_DESIGN and leg is Leg.RECOMPUTE and len(probes) >= 3) else 2
    state = _LegState(leg, coef, p, max(curve.noise_cv or 0.05, CV_FLOOR), np.zeros((p, p)))
    n = np.array(sorted(probes), dtype=float)
    counts = np.array([probes[int(x)] for x in n], dtype=float)
    f = state.basis(n, scale)
    w = counts / (state.cv * state.cost_ms(n)) ** 2
    state.info = np.einsum("k,ki,kj->ij", w, f, f)
    state.info += np.eye(p) * 1e-9 * max(np.trace(state.info), 1e-300)  # keeps a barely supported model invertible
    return state


def _targets(fit: FitResult, low: int, high: int) -> np.ndarray:
    samples = fit.bootstrap.break_even_samples
    values = np.array([high if s is None else s for s in samples], dtype=float)
    if values.size == 0:
        point = fit.break_even_tokens
        values = np.array([high if point is None else point], dtype=float)
    return np.clip(np.quantile(values, TARGET_QUANTILES), low, high)


def t_weighted_cut(
    variance: float, cut: np.ndarray, df_leg: int, df_other: int, gained: np.ndarray, confidence: float
) -> np.ndarray:
    """How much a pair shrinks Var(n*) x t^2 on the weaker leg's df: the square of the width the fit reports.

    ``cut``: the pair's variance cut (per candidate); ``gained``: the residual df it adds to
    its leg (2 at a length the leg has measured, 1 at a new one).
    """
    before = variance * t_quantile(min(df_leg, df_other), confidence) ** 2
    after = (variance - cut) * t_quantile(np.minimum(df_leg + gained, df_other), confidence) ** 2
    return before - after


def variance_share_to_target(width: float | None, target: float) -> float | None:
    """(target / width)^2: the share of Var(n*) x t^2 a round may leave to reach the target; None without a width."""
    if width is None or not math.isfinite(width) or width <= 0:
        return None
    return (target / width) ** 2


def choose_batch(
    fit: FitResult,
    measured: dict[Leg, dict[int, int]],
    grid: list[int],
    n_probes: int,
    round_index: int,
    confidence: float = 0.9,
    *,
    enough: float | None = None,
    target_width: float | None = None,
) -> list[Choice]:
    """Greedy pairs of probes that narrow the interval most per predicted ms, at most ``n_probes`` (module docstring).

    With ``enough``, the round ends early (after MIN_ROUND_PAIRS) once the design's own model
    predicts Var(n*) x t^2 down to that share of its value at the start of the round; with
    ``target_width``, once that model's relative width, 2 t sqrt(Var(n*)) over the median of
    the targets, is at most it.
    """
    scale, targets, legs, slope2 = _design_state(fit, measured, grid)
    centre = float(np.median(targets))
    cand = np.array([n for n in grid if targets[0] / LOCAL_SPAN <= n <= targets[-1] * LOCAL_SPAN], dtype=float)
    if cand.size == 0:
        cand = np.array([nearest(grid, float(np.median(targets)))], dtype=float)
    picks: dict[tuple[int, Leg], list[float]] = {}
    lengths = {leg: set(measured[leg]) for leg in legs}
    df = {leg: _pure_error_df(measured[leg]) for leg in legs}
    at_targets = {leg: state.basis(targets, scale) for leg, state in legs.items()}
    at_cand = {leg: state.basis(cand, scale) for leg, state in legs.items()}
    start = None  # Var(n*) x t^2 before the round's first pick
    for picked in range(max(n_probes // PAIR, 1)):
        invs = {leg: np.linalg.inv(state.info) for leg, state in legs.items()}
        totals = {leg: _target_variance(at_targets[leg], invs[leg], slope2) for leg in legs}
        squared_width = sum(totals.values()) * float(t_quantile(min(df.values()), confidence)) ** 2
        start = squared_width if start is None else start
        if picked >= MIN_ROUND_PAIRS:
            if enough is not None and squared_width <= enough * start:
                break
            if target_width is not None and 2.0 * math.sqrt(squared_width) <= target_width * centre:
                break
        best: tuple[float, Any, int, float, float, np.ndarray] | None = None
        for leg, state in legs.items():
            cut, w = _pair_cut(state, invs[leg], at_targets[leg], at_cand[leg], cand, slope2)
            gained = np.where(np.isin(cand, sorted(lengths[leg])), PAIR, PAIR - 1)
            other = next(d for other_leg, d in df.items() if other_leg is not leg)
            narrowing = t_weighted_cut(sum(totals.values()), cut, df[leg], other, gained, confidence)
            score = narrowing / (PAIR * state.cost_ms(cand))
            k = int(np.argmax(score))
            if best is None or score[k] > best[0]:
                best = (score[k], state, k, cut[k] / max(totals[leg], 1e-300), w[k], at_cand[leg][k])
        assert best is not None  # legs is never empty
        _, state, k, share, w_k, f_k = best
        state.info = state.info + w_k * np.outer(f_k, f_k)
        n_k = int(cand[k])
        df[state.leg] += PAIR if n_k in lengths[state.leg] else PAIR - 1
        lengths[state.leg].add(n_k)
        picks.setdefault((n_k, state.leg), []).append(share)
    return _as_choices(picks, legs, f"round {round_index}", targets)


def df_top_up(
    fit: FitResult, measured: dict[Leg, dict[int, int]], grid: list[int], min_df: int, round_index: int
) -> list[Choice]:
    """Pairs that lift every leg's residual df to ``min_df`` where they cost least for what they narrow.

    For a campaign whose interval already meets its stop rule but rests on too few degrees
    of freedom to be trusted (:data:`kvcal.sweep.adaptive.MIN_STOP_DF`). A pair at a
    length its leg has measured adds 2 df, whichever length it is, so the design only
    chooses among those lengths, by variance cut per ms as :func:`choose_batch` does: for
    a recompute leg, usually a short length costing a fraction of a probe at the crossover.
    """
    scale, targets, legs, slope2 = _design_state(fit, measured, grid)
    picks: dict[tuple[int, Leg], list[float]] = {}
    for leg, state in legs.items():
        short = min_df - _pure_error_df(measured[leg])
        if short <= 0:
            continue
        cand = np.array(sorted(measured[leg]), dtype=float)
        at_targets, at_cand = state.basis(targets, scale), state.basis(cand, scale)
        for _ in range(math.ceil(short / PAIR)):
            inv = np.linalg.inv(state.info)
            total = _target_variance(at_targets, inv, slope2)
            cut, w = _pair_cut(state, inv, at_targets, at_cand, cand, slope2)
            k = int(np.argmax(cut / (PAIR * state.cost_ms(cand))))
            state.info = state.info + w[k] * np.outer(at_cand[k], at_cand[k])
            picks.setdefault((int(cand[k]), leg), []).append(cut[k] / max(total, 1e-300))
    return _as_choices(picks, legs, f"round {round_index} (df to {min_df}, for an interval that can stop)", targets)


def _design_state(fit: FitResult, measured: dict[Leg, dict[int, int]], grid: list[int]):
    """The length scale, the targets, each leg's information and D'(t)^2 at the targets (the module docstring)."""
    scale = float(max(max(m) for m in measured.values()))
    targets = _targets(fit, grid[0], grid[-1])
    legs = {leg: _leg_state(fit, leg, measured[leg], scale) for leg in (Leg.RECOMPUTE, Leg.PULL)}
    rec, pull = legs[Leg.RECOMPUTE].coef, legs[Leg.PULL].coef
    slope = (rec[1] - pull[1]) / 1e3 + 2 * (rec[2] - pull[2]) * targets / 1e6  # D'(t), ms per token
    # floored: a D' of zero (flat, equal legs: a prior with no crossover to find) must not divide by zero
    slope2 = np.maximum(slope**2, max((1e-3 * max(rec[1], pull[1]) / 1e3) ** 2, 1e-30))
    return scale, targets, legs, slope2


def _pure_error_df(counts: dict[int, int]) -> int:
    """A leg's residual df when every length has reps, as kvcal fit counts them."""
    return sum(counts.values()) - len(counts)


def _target_variance(at_targets: np.ndarray, inv: np.ndarray, slope2: np.ndarray) -> float:
    """One leg's share of Var(n*), averaged over the targets (the delta method of the module docstring)."""
    return float(np.mean(np.einsum("ti,ij,tj->t", at_targets, inv, at_targets) / slope2))


def _pair_cut(
    state: _LegState, inv: np.ndarray, at_targets: np.ndarray, at_cand: np.ndarray, cand: np.ndarray, slope2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Var(n*) cut by a pair at each candidate (Sherman-Morrison, averaged over the targets), and the pair's weight."""
    w = PAIR / (state.cv * state.cost_ms(cand)) ** 2
    cross = at_targets @ inv @ at_cand.T  # (targets, candidates)
    self_var = np.einsum("ci,ij,cj->c", at_cand, inv, at_cand)
    return np.mean(w * cross**2 / (1.0 + w * self_var) / slope2[:, None], axis=0), w


def _as_choices(
    picks: dict[tuple[int, Leg], list[float]], legs: dict[Leg, _LegState], label: str, targets: np.ndarray
) -> list[Choice]:
    choices = []
    for (n, leg), shares in sorted(picks.items(), key=lambda item: (item[0][0], item[0][1].value)):
        cost = float(legs[leg].cost_ms(np.array([float(n)]))[0])
        why = (
            f"{label}: {leg.value} at {n} cuts the break-even's variance by {shares[0]:.0%} per pair "
            f"for {cost:.3g} ms a probe (targets {targets[0]:.0f}-{targets[-1]:.0f} tokens)"
        )
        choices.append(Choice(n, leg, PAIR * len(shares), why))
    return choices
