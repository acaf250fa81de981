"""The loaded-run import against what inference-perf 0.7.0 really writes.

The fixtures in tests/fixtures/llmd/loaded/ are real inference-perf 0.7.0 output, written
against tests/openai_standin.py (``python tests/openai_standin.py INFERENCE_PERF``
regenerates them); the last test runs inference-perf itself when
``scripts/inference_perf_env.sh`` has made its venv.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kvcal.errors import InputError
from kvcal.fit import load_fit
from kvcal.fit.observational import ONE_TOKEN, join, parse_epp_log, parse_per_request
from kvcal.settings.sweep import SweepConfig
from kvcal.sweep.runner import run_sweep
from openai_standin import run_inference_perf

REPO = Path(__file__).resolve().parents[3]
LOADED = REPO / "tests" / "fixtures" / "llmd" / "loaded"
PER_REQUEST = "per_request_lifecycle_metrics.json"


def records(folder: str) -> list[dict]:
    return json.loads((LOADED / folder / PER_REQUEST).read_text())


def inference_perf_ttfts(entries: list[dict]) -> list[float]:
    """The TTFTs inference-perf gives (reportgen/base.py): successful, streamed, more than one token time."""
    out = []
    for entry in entries:
        times = ((entry["info"] or {}).get("response_metrics") or {}).get("output_token_times")
        if entry["error"] is None and times is not None and len(times) > 1:
            out.append(times[0] - entry["start_time"])
    return out


@pytest.fixture(scope="module")
def idle_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("idle")
    config = SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 1024, 4096], reps=3, seed=3,
                                             output_dir=folder, name="idle", sim={"recompute_per_token2_ns": 0.0}))
    return run_sweep(config).run_dir


@pytest.mark.parametrize("folder", ["completion", "chat"])
def test_the_import_takes_exactly_the_requests_inference_perf_gives_a_ttft(folder):
    read = parse_per_request(LOADED / folder / PER_REQUEST)
    ttfts = [r.ttft_ms / 1e3 for r in read.requests]
    assert ttfts == pytest.approx(inference_perf_ttfts(records(folder)), abs=1e-12)
    # ... and they summarise as inference-perf's own report does
    own = json.loads((LOADED / folder / "summary_lifecycle_metrics.json").read_text())["successes"]["latency"]
    ttft = own["time_to_first_token"]
    assert (statistics.fmean(ttfts), min(ttfts), max(ttfts), statistics.median(ttfts)) == pytest.approx(
        (ttft["mean"], ttft["min"], ttft["max"], ttft["median"]), abs=1e-12)
    assert read.skipped == {ONE_TOKEN: 2, "an error": 1}  # the stand-in's one-token answers and its HTTP 500


def test_chat_ids_join_the_router_log():
    read = parse_per_request(LOADED / "chat" / PER_REQUEST)
    first_chunk = json.loads(records("chat")[0]["info"]["response_metrics"]["response_chunks"][0])
    assert first_chunk["id"].startswith("chatcmpl-") and read.requests[0].request_id == first_chunk["id"][9:]
    _, stats = join(read.requests, parse_epp_log(LOADED / "chat" / "epp.log"), sum(read.skipped.values()))
    assert (stats.n_joined, stats.n_unmatched, stats.n_skipped) == (13, 0, 3)


def test_inference_perfs_computed_ttft_is_taken_and_a_one_token_answer_has_none():
    entries = records("chat-computed")
    read = parse_per_request(LOADED / "chat-computed" / PER_REQUEST)
    given = [e["computed_metrics"]["time_to_first_token"] for e in entries
             if e.get("computed_metrics") and e["computed_metrics"]["time_to_first_token"] is not None]
    assert [r.ttft_ms / 1e3 for r in read.requests] == pytest.approx(given, abs=1e-12)
    one_token = [e for e in entries if e["error"] is None and len(e["info"]["response_metrics"]["output_token_times"]) == 1]
    assert one_token and one_token[0]["computed_metrics"]["time_to_first_token"] is None
    assert read.skipped[ONE_TOKEN] == len(one_token)


def test_input_tokens_come_from_request_metrics_and_the_deprecated_mirror_is_a_fallback(tmp_path):
    entries = records("completion")
    expected = [e["info"]["request_metrics"]["text"]["input_tokens"] for e in entries
                if e["error"] is None and len(e["info"]["response_metrics"]["output_token_times"]) > 1]
    for entry in entries:
        entry["info"]["input_tokens"] = 1  # the deprecated mirror says otherwise: not read
    (tmp_path / "current.json").write_text(json.dumps(entries))
    assert [r.input_tokens for r in parse_per_request(tmp_path / "current.json").requests] == expected
    for entry in entries:
        entry["info"]["input_tokens"] = entry["info"].pop("request_metrics")["text"]["input_tokens"] + 5
    (tmp_path / "old.json").write_text(json.dumps(entries))
    assert [r.input_tokens for r in parse_per_request(tmp_path / "old.json").requests] == [n + 5 for n in expected]


def test_records_without_chunks_are_skipped_and_counted_not_fatal(tmp_path):
    entries = records("completion")
    for entry in entries[:3]:
        if entry["info"].get("response_metrics"):
            entry["info"]["response_metrics"].pop("response_chunks")  # what response_chunks: false writes
    path = tmp_path / PER_REQUEST
    path.write_text(json.dumps(entries))
    read = parse_per_request(path)
    assert len(read.requests) == 10 and read.skipped["no response chunks (written with response_chunks off)"] == 3


@pytest.mark.parametrize("folder, says", [
    ("no-chunks", "4 with no response chunks"),  # inference-perf run with per_request_fields.response_chunks: false
    ("unary", "4 with no token times (not streamed)"),  # inference-perf run with api.streaming: false
])
def test_a_file_with_no_usable_request_is_one_line_saying_how_to_rerun(folder, says, idle_run, kvcal):
    with pytest.raises(InputError, match=re.escape(says)):
        parse_per_request(LOADED / folder / PER_REQUEST)
    res = kvcal("fit", "--per-request", LOADED / folder / PER_REQUEST, "--epp-log", LOADED / folder / "epp.log",
                "--idle", idle_run)
    assert res.code == 2 and "Traceback" not in res.err
    line = res.err.strip()
    assert "\n" not in line and says in line
    assert "api.streaming: true" in line and "per_request_fields.response_chunks: true" in line


@pytest.mark.parametrize("folder", ["completion", "chat"])
def test_cli_fit_counts_every_request_inference_perf_times(folder, idle_run, kvcal, tmp_path):
    out = tmp_path / "fit.json"
    res = kvcal("fit", "--per-request", LOADED / folder / PER_REQUEST, "--epp-log", LOADED / folder / "epp.log",
                "--idle", idle_run, "--resamples", "100", "-o", out)
    assert res.code == 0, res.err
    cm = load_fit(out).cost_model
    assert cm.n_requests == len(inference_perf_ttfts(records(folder))) == 13
    assert any("3 of 16 requests were left out" in w and "no TTFT" in w for w in cm.warnings)


@pytest.mark.parametrize("change, says", [
    (lambda e: e["info"]["request_metrics"]["text"].update(input_tokens=-3), "greater than or equal to 0"),
    (lambda e: e["info"]["request_metrics"]["text"].update(input_tokens=True), "valid integer"),
    (lambda e: e.pop("start_time"), "start_time: Field required"),
    (lambda e: e["info"]["request_metrics"]["text"].update(input_tokens=10**400), "less than or equal to"),
    (lambda e: e.update(start_time=float("inf")), "finite number"),
])
def test_a_malformed_record_is_a_one_line_error_naming_its_field(change, says, tmp_path, idle_run, kvcal):
    entries = records("completion")
    change(entries[0])
    path = tmp_path / PER_REQUEST
    path.write_text(json.dumps(entries))
    res = kvcal("fit", "--per-request", path, "--epp-log", LOADED / "completion" / "epp.log", "--idle", idle_run)
    assert res.code == 2 and says in res.err and "request 0" in res.err and len(res.err.strip().splitlines()) == 1


def inference_perf_executable() -> Path | None:
    named = os.environ.get("KVCAL_INFERENCE_PERF")
    if named:
        return Path(named)
    made = subprocess.run(["bash", str(REPO / "scripts" / "inference_perf_env.sh"), "--cached-only"],
                          capture_output=True, text=True)
    return Path(made.stdout.strip()) if made.returncode == 0 and made.stdout.strip() else None


@pytest.mark.inference_perf
def test_real_inference_perf_output_joins_every_timed_request(idle_run, kvcal, tmp_path):
    executable = inference_perf_executable()
    if executable is None or not executable.exists():
        pytest.skip("inference-perf 0.7.0 is not installed: run `bash scripts/inference_perf_env.sh` "
                    "(Python >= 3.12 and a package index; scripts/test.sh does) or set KVCAL_INFERENCE_PERF")
    with ThreadPoolExecutor(2) as pool:  # both APIs at once: most of a run is inference-perf starting up
        runs = dict(zip(("completion", "chat"), pool.map(
            lambda api: run_inference_perf(executable, tmp_path / api, api=api, seed=11, computed_metrics=True,
                                           requests_per_s=8.0), ("completion", "chat"))))
    for api, (per_request, epp, _) in runs.items():
        entries = json.loads(per_request.read_text())
        timed = [e for e in entries if (e.get("computed_metrics") or {}).get("time_to_first_token") is not None]
        out = tmp_path / f"{api}.fit.json"
        res = kvcal("fit", "--per-request", per_request, "--epp-log", epp, "--idle", idle_run, "--resamples", "100",
                    "-o", out)
        assert res.code == 0, (api, res.err)
        assert load_fit(out).cost_model.n_requests == len(timed) > 0, api


def test_numbers_and_nesting_no_reader_could_hold_are_input_errors(tmp_path, idle_run, kvcal):
    """Issue 33: a 400-digit queue in the router log and JSON nested 100,000 deep are exit 2, never 70."""
    lines = (LOADED / "completion" / "epp.log").read_text().splitlines()
    decision = next(i for i, line in enumerate(lines) if "p2p decision" in line)
    lines[decision] = re.sub(r'"sourceWaiting": \d+', '"sourceWaiting": ' + "9" * 400, lines[decision])
    epp = tmp_path / "epp.log"
    epp.write_text("\n".join(lines) + "\n")
    res = kvcal("fit", "--per-request", LOADED / "completion" / PER_REQUEST, "--epp-log", epp, "--idle", idle_run)
    assert res.code == 2 and "sourceWaiting" in res.err and len(res.err.strip().splitlines()) == 1
    deep = tmp_path / PER_REQUEST
    deep.write_text("[" * 100_000 + "]" * 100_000)
    res = kvcal("fit", "--per-request", deep, "--epp-log", LOADED / "completion" / "epp.log", "--idle", idle_run)
    assert res.code == 2 and "nested too deep" in res.err
