"""A command's settings model built from its flags: a value outside its field's declared bounds is refused here.

Every command that does work (fit, emit-config, plan, compare, fleet) takes one pydantic model (a
:class:`FlagModel`) whose fields declare their bounds; the thin CLI builds it before any file is read or any
work starts, and the library function receives it. A bad value is one :class:`~kvcal.errors.InputError` (exit 2)
that names the flag and says the declared bounds, e.g. ``--confidence must lie between 0 and 1 (exclusive),
got 1.0``. A check that spans several fields lives in the model's own validator and raises InputError itself
(pydantic lets it through unwrapped). A field may say its bound in words of its own,
``Field(ge=1, json_schema_extra={"must": "be a positive number of tokens"})`` (``"low"``: its lower
bound alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from kvcal.errors import InputError
from kvcal.settings.bounds import in_words

Model = TypeVar("Model", bound=BaseModel)
BOUND_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
LONGEST_SHOWN = 24  # characters of a number shown as given; a 400-digit value is shown by its size


class FlagModel(BaseModel):
    """A command's settings: frozen, no unknown keys, and a refused value is one InputError naming its flag.

    ``FLAGS`` maps a field to its flag where the flag is not ``--field-name``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    FLAGS: ClassVar[Mapping[str, str]] = {}

    def __init__(self, /, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as err:
            raise InputError(describe(type(self), self.FLAGS, err.errors()[0])) from None


def from_flags(model: type[Model], flags: Mapping[str, str], /, **values: Any) -> Model:
    """``model(**values)`` for a model that is not a FlagModel (a record such as FitSettings); a refused value is
    one InputError naming its flag (``flags``: field name -> flag)."""
    try:
        return model(**values)
    except ValidationError as err:
        raise InputError(describe(model, flags, err.errors()[0])) from None


def describe(model: type[BaseModel], flags: Mapping[str, str], error: Any) -> str:
    """One line for pydantic's first error: the flag, what it must be (its declared bounds), and what it got."""
    names = [part for part in error.get("loc") or () if isinstance(part, str)]
    name = names[-1] if names else ""
    flag = flags.get(name, f"--{name.replace('_', '-')}" if name else "a setting")
    got = shown(error.get("input"))
    bounds = declared_bounds(model, names, error.get("type")) if error.get("type") in BOUND_ERRORS else None
    if bounds is not None:
        return f"{flag} must {bounds}, got {got}"
    message = str(error.get("msg", "is not valid")).removeprefix("Value error, ")
    if error.get("type") == "value_error":  # a validator's own sentence, which says what it got
        return f"{flag}: {message}"
    return f"{flag}: {message[:1].lower()}{message[1:]}, got {got}"


def declared_bounds(model: type[BaseModel], names: list[str], broken: str | None = None) -> str | None:
    """What the field at ``names`` (nested models followed) must be, in words; None when it declares no bounds.

    ``broken``: pydantic's error type, for a field that words its lower bound alone (``"low"``)."""
    field = None
    for name in names:
        field = model.model_fields.get(name)
        if field is None:
            return None
        inner = field.annotation
        model = inner if isinstance(inner, type) and issubclass(inner, BaseModel) else model
    if field is None:
        return None
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    worded = extra.get("must") or (extra.get("low") if broken in BOUND_ERRORS[:2] else None)
    if isinstance(worded, str):
        return worded  # the bound in the command's own words, declared beside it
    low = high = None
    low_open = high_open = False
    for bound in field.metadata:  # annotated_types' Gt, Ge, Lt, Le: one attribute each, named as the bound
        for name in ("gt", "ge", "lt", "le"):
            value = getattr(bound, name, None)
            if value is not None and name in ("gt", "ge"):
                low, low_open = value, name == "gt"
            elif value is not None:
                high, high_open = value, name == "lt"
    return in_words(low, low_open, high, high_open)


def shown(value: Any) -> str:
    """A flag's value as a line can hold it (a 400-digit threshold is shown by its size)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = str(value)
        return text if len(text) <= LONGEST_SHOWN else f"a number of {len(text)} digits"
    return repr(value)[:60]
