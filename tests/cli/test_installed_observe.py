"""`kvcal observe`'s interface contract through the installed script (issue 43): keys, shapes, exit codes, deadlines."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fake_prometheus import FakePrometheus
from kvcal.observe.client import QUERY_DEADLINE_S

SCRIPT = Path(os.environ.get("KVCAL_CLI") or Path(sys.executable).with_name("kvcal"))
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
FIGURES = {"pull_share", "local_hit_share", "computed_share", "bytes_per_pulled_token", "ttft_p50_ms", "ttft_p90_ms",
           "ttft_p99_ms", "queue_p90", "requests_per_s", "pull_ms_per_token", "pull_bytes_per_s", "pull_failure_rate",
           "prefill_ms_per_token"}


@pytest.fixture(scope="module")
def prom():
    server = FakePrometheus()
    yield server
    server.close()


def _kvcal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), "observe", *args], capture_output=True, text=True, timeout=120)


def test_the_json_contract(prom):
    done = _kvcal("--prometheus", prom.url(), "--since", "15m", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["schema"] == "kvcal.observe/1" and set(out["window"]) == {"start", "end"}
    assert FIGURES <= set(out["fleet"])
    for figure in [out["fleet"][k] for k in FIGURES] + [p[k] for p in out["pods"] for k in FIGURES]:
        assert set(figure) == {"value", "samples", "missing"}
        assert (figure["value"] is None) == (figure["missing"] is not None)
    assert sorted(p["name"] for p in out["pods"]) == ["127.0.0.1:9103", "pod-a", "pod-b"]
    assert out["checks"] == [] and out["proposal"] is None


@pytest.mark.parametrize("mode, code", [("", 0), ("garbage", 2), ("notfound", 2), ("unavailable", 4)])
def test_exit_codes(prom, mode, code):
    done = _kvcal("--prometheus", prom.url(mode), "--since", "15m")
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == (0 if code == 0 else 1)


def test_an_unreachable_server_is_exit_4():
    done = _kvcal("--prometheus", "http://127.0.0.1:9", "--since", "15m")
    assert done.returncode == 4 and "unreachable" in done.stderr


def test_a_server_that_hangs_ends_at_the_query_deadline_with_exit_4(prom):
    started = time.monotonic()
    done = _kvcal("--prometheus", prom.url("hang"), "--since", "15m")
    assert done.returncode == 4 and f"within {QUERY_DEADLINE_S:g} s" in done.stderr
    assert time.monotonic() - started < QUERY_DEADLINE_S + 30  # a bound, not a timing: it would be 120 s without one


def test_drift_and_the_proposal_through_the_installed_script(tmp_path):
    """Issue 53's contract: checks named per pod (null fleet-wide), the proposal's keys, exit 1 before 3."""
    import fake_costs_fleet
    from kvcal.fit.io import write_fit

    server = FakePrometheus(fake_costs_fleet.cost_fleet)
    fit = write_fit(fake_costs_fleet.calibration_fit(), tmp_path / "fit.json")
    end = server.anchor + 1.0
    window = ["--start", f"{end - 900:.3f}", "--end", f"{end:.3f}", "--fit", str(fit), "--json"]
    try:
        slow = _kvcal("--prometheus", server.url(), *window, "--selector", 'pod=~"decode-slow|prefill-p"', "--propose",
                      "--deployed", "512", "--propose-fit", str(tmp_path / "proposed.json"))
        few = _kvcal("--prometheus", server.url(), *window, "--selector", 'pod="prefill-p"', "--propose")
    finally:
        server.close()
    assert slow.returncode == 1 and "pull_cost_drift (decode-slow)" in slow.stderr
    out = json.loads(slow.stdout)
    for check in out["checks"]:
        assert "pod" in check
    names = {(c["name"], c["pod"]) for c in out["checks"]}
    assert {("pull_cost_drift", "decode-slow"), ("pull_cost_drift", None), ("prefill_cost_drift", "prefill-p"),
            ("prefill_cost_drift", None), ("pull_failures", "decode-slow"), ("pull_failures", None)} <= names
    assert {"threshold", "interval", "deployed", "regret_pct_of_deployed"} <= set(out["proposal"])
    assert out["proposal"]["deployed"] == 512 and isinstance(out["proposal"]["threshold"], int)
    emitted = subprocess.run([str(SCRIPT), "emit-config", str(tmp_path / "proposed.json"), "--format", "json"],
                             capture_output=True, text=True, timeout=120)
    assert emitted.returncode == 0 and json.loads(emitted.stdout)["minCachedTokenDelta"] == out["proposal"]["threshold"]
    assert few.returncode == 3 and "too few pulls" in few.stderr and len(few.stderr.strip().splitlines()) == 1


NEEDS_SDK = pytest.mark.skipif(importlib.util.find_spec("grafana_foundation_sdk") is None,
                               reason="grafana-foundation-sdk needs Python 3.11 (there --dashboard is exit 2, saying so)")


@NEEDS_SDK
def test_the_dashboard_on_stdout_needs_no_server():
    """Issue 54's contract: one JSON object with panels (each with targets[].expr), a Prometheus datasource
    variable in templating, a title; exit 0; nothing queried."""
    done = _kvcal("--dashboard", "-")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    doc = json.loads(done.stdout)
    assert isinstance(doc, dict) and doc["title"]
    assert {p["title"] for p in doc["panels"]} == FIGURES
    assert all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in doc["panels"])
    assert any(v["type"] == "datasource" and v["query"] == "prometheus" for v in doc["templating"]["list"])


@NEEDS_SDK
def test_the_dashboard_beside_observes_json(prom, tmp_path):
    out = tmp_path / "dashboard.json"
    done = _kvcal("--prometheus", prom.url(), "--since", "15m", "--json", "--dashboard", str(out), "--selector",
                  'job=~".+"')
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema"] == "kvcal.observe/1"  # stdout: observe's document alone
    assert "wrote the Grafana dashboard (13 panels)" in done.stderr
    doc = json.loads(out.read_text())
    assert {v["name"]: v.get("query") for v in doc["templating"]["list"]}["selector"] == 'job=~".+"'


@NEEDS_SDK
@pytest.mark.parametrize("args, words", [
    (["--dashboard", "-", "--prometheus", "{prom}"], "both ask for standard output"),
    (["--dashboard", "-", "--prometheus", "{prom}", "--json"], "both ask for standard output"),
    (["--dashboard", "-", "--json"], "--json needs --prometheus"),
    (["--dashboard", "-", "--since", "15m"], "--since needs --prometheus"),
    (["--dashboard", "{tmp}/d.json", "--prometheus", "{prom}", "--since", "5x"], "is not a duration"),
    (["--since", "15m"], "--dashboard FILE"),
])
def test_bad_dashboard_combinations_are_exit_2_and_write_nothing(prom, tmp_path, args, words):
    done = _kvcal(*[a.replace("{prom}", prom.url()).replace("{tmp}", str(tmp_path)) for a in args])
    assert done.returncode == 2 and words in done.stderr and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []
