"""kvcal observe against a fake Prometheus on loopback (tests/fake_prometheus.py): figures, resets, missing metrics,
servers that misbehave, and the checks against a fit and a kvcal fleet row."""

from __future__ import annotations

import json
import math

import pytest

from fake_prometheus import FakePrometheus
from kvcal.errors import InputError
from kvcal.observe.client import PrometheusClient, PrometheusUnavailable, Series
from kvcal.observe.run import parse_duration, parse_selector, parse_time
from kvcal.observe.series import History, Window, bucket_counts, histogram_quantile, increase


@pytest.fixture(scope="module")
def prom():
    server = FakePrometheus()
    yield server
    server.close()


def _observe(kvcal, prom, *extra, mode=""):
    result = kvcal("observe", "--prometheus", prom.url(mode), "--since", "15m", "--json", *extra)
    return result, (json.loads(result.out) if result.code in (0, 1) and result.out.strip() else None)


def _values(figures: dict) -> dict:
    return {k: v["value"] for k, v in figures.items() if isinstance(v, dict)}


def test_the_fleet_and_each_pod_with_a_restart_and_a_pod_without_p2p(kvcal, prom):
    result, doc = _observe(kvcal, prom)
    assert result.code == 0, result.err
    assert doc["schema"] == "kvcal.observe/1" and set(doc["window"]) == {"start", "end"}
    pods = {p["name"]: p for p in doc["pods"]}
    assert set(pods) == {"pod-a", "pod-b", "127.0.0.1:9103"}  # the pod label, else the instance
    a, b, c = (_values(pods[n]) for n in ("pod-a", "pod-b", "127.0.0.1:9103"))
    # pod-a: P2P tier; its external tokens beyond the peer's (5 of 15) came from its own CPU tier
    assert a["pull_share"] == pytest.approx(0.10) and a["local_hit_share"] == pytest.approx(0.30)
    assert a["bytes_per_pulled_token"] == pytest.approx(2048)
    # pod-b restarted mid-window: counted on from zero, neither negative nor lost
    assert b["pull_share"] == pytest.approx(0.20) and b["computed_share"] == pytest.approx(0.70)
    assert b["requests_per_s"] == pytest.approx(4 * 60 / 900)
    assert pods["pod-b"]["pull_share"]["samples"] == 60
    # no P2P: nothing pulled, and its bytes per pulled token missing with the reason
    assert c["pull_share"] == 0.0 and c["bytes_per_pulled_token"] is None
    assert "not enabled" in pods["127.0.0.1:9103"]["bytes_per_pulled_token"]["missing"]
    fleet = _values(doc["fleet"])
    assert fleet["pull_share"] == pytest.approx(30 / 300) and fleet["computed_share"] == pytest.approx(220 / 300)
    assert fleet["local_hit_share"] == pytest.approx(50 / 300)
    assert fleet["bytes_per_pulled_token"] == pytest.approx(2048)
    assert fleet["ttft_p50_ms"] == pytest.approx(100) and fleet["ttft_p90_ms"] == pytest.approx(400)
    assert doc["ttft_buckets_ms"]["ttft_p90_ms"] == [250, 500]
    assert doc["fleet"]["ttft_p50_ms"]["samples"] == 3 * 60 * 4
    assert fleet["queue_p90"] == 4 and fleet["requests_per_s"] == pytest.approx(3 * 4 * 60 / 900)
    assert any(note.startswith("bytes_per_pulled_token: the fleet's figure leaves out 127.0.0.1:9103")
               for note in doc["notes"])


def test_a_selector_narrows_every_query(kvcal, prom):
    result, doc = _observe(kvcal, prom, "--selector", 'pod="pod-a"')
    assert result.code == 0 and [p["name"] for p in doc["pods"]] == ["pod-a"]
    assert doc["fleet"]["pull_share"]["value"] == pytest.approx(0.1)


def test_an_older_vllm_names_what_it_lacks(kvcal, prom):
    result, doc = _observe(kvcal, prom, mode="old")
    assert result.code == 0
    fleet = doc["fleet"]
    for name in ("pull_share", "local_hit_share", "computed_share", "bytes_per_pulled_token", "ttft_p50_ms"):
        assert fleet[name]["value"] is None and fleet[name]["missing"], name
    assert "prompt_tokens_by_source" in fleet["pull_share"]["missing"]
    assert fleet["queue_p90"]["value"] == 4 and fleet["requests_per_s"]["value"] > 0


