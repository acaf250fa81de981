"""The table of figure -> series and ratio (kvcal.observe.catalog) says what kvcal observe computes: every ratio
evaluated on the fake fleets' raw series equals the figure observe reports, pod by pod."""

from __future__ import annotations

import pytest

import fake_costs_fleet
from fake_prometheus import FakePrometheus
import numpy as np

from kvcal.observe.catalog import (
    ALL_QUERIES,
    COST_FAMILIES,
    COST_QUERIES,
    COSTS,
    QUANTILE_FIGURES,
    SHARES,
    Figure,
    every_figure,
)
from kvcal.observe.client import PrometheusClient
from kvcal.observe.costs import pod_kind
from kvcal.observe.figures import fetch, history_of
from kvcal.observe.result import COST_NAMES, FIGURE_NAMES
from kvcal.observe.run import ObserveConfig, run_observe
from kvcal.observe.series import Window, bucket_counts, by_pod, gauge_readings, histogram_quantile, summed


def _evaluate(figure: Figure, kind: str, mine: dict, window: Window, history, ranks: int = 1) -> float | None:
    ratio = figure.ratio(kind)
    if ratio is None:
        return None

    def total(parts) -> float | None:
        value = 0.0
        for part in parts:
            chosen = [s for s in mine.get(part.role, []) if all(s.labels.get(k) == v for k, v in part.labels)]
            if not chosen and part.role != "tier_p2p_failures":
                return None
            value += part.sign * (summed(chosen, window, history).value if chosen else 0.0)
        return value

    top = total(ratio.numerator)
    bottom = window.seconds if ratio.denominator is None else total(ratio.denominator)
    if top is None or not bottom:
        return None
    top /= ranks if ratio.per_rank else 1
    bottom /= ranks if ratio.per_rank == "both" else 1
    return ratio.scale * top / bottom


@pytest.mark.parametrize("served, names", [(None, SHARES), (fake_costs_fleet.cost_fleet, COSTS)])
def test_every_ratio_in_the_table_is_what_observe_reports(served, names):
    server = FakePrometheus(served)
    try:
        window = Window(server.anchor - 899.0, server.anchor + 1.0)
        result = run_observe(ObserveConfig(prometheus=server.url(), start=str(window.start), end=str(window.end)))
        with PrometheusClient(server.url()) as client:
            fetched = fetch(client, window, None, COST_QUERIES, COST_FAMILIES)
    finally:
        server.close()
    history = history_of(fetched)
    split = {role: by_pod(series) for role, series in fetched.items()}
    compared = 0
    for pod in result.pods:
        mine = {role: pods.get(pod.name, []) for role, pods in split.items()}
        share_kind = "p2p-tier" if mine["tier_p2p_bytes"] and mine["cached_p2p"] else "nixl"
        kind = share_kind if names is SHARES else (pod_kind(mine) or "any")
        for name, figure in names.items():
            reported = getattr(pod, name).value
            if reported is None:
                continue
            assert _evaluate(figure, kind, mine, window, history) == pytest.approx(reported, rel=1e-9), (pod.name, name)
            compared += 1
    assert compared >= 12


def test_the_table_names_every_figure_and_only_series_observe_reads():
    assert set(COSTS) == set(COST_NAMES)
    assert set(SHARES) <= set(FIGURE_NAMES)
    assert set(FIGURE_NAMES) - set(SHARES) == set(QUANTILE_FIGURES)
    assert list(every_figure()) == [*FIGURE_NAMES, *COST_NAMES]  # the dashboard's panels, in the JSON's order
    assert {q.role for q in QUANTILE_FIGURES.values()} <= set(ALL_QUERIES)
    for figure in (*COSTS.values(), *SHARES.values()):
        for ratio in figure.ratios.values():
            for part in (*ratio.numerator, *(ratio.denominator or ())):
                assert part.role in ALL_QUERIES


def test_the_quantile_figures_are_what_observe_reports():
    server = FakePrometheus()
    try:
        window = Window(server.anchor - 899.0, server.anchor + 1.0)
        result = run_observe(ObserveConfig(prometheus=server.url(), start=str(window.start), end=str(window.end)))
        with PrometheusClient(server.url()) as client:
            fetched = fetch(client, window, None)
    finally:
        server.close()
    history = history_of(fetched)
    split = {role: by_pod(series) for role, series in fetched.items()}
    for pod in result.pods:
        mine = {role: pods.get(pod.name, []) for role, pods in split.items()}
        for name, figure in QUANTILE_FIGURES.items():
            if figure.of == "histogram":
                found = histogram_quantile(figure.q, bucket_counts(mine[figure.role], window, history))
                value = None if found is None else figure.scale * found.value
            else:
                readings = gauge_readings(mine[figure.role], window)
                value = float(np.percentile(readings, 100 * figure.q)) if readings else None
            assert value == pytest.approx(getattr(pod, name).value, rel=1e-9), (pod.name, name)
