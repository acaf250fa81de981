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
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from kvcal.observe.client import Series

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


@dataclass(frozen=True)
class History:
    """What the counters' arithmetic needs beyond their own samples: when each pod was first scraped, and the
    counters' creation times (``_created`` series, by :func:`family_key`)."""

    seen: dict[str, float]
    created: dict[tuple, tuple[tuple[float, float], ...]]

    @classmethod
    def of(cls, groups: Iterable[list[Series]], created: list[Series]) -> History:
        seen: dict[str, float] = {}
        for group in groups:
            for series in group:
                if series.samples:
                    name = pod_name(series.labels)
                    seen[name] = min(seen.get(name, math.inf), series.samples[0][0])
        return cls(seen, {family_key(s.labels): s.samples for s in created})

    def created_at(self, series: Series, at: float) -> float | None:
        """When the counter sampled at ``at`` was created, as last exported by then (None: not exported)."""
        samples = self.created.get(family_key(series.labels))
        if not samples:
            return None
        known = [value for when, value in samples if when <= at]
        return known[-1] if known else samples[0][1]


def _baseline(series: Series, window: Window, history: History, first: tuple[float, float]) -> float:
    created = history.created_at(series, first[0])
    if created is not None and created > window.start:
        return 0.0  # the counter began inside the window, at zero
    if history.seen.get(pod_name(series.labels), math.inf) < first[0]:
        return 0.0  # created after its pod was first scraped: it began at zero
    return first[1]


def increase(series: Series, window: Window, history: History) -> Increase:
    """The series' increase over ``window``, resets counted (module docstring)."""
    before = [(at, value) for at, value in series.samples if at <= window.start]
    inside = [(at, value) for at, value in series.samples if window.start < at <= window.end]
    if not inside:
        return Increase(0.0, 0)
    previous = before[-1][1] if before else _baseline(series, window, history, inside[0])
    created = history.created_at(series, before[-1][0] if before else inside[0][0])
    total = 0.0
    for at, value in inside:
        now_created = history.created_at(series, at)
        restarted = value < previous or (created is not None and now_created != created)
        total += value if restarted else value - previous
        previous, created = value, now_created
    return Increase(total, len(inside))


def by_pod(series: list[Series]) -> dict[str, list[Series]]:
    out: dict[str, list[Series]] = defaultdict(list)
    for one in series:
        out[pod_name(one.labels)].append(one)
    return dict(out)


def summed(series: list[Series], window: Window, history: History) -> Increase:
    """The increases of several series added (a pod's engines, the fleet's pods)."""
    parts = [increase(one, window, history) for one in series]
    return Increase(sum(p.value for p in parts), sum(p.samples for p in parts))


def gauge_readings(series: list[Series], window: Window) -> list[float]:
    """A pod's gauge in the window, one reading per scrape: the series of one scrape (its engines) added."""
    at_time: dict[float, float] = defaultdict(float)
    for one in series:
        for at, value in one.samples:
            if window.start < at <= window.end:
                at_time[at] += value
    return [at_time[at] for at in sorted(at_time)]


@dataclass(frozen=True)
class Quantile:
    """A quantile read off histogram buckets: the interpolated value and the bucket it lies in (its resolution)."""

    value: float
    low: float
    high: float


def bucket_counts(series: list[Series], window: Window, history: History) -> dict[float, float]:
    """Observations per upper bound ``le`` over the window, cumulative, summed over the series given."""
    groups: dict[float, list[Series]] = defaultdict(list)
    for one in series:
        try:
            groups[float(one.labels.get("le", "nan"))].append(one)
        except ValueError:
            continue
    counts = {le: summed(group, window, history).value for le, group in groups.items() if not math.isnan(le)}
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