@pytest.mark.parametrize("mode, code, words", [
    ("garbage", 2, "not a Prometheus API"), ("html", 2, "not a Prometheus API"),
    ("notfound", 2, "HTTP 404"), ("bad_data", 2, "refused"), ("huge", 2, "narrow --selector"),
    ("unavailable", 4, "failed on the server"), ("reset", 4, "failed"),
])
def test_a_server_that_misbehaves_is_one_line_and_its_exit_code(kvcal, prom, mode, code, words):
    result = kvcal("observe", "--prometheus", prom.url(mode), "--since", "15m")
    assert result.code == code, result.err
    assert words in result.err and len(result.err.strip().splitlines()) == 1 and not result.out


def test_an_unreachable_server_is_exit_4(kvcal):
    result = kvcal("observe", "--prometheus", "http://127.0.0.1:9", "--since", "15m")
    assert result.code == 4 and "unreachable" in result.err


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_a_server_that_hangs_or_trickles_ends_at_the_deadline(prom, mode):
    with PrometheusClient(prom.url(mode), query_deadline_s=1.0) as client:
        with pytest.raises(PrometheusUnavailable, match="no answer within"):
            client.check(1.0)


def test_the_queries_share_one_budget(prom):
    with PrometheusClient(prom.url(), total_deadline_s=0.0) as client:
        with pytest.raises(PrometheusUnavailable, match="budget"):
            client.check(1.0)


@pytest.mark.parametrize("args, words", [
    (["--since", "15x"], "not a duration"), (["--since", "0s"], "within"), (["--since", "40d"], "within"),
    (["--start", "2026-12-07T04:00:00Z"], "go together"), (["--since", "5m", "--start", "1", "--end", "2"], "not both"),
    (["--start", "20", "--end", "10"], "after --start"), (["--start", "yesterday", "--end", "10"], "RFC 3339"),
    (["--selector", "pod=pod-a"], "label matchers"), (["--propose"], "give --fit"),
    (["--propose-fit", "x.json"], "give --fit"),
])
def test_bad_flags_are_input_errors_before_any_query(kvcal, args, words):
    result = kvcal("observe", "--prometheus", "http://127.0.0.1:9", *args)  # nothing listens there: exit 4 if asked
    assert result.code == 2 and words in result.err, result.err


@pytest.mark.parametrize("url", ["prometheus:9090", "ftp://x", "http://", "http://h:0"])
def test_a_wrong_url_is_exit_2(kvcal, url):
    assert kvcal("observe", "--prometheus", url).code == 2


def test_the_window_and_selector_parsers():
    assert parse_duration("1h30m") == 5400 and parse_duration("90s") == 90
    assert parse_time("2026-12-07T04:00:00Z", "--start") == parse_time("1796616000", "--start")
    assert parse_selector('{namespace="llm-d", pod=~"a.*"}') == 'namespace="llm-d", pod=~"a.*"'
    with pytest.raises(InputError):
        parse_selector('pod="a"} or vector(1) {')


def test_a_counter_that_resets_counts_on_from_zero():
    window = Window(100.0, 200.0)
    series = Series({"pod": "p"}, ((90.0, 500.0), (120.0, 600.0), (150.0, 30.0), (180.0, 80.0)))
    assert increase(series, window, History({"p": 0.0}, {})).value == 100 + 30 + 50  # not 80 - 500
    fresh = Series({"pod": "p"}, ((150.0, 40.0), (180.0, 70.0)))  # created after its pod was scraped: from zero
    assert increase(fresh, window, History({"p": 95.0}, {})).value == 70
    assert increase(fresh, window, History({"p": 150.0}, {})).value == 30  # first seen now: nothing earlier is known


def test_a_counters_created_time_tells_a_start_or_a_restart_its_count_cannot():
    window = Window(100.0, 200.0)
    name = {"__name__": "vllm:prompt_tokens_total", "pod": "p"}
    created = {"__name__": "vllm_prompt_tokens_created", "pod": "p"}
    # started at 110, first scraped at 150 with 40 counted: all 70 are the window's
    fresh = Series(name, ((150.0, 40.0), (180.0, 70.0)))
    history = History.of([[fresh]], [Series(created, ((150.0, 110.0), (180.0, 110.0)))])
    assert increase(fresh, window, history).value == 70
    # restarted at 140 and already past its old count at the next scrape: 650 counted since, not 50
    restarted = Series(name, ((90.0, 500.0), (120.0, 600.0), (150.0, 650.0)))
    history = History.of([[restarted]], [Series(created, ((90.0, 10.0), (120.0, 10.0), (150.0, 140.0)))])
    assert increase(restarted, window, history).value == 100 + 650


