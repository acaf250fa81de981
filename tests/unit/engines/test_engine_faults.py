"""The fault suite: engines that misbehave end the probe or the run with one line naming them, never hang or exit 70.

Each fault runs against a loopback fake engine (tests/fake_engine.py) with short deadlines.
Every test failed on the code before engine replies were bounded: the streams and
bodies hung (a per-read timeout), the 100 MB page was read whole, and the bad replies
raised ValueError, TypeError, AttributeError or RecursionError (exit 70), or were kept
as a valid 2.6e295-byte pull. The faults met through the installed script (an attach-mode
sweep against the fakes) are tests/cli/test_installed_engine_faults.py.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from fake_engine import FakeEngine, SlowHead
from kvcal.engines.http import CAPS, EngineClient
from kvcal.engines.process import ServerProcess, wait_all_ready
from kvcal.engines.vllm import VllmPair
from kvcal.engines.vllm_launch import VllmSettings
from kvcal.errors import EngineError
from kvcal.probe_checks import checked_record
from kvcal.records import Leg

CONFIG = Path(__file__).parents[2] / "fixtures" / "hf_configs" / "llama-3.1-8b.json"


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
                                        ("negative-counter", "negative"), ("huge-counter", "impossible byte count")])
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
