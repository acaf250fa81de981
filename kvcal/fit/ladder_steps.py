"""The ladder's arithmetic in block multiples: the shortest length a pull can prove, the lengths to add below or above.

Shared by the fit's advice (:mod:`kvcal.fit.breakeven` names the lengths to add), the
sweep's default design (:mod:`kvcal.sweep.lengths.grow_below` grows the plan down to the floor, and
:mod:`kvcal.sweep.lengths.adaptive_design` starts there) and emit's floor. Why a pull's floor is two
blocks: :mod:`kvcal.sweep.lengths.grow_below`.
"""

from __future__ import annotations

FLOOR_BLOCKS = 2  # a one-block pull moves nothing (kvcal.sweep.lengths.grow_below's docstring says why)


def pull_floor(block_size: int) -> int:
    """The shortest prefix length (tokens) at which a pull can move KV: two blocks."""
    return FLOOR_BLOCKS * block_size


def floor_reason(block_size: int) -> str:
    return (
        f"{pull_floor(block_size)} tokens, two blocks of {block_size}: an engine never takes a prompt's last "
        "block from a peer, so a one-block pull moves nothing"
    )


def lengths_below(shortest: int, block_size: int) -> list[int]:
    """The octave below ``shortest``: 3/4 and 1/2 of it in block multiples, neither under the floor (ascending)."""
    floor = pull_floor(block_size)
    out = {max(floor, (shortest * num // den) // block_size * block_size) for num, den in ((3, 4), (1, 2))}
    return sorted(n for n in out if n < shortest)


def lengths_to_add_below(n_min: int, break_even: float, block_size: int) -> list[int]:
    """Octaves below ``n_min`` down to half the fitted break-even (a crossover needs a length on each side),
    never under the floor."""
    out: list[int] = []
    shortest = n_min
    while shortest > pull_floor(block_size) and shortest > break_even / 2:
        below = lengths_below(shortest, block_size)
        if not below:
            break
        out += below
        shortest = below[0]
    return sorted(set(out))


def lengths_to_add_above(n_max: int, upto: float, block_size: int) -> list[int]:
    """The ladder's 1x and 1.5x powers of two above ``n_max`` up to ``upto`` (at least one), in block multiples."""
    out: list[int] = []
    value = n_max
    while not out or value * 4 // 3 <= upto:
        value = value * 3 // 2 if (value & (value - 1)) == 0 else value * 4 // 3
        rounded = -(-value // block_size) * block_size
        if rounded > n_max and rounded not in out:
            out.append(rounded)
    return out
