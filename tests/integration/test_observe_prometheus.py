"""kvcal observe against a real Prometheus (Debian's package, 2.42 here) scraping small exporters every second.

The exporters (prometheus_client, as vLLM's own loggers use it) emit vLLM 0.33's metric
names and labels for three pods: ``pod-a`` with the P2P tier, ``pod-b`` with NIXL P/D that
restarts mid-window (a new process: every counter begins again at zero), and one without
P2P and without a ``pod`` label (named by its instance); each counts its transfers' time,
failures and prefills as vLLM names them. The test knows every count it made, so the
figures must agree exactly; TTFT quantiles within the histogram's bucket.

The same server then serves the dashboard's check (issue 54): every panel's PromQL of
``kvcal observe --dashboard``, evaluated by this Prometheus over a window of steady traffic
(``$__rate_interval`` the window), against ``kvcal observe --json`` over that window, per pod
and fleet-wide, within 5 % (on a loaded 2-core host they agreed to rounding, 3.5e-16 relative at
most; the 5 % is room for a window's edges).
No engine runs; the two tests take some 45 s, mostly waiting for scrapes. scripts/prometheus_env.sh installs
the package.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from prometheus_server import PROMETHEUS, SKIP_REASON, free_port, prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.skipif(PROMETHEUS is None, reason=SKIP_REASON)]
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
KV_BYTES = 2048
WIRE_S, PREFILL_S = 1.5e-6, 40e-6  # a pulled token's transfer time, a computed token's prefill time


class Exporter:
    """One engine's /metrics with vLLM 0.33's names; ``restart()`` is a new process on the same port."""

    def __init__(self, port: int, *, tier: bool, nixl: bool, history: int = 0) -> None:
        self.port, self.tier, self.nixl = port, tier, nixl
        self._start()
        if history:  # a long-running pod: far from zero when the window opens
            self.serve(history, computed=history, local=0, pulled=0, ttft=[0.05])

    def _start(self) -> None:
        r = self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.prompt = Counter("vllm:prompt_tokens", "", labels, registry=r).labels("m", "0")
        by_source = Counter("vllm:prompt_tokens_by_source", "", labels + ["source"], registry=r)
        self.source = {s: by_source.labels("m", "0", s) for s in ("local_compute", "local_cache_hit",
                                                                   "external_kv_transfer")}
        cached = Counter("vllm:prompt_tokens_cached_by_source", "", labels + ["source"], registry=r)
        self.cached = {s: cached.labels("m", "0", s) for s in ("device", "host", "p2p", "disk", "external_unspecified")}
        if self.tier:
            reads = Counter("vllm:kv_offload_tiering_read_bytes", "", labels + ["tier"], registry=r)
            self.tier_read = reads.labels("m", "0", "1:p2p")
            reads.labels("m", "0", "0:primary")
            self.tier_time = Counter("vllm:kv_offload_tiering_read_time", "", labels + ["tier"],
                                     registry=r).labels("m", "0", "1:p2p")
            self.tier_chunks = Counter("vllm:kv_offload_tiering_chunk_hits", "", labels + ["tier"],
                                       registry=r).labels("m", "0", "1:p2p")
        if self.nixl:
            self.nixl_bytes = Histogram("vllm:nixl_bytes_transferred", "", labels, registry=r,
                                        buckets=(1e4, 1e6, 1e8)).labels("m", "0")
            self.nixl_time = Histogram("vllm:nixl_xfer_time_seconds", "", labels, registry=r,
                                       buckets=(0.001, 0.1, 1.0)).labels("m", "0")
            self.nixl_failed = Counter("vllm:nixl_num_failed_transfers", "", labels, registry=r).labels("m", "0")
        self.prefill_time = Histogram("vllm:request_prefill_time_seconds", "", labels, registry=r,
                                      buckets=(0.01, 1.0)).labels("m", "0")
        self.prefill_tokens = Histogram("vllm:request_prefill_kv_computed_tokens", "", labels, registry=r,
                                        buckets=(100, 10000)).labels("m", "0")
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "", labels, buckets=TTFT_BUCKETS,
                              registry=r).labels("m", "0")
        self.waiting = Gauge("vllm:num_requests_waiting", "", labels, registry=r).labels("m", "0")
        self.success = Counter("vllm:request_success", "", labels + ["finished_reason"], registry=r).labels(
            "m", "0", "length")
        self.server, self.thread = start_http_server(self.port, addr="127.0.0.1", registry=r)

    def restart(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve(self, requests: int, *, computed: int, local: int, pulled: int, ttft: list[float]) -> None:
        """``requests`` finished requests that together computed, hit and pulled these prompt tokens."""
        self.prompt.inc(computed + local + pulled)
        self.source["local_compute"].inc(computed)
        self.source["local_cache_hit"].inc(local)
        self.source["external_kv_transfer"].inc(pulled)
        self.cached["device"].inc(local)
        if self.tier:
            self.cached["p2p"].inc(pulled)
            self.tier_read.inc(pulled * KV_BYTES)
        if self.tier:
            self.tier_time.inc(pulled * WIRE_S)
            self.tier_chunks.inc(pulled // 50)
        if self.nixl and pulled:
            self.nixl_bytes.observe(pulled * KV_BYTES)
            self.nixl_time.observe(pulled * WIRE_S)
            self.nixl_failed.inc(1)  # one failed transfer beside each that moved KV
        computed_here = computed + (pulled if self.nixl else 0)  # vLLM counts a NIXL pull's tokens as computed
        self.prefill_time.observe(computed * PREFILL_S)
        self.prefill_tokens.observe(computed_here)
        for seconds in ttft:
            self.ttft.observe(seconds)
        self.success.inc(requests)


@pytest.fixture(scope="module")
def scraped_fleet(tmp_path_factory):
    """Three exporters and the Prometheus scraping them, shared by the module's tests (each reads its own window)."""
    tmp_path = tmp_path_factory.mktemp("prometheus")
    ports = [free_port() for _ in range(3)]
    pods = {"pod-a": Exporter(ports[0], tier=True, nixl=False, history=500),
            "pod-b": Exporter(ports[1], tier=False, nixl=True, history=1000),
            f"127.0.0.1:{ports[2]}": Exporter(ports[2], tier=False, nixl=False, history=500)}
    targets = [(f"127.0.0.1:{ports[0]}", "pod-a"), (f"127.0.0.1:{ports[1]}", "pod-b"), (f"127.0.0.1:{ports[2]}", None)]
    try:
        with prometheus(tmp_path, targets) as url:
            yield url, pods
    finally:
        for pod in pods.values():
            pod.close()


