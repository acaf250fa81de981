"""`kvcal observe` against hostile Prometheus servers through the INSTALLED script (issue 55): text, numbers, bytes.

tests/hostile_prometheus.py makes each server: labels and error texts holding terminal
sequences, counters near 1e308 or negative or NaN, a ``le="-Inf"`` bucket, a queue reading
of +Inf, a value that is a word, bytes without an HTTP status line. Each run must end with its
documented exit code, one line on stderr when it fails, no traceback, no raw control
character on stdout or stderr, and no check judged ``ok`` on a value that is not a number.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fake_prometheus import FakePrometheus

SCRIPT = Path(os.environ.get("KVCAL_CLI") or Path(sys.executable).with_name("kvcal"))
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # newline and tab end lines/fields
FIT = Path(__file__).resolve().parents[2] / "results" / "baselines" / "cpu-tiny" / "fit.json"


@pytest.fixture(scope="module")
def prom():
    server = FakePrometheus()
    yield server
    server.close()


@pytest.fixture(scope="module")
def fleet_file(tmp_path_factory) -> Path:
    from kvcal.fleet.result import Figure, FleetResult, FleetRow

    fig = Figure(value=1.0, ci=[0.0, 1e6])
    row = FleetRow(policy="always-pull", threshold=None, goodput_rps=fig, completed_rps=fig, input_tokens_per_s=fig,
                   ttft_p50_ms=fig, ttft_p90_ms=fig, ttft_p99_ms=fig, ttft_mean_ms=fig, prefill_queue_p90=fig,
                   pull_share=fig, pulled_token_share=fig, tokens_moved_per_s=fig, busy_share=fig)
    result = FleetResult(kvcal_version="t", fit="f", workload="w", pods=3, rate=1.0, concurrency=None, duration_s=60,
                         seeds=1, resamples=0, block_size=64, best_threshold=None, best_threshold_ci=None,
                         best_rule="r", recommended_threshold=None, recommended_steps=[], recommended_reason=None,
                         idle_threshold=None, idle_threshold_reason=None, rows=[row])
    path = tmp_path_factory.mktemp("fleet") / "fleet.json"
    path.write_text(result.model_dump_json(by_alias=True))
    return path


CASES = {  # mode: (exit code, words in the one error line; None when it succeeds)
    "labels": (0, None), "nan_gauge": (0, None), "errtext": (2, "refused"), "near_max": (2, "counter"),
    "negative": (2, "request_success_total"), "nan_counter": (2, "counter"), "inf_gauge": (2, "gauge"),
    "neg_inf_bucket": (2, 'le="-Inf"'), "notanumber": (2, "must be a number"), "nohttp": (2, "no HTTP status line"),
}


@pytest.mark.parametrize("mode", sorted(CASES))
def test_a_hostile_server_gets_its_exit_code_and_nothing_raw_reaches_the_terminal(prom, fleet_file, mode):
    code, words = CASES[mode]
    for extra in ([], ["--json"]):
        done = subprocess.run([str(SCRIPT), "observe", "--prometheus", prom.url(mode), "--since", "15m", "--fit",
                               str(FIT), "--fleet", str(fleet_file), "--deployed", "1", *extra],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == code, done.stderr
        assert "Traceback" not in done.stderr and not RAW.search(done.stdout + done.stderr), done.stdout + done.stderr
        if words is not None:
            assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr
        elif extra:  # a deployed threshold of 1 is judged, on numbers only
            checks = json.loads(done.stdout)["checks"]
            assert {c["name"] for c in checks} >= {"ttft_p50_ms", "pull_share", "bytes_per_pulled_token"}
            assert all(c["observed"] is not None for c in checks if c["verdict"] == "ok")
