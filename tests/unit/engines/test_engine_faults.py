"""The fault suite: engines that misbehave end the probe or the run with one line naming them, never hang or exit 70.

Each fault runs against a loopback fake engine (tests/fake_engine.py) with short deadlines.
Every test failed on the code before engine replies were bounded: the streams and
bodies hung (a per-read timeout), the 100 MB page was read whole, and the bad replies
raised ValueError, TypeError, AttributeError or RecursionError (exit 70), or were kept
as a valid 2.6e295-byte pull.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fake_engine import FakeEngine, SlowHead
from kvcal.engines.http import CAPS, EngineClient
from kvcal.engines.process import ServerProcess, wait_all_ready
from kvcal.engines.vllm import VllmPair
from kvcal.engines.vllm_launch import VllmSettings
from kvcal.errors import EngineError
from kvcal.probe_checks import checked_record
from kvcal.records import Leg, ProbeRecord

CONFIG = Path(__file__).parents[2] / "fixtures" / "hf_configs" / "llama-3.1-8b.json"
SCRIPT = Path(os.environ.get("KVCAL_CLI") or Path(sys.executable).with_name("kvcal"))


def _client(engine: FakeEngine | SlowHead, timeout_s: float = 1.0) -> EngineClient:
    return EngineClient(engine.url, name="consumer", model="fake", request_timeout_s=timeout_s)


@pytest.mark.parametrize("fault", ["endless-stream", "byte-a-second"])
def test_a_stream_that_does_not_end_meets_the_probe_deadline(fault):
    with FakeEngine("consumer", fault) as engine, pytest.raises(EngineError) as err:
        _client(engine).stream_completion([1, 2, 3])
    assert f"consumer at {engine.url}: POST /v1/completions ran past its 1 s deadline" in str(err.value)


def test_a_trickling_body_meets_the_probe_deadline():
    with FakeEngine("producer", "trickling-body") as engine, pytest.raises(EngineError, match="ran past its 1 s deadline"):
        _client(engine).complete([1, 2, 3])


def test_a_response_head_that_trickles_on_a_kept_alive_connection_meets_the_deadline():
    """The second request reuses the first one's connection, whose socket no connect event names.

    Before, the watchdog learnt that socket only once the head had arrived: each read of
    the head was bounded by httpx's per-read timeout alone, so a head sent a byte at a
    time held the request for as long as it trickled (20 s here, against a 1 s deadline).
    """
    with SlowHead(answered=1) as server:
        client = _client(server)
        try:
            client.complete([1, 2, 3])
            with pytest.raises(EngineError, match="POST /v1/completions ran past its 1 s deadline"):
                client.complete([1, 2, 3])
        finally:
            client.close()
        assert server.connections == 1 and not server.sent_all.is_set()


@pytest.mark.parametrize("every_s", [0.05, None], ids=["head-a-byte-at-a-time", "no-answer"])
def test_the_start_deadline_bounds_a_health_poll_that_never_completes(tmp_path, every_s):
    """Before, each poll was bounded per read (2 s): a /health head a byte at a time held start-up while it trickled."""
    with SlowHead(every_s=every_s) as health:
        server = ServerProcess("consumer", [sys.executable, "-c", "import time; time.sleep(60)"], env={},
                               log_path=tmp_path / "c.log", ready_url=f"{health.url}/health")
        with server, pytest.raises(EngineError, match="consumer not ready after 1 s"):
            wait_all_ready([server], timeout_s=1)
        assert health.connections >= 1 and not health.sent_all.is_set()


def test_a_huge_metrics_page_is_refused_at_its_cap():
    with FakeEngine("consumer", "huge-metrics") as engine, pytest.raises(EngineError) as err:
        _client(engine).metrics()
    assert "GET /metrics answered too much" in str(err.value) and f"{CAPS['metrics']:,}" in str(err.value)


@pytest.mark.parametrize("fault, sent", [("models-wrong-types", "max_model_len"), ("models-root-list", "root"),
                                         ("models-data-string", "data"), ("models-deep-json", "nested too deep")])
def test_a_bad_models_reply_is_the_engines_error(fault, sent):
    with FakeEngine("producer", fault) as engine, pytest.raises(EngineError) as err:
        EngineClient(engine.url, name="producer").served_model()
    message = str(err.value)
    assert message.startswith(f"producer at {engine.url}: not a vLLM OpenAI server") and sent in message
    assert "\n" not in message and len(message) < 600


def test_deep_json_in_a_completion_is_the_engines_error():
    with FakeEngine("producer", "completion-deep-json") as engine, pytest.raises(EngineError, match="nested too deep"):
        _client(engine).complete([1])


def test_an_unparseable_metrics_page_is_the_engines_error():
    with FakeEngine("consumer", "garbage-metrics") as engine, pytest.raises(EngineError, match="not Prometheus text"):
        _client(engine).metrics()


def _attached(producer: FakeEngine, consumer: FakeEngine, tmp_path: Path) -> VllmPair:
    pair = VllmPair(VllmSettings(producer_url=producer.url, consumer_url=consumer.url, settle_timeout_s=0.2,
                                 probe_timeout_s=2.0, startup_timeout_s=10.0, cache_dir=tmp_path))
    pair.start()
    return pair


@pytest.mark.parametrize("fault, why", [("nan-counter", "not a number"), ("inf-counter", "not a number"),
                                        ("huge-counter", "impossible byte count")])
def test_a_byte_counter_no_engine_can_count_fails_the_leg(tmp_path, fault, why):
    with FakeEngine("producer") as producer, FakeEngine("consumer", fault) as consumer:
        pair = _attached(producer, consumer, tmp_path)
        try:
            with pytest.raises(EngineError) as err:
                pair.measure(Leg.PULL, list(range(64)))
        finally:
            pair.stop()
    assert f"consumer at {consumer.url}: GET /metrics sent" in str(err.value) and why in str(err.value)
    assert "vllm:nixl_bytes_transferred_sum" in str(err.value)


def test_a_model_root_no_file_system_can_hold_is_read_as_a_hub_id(tmp_path):
    """Before, a 300-byte name in /v1/models' ``root`` raised OSError (File name too long) out of the pair, and the
    CLI printed the engine's text whole as if it were a file the user named (exit 2)."""
    root = tmp_path / ("a" * 300)
    with FakeEngine("producer", root=root) as producer, FakeEngine("consumer", root=root) as consumer:
        pair = _attached(producer, consumer, tmp_path)
        try:
            assert pair.kv_bytes_per_token is None  # no layout known, as for a hub id this host has not cached
        finally:
            pair.stop()


