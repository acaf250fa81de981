"""emit-config's defaults and the checks on its numeric flags.

Kept apart from :mod:`kvcal.emit.threshold` so that the flag declarations (and
``kvcal --help``) do not build the typed records that the rule itself needs.
"""

from __future__ import annotations

import math

from kvcal.errors import InputError

DEFAULT_MARGIN = 0.25
"""Default safety margin: +25 % over the interval's upper end (see docs/emit.md for why)."""
DEFAULT_BLOCK_SIZE = 64
"""Block size when neither the flag nor the run records one (the llm-d guides use 64)."""


def validate_margin(margin: float) -> float:
    if not isinstance(margin, (int, float)) or isinstance(margin, bool) or not math.isfinite(margin) or margin < 0:
        raise InputError(f"--margin must be a fraction >= 0, e.g. 0.25 for +25% (got {margin})")
    return float(margin)


def validate_block_size(block_size: int) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise InputError(f"--block-size must be a positive integer number of tokens, e.g. 64 (got {block_size})")
    return block_size
