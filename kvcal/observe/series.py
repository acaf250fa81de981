"""Counter increases with resets, pods by name, histogram quantiles: the arithmetic on Prometheus' raw samples.

A counter's increase over the window [start, end] starts from its last sample at or before
``start`` (the fetch reaches back :data:`LOOKBACK_S` for it). A drop means the process
restarted and its counter began again at zero, so the sample after a drop adds its whole
value (PromQL's ``increase`` does the same, without extrapolating to the window's edges:
kvcal's figures are the counts the engines made, exactly). A series that first appears
after its pod was already scraped was created then (vLLM creates some labelled series on
first use; a restarted pod under the same name starts new ones), so it counts from zero.

prometheus_client, which vLLM's loggers use, also exports when each counter was created
(``<name>_created``, unix seconds): a counter created inside the window began there at
zero and counts whole, even when Prometheus first scraped it later (a pod that started
in the window); a created time that changes between two samples is a restart even when
the new count has already passed the old one. Without ``_created`` (disabled, or another
client), a series whose pod was never scraped before counts from its first sample, as
nothing earlier is known.

Cost: linear in the samples. Each series is two arrays (:mod:`kvcal.observe.samples`,
where every number was checked on entry); an increase is one pass over its window's
samples, and when each sample's counter was created is looked up by binary search in the
``_created`` series' change points (``numpy.searchsorted``), not by a scan of them per
sample (which made a month of 15 s scrapes take hours). Sums cannot overflow (the entry
bounds every value by 2^63); they are checked all the same, and an overflow is an input
error naming the series, never a figure of inf or NaN.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kvcal.errors import InputError
from kvcal.observe.samples import Series, describe

LOOKBACK_S = 300.0
"""How far before the window the fetch reaches for a counter's baseline (Prometheus' default staleness span)."""


@dataclass(frozen=True)
class Window:
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Increase:
    """A counter's increase over the window and how many of its samples lie in the window."""

    value: float
    samples: int


def pod_name(labels: dict[str, str]) -> str:
    """The ``pod`` label when the scrape sets one, else the target's ``instance``."""
    return labels.get("pod") or labels.get("instance") or "(no pod or instance label)"


_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def family_key(labels: dict[str, str]) -> tuple:
    """What ties a counter's samples to its ``_created`` series: the metric family and the labels but ``le``."""
    name = labels.get("__name__", "")
    name = name[5:] if name.startswith(("vllm:", "vllm_")) else name
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return (name, *sorted((k, v) for k, v in labels.items() if k not in ("__name__", "le")))


def finite_total(values: Iterable[float], what: str) -> float:
    """The sum of ``values``; a sum past what a float holds is an input error naming ``what`` (never inf)."""
    try:
        total = math.fsum(values)
    except OverflowError:
        total = math.inf
    if not math.isfinite(total):
        raise InputError(f"the counts of {what} add up past what a float holds: Prometheus' values are refused")
    return total


@dataclass(frozen=True)
class History:
    """What the counters' arithmetic needs beyond their own samples: when each pod was first scraped, and the
    counters' creation times (``_created`` series, by :func:`family_key`)."""

    seen: dict[str, float]
    created: dict[tuple, Series]

    @classmethod
    def of(cls, groups: Iterable[list[Series]], created: list[Series]) -> History:
        seen: dict[str, float] = {}
        for group in groups:
            for series in group:
                if len(series):
                    name = pod_name(series.labels)
                    seen[name] = min(seen.get(name, math.inf), float(series.times[0]))
        return cls(seen, {family_key(s.labels): s for s in created})

    def created_at_each(self, series: Series, at: np.ndarray) -> np.ndarray | None:
        """When the counter sampled at each of ``at`` was created, as last exported by then (None: not exported)."""
        created = self.created.get(family_key(series.labels))
        if created is None or not len(created):
            return None
        index = np.searchsorted(created.times, at, side="right") - 1
        return created.values[np.maximum(index, 0)]  # before its first sample: the first value

    def created_at(self, series: Series, at: float) -> float | None:
        found = self.created_at_each(series, np.array([at]))
        return None if found is None else float(found[0])


def _baseline(series: Series, window: Window, history: History, first_at: float, first_value: float) -> float:
    created = history.created_at(series, first_at)
    if created is not None and created > window.start:
        return 0.0  # the counter began inside the window, at zero
    if history.seen.get(pod_name(series.labels), math.inf) < first_at:
        return 0.0  # created after its pod was first scraped: it began at zero
    return first_value


