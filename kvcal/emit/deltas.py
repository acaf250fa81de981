"""``--deltas FILE``: the cached-token deltas a fleet's router sees, as a list, a histogram or its decision log.

Accepted shapes (the first that fits):

* the router (EPP) log ``kvcal fit --epp-log`` reads: every ``p2p decision`` line's ``deltaTokens``
  (:func:`kvcal.fit.observational.parse_epp_log`), zeros left out;
* JSON: a list of deltas, a list of ``[delta, count]`` pairs, or an object ``{"delta": count}``;
* text: one delta a line (a list), or ``delta,count`` a line (a histogram; comma, tab or spaces),
  a header line of words allowed.

Each delta is a whole number of tokens from 1 to ``MAX_TOKENS``, each count a non-negative
number; the weights are the counts over their sum.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from kvcal.emit.regret import Deltas
from kvcal.errors import InputError
from kvcal.fit.observational import DECISION, parse_epp_log
from kvcal.records import MAX_TOKENS
from kvcal.userfiles import load_json, read_text

_SPLIT = re.compile(r"[,\t ;]+")


def read_deltas(path: Path) -> Deltas:
    """The deltas and weights of ``path`` (module docstring); InputError naming the line otherwise."""
    text = read_text(path, "--deltas file")
    if DECISION in text:
        values = [d.delta_tokens for d in parse_epp_log(path).values() if d.delta_tokens > 0]
        if not values:
            raise InputError(f"{path}: the router log's p2p decisions carry no positive deltaTokens")
        return _collect([(v, 1.0) for v in values], path, f"{path} ({len(values):,} router decisions)")
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        try:
            data = load_json(stripped)
        except (ValueError, RecursionError):
            raise InputError(
                f"{path}: not valid JSON (a list of deltas, [delta, count] pairs or {{delta: count}})"
            ) from None
        return _collect(_json_pairs(data, path), path, f"{path}")
    return _collect(_text_pairs(text, path), path, f"{path}")


def _json_pairs(data: Any, path: Path) -> list[tuple[Any, Any]]:
    if isinstance(data, dict):
        return list(data.items())
    if isinstance(data, list):
        return [tuple(item) if isinstance(item, list) and len(item) == 2 else (item, 1.0) for item in data]
    raise InputError(f"{path}: JSON must be a list of deltas, [delta, count] pairs or an object {{delta: count}}")


def _text_pairs(text: str, path: Path) -> list[tuple[Any, Any]]:
    pairs: list[tuple[Any, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = [f for f in _SPLIT.split(line.strip()) if f]
        if not fields or line.lstrip().startswith("#"):
            continue
        if number == 1 and not _numeric(fields[0]):
            continue  # a header
        if len(fields) > 2:
            raise InputError(
                f"{path} line {number}: expected a delta, or a delta and a count (got {line.strip()[:60]!r})"
            )
        pairs.append((fields[0], fields[1] if len(fields) == 2 else 1.0, number))  # type: ignore[arg-type]
    return pairs


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _collect(pairs: list[tuple], path: Path, source: str) -> Deltas:
    values: dict[int, float] = {}
    for item in pairs:
        raw_delta, raw_count = item[0], item[1]
        where = f"{path} line {item[2]}" if len(item) > 2 else f"{path}"
        delta, count = _number(raw_delta, where, "delta"), _number(raw_count, where, "count")
        if delta != int(delta) or not 1 <= delta <= MAX_TOKENS:
            raise InputError(
                f"{where}: a delta must be a whole number of tokens from 1 to {MAX_TOKENS:,} (got {raw_delta!r})"
            )
        if count < 0:
            raise InputError(f"{where}: a count must be 0 or more (got {raw_count!r})")
        values[int(delta)] = values.get(int(delta), 0.0) + count
    total = sum(values.values())
    if not values or total <= 0:
        raise InputError(f"{path}: no deltas with a positive count")
    points = np.array(sorted(values), dtype=float)
    weights = np.array([values[int(p)] / total for p in points])
    return Deltas(points, weights, f"{source}: {len(points):,} distinct deltas")


def _number(value: Any, where: str, what: str) -> float:
    if isinstance(value, bool):
        raise InputError(f"{where}: a {what} must be a number (got {value!r})")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: a {what} must be a number (got {str(value)[:40]!r})") from None
    if not math.isfinite(number):
        raise InputError(f"{where}: a {what} must be finite (got {value!r})")
    return number
