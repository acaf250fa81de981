"""Numbers from Prometheus and from a fleet file checked where they enter; NaN never passes a gate (issue 55)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fake_prometheus import FakePrometheus
from hostile_prometheus import HOSTILE_POD
from kvcal.errors import InputError
from kvcal.observe.checks import fleet_row
from kvcal.observe.result import Check, Observed
from kvcal.observe.samples import MAX_COUNT, checked, merged
from kvcal.observe.series import History, Window, bucket_counts, finite_total, histogram_quantile, increase

COUNTER = {"__name__": "vllm:prompt_tokens_total", "pod": "p"}


def _checked(labels, pairs):
    times = np.array([t for t, _ in pairs], dtype=float)
    return checked("Prometheus at x", labels, times, np.array([v for _, v in pairs], dtype=float))


@pytest.fixture(scope="module")
def prom():
    server = FakePrometheus()
    yield server
    server.close()


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, MAX_COUNT * 2])
def test_a_counter_that_is_negative_not_finite_or_past_2_63_is_refused_with_the_series_named(value):
    with pytest.raises(InputError, match=r'vllm:prompt_tokens_total\{pod="p"\}'):
        _checked(COUNTER, [(1.0, 5.0), (2.0, value)])


def test_a_gauge_nan_is_no_reading_but_a_negative_or_infinite_one_is_refused():
    gauge = {"__name__": "vllm:num_requests_waiting", "pod": "p"}
    assert _checked(gauge, [(1.0, 2.0), (2.0, math.nan), (3.0, 4.0)]).values.tolist() == [2.0, 4.0]
    for value in (-1.0, math.inf):
        with pytest.raises(InputError, match="gauge"):
            _checked(gauge, [(1.0, value)])


@pytest.mark.parametrize("at", [math.nan, -5.0, 4e10])
def test_a_sample_time_that_is_no_instant_is_refused(at):
    with pytest.raises(InputError, match="instant"):
        _checked(COUNTER, [(at, 1.0)])


def test_samples_are_ordered_one_an_instant_and_a_created_series_keeps_its_changes_only():
    series = _checked(COUNTER, [(3.0, 9.0), (1.0, 5.0), (1.0, 6.0), (2.0, 7.0)])
    assert series.samples == ((1.0, 5.0), (2.0, 7.0), (3.0, 9.0))
    created = {"__name__": "vllm:prompt_tokens_created", "pod": "p"}
    month = [(float(t), 1000.0 if t < 50_000 else 2000.0) for t in range(1, 178_561)]
    kept = _checked(created, month)
    assert kept.samples == ((1.0, 1000.0), (50_000.0, 2000.0))  # what a month of unchanged stamps reduces to
    joined = merged(created, [kept, _checked(created, [(200_000.0, 2000.0), (200_015.0, 3000.0)])])
    assert joined.samples == ((1.0, 1000.0), (50_000.0, 2000.0), (200_015.0, 3000.0))


def test_increases_use_the_created_series_by_lookup_and_restarts_still_count():
    created = {"__name__": "vllm_prompt_tokens_created", "pod": "p"}
    n = 10_000
    counter = _checked(COUNTER, [(float(t), float(t if t < n // 2 else t - n // 2 + 3 * n)) for t in range(1, n + 1)])
    stamps = _checked(created, [(float(t), 1.0 if t < n // 2 else float(n // 2)) for t in range(1, n + 1)])
    history = History.of([[counter]], [stamps])
    # one a scrape, and at the restart (the count past the old one) the new process's whole count
    assert increase(counter, Window(0.5, n), history).value == (n - 1) + 3 * n
    assert increase(counter, Window(n + 1, n + 2), history).samples == 0


def test_a_sum_past_a_float_is_an_input_error_never_inf():
    with pytest.raises(InputError, match="add up past"):
        finite_total([1.7e308, 1.7e308], "x")


@pytest.mark.parametrize("le", ["-Inf", "-0.5", "NaN", "fast"])
def test_a_bucket_bound_below_zero_or_no_number_is_refused(le):
    series = [_checked({"__name__": "vllm:time_to_first_token_seconds_bucket", "le": b}, [(0.0 + 1, 0.0), (10.0, n)])
              for b, n in ((le, 1), ("1", 9), ("+Inf", 10))]
    with pytest.raises(InputError, match="bound"):
        bucket_counts(series, Window(0.5, 10.0), History({}, {}))


def test_a_quantile_in_a_zero_bucket_is_zero_not_nan():
    q = histogram_quantile(0.5, {0.0: 6.0, 1.0: 9.0, math.inf: 10.0})
    assert q is not None and q.value == 0.0 and math.isfinite(q.value)


def test_nan_never_passes_a_gate_and_a_figure_that_is_no_number_is_missing():
    for observed, predicted in ((math.nan, [1.0, 2.0]), (1.5, [math.nan, 2.0]), (None, [1.0, 2.0]),
                                (math.inf, [1.0, 2.0])):
        check = Check(name="x", observed=observed, predicted=predicted, tolerance="t", verdict="ok", reason="r")
        assert check.verdict == "unknown"
    assert Check(name="x", observed=1.5, predicted=[1.0, 2.0], tolerance="t", verdict="ok", reason="r").verdict == "ok"
    figure = Observed(value=math.nan, samples=3)
    assert figure.value is None and figure.missing


def _fleet(thresholds=(1024,), always=True, **figure):
    from kvcal.fleet.result import Figure, FleetResult, FleetRow

    def fig(low=1.0, high=2.0):
        return Figure(value=(low + high) / 2, ci=[low, high])

    def row(policy, threshold):
        return FleetRow(policy=policy, threshold=threshold, goodput_rps=fig(), completed_rps=fig(),
                        input_tokens_per_s=fig(), ttft_p50_ms=figure.get("ttft", fig()), ttft_p90_ms=fig(),
                        ttft_p99_ms=fig(), ttft_mean_ms=fig(), prefill_queue_p90=fig(), pull_share=fig(),
                        pulled_token_share=fig(), tokens_moved_per_s=fig(), busy_share=fig())

    rows = [row("threshold", t) for t in thresholds] + ([row("always-pull", None)] if always else [])
    return FleetResult(kvcal_version="t", fit="f", workload="w", pods=3, rate=1.0, concurrency=None, duration_s=60,
                       seeds=1, resamples=0, block_size=64, best_threshold=1024, best_threshold_ci=[1024, 1024],
                       best_rule="r", recommended_threshold=1024, recommended_steps=[], recommended_reason=None,
                       idle_threshold=1024, idle_threshold_reason=None, rows=rows)


def test_a_deployed_threshold_is_judged_against_the_row_that_pulls_at_the_same_deltas():
    fleet = _fleet(thresholds=(1024, 2048))
    assert fleet_row(fleet, 1).policy == "always-pull"  # 1, the plugin's default: pulls whenever a peer holds more
    assert fleet_row(fleet, 64).policy == "always-pull"
    assert fleet_row(fleet, 1000).threshold == 1024 and fleet_row(fleet, 2048).threshold == 2048
    with pytest.raises(InputError, match="--thresholds 1$"):
        fleet_row(_fleet(always=False), 1)
    with pytest.raises(InputError, match="--thresholds 3008"):
        fleet_row(fleet, 3000)


@pytest.mark.parametrize("ci", [[math.nan, 2.0], [3.0, 2.0], [1.0], [1.0, math.inf]])
def test_a_fleet_file_with_a_nan_or_inverted_interval_is_refused_by_observe(kvcal, prom, tmp_path, ci):
    written = json.dumps(ci).replace("nan", "NaN").replace("inf", "Infinity")  # as a hand-edited file holds them
    text = _fleet().model_dump_json(by_alias=True).replace('"ttft_p50_ms":{"value":1.5,"ci":[1.0,2.0]}',
                                                          f'"ttft_p50_ms":{{"value":1.5,"ci":{written}}}')
    path = tmp_path / "fleet.json"
    path.write_text(text)
    result = kvcal("observe", "--prometheus", prom.url(), "--fleet", path, "--deployed", "1024")
    assert result.code == 2 and "ttft_p50_ms" in result.err and "damaged" in result.err, result.err


def test_a_hostile_label_stays_one_escaped_row_of_the_table(kvcal, prom):
    result = kvcal("observe", "--prometheus", prom.url("labels"), "--since", "15m")
    assert result.code == 0, result.err
    rows = result.out.splitlines()
    tables = sum(line.startswith("pod ") for line in rows)  # the figures' table and the production costs'
    assert sum(line.startswith("fleet ") for line in rows) == tables == 2  # a label's newline forged no fleet row
    assert not any(c in result.out for c in "\x1b\x00\r\x07\u202e\x85")
    assert "pod-\\x1b[31mred" in result.out
    doc = kvcal("observe", "--prometheus", prom.url("labels"), "--since", "15m", "--json")
    assert HOSTILE_POD in {p["name"] for p in json.loads(doc.out)["pods"]}  # the JSON keeps it, escaped by JSON
