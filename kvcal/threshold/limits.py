"""The checks on the numbers a rule reads (margin, block size) and the default margin; the rules' names are
:mod:`kvcal.threshold.rules`' table.

Kept apart from :mod:`kvcal.threshold.choose` so that the flag declarations (and ``kvcal --help``) do not build
the typed records that the rule itself needs.
"""

from __future__ import annotations

import math

from kvcal.errors import InputError

MAX_MARGIN = 100.0  # +10,000%: past any safety factor; beyond it the threshold is no longer a number a router can hold

DEFAULT_MARGIN = 0.25
"""``--rule upper``'s margin when none is given: +25 % over the interval's upper end (docs/emit.md)."""


def validate_margin(margin: float) -> float:
    if (
        not isinstance(margin, (int, float))
        or isinstance(margin, bool)
        or not math.isfinite(margin)
        or not 0 <= margin <= MAX_MARGIN
    ):
        raise InputError(f"--margin must be a fraction from 0 to {MAX_MARGIN:g}, e.g. 0.25 for +25% (got {margin})")
    return float(margin)


def validate_block_size(block_size: int) -> int:
    from kvcal.records.run import (
        MAX_TOKENS,  # here, not at the top: the flags' module must not build the records (--help)
    )

    if isinstance(block_size, bool) or not isinstance(block_size, int) or not 1 <= block_size <= MAX_TOKENS:
        raise InputError(
            f"--block-size must be a whole number of tokens from 1 to {MAX_TOKENS:,}, e.g. 64 (got {block_size})"
        )
    return block_size
