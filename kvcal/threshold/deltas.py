"""``--deltas FILE``: the cached-token deltas a fleet's router sees, as a list, a histogram or its decision log.

Accepted shapes (the first that fits):

* the router (EPP) log ``kvcal fit --epp-log`` reads: every ``p2p decision`` line's ``deltaTokens``
  (:func:`kvcal.fit.observational.decision_from_line`), zeros left out; each decision line counts
  (a request the router decided twice was routed twice);
* JSON (at most ``MAX_JSON_BYTES``): a list of deltas, a list of ``[delta, count]`` pairs, or an
  object ``{"delta": count}``;
* text: one delta a line (a list), or ``delta,count`` a line (a histogram; comma, tab or spaces),
  a header line of words allowed.

Each delta is a whole number of tokens from 1 to ``MAX_TOKENS``, each count a non-negative
number up to ``MAX_COUNT``; the weights are the counts over their sum.

Memory is bounded whatever the file holds: the log and text forms are read a line at a time
(:func:`kvcal.files.reading.read_lines`) into a histogram of at most
:data:`kvcal.threshold.delta_weights.MAX_POINTS` values (:class:`HistogramBuilder`), so a router log of
a million decisions takes the same few MB as one of a thousand.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from kvcal.errors import InputError
from kvcal.files.reading import load_json, read_lines, read_text
from kvcal.fit.observational import DECISION, decision_from_line
from kvcal.records.run import MAX_TOKENS
from kvcal.threshold.delta_weights import MAX_POINTS, Histogram, merge_to

_SPLIT = re.compile(r"[,\t ;]+")
MAX_COUNT = 1e200  # far past any count of requests; the weights' sums stay finite below it
MAX_JSON_BYTES = 64 * 1024 * 1024  # a JSON document is parsed whole; past this, the line forms stream
CHUNK = 1 << 16  # values parsed before they are merged into the histogram


class HistogramBuilder:
    """Deltas and counts added one at a time, held as at most MAX_POINTS bins with their exact moments."""

    def __init__(self) -> None:
        self.starts = np.empty(0)
        self.sums = np.empty((0, 3))
        self.width = 1.0
        self.pending: list[tuple[float, float]] = []

    def add(self, delta: float, count: float) -> None:
        self.pending.append((delta, count))
        if len(self.pending) >= CHUNK:
            self._merge()

    def _merge(self) -> None:
        if not self.pending:
            return
        values, counts = np.array(self.pending, dtype=float).T
        self.pending = []
        fresh = np.stack([counts, counts * values, counts * values * values], axis=1)
        keys = np.concatenate([self.starts, values])
        self.starts, self.sums, self.width = merge_to(keys, np.concatenate([self.sums, fresh]), MAX_POINTS, self.width)

    def build(self, where: str, source: str) -> Histogram:
        self._merge()
        keep = self.sums[:, 0] > 0
        sums = self.sums[keep]
        total = float(sums[:, 0].sum()) if len(sums) else 0.0
        if not len(sums) or total <= 0:
            raise InputError(f"{where}: no deltas with a positive count")
        if not np.isfinite(sums).all() or not math.isfinite(total):
            raise InputError(f"{where}: the counts add up past what kvcal can hold; scale them down")
        mean = sums[:, 1] / sums[:, 0]
        variance = np.maximum(sums[:, 2] / sums[:, 0] - mean * mean, 0.0)
        merged = f", merged into bins of {self.width:,.0f} tokens" if self.width > 1 else ""
        return Histogram(mean, sums[:, 0] / total, variance, f"{source}: {len(mean):,} distinct deltas{merged}")


def read_deltas(path: Path) -> Histogram:
    """The deltas and weights of ``path`` (module docstring); InputError naming the line otherwise."""
    first = _first_content(path)
    builder = HistogramBuilder()
    if first is not None and DECISION in first:
        n = _read_router_log(path, builder)
        return builder.build(f"{path}", f"{path} ({n:,} router decisions)")
    if first is not None and first.lstrip().startswith(("[", "{")):
        for delta, count, where in _json_pairs(path):
            _add(builder, delta, count, where)
        return builder.build(f"{path}", f"{path}")
    for delta, count, where in _text_pairs(path):
        _add(builder, delta, count, where)
    return builder.build(f"{path}", f"{path}")


def _first_content(path: Path) -> str | None:
    """The first line that is not blank (what tells the forms apart), None for an empty file."""
    for _, line in read_lines(path, f"--deltas {path}"):  # the first read: a missing file names the flag too
        if line.strip():
            return line
    return None


def _read_router_log(path: Path, builder: HistogramBuilder) -> int:
    n = 0
    for number, line in read_lines(path, f"{path}"):
        decision = decision_from_line(line, f"{path} line {number}")
        if decision is not None and decision.delta_tokens > 0:
            builder.add(float(decision.delta_tokens), 1.0)
            n += 1
    if not n:
        raise InputError(f"{path}: the router log's p2p decisions carry no positive deltaTokens")
    return n


def _json_pairs(path: Path) -> list[tuple[Any, Any, str]]:
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise InputError(
            f"{path}: a JSON --deltas file of {size:,} bytes is past the {MAX_JSON_BYTES:,} kvcal parses whole; "
            "give the deltas one a line (delta or delta,count) instead"
        )
    try:
        data = load_json(read_text(path, f"{path}", bom=True))
    except (ValueError, RecursionError):
        raise InputError(
            f"{path}: not valid JSON (a list of deltas, [delta, count] pairs or {{delta: count}})"
        ) from None
    where = f"{path}"
    if isinstance(data, dict):
        return [(k, v, where) for k, v in data.items()]
    if isinstance(data, list):
        return [(*item, where) if isinstance(item, list) and len(item) == 2 else (item, 1.0, where) for item in data]
    raise InputError(f"{path}: JSON must be a list of deltas, [delta, count] pairs or an object {{delta: count}}")


def _text_pairs(path: Path) -> Any:
    for number, line in read_lines(path, f"{path}"):
        fields = [f for f in _SPLIT.split(line.strip()) if f]
        if not fields or line.lstrip().startswith("#"):
            continue
        if number == 1 and not _numeric(fields[0]):
            continue  # a header
        if len(fields) > 2:
            raise InputError(
                f"{path} line {number}: expected a delta, or a delta and a count (got {line.strip()[:60]!r})"
            )
        yield fields[0], fields[1] if len(fields) == 2 else 1.0, f"{path} line {number}"


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _add(builder: HistogramBuilder, raw_delta: Any, raw_count: Any, where: str) -> None:
    delta, count = _number(raw_delta, where, "delta"), _number(raw_count, where, "count")
    if delta != int(delta) or not 1 <= delta <= MAX_TOKENS:
        raise InputError(
            f"{where}: a delta must be a whole number of tokens from 1 to {MAX_TOKENS:,} (got {raw_delta!r})"
        )
    if not 0 <= count <= MAX_COUNT:
        raise InputError(f"{where}: a count must be a number from 0 to {MAX_COUNT:.0e} (got {raw_count!r})")
    builder.add(delta, count)


def _number(value: Any, where: str, what: str) -> float:
    if isinstance(value, bool):
        raise InputError(f"{where}: a {what} must be a number (got {value!r})")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{where}: a {what} must be a number (got {str(value)[:40]!r})") from None
    if not math.isfinite(number):
        raise InputError(f"{where}: a {what} must be finite (got {str(value)[:40]!r})")
    return number
