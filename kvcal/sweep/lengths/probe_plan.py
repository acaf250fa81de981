"""Plan a sweep: which prefix lengths, how many reps per leg, and in what order.

The plan is a list of probes in a seeded shuffled order, so slow drift in the engine
(thermal, cache growth) spreads over every length and leg instead of biasing one. It
is stored in run.json; resume replays it and skips probes that already have a valid
record.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvcal.errors import InputError
from kvcal.records.run import Leg, PlannedProbe
from kvcal.settings.sweep import repeated_lengths_problem

__all__ = ["PlannedProbe", "build_plan", "default_prefix_lengths", "validate_prefix_lengths"]

MAX_PREFIX_TOKENS = 10**9  # far beyond any context window; keeps every later product finite


def default_prefix_lengths(block_size: int, max_model_len: int) -> list[int]:
    """A ladder of 1x and 1.5x powers of two from 256 tokens up to the model's limit.

    Dense at the short end, where the floor of the pull dominates, and reaching the
    longest prompt the model accepts (one token is left for the generated token),
    where the quadratic term of recompute shows.
    """
    longest = ((max_model_len - 1) // block_size) * block_size
    ladder: set[int] = set()
    base = 256
    while base <= longest:
        for value in (base, base * 3 // 2):
            rounded = (value // block_size) * block_size
            if block_size <= rounded <= longest:
                ladder.add(rounded)
        base *= 2
    if longest >= block_size:
        ladder.add(longest)
    return sorted(ladder)


def validate_prefix_lengths(lengths: list[int], block_size: int, max_model_len: int | None) -> list[int]:
    """Check lengths against the block size and the model limit; return them sorted."""
    if block_size <= 0:
        raise InputError(f"block size must be a positive integer, got {block_size}")
    if not lengths:
        raise InputError("no prefix lengths to sweep")
    if problem := repeated_lengths_problem(lengths):
        raise InputError(f"prefix length {problem}")
    for n in lengths:
        if n <= 0:
            raise InputError(f"prefix length {n} is not positive")
        if n > MAX_PREFIX_TOKENS:
            raise InputError(f"prefix length {n} is beyond any model's context (at most {MAX_PREFIX_TOKENS:,} tokens)")
        if n % block_size:
            below, above = (n // block_size) * block_size, (n // block_size + 1) * block_size
            nearest = f"{below} or {above}" if below else f"{above}"
            raise InputError(
                f"prefix length {n} is not a multiple of the block size {block_size} "
                f"(a partial last block cannot be cached); use {nearest}"
            )
        if max_model_len is not None and n + 1 > max_model_len:
            raise InputError(
                f"prefix length {n} does not fit the model's max length {max_model_len} "
                f"(the prompt plus one generated token must fit)"
            )
    return sorted(lengths)


def build_plan(lengths: list[int], reps: int, seed: int, pairs: Sequence[tuple[str, str]] = ()) -> list[PlannedProbe]:
    """Every (length, leg, rep) once, shuffled with ``seed``; with ``pairs`` ((name, link class), a campaign over
    several pairs) every (pair, length, leg, rep) once, all pairs in one shuffled order, ids prefixed by the pair."""
    if reps < 1:
        raise InputError(f"--reps must be at least 1, got {reps}")
    members: Sequence[tuple[str | None, str | None]] = pairs or [(None, None)]
    cells = [
        (member, n, leg, rep)
        for member in members
        for n in lengths
        for leg in (Leg.RECOMPUTE, Leg.PULL)
        for rep in range(reps)
    ]
    order = np.random.default_rng(seed).permutation(len(cells))
    plan = []
    for index, cell_index in enumerate(order):
        (name, link_class), n, leg, rep = cells[int(cell_index)]
        probe_id = f"L{n}-{leg.value}-r{rep}" if name is None else f"{name}-L{n}-{leg.value}-r{rep}"
        plan.append(
            PlannedProbe(
                plan_index=index, probe_id=probe_id, prefix_tokens=n, leg=leg, rep=rep, pair=name, link_class=link_class
            )
        )
    return plan