def test_a_byte_counter_label_too_long_to_record_makes_the_attempt_invalid(tmp_path):
    """Before, the record's bytes_metric (the counter's sample, labels and all) broke its 1,000-character bound and
    the attempt's fallback record kept it, so the second ProbeRecord raised ValidationError out of the sweep (exit 70)."""
    with FakeEngine("producer") as producer, FakeEngine("consumer", "long-label-counter") as consumer:
        pair = _attached(producer, consumer, tmp_path)
        try:
            measured = pair.measure(Leg.PULL, list(range(64)))
        finally:
            pair.stop()
    assert len(measured.bytes_metric) > 2000
    record = checked_record(probe_id="L64-pull-r0", plan_index=0, attempt=1, prefix_tokens=64, leg=Leg.PULL, rep=0,
                            ttft_ms=measured.ttft_ms, bytes_moved=measured.bytes_moved,
                            bytes_metric=measured.bytes_metric, metrics_delta=measured.metrics_delta, valid=True,
                            started_at="2026-12-06T05:00:00Z")
    assert not record.valid and record.bytes_metric is None and "implausible bytes_metric" in record.invalid_reason


def test_a_well_behaved_fake_pair_measures_and_names_its_proof(tmp_path):
    with FakeEngine("producer") as producer, FakeEngine("consumer") as consumer:
        pair = _attached(producer, consumer, tmp_path)
        try:
            result = pair.measure(Leg.PULL, list(range(64)))
        finally:
            pair.stop()
    assert result.bytes_moved == 64 * 64 and result.bytes_metric == "consumer/vllm:nixl_bytes_transferred_sum"


def _attach_setup(tmp_path: Path, probe_timeout_s: int) -> tuple[Path, Path]:
    """A model folder holding a config.json (the fakes' ``root``) and a campaign file with ``probe_timeout_s``."""
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(CONFIG, model / "config.json")
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(f"probe_timeout_s: {probe_timeout_s}\n")
    return model, campaign


def _attach_sweep(tmp_path: Path, campaign: Path, producer: FakeEngine, consumer: FakeEngine, *more: str) -> list[str]:
    """The installed script's attach-mode sweep against the two fakes, into ``tmp_path/runs/r``."""
    return [str(SCRIPT), "sweep", "--config", str(campaign), "--producer-url", producer.url, "--consumer-url",
            consumer.url, *more, "--output-dir", str(tmp_path / "runs"), "--name", "r"]


