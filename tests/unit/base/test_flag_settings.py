"""A command's settings model refuses a value outside its declared bounds with one line naming the flag."""

from __future__ import annotations

from typing import ClassVar

import pytest
from pydantic import Field

from kvcal.errors import InputError
from kvcal.settings.from_flags import FlagModel, from_flags
from kvcal.records.fit import FIT_DEFAULTS, FitSettings


class Example(FlagModel):
    FLAGS: ClassVar[dict[str, str]] = {"n_things": "--things"}

    level: float = Field(0.5, gt=0, lt=1)
    n_things: int = Field(3, ge=1, le=1_000_000)
    tokens: int = Field(64, ge=1, json_schema_extra={"must": "be a positive number of tokens"})
    rate: float = Field(1.0, gt=0)


@pytest.mark.parametrize("values, line", [
    ({"level": 1.0}, "--level must lie between 0 and 1 (exclusive), got 1.0"),
    ({"n_things": 0}, "--things must lie within 1-1,000,000, got 0"),
    ({"n_things": 10**400}, "--things must lie within 1-1,000,000, got a number of 401 digits"),
    ({"tokens": -64}, "--tokens must be a positive number of tokens, got -64"),
    ({"rate": 0.0}, "--rate must be above 0, got 0.0"),
    ({"rate": float("nan")}, "--rate: input should be a finite number, got nan"),
])
def test_a_value_out_of_its_declared_bounds_is_one_line_naming_the_flag(values, line):
    with pytest.raises(InputError) as err:
        Example(**values)
    assert str(err.value) == line


def test_the_fit_settings_bounds_are_declared_once_on_the_record():
    """fitting.py no longer restates them: the record refuses, and says the flag kvcal fit uses."""
    flags = {"n_resamples": "--resamples"}
    with pytest.raises(InputError, match=r"^--confidence must lie between 0 and 1 \(exclusive\), got 1$"):
        from_flags(FitSettings, flags, confidence=1)
    with pytest.raises(InputError, match=r"^--resamples: 5 resamples are too few for a 90% interval; use at least 100$"):
        from_flags(FitSettings, flags, n_resamples=5)
    with pytest.raises(InputError, match=r"^--resamples must lie within 0-1,000,000"):
        from_flags(FitSettings, flags, n_resamples=10**7)
    with pytest.raises(InputError, match=r"^--seed must be non-negative, got -1$"):
        from_flags(FitSettings, flags, seed=-1)
    assert from_flags(FitSettings, flags) == FIT_DEFAULTS
