"""Parsers for flag values that several commands share."""

from __future__ import annotations

from kvcal.errors import InputError


def int_list(text: str | None, flag: str) -> list[int] | None:
    """``"256, 512,1024"`` -> ``[256, 512, 1024]``; None or empty -> None; anything else is a one-line error."""
    if not text:
        return None
    try:
        return [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise InputError(f"{flag} must be comma-separated integers, got {text!r}") from None
