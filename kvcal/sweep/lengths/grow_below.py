"""How far the default design reaches: the shortest length a pull can prove, and growing the plan down to it.

The default ladder starts at 256 tokens, where a pull wins on most GPU pairs only just
or not at all; on a fast CPU pair, or a model with a heavy prefill, the pull already
wins there, and a fit of lengths that all lie on one side of the crossover can only
extrapolate it. So a default campaign looks further down when the measurements ask for
it, and stops where a pull stops proving anything.

The floor (:func:`kvcal.fit.ladder_steps.pull_floor`, with the ladder arithmetic the fit's advice shares): an
engine never takes a prompt's last block from a peer
(the prefix cache leaves at least one token to compute, so the hit stops a block short of
a block-aligned prompt), and a one-block pull moves nothing: the shortest length at which
a pull measures a transfer is two blocks (128 tokens at block size 64).

The rule (:func:`grown_probes`): after the planned probes, when the pull's median beat
recompute's at the shortest length measured, the next octave below it is appended (its
1x and 1.5x powers of two in block multiples, the ladder's own spacing, never below the
floor) with the sweep's reps, and measured; again, until recompute wins at the shortest
length or the floor is reached. A plan of one length (a model limit of 257-320 tokens
leaves the default ladder 256 alone) grows one octave whoever wins: no fit can use one
length. Only the default design grows: explicit
``--prefix-lengths`` are measured as given, and the fit's advice names what to add.
At the other end the ladder already reaches the model's limit; when recompute wins there,
:func:`top_note` says so and names the limit.
"""

from __future__ import annotations

from kvcal.fit.ladder_steps import floor_reason, lengths_below, lengths_to_add_above, lengths_to_add_below, pull_floor
from kvcal.records.run import Leg, PlannedProbe, ProbeRecord
from kvcal.sweep.lengths.probe_plan import build_plan


def leg_medians(records: list[ProbeRecord]) -> dict[int, tuple[float, float]]:
    """Length -> (recompute, pull) median TTFT over valid idle probes, for lengths both legs measured."""
    by: dict[tuple[int, Leg], list[float]] = {}
    for r in records:
        if r.valid and not r.off_curve and r.ttft_ms is not None and r.load_state in (None, "idle"):
            by.setdefault((r.prefix_tokens, r.leg), []).append(r.ttft_ms)
    medians = {}
    for (n, leg), values in by.items():
        other = by.get((n, Leg.PULL if leg is Leg.RECOMPUTE else Leg.RECOMPUTE))
        if leg is Leg.RECOMPUTE and other:
            medians[n] = (_median(values), _median(other))
    return medians


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def grown_probes(
    plan: list[PlannedProbe], records: list[ProbeRecord], *, block_size: int, reps: int, seed: int
) -> tuple[list[PlannedProbe], str] | None:
    """Probes to append to a default campaign's ``plan`` below its shortest length, and why; None when it is done."""
    medians = leg_medians(records)
    if not medians:
        return None
    shortest = min(medians)
    recompute_ms, pull_ms = medians[shortest]
    planned = {p.prefix_tokens for p in plan}
    if pull_ms >= recompute_ms and len(planned) > 1:
        return None
    lengths = [n for n in lengths_below(shortest, block_size) if n not in planned]
    if not lengths:
        return None  # at the floor: the summary says so (top_note's twin in the fit's advice)
    offset = len(plan)
    grown = [
        p.model_copy(update={"plan_index": offset + p.plan_index}) for p in build_plan(lengths, reps, seed + offset)
    ]
    added = ",".join(map(str, lengths))
    if pull_ms >= recompute_ms:
        why = (
            f"{shortest} tokens is the only length the model's limit left the default ladder, and no fit can use "
            f"one length: adding {added} tokens (recompute won at {shortest}: {recompute_ms:.1f} ms against the "
            f"pull's {pull_ms:.1f} ms)"
        )
    else:
        why = (
            f"the pull won at {shortest} tokens, the shortest measured ({pull_ms:.1f} ms against recompute's "
            f"{recompute_ms:.1f} ms): adding {added} tokens to find the crossover below it "
            f"(the floor is {floor_reason(block_size)})"
        )
    return grown, why


def floor_note(records: list[ProbeRecord], block_size: int) -> str | None:
    """When the pull still wins at the floor: the crossover lies below any length a pull can prove."""
    medians = leg_medians(records)
    floor = pull_floor(block_size)
    if floor in medians and min(medians) == floor and medians[floor][1] < medians[floor][0]:
        return (
            f"the pull won down to {floor_reason(block_size)}: the crossover lies below what a pull can prove; "
            f"pulling pays from {floor} tokens up"
        )
    return None


def top_note(records: list[ProbeRecord], longest_allowed: int) -> str | None:
    """When recompute won at the longest length and that is the model's limit: no crossover within what it allows."""
    medians = leg_medians(records)
    if not medians:
        return None
    longest = max(medians)
    recompute_ms, pull_ms = medians[longest]
    if recompute_ms > pull_ms or longest < longest_allowed:
        return None
    return (
        f"recompute won at {longest} tokens, the longest prompt this model allows: no crossover to find on "
        "this pair within the model's context (an engine started with a longer --max-model-len can look further)"
    )


def dry_run_note(lengths: list[int], block_size: int) -> str | None:
    """What a default ladder's --dry-run adds to its plan: how it may grow below its shortest length."""
    shortest = min(lengths)
    if shortest <= pull_floor(block_size):
        return None
    if len(set(lengths)) < 2:
        return (
            f"default design: {shortest} tokens is one length, which no fit can use: the octave below it is "
            f"added after it, and more below while the pull wins, down to {floor_reason(block_size)}"
        )
    return (
        f"default design: if the pull wins at {shortest} tokens, lengths below it are added, an octave at a "
        f"time, down to {floor_reason(block_size)}"
    )


def adaptive_stop_note(stop_reason: str, allowed_range: list[int], *, explicit: bool, block_size: int) -> str | None:
    """What an adaptive campaign that stopped at an end of its allowed range tells the user: how far it may look."""
    low, high = allowed_range
    if stop_reason == "recompute-wins-to-longest":
        if explicit:
            more = ",".join(map(str, lengths_to_add_above(high, 4 * high, block_size)))
            return f"recompute won up to {high} tokens, the longest of --prefix-lengths: widen it (e.g. ...,{more})"
        return (
            f"recompute won up to {high} tokens, the longest prompt this model allows: no crossover to find on "
            "this pair within the model's context"
        )
    if stop_reason == "pull-wins-at-shortest":
        below = lengths_to_add_below(low, low / 2, block_size)
        if explicit and below:
            return (
                f"the pull won down to {low} tokens, the shortest of --prefix-lengths: widen it (e.g. {below[0]},...)"
            )
        return f"the pull won down to {floor_reason(block_size)}: pulling pays from {low} tokens up"
    return None
