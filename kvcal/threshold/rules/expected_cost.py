"""The default rule, ``--rule expected-cost``: the threshold with the least expected cost over the fit's draws.

The decision itself is :func:`kvcal.threshold.decision.decide`: every candidate threshold (block
multiples over the measured range, and no P2P) priced per request over the deltas, averaged
over the fit's draws of both legs' mean costs. This module turns it into the rule's steps,
its warnings and its one refusal:

* **no P2P is cheapest**: NotRecommended (exit 3), with the expected costs that make it so;
* the threshold at the **shortest measured length** (pulling from there on costs least): the
  break-even may lie below the sweep, so the warning says what to sweep next, unless that
  length is the two-block floor, below which no pull moves bytes;
* at the **longest** measured length, or beyond the measured range under ``--allow-extrapolation``:
  the warning says what would confirm it.

What the earlier rule did with gates is now part of the cost: a length where the pull lost
counts through its measured mean and noise (:mod:`kvcal.threshold.draw_costs`), a tie is a tie in
the draws (the highest of equal costs wins), and recomputing winning everywhere is no P2P
being cheapest. Refusals about the data (a disturbed host) are made before any rule
(:mod:`kvcal.threshold.parts`).
"""

from __future__ import annotations

import math

from kvcal.errors import NotRecommended
from kvcal.fit.ladder_steps import pull_floor
from kvcal.fit.mean_cost import mean_scales, reps_to_settle, scale_rel_sd
from kvcal.threshold.candidate_costs import ThresholdCosts
from kvcal.threshold.decision import Decision, decide
from kvcal.threshold.delta_weights import Deltas
from kvcal.threshold.draw_costs import LEGS, cost_draws
from kvcal.threshold.parts import Working, fmt, ladder_down, ladder_up
from kvcal.threshold.regret import RegretModel
from kvcal.threshold.rules import Chosen

SETTLE_REGRET_PCT = 0.1
"""An expected regret (% of TTFT) below which no leg's scale needs settling."""
DOMINATES = 0.5
"""The share of the expected regret a scale's uncertainty must carry to dominate the choice."""


def choose(w: Working, *, margin: float | None, deltas: Deltas | None, allow_extrapolation: bool) -> Chosen:
    """The rule's entry (kvcal.threshold.rules): the decision's threshold, and the decision with it."""
    decision = expected_cost_threshold(w, deltas, allow_extrapolation)
    assert decision.threshold is not None  # expected_cost_threshold refuses a decision without one
    return Chosen(decision.threshold, decision, carries_decision=True)


def expected_cost_threshold(w: Working, deltas: Deltas | None, allow_extrapolation: bool) -> Decision:
    """The decision (module docstring), its steps and warnings appended to ``w``; NotRecommended for no P2P."""
    decision = decide(w.fit, block_size=w.block, deltas=deltas, allow_extrapolation=allow_extrapolation)
    w.steps.append(_costs_line(w, decision))
    w.steps += [
        f"at {m.prefix_tokens} tokens the {m.leg} curve misfits: its measured mean is {m.measured_ms:.4g} ms against "
        f"{m.fitted_ms:.4g} ms fitted, so the draws take the measured mean, with its noise, there"
        for m in decision.draws.misfits
    ]
    w.steps.append(_compared_line(decision, deltas, w.fit.measured_range))
    if decision.threshold is None:
        raise NotRecommended(_no_p2p(w, decision))
    _advice(w, decision.threshold, allow_extrapolation)
    _scale_advice(w, decision)
    return decision


def _costs_line(w: Working, decision: Decision) -> str:
    m_r, m_p = mean_scales(w.fit)
    draws = decision.draws
    over = (
        f"{draws.n_draws:,} draws of the fit (its bootstrap curves and drawn scales)"
        if draws.from_bootstrap
        else "the point curves (the fit keeps no bootstrap draws)"
    )
    return (
        f"mean costs: recompute's curve x {m_r:.4g}, the pull's x {m_p:.4g} (what the router pays on average), "
        f"over {over}"
    )


def _compared_line(decision: Decision, deltas: Deltas | None, measured: list[int]) -> str:
    points = decision.candidates
    step = int(points[1] - points[0]) if len(points) > 1 else 0
    span = f"{int(points[0])}-{int(points[-1])} tokens" + (f" in steps of {step}" if step else "")
    over = deltas.source if deltas is not None else f"deltas log-uniform over {measured[0]}-{measured[-1]} tokens"
    chosen = (
        "no P2P is cheapest"
        if decision.threshold is None
        else f"{decision.threshold} costs least, {decision.chosen_cost_ms:.4g} ms a request on average"
    )
    return (
        f"compared {len(points):,} thresholds ({span}) and no P2P over {over}: {chosen}; "
        f"no P2P costs {decision.no_p2p_cost_ms:.4g} ms"
    )


