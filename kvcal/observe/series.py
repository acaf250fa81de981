"""Counter increases with resets, pods by name, histogram quantiles: the arithmetic on Prometheus' raw samples.

A counter's increase over the window [start, end] starts from its last sample at or before
``start`` (the fetch reaches back :data:`LOOKBACK_S` for it). A drop means the process
restarted and its counter began again at zero, so the sample after a drop adds its whole
value (PromQL's ``increase`` does the same, without extrapolating to the window's edges:
kvcal's figures are the counts the engines made, exactly). A series that first appears
after its pod was already scraped was created then (vLLM creates some labelled series on
first use; a restarted pod under the same name starts new ones), so it counts from zero;
one whose pod was never scraped before (Prometheus started late, or a new pod) counts from
its first sample, as nothing earlier is known.
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


def first_seen(groups: Iterable[list[Series]]) -> dict[str, float]:
    """Per pod, the time of its earliest sample in any fetched series: when Prometheus first scraped it."""
    seen: dict[str, float] = {}
    for group in groups:
        for series in group:
            if series.samples:
                name = pod_name(series.labels)
                seen[name] = min(seen.get(name, math.inf), series.samples[0][0])
    return seen


def increase(series: Series, window: Window, pod_seen_from: float) -> Increase:
    """The series' increase over ``window``, resets counted (module docstring)."""
    before = [value for at, value in series.samples if at <= window.start]
    inside = [(at, value) for at, value in series.samples if window.start < at <= window.end]
    if not inside:
        return Increase(0.0, 0)
    if before:
        previous = before[-1]
    elif pod_seen_from < inside[0][0]:
        previous = 0.0  # created after its pod was first scraped: it began at zero
    else:
        previous = inside[0][1]
    total = 0.0
    for _, value in inside:
        total += value - previous if value >= previous else value
        previous = value
    return Increase(total, len(inside))


def by_pod(series: list[Series]) -> dict[str, list[Series]]:
    out: dict[str, list[Series]] = defaultdict(list)
    for one in series:
        out[pod_name(one.labels)].append(one)
    return dict(out)


def summed(series: list[Series], window: Window, seen: dict[str, float]) -> Increase:
    """The increases of several series added (a pod's engines, the fleet's pods)."""
    parts = [increase(one, window, seen.get(pod_name(one.labels), math.inf)) for one in series]
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


def bucket_counts(series: list[Series], window: Window, seen: dict[str, float]) -> dict[float, float]:
    """Observations per upper bound ``le`` over the window, cumulative, summed over the series given."""
    groups: dict[float, list[Series]] = defaultdict(list)
    for one in series:
        try:
            groups[float(one.labels.get("le", "nan"))].append(one)
        except ValueError:
            continue
    counts = {le: summed(group, window, seen).value for le, group in groups.items() if not math.isnan(le)}
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