def increase(series: Series, window: Window, history: History) -> Increase:
    """The series' increase over ``window``, resets counted (module docstring); one pass over its samples."""
    times, values = series.times, series.values
    low = int(np.searchsorted(times, window.start, side="right"))
    high = int(np.searchsorted(times, window.end, side="right"))
    if high <= low:
        return Increase(0.0, 0)
    inside = values[low:high]
    before_at = float(times[low - 1] if low else times[low])
    previous = np.empty_like(inside)
    previous[0] = values[low - 1] if low else _baseline(series, window, history, float(times[low]), float(inside[0]))
    previous[1:] = inside[:-1]
    restarted = inside < previous
    created = history.created_at_each(series, np.concatenate(([before_at], times[low:high])))
    if created is not None:
        restarted |= created[1:] != created[:-1]  # a new creation time: a restart, even past the old count
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.sum(np.where(restarted, inside, inside - previous)))
    return Increase(finite_total([total], describe(series.labels)), high - low)


def by_pod(series: list[Series]) -> dict[str, list[Series]]:
    out: dict[str, list[Series]] = defaultdict(list)
    for one in series:
        out[pod_name(one.labels)].append(one)
    return dict(out)


def summed(series: list[Series], window: Window, history: History) -> Increase:
    """The increases of several series added (a pod's engines, the fleet's pods)."""
    parts = [increase(one, window, history) for one in series]
    what = describe(series[0].labels) + (f" and {len(series) - 1} more series" if len(series) > 1 else "")
    return Increase(finite_total((p.value for p in parts), what) if parts else 0.0, sum(p.samples for p in parts))


def gauge_readings(series: list[Series], window: Window) -> list[float]:
    """A pod's gauge in the window, one reading per scrape: the series of one scrape (its engines) added."""
    times, values = [], []
    for one in series:
        low = np.searchsorted(one.times, window.start, side="right")
        high = np.searchsorted(one.times, window.end, side="right")
        times.append(one.times[low:high])
        values.append(one.values[low:high])
    if not times:
        return []
    instants, which = np.unique(np.concatenate(times), return_inverse=True)
    return np.bincount(which, weights=np.concatenate(values), minlength=instants.size).tolist()


@dataclass(frozen=True)
class Quantile:
    """A quantile read off histogram buckets: the interpolated value and the bucket it lies in (its resolution)."""

    value: float
    low: float
    high: float


def _bound(series: Series) -> float:
    """A bucket's upper bound ``le``: a number >= 0 or +Inf (kvcal's histograms count durations and sizes)."""
    text = series.labels.get("le", "")
    try:
        le = float(text)
    except ValueError:
        le = math.nan
    if not le >= 0:  # NaN, negative, -Inf, or no number at all
        raise InputError(
            f"the histogram bucket {describe(series.labels)}: a bucket's bound le must be a number >= 0 or +Inf "
            "(refused: its quantiles would be no durations)"
        )
    return le


def bucket_counts(series: list[Series], window: Window, history: History) -> dict[float, float]:
    """Observations per upper bound ``le`` over the window, cumulative, summed over the series given."""
    groups: dict[float, list[Series]] = defaultdict(list)
    for one in series:
        groups[_bound(one)].append(one)
    counts = {le: summed(group, window, history).value for le, group in groups.items()}
    running = 0.0
    for le in sorted(counts):  # increases per bucket with resets can break monotony by a count: keep it cumulative
        running = counts[le] = max(running, counts[le])
    return counts


def histogram_quantile(q: float, counts: dict[float, float]) -> Quantile | None:
    """PromQL's ``histogram_quantile`` on cumulative bucket counts: linear inside the bucket; None with no observation.

    As Prometheus does, a quantile that falls in the ``+Inf`` bucket is the highest finite bound.
    """
    bounds = sorted(counts)
    if not bounds or not math.isinf(bounds[-1]) or counts[bounds[-1]] <= 0:
        return None
    rank = q * counts[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        if counts[le] >= rank and counts[le] > 0:
            if math.isinf(le):
                return Quantile(lower, lower, math.inf)
            inside = counts[le] - below
            share = (rank - below) / inside if inside > 0 else 1.0
            return Quantile(lower + (le - lower) * share, lower, le)
        lower, below = le, counts[le]
    return None