def _no_p2p(w: Working, decision: Decision) -> str:
    best = int(decision.expected_ms.argmin())
    cheapest, cost = int(decision.candidates[best]), float(decision.expected_ms[best])
    more = 100.0 * (cost - decision.no_p2p_cost_ms) / max(decision.no_p2p_cost_ms, 1e-12)
    return (
        f"P2P is not recommended on this setup: on the fit's mean costs no P2P is cheapest (recomputing costs "
        f"{decision.no_p2p_cost_ms:.4g} ms a request on average over {w.lo_hi}; the cheapest threshold, {cheapest}, "
        f"{cost:.4g} ms, {more:+.2g}%); no threshold emitted (leave p2p-source-producer off; if a longer prefix may "
        f"win, run `kvcal sweep --prefix-lengths {ladder_up(w.n_max, w.block)}`, or re-measure on a faster transport)"
    )


def _advice(w: Working, threshold: int, allow_extrapolation: bool) -> None:
    """What to sweep next when the threshold sits at an end of the measured range or beyond it."""
    floor = pull_floor(w.block)
    if threshold < w.n_min or threshold > w.n_max:
        side, length = ("below the shortest", w.n_min) if threshold < w.n_min else ("beyond the longest", w.n_max)
        around = ladder_down(w.n_min, w.block) if threshold < w.n_min else ladder_up(w.n_max, w.block)
        w.warnings.append(
            f"--allow-extrapolation: {threshold} lies {side} measured length ({length}), on the curves alone; "
            f"confirm it with `kvcal sweep --prefix-lengths {around}`"
        )
    elif threshold <= max(w.n_min, floor) and w.n_min <= floor:
        w.steps.append(
            f"the threshold rests at the shortest measured length, {w.n_min} tokens, which is the floor "
            f"(two blocks of {w.block}: a one-block pull moves nothing)"
        )
    elif threshold < w.n_min + w.block and not allow_extrapolation:
        down = ladder_down(w.n_min, w.block)
        w.warnings.append(
            f"pulling from the shortest measured length, {w.n_min} tokens, costs least on the fit's mean costs, so "
            f"the break-even may lie below the sweep: run `kvcal sweep --prefix-lengths {down}` to locate it and "
            f"lower this threshold (or pass --allow-extrapolation to trust the curves below {fmt(w.n_min)})"
        )
    elif threshold > w.n_max - w.block:
        w.warnings.append(
            f"the threshold is the longest measured length ({w.n_max} tokens): pulling pays only at the top of the "
            f"range; confirm it with `kvcal sweep --reps 5 --prefix-lengths {ladder_up(w.n_max, w.block)}`"
        )


def _scale_advice(w: Working, decision: Decision) -> None:
    """Where one leg's mean-cost scale carries most of what the choice may cost: which leg, and the reps that would
    bring its share of the expected regret under ``SETTLE_REGRET_PCT`` (its regret falls about as its variance)."""
    threshold, summary = decision.threshold, w.fit.mean_cost
    if threshold is None or summary is None or not decision.draws.from_bootstrap:
        return
    total = RegretModel(decision.model).figures(threshold).expected_regret_pct or 0.0
    if total < SETTLE_REGRET_PCT:
        return
    for leg in LEGS:
        parts = summary.recompute_parts if leg == "recompute" else summary.pull_parts
        if parts is None:
            continue
        known = ThresholdCosts(cost_draws(w.fit, known_scale=leg), decision.model.deltas, decision.candidates)
        carried = total - (RegretModel(known).figures(threshold).expected_regret_pct or 0.0)
        if carried < DOMINATES * total:
            continue
        target = scale_rel_sd(parts) * math.sqrt(SETTLE_REGRET_PCT / carried)
        more = reps_to_settle(w.fit, leg, target)
        lengths = sum(1 for r in w.fit.per_length if (r.n_recompute if leg == "recompute" else r.n_pull))
        per_length = math.ceil(more / max(lengths, 1))
        w.warnings.append(
            f"the {leg}'s mean cost over its curve (x{mean_scales(w.fit)[LEGS.index(leg)]:.3g}) carries {carried:.2g} "
            f"points of this threshold's expected regret of {total:.2g}% of TTFT: about {more:,} more probes of the "
            f"{leg} at the lengths already measured ({per_length:,} more reps at each of {max(lengths, 1)}) would "
            f"bring that under {SETTLE_REGRET_PCT:g}%"
        )
