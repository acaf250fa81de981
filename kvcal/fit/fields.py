"""Reading one field of a probe table (a CSV row, an llm-d Job line): bounded, finite, named where it fails.

Every number is checked where it is read (a user's mistake is an :class:`~kvcal.errors.InputError`
naming the row); the time order of a CSV (``order`` or ``started_at``) becomes each row's rank in time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kvcal.errors import InputError
from kvcal.instants import instant
from kvcal.records import MAX_BYTES_MOVED, MAX_TOKENS, MAX_TTFT_MS

LEGS = ("recompute", "pull")  # the leg column's values
TAG_COLUMNS = ("pair", "link_class")  # a campaign over pairs: which pair measured the row, and its link class
MAX_TAG = 200  # as a probe record's pair and link_class (kvcal.records)
TIME_COLUMNS = ("order", "started_at")  # time order: an integer rank, or a start time (ISO 8601 or epoch seconds)
MAX_INT, MAX_MS = (
    2**53,
    MAX_TTFT_MS,
)  # far above any real count or TTFT, far below overflow; one rule with kvcal.records


@dataclass(frozen=True)
class ParsedRows:
    """What a probe file's reader found: rows with kvcal.fit.tables.COLUMNS' keys, and what it noted on the way."""

    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    n_invalid_excluded: int = 0
    order_source: str | None = None  # the column that gave the time order (a CSV's order or started_at)
    verdict: str | None = None  # the llm-d recipe's NO CROSSOVER line
    n_repeated: int = 0  # repeated lines dropped by the reader (the table collapses repeated rows itself)


def tags(path: Path, frame: pd.DataFrame, rows: list[dict[str, Any]]) -> None:
    """Set each row's ``pair`` and ``link_class`` from the CSV's columns of those names (None where absent).

    ``link_class`` splits the fit by class, so it is given in every row or none (a blank row would fall out of
    every class); ``pair`` may be blank. Each is printable text of at most :data:`MAX_TAG` characters.
    """
    for name in TAG_COLUMNS:
        values = frame[name].tolist() if name in frame.columns else [""] * len(rows)
        given = any(v.strip() for v in values)
        for index, raw, row in zip(frame.index.tolist(), values, rows):
            text = raw.strip()
            where = f"{path} row {int(index) + 2}"
            if given and not text and name == "link_class":
                raise InputError(f"{where}: link_class is empty; give every row's class or drop the column")
            if len(text) > MAX_TAG or not text.isprintable():
                raise InputError(f"{where}: {name} must be printable text of at most {MAX_TAG} characters")
            row[name] = text or None


def time_order(path: Path, frame: pd.DataFrame, rows: list[dict[str, Any]]) -> str | None:
    """Set each row's ``order`` (rank in time) from the CSV's order or started_at column; the column used, or None.

    ``order`` wins when both are given; a column filled in some rows only is refused (half a time order
    would rank the blank rows arbitrarily)."""
    name = next((c for c in TIME_COLUMNS if c in frame.columns and frame[c].str.strip().any()), None)
    if name is None:
        return None  # no time column, or one left empty in every row (a table written without time order)
    stamps = []
    for (index, raw), _row in zip(frame.iterrows(), rows):
        where = f"{path} row {int(index) + 2}"
        text = raw[name].strip()
        if not text:
            raise InputError(f"{where}: {name} is empty; give the time order in every row or drop the column")
        stamps.append(int_field(text, name, where) if name == "order" else start_time(text, where))
    # Rank by (stamp, row): started_at has 1 s resolution in a run's export, and probes stamped in one second
    # keep the file's order (the order they were written in).
    for rank, i in enumerate(sorted(range(len(stamps)), key=lambda i: (stamps[i], i))):
        rows[i]["order"] = rank
    return name


def start_time(text: str, where: str) -> float:
    """started_at as epoch seconds: ISO 8601 (a time without a zone is read as UTC) or a number of seconds."""
    try:
        return instant(text)
    except ValueError as err:
        raise InputError(f"{where}: started_at {err}") from None


def int_field(value: str, name: str, where: str, *, positive: bool = False) -> int:
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        raise InputError(f"{where}: {name} '{text}' is not a number") from None
    if not math.isfinite(number) or number != int(number):
        raise InputError(f"{where}: {name} '{text}' is not a whole number")
    if number < 0 or (positive and number == 0):
        raise InputError(f"{where}: {name} must be {'positive' if positive else 'non-negative'}, got {text}")
    limit = (
        MAX_TOKENS
        if name in ("prefix_tokens", "tokens", "rep")
        else MAX_BYTES_MOVED
        if name == "bytes_moved"
        else MAX_INT
    )
    if number > limit:
        raise InputError(f"{where}: {name} {text} is beyond any plausible value (at most {limit:.3g})")
    return int(number)


def time_field(value: str, name: str, where: str) -> float:
    number = parse_number(str(value).strip(), name, where)
    if number <= 0:
        raise InputError(f"{where}: {name} must be positive, got {str(value).strip()}")
    if number > MAX_MS:
        raise InputError(
            f"{where}: {name} {str(value).strip()} ms is beyond any plausible time (at most {MAX_MS:.0e} ms)"
        )
    return number


def leg_field(value: str, where: str) -> str:
    text = str(value).strip().lower()
    if text not in LEGS:
        raise InputError(f"{where}: leg '{value}' is neither 'recompute' nor 'pull'")
    return text


def parse_number(text: str, name: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{where}: {name} '{text}' is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"{where}: {name} is {text} (NaN or infinite)")
    return value
