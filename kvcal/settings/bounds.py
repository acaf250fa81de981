"""A setting's declared bounds in words ("be above 0 and at most 1"), without pydantic.

Kept apart from :mod:`kvcal.settings.from_flags` (which words a refused flag's bounds with it) so that a command's
``--help`` can quote the bounds of its generated help table (kvcal/cli/help_tables.py) without loading pydantic.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any


def in_words(low: Any, low_open: bool, high: Any, high_open: bool) -> str | None:
    """What a value must do to lie within the bounds (``_open``: the bound itself is refused); None without any."""
    if low is not None and high is not None:
        if low_open and high_open:
            return f"lie between {_number(low)} and {_number(high)} (exclusive)"
        if not low_open and not high_open:
            return f"lie within {_number(low)}-{_number(high)}"
        return (
            f"be {'above' if low_open else 'at least'} {_number(low)} and {'below' if high_open else 'at most'} "
            f"{_number(high)}"
        )
    if low is not None:
        return f"be {'above' if low_open else 'at least'} {_number(low)}"
    if high is not None:
        return f"be {'below' if high_open else 'at most'} {_number(high)}"
    return None


def _number(value: Any) -> str:
    return (
        f"{value:,}"
        if isinstance(value, int) and abs(value) >= 100_000
        else f"{value:g}"
        if isinstance(value, float)
        else str(value)
    )


BOUND_KEYS = ("gt", "ge", "lt", "le")  # annotated_types' names; a help table's entry and a dataclass field's metadata
_COMPARE = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}


def bounds_in_words(bounds: Mapping[str, Any]) -> str | None:
    """The bounds among ``bounds``' keys (gt, ge, lt, le) in words, as :func:`in_words` gives them."""
    low = "gt" if "gt" in bounds else "ge"
    high = "lt" if "lt" in bounds else "le"
    return in_words(bounds.get(low), low == "gt", bounds.get(high), high == "lt")


def within(value: Any, bounds: Mapping[str, Any]) -> bool:
    """Whether ``value`` meets every bound among ``bounds``' keys (gt, ge, lt, le)."""
    return all(_COMPARE[key](value, bounds[key]) for key in BOUND_KEYS if key in bounds)
