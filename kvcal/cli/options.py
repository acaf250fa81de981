"""Parsers for flag values that several commands share."""

from __future__ import annotations

import math

from kvcal.errors import InputError

MAX_LISTED = 2**53  # the largest integer a float holds exactly


def _number_list(text: str | None, flag: str, kind: type, what: str) -> list | None:
    if text is None:
        return None
    if not text.strip():
        raise InputError(f"{flag} is empty (e.g. {flag} 256,512,1024)")
    parts = text.replace(" ", "").split(",")
    if text.strip() and not any(parts):
        raise InputError(f"{flag} lists no values, got {text!r} (e.g. {flag} 256,512,1024)")
    try:
        values = [kind(part) for part in parts if part]
    except ValueError:
        raise InputError(f"{flag} must be comma-separated {what}, got {text!r}") from None
    for value in values:
        # Every count kvcal takes is used as a float somewhere: past 2**53 it is no longer the number given,
        # and a 400-digit integer overflows there, after the work (a fleet simulation) has run.
        if abs(value) > MAX_LISTED or not math.isfinite(value):
            shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:12]}... ({len(str(value))} digits)"
            raise InputError(f"{flag}: {shown} is not a usable value (finite, at most {MAX_LISTED} in size)")
    return values


def int_list(text: str | None, flag: str) -> list[int] | None:
    """``"256, 512,1024"`` -> ``[256, 512, 1024]``; None -> None; an empty list or anything else is a one-line error."""
    return _number_list(text, flag, int, "integers")


def float_list(text: str | None, flag: str) -> list[float] | None:
    """``"0.45,0.45"`` -> ``[0.45, 0.45]``; None -> None; an empty list or anything else is a one-line error."""
    return _number_list(text, flag, float, "numbers")


_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


def byte_size(text: str | None, flag: str) -> int | None:
    """``"88GiB"``, ``"96Gi"``, ``"8e9"`` or ``"1073741824"`` -> bytes; None -> None; else a one-line error."""
    if text is None:
        return None
    raw = text.strip().replace(" ", "")
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = raw[len(number) :].lower()
    try:
        value = float(number) * _BYTE_UNITS[unit]
    except (ValueError, KeyError):
        raise InputError(f"{flag} must be a byte count such as 88GiB, 96Gi, 8GB or 8589934592 (got {text!r})") from None
    if not value >= 1 or value != value or value == float("inf"):
        raise InputError(f"{flag} must be at least 1 byte (got {text!r})")
    return int(value)


SHARE_TOLERANCE = 1e-6  # shares written to 6 places (1/3 as 0.333333) still sum to 1


def parse_class_mix(text: str | None) -> dict[str, float] | None:
    """``CLASS=SHARE,...``: each share in [0, 1], each class once, the shares summing to 1."""
    if text is None:
        return None
    mix: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name = name.strip()
        try:
            share = float(value)
        except ValueError:
            share = math.nan
        if not sep or not name or not 0 <= share <= 1:
            raise InputError(
                f"--class-mix: {item!r} is not CLASS=SHARE with a share between 0 and 1 "
                "(e.g. --class-mix same-node=0.7,tcp=0.3)"
            )
        if name in mix:
            raise InputError(f"--class-mix names {name} twice")
        mix[name] = share
    if abs(sum(mix.values()) - 1) > SHARE_TOLERANCE:
        raise InputError(f"--class-mix shares sum to {sum(mix.values()):.6g}; they must sum to 1")
    return mix
