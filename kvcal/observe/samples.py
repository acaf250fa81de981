"""One time series' raw samples as Prometheus sent them: two arrays, checked where they enter.

A Prometheus answer is input like a file: every number in it is checked here, once,
before any arithmetic (issue 55):

- a sample's time must be a finite instant between 1970 and 3000;
- a counter (a name ending ``_total``, ``_count``, ``_sum`` or ``_bucket``) must be finite and
  lie in [0, :data:`MAX_COUNT`]: a counter never goes negative, and a value past 2^63 is no
  count an exporter keeps (uint64 counters end there). The bound is what keeps every sum of
  increases kvcal forms finite: at most :data:`MAX_SAMPLES` samples of at most 2^63 each
  add up to under 1e27, so no figure can overflow (a sum is still checked, as a guard);
- a ``_created`` value is an instant like a sample's time;
- a gauge reading that is NaN is no reading (an exporter's "unknown"), and is left out;
  one that is infinite, negative or past :data:`MAX_COUNT` is refused (the gauges kvcal
  reads count requests).

A refusal is an input error (exit 2) naming the series and the sample. A counter that drops
is not refused: a drop is a restart (:mod:`kvcal.observe.series`), as Prometheus' ``rate``
reads it.

Samples are two float64 arrays (16 bytes a sample, the least that holds them exactly),
in time order with one sample per instant. A ``_created`` series keeps only the samples
where its value changes (its first one included): what :mod:`kvcal.observe.series` asks
of it, when a counter was created as of an instant, is the same from them, and a
month of 15 s scrapes of an unchanged value is two samples instead of 178,560.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from kvcal.errors import InputError
from kvcal.terminal_text import visible

MAX_COUNT = float(2**63)
"""The largest value a counter or gauge may hold (uint64's range)."""
LATEST_INSTANT = 32_503_680_000.0  # the year 3000, as kvcal's --start/--end
MAX_SAMPLES = 50_000_000
"""Samples one ``kvcal observe`` holds at most (Prometheus' own default ``--query.max-samples``): 800 MB."""
COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")
CREATED_SUFFIX = "_created"


def kind_of(labels: dict[str, str]) -> str:
    """``counter``, ``created`` or ``gauge``, by the name's suffix (the OpenMetrics naming vLLM follows)."""
    name = labels.get("__name__", "")
    if name.endswith(CREATED_SUFFIX):
        return "created"
    return "counter" if name.endswith(COUNTER_SUFFIXES) else "gauge"


def describe(labels: dict[str, str], limit: int = 200) -> str:
    """``name{label="value",...}``, control characters escaped, cut at ``limit`` characters: for a message."""
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    text = visible(labels.get("__name__", "") + "{" + inner + "}")
    return text if len(text) <= limit else text[:limit] + "..."


class Series:
    """One series: its labels and its samples, ``times`` (unix seconds) and ``values``, in time order."""

    __slots__ = ("labels", "times", "values")

    def __init__(
        self,
        labels: dict[str, str],
        samples: Iterable[tuple[float, float]] = (),
        *,
        times: np.ndarray | None = None,
        values: np.ndarray | None = None,
    ) -> None:
        self.labels = labels
        if times is None or values is None:
            pairs = sorted(samples)
            times = np.array([p[0] for p in pairs], dtype=np.float64)
            values = np.array([p[1] for p in pairs], dtype=np.float64)
        self.times, self.values = times, values

    @property
    def samples(self) -> tuple[tuple[float, float], ...]:
        """The samples as (time, value) pairs (for reading; the arithmetic works on the arrays)."""
        return tuple(zip(self.times.tolist(), self.values.tolist()))

    def __len__(self) -> int:
        return int(self.times.size)

    def __repr__(self) -> str:
        return f"Series({describe(self.labels)}, {len(self)} samples)"


def _refuse(source: str, labels: dict[str, str], at: float, value: float, why: str) -> InputError:
    return InputError(f"{source} sent {value!r} at {at:.3f} for {describe(labels)}: {why}")


def _check_instants(source: str, labels: dict[str, str], times: np.ndarray, values: np.ndarray) -> None:
    bad = ~np.isfinite(times) | (times <= 0) | (times >= LATEST_INSTANT)
    if bad.any():
        i = int(np.argmax(bad))
        raise _refuse(source, labels, float(times[i]), float(values[i]), "its time is no instant between 1970 and 3000")


def _check_range(source: str, labels: dict[str, str], times: np.ndarray, values: np.ndarray, what: str) -> None:
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values < 0) | (values > MAX_COUNT)
    if bad.any():
        i = int(np.argmax(bad))
        raise _refuse(source, labels, float(times[i]), float(values[i]), f"{what} (refused)")


def checked(source: str, labels: dict[str, str], times: np.ndarray, values: np.ndarray) -> Series:
    """A series from the arrays an answer held: in time order, one sample per instant, every number checked
    (module docstring). ``source`` names the server in a refusal."""
    order = np.argsort(times, kind="stable")
    times, values = times[order], values[order]
    _check_instants(source, labels, times, values)
    kind = kind_of(labels)
    if kind == "gauge":
        kept = ~np.isnan(values)  # NaN: the exporter does not know; no reading
        times, values = times[kept], values[kept]
        _check_range(source, labels, times, values, f"a gauge reading must lie in [0, {MAX_COUNT:.3g}]")
    elif kind == "created":
        bad = ~np.isfinite(values) | (values <= 0) | (values >= LATEST_INSTANT)
        if bad.any():
            i = int(np.argmax(bad))
            raise _refuse(source, labels, float(times[i]), float(values[i]), "a creation time must be an instant")
    else:
        _check_range(source, labels, times, values, f"a counter must be finite and lie in [0, {MAX_COUNT:.3g}]")
    return _distinct(labels, times, values, changes_only=kind == "created")


def _distinct(labels: dict[str, str], times: np.ndarray, values: np.ndarray, *, changes_only: bool) -> Series:
    """One sample per instant (the first sent), and for a ``_created`` series only the samples that change it."""
    if times.size > 1:
        keep = np.empty(times.size, dtype=bool)
        keep[0] = True
        keep[1:] = times[1:] != times[:-1]
        if changes_only:
            keep[1:] &= values[1:] != values[:-1]
        if not keep.all():
            times, values = times[keep], values[keep]
    return Series(labels, times=times, values=values)


def merged(labels: dict[str, str], parts: Sequence[Series]) -> Series:
    """Several pieces of one series (answers for consecutive spans, or two spellings of its name) as one."""
    if len(parts) == 1:
        return Series(labels, times=parts[0].times, values=parts[0].values)
    times = np.concatenate([p.times for p in parts])
    values = np.concatenate([p.values for p in parts])
    order = np.argsort(times, kind="stable")
    return _distinct(labels, times[order], values[order], changes_only=kind_of(labels) == "created")