def test_histogram_quantiles_interpolate_inside_their_bucket():
    window = Window(0.0, 10.0)
    series = [Series({"le": le}, ((0.0, 0.0), (10.0, n))) for le, n in (("0.1", 5), ("1", 9), ("+Inf", 10))]
    counts = bucket_counts(series, window, History({}, {}))
    q = histogram_quantile(0.5, counts)
    assert q.value == pytest.approx(0.1) and (q.low, q.high) == (0.0, 0.1)
    assert histogram_quantile(0.99, counts).high == math.inf  # in the +Inf bucket: the highest finite bound
    assert histogram_quantile(0.5, {math.inf: 0.0}) is None


def _fleet_file(tmp_path, *, ttft=(80.0, 120.0), p90=(350.0, 450.0), share=(0.08, 0.12), queue=(3.0, 5.0),
                with_share=True, threshold=1024):
    from kvcal.fleet.result import Figure, FleetResult, FleetRow

    def fig(low, high):
        return Figure(value=(low + high) / 2, ci=[low, high])

    row = FleetRow(policy="threshold", threshold=threshold, goodput_rps=fig(1, 1), completed_rps=fig(1, 1),
                   input_tokens_per_s=fig(1, 1), ttft_p50_ms=fig(*ttft), ttft_p90_ms=fig(*p90),
                   ttft_p99_ms=fig(*p90), ttft_mean_ms=fig(*ttft), prefill_queue_p90=fig(*queue),
                   pull_share=fig(0.5, 0.5), pulled_token_share=fig(*share) if with_share else None,
                   tokens_moved_per_s=fig(1, 1), busy_share=fig(0.5, 0.5))
    result = FleetResult(kvcal_version="t", fit="f", workload="w", pods=3, rate=1.0, concurrency=None, duration_s=60,
                         seeds=1, resamples=0, block_size=64, best_threshold=1024, best_threshold_ci=[1024, 1024],
                         best_rule="r", recommended_threshold=1024, recommended_steps=[], recommended_reason=None,
                         idle_threshold=1024, idle_threshold_reason=None, rows=[row])
    path = tmp_path / "fleet.json"
    path.write_text(result.model_dump_json(by_alias=True))
    return path


def test_checks_pass_when_the_fleet_does_what_kvcal_said(kvcal, prom, tmp_path):
    from pathlib import Path

    fit = Path(__file__).resolve().parents[3] / "results" / "baselines" / "cpu-tiny" / "fit.json"  # 2048 B/token
    result, doc = _observe(kvcal, prom, "--fit", fit, "--fleet", _fleet_file(tmp_path), "--deployed", "1024")
    assert result.code == 0, result.err
    verdicts = {c["name"]: c["verdict"] for c in doc["checks"]}
    # the baseline's fit.json predates engine_side, and no pod of this fleet exposes the costs: fleet-wide unknowns
    assert verdicts == {"bytes_per_pulled_token": "ok", "ttft_p50_ms": "ok", "ttft_p90_ms": "ok", "pull_share": "ok",
                        "queue_p90": "ok", "pull_cost_drift": "unknown", "prefill_cost_drift": "unknown",
                        "pull_failures": "unknown"}
    # pod-a has the P2P tier (it pulls) but this fleet's exporters predate the read-time counter: unknown, named
    pod_a = [c for c in doc["checks"] if c["pod"] == "pod-a"]
    assert {c["name"] for c in pod_a} == {"pull_cost_drift", "pull_failures"}
    assert all(c["verdict"] == "unknown" for c in pod_a)
    assert all(len(c["predicted"]) == 2 for c in doc["checks"] if c["verdict"] != "unknown")


def test_a_figure_outside_the_prediction_is_exit_1_with_what_to_measure_again(kvcal, prom, tmp_path):
    from factories import make_fit
    from kvcal.fit.io import write_fit

    fit = write_fit(make_fit(setup={"kv_bytes_per_token": 4096}), tmp_path / "fit.json")
    result, doc = _observe(kvcal, prom, "--fit", fit, "--fleet", _fleet_file(tmp_path, share=(0.3, 0.4)),
                           "--deployed", "1024")
    assert result.code == 1
    verdicts = {c["name"]: c["verdict"] for c in doc["checks"]}
    assert verdicts["bytes_per_pulled_token"] == "outside" and verdicts["pull_share"] == "outside"
    assert verdicts["ttft_p90_ms"] == "ok"
    assert any("kvcal sweep" in line for line in doc["remeasure"]) and "kvcal fleet" in result.err


def test_the_ttft_check_is_held_to_the_bucket_not_the_interpolation(kvcal, prom, tmp_path):
    # observed p90 400 ms lies in the (250, 500] bucket: a prediction of 520-560 ms meets it once widened; 900+ does not
    ok, doc = _observe(kvcal, prom, "--fleet", _fleet_file(tmp_path, p90=(520.0, 560.0)), "--deployed", "1024")
    assert ok.code == 0 and {c["name"]: c["verdict"] for c in doc["checks"]}["ttft_p90_ms"] == "ok"
    far, doc = _observe(kvcal, prom, "--fleet", _fleet_file(tmp_path, p90=(900.0, 1000.0)), "--deployed", "1024")
    assert far.code == 1 and {c["name"]: c["verdict"] for c in doc["checks"]}["ttft_p90_ms"] == "outside"


def test_an_older_fleet_result_leaves_the_share_unknown_and_a_missing_row_is_an_input_error(kvcal, prom, tmp_path):
    result, doc = _observe(kvcal, prom, "--fleet", _fleet_file(tmp_path, with_share=False), "--deployed", "1024")
    assert result.code == 0 and {c["name"]: c["verdict"] for c in doc["checks"]}["pull_share"] == "unknown"
    result = kvcal("observe", "--prometheus", prom.url(), "--fleet", _fleet_file(tmp_path), "--deployed", "2048")
    assert result.code == 2 and "--thresholds 2048" in result.err
    result = kvcal("observe", "--prometheus", prom.url(), "--fleet", _fleet_file(tmp_path))
    assert result.code == 2 and "--deployed" in result.err


def test_fleet_rows_count_the_pulled_prompt_tokens_as_the_engines_do():
    """nixl-pd: the source prefills the whole prompt (its hold) and counts it, the consumer counts it again, pulled."""
    from factories import make_fit
    from kvcal.fleet.costs import point_costs
    from kvcal.fleet.policies.always_pull import AlwaysPull
    from kvcal.fleet.policies.no_p2p import NoP2P
    from kvcal.fleet.sim import FleetSim
    from kvcal.fleet.study import _figures
    from kvcal.fleet.workload import Workload

    w = Workload.model_validate({
        "duration_s": 2000, "warmup_s": 0, "arrival": {"rate": 0.01}, "router": {"pick": "rotate"},
        "sessions": {"system_prompts": 1, "system_prompt_tokens": 1024, "turns": 2, "input_tokens": 1024,
                     "output_tokens": 1, "think_time_s": 0.1},
        "engine": {"max_num_batched_tokens": 65536, "pull_computes_on_source": True}})
    stats = FleetSim(w, 2, point_costs(make_fit()), AlwaysPull(), 64, seed=2).run()
    first, second = 2048, 2048 + 1 + 1024
    assert stats.routed == 2 * stats.pulled > 6
    assert stats.routed_prompt_tokens == stats.pulled * (first + 2 * second)
    assert _figures(stats)["pulled_token_share"] == pytest.approx(stats.tokens_moved / stats.routed_prompt_tokens)
    never = FleetSim(w, 2, point_costs(make_fit()), NoP2P(), 64, seed=2).run()
    assert _figures(never)["pulled_token_share"] == 0.0


def test_a_series_that_changed_its_names_spelling_is_counted_once():
    from kvcal.observe.figures import _joined

    labels = {"pod": "p", "engine": "0"}
    parts = [Series({"__name__": "vllm:prompt_tokens_total", **labels}, ((90.0, 500.0), (120.0, 600.0))),
             Series({"__name__": "vllm_prompt_tokens_total", **labels}, ((150.0, 650.0), (180.0, 700.0)))]
    (one,) = _joined(parts)
    # not 100 + 700 (a fresh series from zero)
    assert increase(one, Window(100.0, 200.0), History({"p": 0.0}, {})).value == 200


def test_series_of_different_metrics_with_the_same_labels_stay_apart():
    from kvcal.observe.figures import _joined

    labels = {"pod": "p", "engine": "0"}
    created = [Series({"__name__": "vllm_prompt_tokens_created", **labels}, ((1.0, 5.0),)),
               Series({"__name__": "vllm:time_to_first_token_seconds_created", **labels}, ((1.0, 6.0),))]
    assert len(_joined(created)) == 2


def test_values_name_the_row_as_compare_reads_them(kvcal, prom, tmp_path):
    from pathlib import Path

    values = Path(__file__).resolve().parents[2] / "fixtures" / "values" / "router-p2p.yaml"  # minCachedTokenDelta 2048
    result, doc = _observe(kvcal, prom, "--fleet", _fleet_file(tmp_path, threshold=2048), "--values", values)
    assert result.code == 0, result.err
    assert len(doc["checks"]) == 4
    result = kvcal("observe", "--prometheus", prom.url(), "--fleet", _fleet_file(tmp_path), "--values", values)
    assert result.code == 2 and "deployed threshold 2048" in result.err