def _wait_for(condition, timeout_s: float) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout_s`` passes (False): a bound on a wait, not a timing check."""
    ends_at = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= ends_at:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
@pytest.mark.parametrize("fault", ["endless-stream", "byte-a-second"])
def test_attach_sweep_against_an_engine_that_never_finishes_ends_cleanly(tmp_path, fault):
    """The contract's run, with probe_timeout_s 1 (the contract's 5 takes 15 s a case: docs/engines.md)."""
    model, campaign = _attach_setup(tmp_path, probe_timeout_s=1)
    with FakeEngine("producer", root=model) as producer, FakeEngine("consumer", fault, root=model) as consumer:
        done = subprocess.run(_attach_sweep(tmp_path, campaign, producer, consumer, "--max-attempts", "2",
                                            "--prefix-lengths", "64,128"),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode not in (0, 70), done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and f"consumer at {consumer.url}" in last and "deadline" in last
    probes = tmp_path / "runs" / "r" / "probes.jsonl"
    records = [ProbeRecord.model_validate_json(line) for line in probes.read_text().splitlines()] if probes.exists() else []
    assert not [r for r in records if r.valid and (r.bytes_moved or 0) > 1e15]


STREAM_WAIT_S = 120  # kvcal's start-up and the pair's warm-up on a loaded machine; a hang fails here instead of never


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_stops_a_sweep_waiting_on_an_endless_stream(tmp_path, signum):
    """The probe deadline is 10 minutes: the run ends because of the signal, long before it."""
    model, campaign = _attach_setup(tmp_path, probe_timeout_s=600)
    stderr = tmp_path / "stderr.txt"
    with FakeEngine("producer", root=model) as producer, FakeEngine("consumer", "endless-stream", root=model) as consumer:
        with open(stderr, "w") as sink:
            # SIGINT at its default in kvcal whatever this process inherited: a shell without job control starts
            # background jobs with SIGINT ignored, and kvcal (as every program) leaves an ignored SIGINT ignored.
            proc = subprocess.Popen(_attach_sweep(tmp_path, campaign, producer, consumer, "--prefix-lengths", "64"),
                                    stdout=subprocess.DEVNULL, stderr=sink, stdin=subprocess.DEVNULL,
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            # The consumer's stream has begun: kvcal is blocked reading it (or it ended, which fails below).
            began = _wait_for(lambda: consumer.streams > 0 or proc.poll() is not None, STREAM_WAIT_S)
            if not began or proc.poll() is not None:
                pytest.fail(f"kvcal never began the consumer's stream within {STREAM_WAIT_S} s "
                            f"(exit {proc.poll()}): {stderr.read_text()[-2000:]}")
            proc.send_signal(signum)
            code = proc.wait(timeout=120)
        finally:
            proc.kill()
            proc.wait()
    assert code not in (0, 70) and code != -signum  # kvcal's own handler ended it, cleanly


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
@pytest.mark.parametrize("producer_kw, consumer_kw, named", [
    ({"block_size": 64}, {"block_size": 16}, "block size 64 against 16"),
    ({"cache_dtype": "fp8"}, {"cache_dtype": "auto"}, "KV cache dtype fp8 against auto"),
    ({"root": "other-model"}, {}, "model other-model against "),
])
def test_attached_engines_that_disagree_are_refused_naming_both(tmp_path, producer_kw, consumer_kw, named):
    """Before, a producer with block size 64 and a consumer with 16 ran to exit 0 (only the consumer's page was read)."""
    model, campaign = _attach_setup(tmp_path, probe_timeout_s=2)
    with FakeEngine("producer", **{"root": model, **producer_kw}) as producer, \
            FakeEngine("consumer", **{"root": model, **consumer_kw}) as consumer:
        done = subprocess.run(_attach_sweep(tmp_path, campaign, producer, consumer, "--prefix-lengths", "64"),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stderr
    assert producer.url in last and consumer.url in last and named in last
    assert not (tmp_path / "runs" / "r" / "probes.jsonl").exists()


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
def test_run_json_never_holds_a_block_size_that_contradicts_the_engines(tmp_path):
    from kvcal.run_manifest import RunManifest

    model, campaign = _attach_setup(tmp_path, probe_timeout_s=2)
    with FakeEngine("producer", root=model) as producer, FakeEngine("consumer", root=model) as consumer:
        given = subprocess.run(_attach_sweep(tmp_path, campaign, producer, consumer, "--block-size", "64"),
                               capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert given.returncode == 2 and "--block-size 64 contradicts the engines" in given.stderr, given.stderr
        left_out = subprocess.run(_attach_sweep(tmp_path, campaign, producer, consumer, "--prefix-lengths", "64",
                                                "--reps", "1"),
                                  capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert left_out.returncode not in (2, 70), left_out.stderr  # the fakes' 64 B/token may fail the byte gate (5)
    manifest = RunManifest.model_validate_json((tmp_path / "runs" / "r" / "run.json").read_text())
    assert manifest.settings.engine.block_size == manifest.setup.block_size == 16


def test_a_signal_whose_keyboard_interrupt_is_lost_still_ends_a_request_blocked_on_an_endless_stream():
    """Python drops a KeyboardInterrupt raised while a finalizer runs: the handler's STOP ends the read anyway.

    Here the handler's flag is set from another thread and no KeyboardInterrupt is raised at all (the lost case);
    before, nothing but the 600 s probe deadline ended the stream (issue 40, item 9)."""
    from kvcal.engines.deadline import STOP
    from kvcal.engines.process import sigterm_raises

    with FakeEngine("consumer", "endless-stream") as engine, sigterm_raises():
        setter = threading.Timer(0.5, STOP.set)
        setter.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                _client(engine, timeout_s=600.0).stream_completion([1, 2, 3])
            with pytest.raises(KeyboardInterrupt):  # and no later request starts
                _client(engine, timeout_s=600.0).metrics()
        finally:
            setter.cancel()
    assert not STOP.is_set()  # cleared once the run unwound