def test_observe_reads_exact_counts_through_a_restart_and_names_what_a_pod_lacks(scraped_fleet):
    url, pods = scraped_fleet
    a, b, c = pods.values()
    start = time.time()
    rng = np.random.default_rng(0)
    ttfts: dict = {name: [] for name in pods}
    counted = {name: dict(computed=0, local=0, pulled=0, requests=0) for name in pods}
    plan = dict(zip(pods, (dict(computed=600, local=250, pulled=150), dict(computed=700, local=100, pulled=200),
                           dict(computed=900, local=100, pulled=0))))

    def serve(name: str, requests: int, **counts) -> None:
        seen = list(rng.gamma(2.0, 0.05, requests))
        ttfts[name] += seen
        pods[name].serve(requests, ttft=seen, **counts)
        for key, value in {**counts, "requests": requests}.items():
            counted[name][key] += value

    def serve_all(times: int) -> None:
        for _ in range(times):
            for name, pod in pods.items():
                serve(name, 2, **plan[name])
                pod.waiting.set(int(rng.integers(0, 5)))
            time.sleep(0.3)

    serve_all(8)
    time.sleep(1.6)  # pod-b's last counts before the restart are scraped
    b.restart()
    # at once more than it had counted in all its life: only the counter's created time shows the restart
    serve("pod-b", 1, computed=30_000, local=0, pulled=0)
    serve_all(8)
    time.sleep(2.5)  # the last counts are scraped before the window closes
    end = time.time()
    done = subprocess.run([sys.executable, "-m", "kvcal.cli.app", "observe", "--prometheus", url, "--start",
                           f"{start:.3f}", "--end", f"{end:.3f}", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    got = {p["name"]: p for p in doc["pods"]}
    assert set(got) == set(pods)
    for name, counts in counted.items():
        total = counts["computed"] + counts["local"] + counts["pulled"]
        assert got[name]["pull_share"]["value"] == pytest.approx(counts["pulled"] / total, abs=1e-12), name
        assert got[name]["computed_share"]["value"] == pytest.approx(counts["computed"] / total, abs=1e-12), name
        assert got[name]["requests_per_s"]["value"] == pytest.approx(counts["requests"] / (end - start), rel=1e-3)
        assert got[name]["ttft_p50_ms"]["samples"] == counts["requests"], name
    assert got["pod-a"]["bytes_per_pulled_token"]["value"] == pytest.approx(KV_BYTES)
    assert got["pod-b"]["bytes_per_pulled_token"]["value"] == pytest.approx(KV_BYTES)  # through the restart
    assert got[list(pods)[2]]["bytes_per_pulled_token"]["missing"]
    # the production costs, through the restart (no --fit: TP 1, and a note says so)
    for name in ("pod-a", "pod-b"):
        assert got[name]["pull_ms_per_token"]["value"] == pytest.approx(WIRE_S * 1e3), name
        assert got[name]["pull_bytes_per_s"]["value"] == pytest.approx(KV_BYTES / WIRE_S), name
    assert got["pod-a"]["pull_failure_rate"]["value"] == 0.0  # no failure series: none failed
    transfers = 2 * 8  # pod-b pulls once in each of the 16 rounds (not in its lone request after the restart)
    assert got["pod-b"]["pull_failure_rate"]["value"] == pytest.approx(transfers / (2 * transfers))
    assert got["pod-b"]["pull_failure_rate"]["samples"] == 2 * transfers
    assert "P/D decode pod" in got["pod-b"]["prefill_ms_per_token"]["missing"]
    for name in ("pod-a", list(pods)[2]):
        assert got[name]["prefill_ms_per_token"]["value"] == pytest.approx(PREFILL_S * 1e3), name
    assert "does not pull" in got[list(pods)[2]]["pull_ms_per_token"]["missing"]
    assert any("TP 1 is assumed" in note for note in doc["notes"])
    fleet = doc["fleet"]
    every_token = sum(v for counts in counted.values() for k, v in counts.items() if k != "requests")
    assert fleet["pull_share"]["value"] == pytest.approx(sum(c["pulled"] for c in counted.values()) / every_token,
                                                        abs=1e-12)
    every = np.concatenate([ttfts[name] for name in pods]) * 1e3
    for key, q in (("ttft_p50_ms", 50), ("ttft_p90_ms", 90)):
        low, high = doc["ttft_buckets_ms"][key]
        truth = np.percentile(every, q)
        assert low <= truth <= high or abs(truth - fleet[key]["value"]) <= (high - low), (key, truth, low, high)


def _observe_json(url: str, start: float, end: float) -> dict:
    done = subprocess.run([sys.executable, "-m", "kvcal.cli.app", "observe", "--prometheus", url, "--start",
                           f"{start:.3f}", "--end", f"{end:.3f}", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _instant(url: str, expr: str, at: float) -> list[dict]:
    """The expression's value at ``at`` from the server's query API (POST: the panels' expressions are long)."""
    data = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"}).encode()
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=30) as answer:
            return json.load(answer)["data"]["result"]
    except urllib.error.HTTPError as err:
        pytest.fail(f"Prometheus refused a panel's expression: {err.read()[:300]!r}\n{expr[:300]}")


TTFTS = (0.003, 0.007, 0.012, 0.03, 0.05, 0.07, 0.09, 0.2, 0.3, 0.6)  # a fixed mix: every window holds alike
QUEUE_TOP = (2, 4, 4)  # each pod's queue most of the time (its p90), the pods' alike enough to pool (promql.py)


def _steady(pods: dict, stop: threading.Event) -> None:
    """Every 0.1 s, each pod serves two requests and sets its queue: at the top 5 times in 7, else 0 or 1."""
    plan = (dict(computed=600, local=250, pulled=150), dict(computed=700, local=100, pulled=200),
            dict(computed=900, local=100, pulled=0))
    i = 0
    while not stop.is_set():
        for pod, counts, top in zip(pods.values(), plan, QUEUE_TOP):
            pod.serve(2, ttft=[TTFTS[i % 10], TTFTS[(i + 3) % 10]], **counts)
            pod.waiting.set(top if i % 7 < 5 else i % 7 - 5)
        i += 1
        time.sleep(0.1)


def test_every_dashboard_panel_agrees_with_observe_within_5_percent(scraped_fleet):
    from kvcal.observe.catalog import every_figure
    from kvcal.observe.promql import POD, queries

    url, pods = scraped_fleet
    stop = threading.Event()
    server = threading.Thread(target=_steady, args=(pods, stop), daemon=True)
    server.start()
    try:
        time.sleep(3.0)  # every counter well above zero: rate's extrapolation is not cut at a zero point
        window = 12  # whole seconds: a 1 s scrape interval puts observe's first and last counts a window apart
        start = float(int(time.time()))
        end = start + window
        time.sleep(end - time.time() + 2.5)  # the window's last counts are scraped
    finally:
        stop.set()
        server.join(timeout=10)
    doc = _observe_json(url, start, end)
    names = {p["name"] for p in doc["pods"]}
    compared = 0
    for figure_name, figure in every_figure().items():
        found = queries(figure)
        values = {}
        for which, expr in (("pods", found.per_pod), ("fleet", found.fleet)):
            expr = (expr.replace("$__rate_interval", f"{window}s").replace("$__interval", "1s")
                    .replace("$selector", "").replace("$tp", "1"))
            values[which] = {r["metric"].get(POD, "fleet"): float(r["value"][1]) for r in _instant(url, expr, end)}
        assert set(values["pods"]) <= names, figure_name
        for name, figures in [(p["name"], p) for p in doc["pods"]] + [("fleet", doc["fleet"])]:
            observed = figures[figure_name]["value"]
            panel = values["fleet" if name == "fleet" else "pods"].get(name)
            if observed is None:  # missing in observe: no value on the panel either
                assert panel is None, (figure_name, name, panel, figures[figure_name]["missing"])
                continue
            assert panel == pytest.approx(observed, rel=0.05, abs=1e-12), (figure_name, name)
            compared += 1
    assert compared >= 40
