"""kvcal observe's production costs, drift and proposal against a fake Prometheus whose pods export vLLM's transfer,
failure and prefill counters (tests/fake_costs_fleet.py): NIXL pods, a P2P-tier pod, a pod whose link slowed
mid-window, a pod with failing pulls, a pod without these metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fake_costs_fleet as fleet
from fake_prometheus import FakePrometheus
from kvcal.threshold.choose import compute_threshold
from kvcal.fit.io import write_fit
from kvcal.records.fit import load_fit
from kvcal.records.fit_costmodel import CostModelFit, Estimate

CALIBRATED_PULL = fleet.WIRE_US / 1e3
CALIBRATED_PREFILL = fleet.PREFILL_US / 1e3
NOT_BUSY = 'pod!="busy"'
VALUES = Path(__file__).resolve().parents[2] / "fixtures" / "values" / "router-p2p.yaml"


@pytest.fixture(scope="module")
def prom():
    server = FakePrometheus(fleet.cost_fleet)
    yield server
    server.close()


_fit = fleet.calibration_fit


@pytest.fixture(scope="module")
def fit_path(tmp_path_factory):
    return write_fit(_fit(), tmp_path_factory.mktemp("fit") / "fit.json")


def _observe(kvcal, prom, *extra, selector=NOT_BUSY, span=900.0):
    end = prom.anchor + 1.0  # the scrape at the anchor inside the window, the one span before it the baseline
    args = ["observe", "--prometheus", prom.url(), "--start", f"{end - span:.3f}", "--end", f"{end:.3f}", "--json",
            *extra]
    if selector:
        args += ["--selector", selector]
    result = kvcal(*args)
    return result, (json.loads(result.out) if result.out.strip() else None)


def _pods(doc):
    return {p["name"]: p for p in doc["pods"]}


def _checks(doc):
    return {(c["name"], c["pod"]): c for c in doc["checks"]}


def test_each_pods_costs_and_the_fleets(kvcal, prom, fit_path):
    result, doc = _observe(kvcal, prom, "--fit", fit_path)
    pods = _pods(doc)
    a = pods["decode-a"]
    # NIXL pools its transfer time over TP 2 (the fit's): per rank it is the wire's 1.5 us a token
    assert a["pull_ms_per_token"] == {"value": pytest.approx(CALIBRATED_PULL), "samples": 240, "missing": None}
    assert a["pull_bytes_per_s"]["value"] == pytest.approx(2048 / (2 * 1.5e-6))
    assert a["pull_failure_rate"]["value"] == 0.0 and a["pull_failure_rate"]["samples"] == 240  # pulls, not ranks
    assert "P/D decode pod" in a["prefill_ms_per_token"]["missing"] and a["prefill_ms_per_token"]["value"] is None
    # the link slowed 10x for the second half of the window: 5.5x on average
    assert pods["decode-slow"]["pull_ms_per_token"]["value"] == pytest.approx(5.5 * CALIBRATED_PULL)
    assert pods["decode-failing"]["pull_failure_rate"]["value"] == pytest.approx(1 / 5)
    assert pods["prefill-p"]["prefill_ms_per_token"] == {"value": pytest.approx(CALIBRATED_PREFILL), "samples": 180,
                                                         "missing": None}
    assert pods["prefill-p"]["pull_ms_per_token"]["missing"] == "no token was pulled in the window"
    assert pods["prefill-p"]["pull_failure_rate"]["missing"] == "no pull was attempted in the window"
    tier = pods["tier-q"]
    assert tier["pull_ms_per_token"]["value"] == pytest.approx(CALIBRATED_PULL)  # the tier pools no ranks
    assert tier["pull_failure_rate"]["value"] == 0.0 and tier["pull_failure_rate"]["samples"] == 32 * 60
    assert tier["prefill_ms_per_token"]["value"] == pytest.approx(CALIBRATED_PREFILL)
    for name in ("pull_ms_per_token", "pull_bytes_per_s", "pull_failure_rate", "prefill_ms_per_token"):
        plain = pods["plain"][name]
        assert plain["value"] is None and plain["missing"], name  # never 0 for unknown
    assert "does not pull" in pods["plain"]["pull_ms_per_token"]["missing"]
    assert "is not exposed" in pods["plain"]["prefill_ms_per_token"]["missing"]
    tokens = 3 * 4 * 2048 + 2048
    wire = (4 * 2048 * (1 + 5.5 + 1) + 2048) * CALIBRATED_PULL
    assert doc["fleet"]["pull_ms_per_token"]["value"] == pytest.approx(wire / tokens)
    prefill = doc["fleet"]["prefill_ms_per_token"]["value"]  # decode pods left out: prefill-p, prefill-slow, tier-q
    assert prefill == pytest.approx(CALIBRATED_PREFILL * (3000 + 10 * 3000 + 1000) / 7000)
    assert any("P2P-tier pods" in note for note in doc["notes"])
    assert any(note.startswith("tier-q: no promotion-failure series") for note in doc["notes"])


def test_drift_is_named_on_the_right_pod_and_leg(kvcal, prom, fit_path):
    result, doc = _observe(kvcal, prom, "--fit", fit_path)
    assert result.code == 1
    checks = _checks(doc)
    verdict = {key: c["verdict"] for key, c in checks.items()}
    assert verdict[("pull_cost_drift", "decode-slow")] == "outside"
    assert verdict[("pull_cost_drift", "decode-a")] == verdict[("pull_cost_drift", "tier-q")] == "ok"
    assert verdict[("pull_cost_drift", "decode-failing")] == "ok"
    assert verdict[("pull_failures", "decode-failing")] == "outside"
    assert verdict[("pull_failures", "decode-a")] == verdict[("pull_failures", "tier-q")] == "ok"
    assert verdict[("prefill_cost_drift", "prefill-slow")] == "outside"
    assert verdict[("prefill_cost_drift", "prefill-p")] == verdict[("prefill_cost_drift", "tier-q")] == "ok"
    assert verdict[("prefill_cost_drift", "decode-a")] == "unknown"  # its figure is missing: a decode pod
    assert not [key for key in checks if key[1] == "plain"]  # it exposes neither leg
    for name in ("pull_cost_drift", "prefill_cost_drift", "pull_failures"):
        assert (name, None) in checks  # one fleet-wide each
    slow = checks[("pull_cost_drift", "decode-slow")]
    assert slow["predicted"] == [CALIBRATED_PULL, CALIBRATED_PULL] and "x5.5" in slow["reason"]
    assert "sqrt(1/240 pulls + 1/40 calibration probes)" in slow["tolerance"]
    assert "pull_cost_drift (decode-slow)" in result.err and "pull_failures (decode-failing)" in result.err
    assert any("decode-slow" in line and "kvcal sweep" in line and "link" in line for line in doc["remeasure"])
    assert len(result.err.strip().splitlines()) == 1


def test_a_healthy_selection_is_ok_and_exit_0(kvcal, prom, fit_path):
    result, doc = _observe(kvcal, prom, "--fit", fit_path, selector='pod=~"decode-a|prefill-p|tier-q|plain"')
    assert result.code == 0, result.err
    assert {c["verdict"] for c in doc["checks"] if c["name"] != "bytes_per_pulled_token"} == {"ok", "unknown"}
    assert doc["fleet"]["pull_ms_per_token"]["value"] == pytest.approx(CALIBRATED_PULL)


def test_without_a_fit_tp_1_is_assumed_and_said(kvcal, prom):
    result, doc = _observe(kvcal, prom, selector='pod="decode-a"')
    assert result.code == 0 and doc["checks"] == []
    assert doc["fleet"]["pull_ms_per_token"]["value"] == pytest.approx(2 * CALIBRATED_PULL)
    assert any("TP 1 is assumed" in note for note in doc["notes"])


def test_a_queued_window_leaves_the_prefill_unknown_unless_the_calibration_was_loaded(kvcal, prom, fit_path, tmp_path):
    result, doc = _observe(kvcal, prom, "--fit", fit_path, selector='pod=~"prefill-slow|busy"')
    check = _checks(doc)[("prefill_cost_drift", "prefill-slow")]
    assert check["verdict"] == "unknown" and "queue p90 is 5" in check["reason"]
    e = Estimate(value=1.0)
    loaded = _fit(cost_model=CostModelFit(transferFixedMs=e, sourceWaitMs=e, requeueMs=e, prefillMicrosecondsPerToken=e,
                                          transferMicrosecondsPerToken=e, busyQueueThreshold=2, base_ms=e,
                                          busy_computing_ms=e, design="designed", confidence=0.9, n_requests=10,
                                          n_resamples=0))
    result, doc = _observe(kvcal, prom, "--fit", write_fit(loaded, tmp_path / "loaded.json"),
                           selector='pod=~"prefill-slow|busy"')
    assert _checks(doc)[("prefill_cost_drift", "prefill-slow")]["verdict"] == "outside"


def test_an_older_fit_leaves_the_cost_checks_unknown_and_cannot_propose(kvcal, prom, tmp_path):
    old = write_fit(_fit(engine_side=None), tmp_path / "old.json")
    result, doc = _observe(kvcal, prom, "--fit", old, selector='pod="decode-slow"')
    assert result.code == 0
    assert _checks(doc)[("pull_cost_drift", "decode-slow")]["verdict"] == "unknown"
    assert "run kvcal fit on the run folder again" in _checks(doc)[("pull_cost_drift", "decode-slow")]["reason"]
    result = kvcal("observe", "--prometheus", "http://127.0.0.1:9", "--fit", old, "--propose")
    assert result.code == 2 and "engine-side pull" in result.err  # refused before any query (nothing listens there)


def test_the_proposal_moves_with_the_costs_and_its_fit_renders(kvcal, prom, fit_path, tmp_path):
    base = compute_threshold(load_fit(fit_path)).min_cached_token_delta
    result, doc = _observe(kvcal, prom, "--fit", fit_path, "--propose", "--deployed", str(base),
                           selector='pod=~"decode-a|prefill-p"')
    assert result.code == 0, result.err
    same = doc["proposal"]
    assert same["threshold"] == base and same["deployed"] == base
    assert same["pull_ms_per_token_delta"] == pytest.approx(0.0, abs=1e-12)
    assert same["prefill_ratio"] == pytest.approx(1.0) and same["batches"] >= 10
    assert same["interval"][0] <= base <= same["interval"][1]
    assert same["regret_pct_of_deployed"] == pytest.approx(0.0, abs=0.05)
    written = tmp_path / "proposed.json"
    result, doc = _observe(kvcal, prom, "--fit", fit_path, "--propose-fit", written, "--deployed", str(base),
                           selector='pod=~"decode-slow|prefill-p"')
    slower = doc["proposal"]
    assert result.code == 1  # the slowed link is drift: exit 1, the proposal printed first
    assert slower["threshold"] > base and slower["pull_ms_per_token_delta"] == pytest.approx(4.5 * CALIBRATED_PULL)
    assert slower["regret_pct_of_deployed"] > 0
    proposed = load_fit(written)
    assert proposed.proposed_from.window_end == doc["window"]["end"] and proposed.proposed_from.prometheus == prom.url()
    assert proposed.mean_cost is None or proposed.mean_cost.per_length == []
    helm = kvcal("emit-config", written, "--format", "helm", "--values", VALUES)
    assert helm.code == 0, helm.err
    assert f"minCachedTokenDelta: {slower['threshold']}" in helm.out
    _, doc = _observe(kvcal, prom, "--fit", fit_path, "--propose", selector='pod=~"decode-a|prefill-slow"')
    assert doc["proposal"]["threshold"] < base and doc["proposal"]["prefill_ratio"] == pytest.approx(10.0)


def test_too_few_pulls_is_exit_3_with_the_numbers(kvcal, prom, fit_path):
    result, doc = _observe(kvcal, prom, "--fit", fit_path, "--propose", selector='pod="prefill-p"')
    assert result.code == 3 and "0 pulls in the window" in result.err and doc["proposal"]["threshold"] is None
    result, doc = _observe(kvcal, prom, "--fit", fit_path, "--propose", selector='pod="decode-a"', span=60.0)
    assert result.code == 3 and "16 pulls in the window" in result.err and "at least 20 pulls" in result.err
