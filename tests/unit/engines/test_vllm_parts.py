"""The vLLM pair's parts without vLLM: transports, metrics, HTTP timing, processes, launch plan, tiny model."""

from __future__ import annotations

import json
import socket
import sys
import textwrap
import time
import types

import httpx
import psutil
import pytest

from kvcal.engines.http import EngineClient
from kvcal.engines.metrics import delta, first_exposed, info_labels, parse_metrics, poll_until, total
from kvcal.engines.process import ServerProcess, check_port_free, free_ports, log_tail, wait_all_ready, wait_until_idle
from kvcal.engines.vllm import VllmPair, VllmSettings
from kvcal.engines.vllm_launch import _cpu_ranges
from kvcal.errors import EngineError, HardwareError, InputError
from kvcal.transports import available, get_transport
from kvcal.transports.base import Role, SideChannel

SIDE = SideChannel("10.0.0.5", 5600)
NEVER_READY = "http://127.0.0.1:9/health"  # the discard port: no server there answers

# --- transports --------------------------------------------------------------------


def test_transports_are_discovered_by_module():
    assert {"nixl-pd", "p2p-tier"} <= set(available())
    with pytest.raises(InputError, match="nixl-pd"):
        get_transport("carrier-pigeon")


def test_nixl_pd_renders_roles_devices_and_side_channels():
    nixl = get_transport("nixl-pd")
    producer = nixl.kv_transfer_config(Role.PRODUCER, "cpu", SIDE)
    consumer = nixl.kv_transfer_config(Role.CONSUMER, "cuda", SIDE)
    assert producer == {"kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_buffer_device": "cpu"}
    assert consumer["kv_role"] == "kv_consumer" and consumer["kv_buffer_device"] == "cuda"
    assert nixl.env(Role.PRODUCER, SIDE) == {
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.5",
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600",
    }
    assert nixl.hold_params("id")["do_remote_decode"] is True
    held = {"do_remote_prefill": True, "remote_block_ids": [[1, 2]], "remote_engine_id": "e", "remote_port": 5600}
    assert nixl.pull_params(held, "id", SIDE) == held
    with pytest.raises(EngineError, match="no KV blocks"):
        nixl.pull_params({"do_remote_prefill": True}, "id", SIDE)
    assert not nixl.needs_gpu


def test_a_huge_producer_reply_without_blocks_is_cut_in_the_error():
    """Before, the whole reply was repr'd into the message: 2 MB of it here."""
    held = {"remote_block_ids": [], "junk": "x" * 2_000_000, "lines": "a\nb"}
    with pytest.raises(EngineError) as err:
        get_transport("nixl-pd").pull_params(held, "id", SIDE)
    message = str(err.value)
    assert "no KV blocks to pull" in message and "'junk': 'xxx" in message
    assert len(message) < 600 and "\n" not in message


def test_p2p_tier_renders_the_documented_protocol():
    p2p = get_transport("p2p-tier", {"cpu_bytes_to_use": 1234})
    config = p2p.kv_transfer_config(Role.CONSUMER, "cuda", SIDE)
    extra = config["kv_connector_extra_config"]
    assert config["kv_connector"] == "OffloadingConnector" and config["kv_role"] == "kv_both"
    assert extra["spec_name"] == "TieringOffloadingSpec" and extra["cpu_bytes_to_use"] == 1234
    assert extra["secondary_tiers"] == [{"type": "p2p", "host": "10.0.0.5", "port": 5600}]
    assert extra["offload_prompt_only"] is False and extra["self_describing_kv_events"] is True
    assert p2p.env(Role.PRODUCER, SIDE) == {
        "VLLM_P2P_SIDE_CHANNEL_HOST": "10.0.0.5",
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.5",
    }
    assert p2p.shm_bytes() == 1234 and p2p.deployed_side_port == 7777
    assert p2p.hold_params("x") is None
    source = p2p.pull_params(None, "req-1", SIDE)["remote_kv_source"]
    assert source == {"kv_request_id": "req-1", "remote_host": "10.0.0.5", "remote_port": 5600}
    with pytest.raises(HardwareError, match="GPU"):
        p2p.check_host(has_gpu=False)
    p2p.check_host(has_gpu=True)


def test_p2p_tier_is_refused_without_gpu_before_anything_launches(tmp_path):
    pair = VllmPair(
        VllmSettings(transport="p2p-tier", device="cpu", cache_dir=tmp_path / "cache", run_dir=tmp_path / "run")
    )
    with pytest.raises(HardwareError):
        pair.start()
    assert pair._servers == []
    assert not (tmp_path / "run" / "logs").exists()
    assert not (tmp_path / "cache").exists()


# --- metrics -----------------------------------------------------------------------

CANNED = textwrap.dedent(
    """\
    # HELP vllm:prompt_tokens_by_source_total Prompt tokens by source.
    # TYPE vllm:prompt_tokens_by_source_total counter
    vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 100.0
    vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 2048.0
    # HELP vllm:prompt_tokens_by_source_created Prompt tokens by source.
    # TYPE vllm:prompt_tokens_by_source_created gauge
    vllm:prompt_tokens_by_source_created{engine="0",model_name="m",source="local_compute"} 1.7e9
    # HELP vllm:nixl_bytes_transferred Bytes per transfer.
    # TYPE vllm:nixl_bytes_transferred histogram
    vllm:nixl_bytes_transferred_bucket{engine="0",le="2048.0",model_name="m"} 0.0
    vllm:nixl_bytes_transferred_bucket{engine="0",le="+Inf",model_name="m"} 1.0
    vllm:nixl_bytes_transferred_count{engine="0",model_name="m"} 1.0
    vllm:nixl_bytes_transferred_sum{engine="0",model_name="m"} 4194304.0
    # HELP vllm:num_requests_running Running.
    # TYPE vllm:num_requests_running gauge
    vllm:num_requests_running{engine="0",model_name="m"} 3.0
    # HELP vllm:cache_config_info Cache config.
    # TYPE vllm:cache_config_info gauge
    vllm:cache_config_info{block_size="64",engine="0",enable_prefix_caching="True"} 1.0
    """
)


def test_parse_keeps_monotonic_samples_and_drops_engine_labels():
    snap = parse_metrics(CANNED)
    assert snap == {
        'vllm:prompt_tokens_by_source_total{source="local_compute"}': 100.0,
        'vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}': 2048.0,
        "vllm:nixl_bytes_transferred_count": 1.0,
        "vllm:nixl_bytes_transferred_sum": 4194304.0,
    }
    assert total(snap, "vllm:prompt_tokens_by_source_total") == 2148.0
    assert total(snap, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 2048.0
    assert (
        first_exposed(snap, ("vllm:renamed_bytes_sum", "vllm:nixl_bytes_transferred_sum"))
        == "vllm:nixl_bytes_transferred_sum"
    )
    assert first_exposed(snap, ("vllm:renamed_bytes_sum",)) is None
    assert info_labels(CANNED, "vllm:cache_config_info")["block_size"] == "64"
    # A sample without a TYPE line counts when its name ends like a counter's.
    assert parse_metrics("custom_requests_total 5\ncustom_inflight 2\n") == {"custom_requests_total": 5.0}


def test_delta_reports_changes_and_new_samples_only():
    before = parse_metrics(CANNED)
    after = dict(before)
    after["vllm:nixl_bytes_transferred_sum"] += 1024
    after["vllm:new_total"] = 2.0
    assert delta(before, after) == {"vllm:nixl_bytes_transferred_sum": 1024.0, "vllm:new_total": 2.0}
    assert delta(before, before) == {}


def test_poll_until_returns_at_once_when_settled_and_gives_up_at_timeout():
    reads = iter([{"n": 0.0}, {"n": 0.0}, {"n": 1.0}])
    snap, settled = poll_until(lambda: next(reads), lambda s: s["n"] >= 1, timeout_s=5, interval_s=0)
    assert settled and snap == {"n": 1.0}
    began = time.monotonic()
    snap, settled = poll_until(lambda: {"n": 0.0}, lambda s: s["n"] >= 1, timeout_s=0.2, interval_s=0.01)
    assert not settled and 0.2 <= time.monotonic() - began < 2


# --- HTTP timing -------------------------------------------------------------------


def _client(handler) -> EngineClient:
    return EngineClient("http://engine", name="consumer", model="m", transport=httpx.MockTransport(handler))


def _sse(*events: str) -> httpx.Response:
    body = "".join(f"data: {e}\n\n" for e in events).encode()
    return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})


def test_stream_times_the_first_token_event_and_sends_token_ids():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.update(json.loads(request.content))
        return _sse(json.dumps({"choices": [{"text": " yo", "finish_reason": "length"}]}), "[DONE]")

    timing = _client(handler).stream_completion([5, 6, 7], {"do_remote_prefill": True})
    assert seen == {
        "model": "m",
        "prompt": [5, 6, 7],
        "max_tokens": 1,
        "stream": True,
        "kv_transfer_params": {"do_remote_prefill": True},
    }
    assert timing.text == " yo" and 0 < timing.ttft_ms <= timing.total_ms


def test_stream_error_event_and_tokenless_stream_are_engine_errors():
    error = json.dumps({"error": {"message": "Internal server error", "code": 500}})
    with pytest.raises(EngineError, match="consumer at http://engine: completion failed: Internal server error"):
        _client(lambda r: _sse(error, "[DONE]")).stream_completion([1])
    with pytest.raises(EngineError, match="without a token"):
        _client(lambda r: _sse("[DONE]")).stream_completion([1])
    with pytest.raises(EngineError, match="HTTP 400"):
        _client(lambda r: httpx.Response(400, json={"error": "bad"})).stream_completion([1])


def test_completion_returns_the_engines_kv_transfer_params():
    params = {"do_remote_prefill": True, "remote_block_ids": [[1]]}
    done = _client(lambda r: httpx.Response(200, json={"choices": [{}], "kv_transfer_params": params})).complete([1])
    assert done.kv_transfer_params == params and done.elapsed_ms > 0


# --- processes ---------------------------------------------------------------------

SERVER = textwrap.dedent(
    """\
    import http.server, subprocess, sys, time
    port = int(sys.argv[1])
    # A grandchild in the same session, like vLLM's engine core and workers.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a):
            pass
    print("serving", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def test_server_tree_is_gone_after_stop(tmp_path):
    port = free_ports(1)[0]
    server = ServerProcess(
        "dummy",
        [sys.executable, "-c", SERVER, str(port)],
        env={},
        log_path=tmp_path / "dummy.log",
        ready_url=f"http://127.0.0.1:{port}/health",
        ports=[port],
    )
    with server:
        wait_all_ready([server], timeout_s=30)
        assert server.ready_after_s is not None
        tree = [psutil.Process(server.proc.pid), *psutil.Process(server.proc.pid).children(recursive=True)]
        assert len(tree) >= 2
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    server.stop()  # idempotent


def _script_server(tmp_path, name: str, script: str) -> ServerProcess:
    """A server that runs ``script`` and is never ready (its ready URL is the discard port, where nothing answers)."""
    return ServerProcess(
        name, [sys.executable, "-c", script], env={}, log_path=tmp_path / f"{name}.log", ready_url=NEVER_READY
    )


def _fails_fast(server: ServerProcess, timeout_s: float) -> str:
    """The readiness wait's one-line error for a server that cannot start: it comes well before ``timeout_s``."""
    began = time.monotonic()
    with server, pytest.raises(EngineError) as err:
        wait_all_ready([server], timeout_s=timeout_s)
    assert time.monotonic() - began < timeout_s / 4
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_dying_server_fails_fast_with_its_last_log_lines(tmp_path):
    script = "import sys; print('loading model', flush=True); print('ValueError: no such model', file=sys.stderr); sys.exit(3)"
    message = _fails_fast(_script_server(tmp_path, "producer", script), timeout_s=60)
    assert "producer exited with status 3" in message
    assert "loading model | ValueError: no such model" in message


def test_a_server_whose_listener_lost_its_port_fails_fast_though_it_lives_on(tmp_path):
    # vLLM's NIXL handshake listener dies in its thread on a taken port; the process stays up.
    script = (
        "import time; print('loading model', flush=True); time.sleep(1.5); "
        "print('zmq.error.ZMQError: Address already in use (addr=tcp://127.0.0.1:42641)', flush=True); "
        "time.sleep(120)"
    )
    message = _fails_fast(_script_server(tmp_path, "loop-producer", script), timeout_s=120)
    assert "loop-producer cannot start" in message and "Address already in use" in message


def test_free_ports_stay_below_the_ephemeral_range(tmp_path, monkeypatch):
    from kvcal.engines import process

    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("41000\t60999\n")
    monkeypatch.setattr(process, "_EPHEMERAL_RANGE_FILE", ranges)
    ports = free_ports(6)
    assert len(set(ports)) == 6
    assert all(process._FIXED_PORTS_FROM <= port < 41000 for port in ports)
    # Where the range cannot be read the OS picks, and the ports still differ.
    monkeypatch.setattr(process, "_EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    assert len(set(free_ports(4))) == 4


def test_a_server_that_never_answers_times_out(tmp_path):
    server = _script_server(tmp_path, "consumer", "import time; time.sleep(60)")
    with server, pytest.raises(EngineError, match="consumer not ready after 1 s"):
        wait_all_ready([server], timeout_s=1)


def test_a_taken_port_is_a_clear_error_before_launch(tmp_path):
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(EngineError, match=f"port {port} for the consumer is already in use"):
            check_port_free(port, "consumer")
        server = ServerProcess(
            "consumer",
            [sys.executable, "-c", "pass"],
            env={},
            log_path=tmp_path / "c.log",
            ready_url="http://127.0.0.1:9/",
            ports=[port],
        )
        with pytest.raises(EngineError, match="already in use"):
            server.start()
        assert server.proc is None


def test_idle_wait_outlasts_a_busy_tail_and_gives_up_on_a_spinner(tmp_path):
    # The tail's busy part is measured in its own CPU time and ends with a marker, so the
    # test holds on a loaded host: a starved tail is slower, not shorter (no wall-clock bound).
    done = tmp_path / "tail-done"
    tail = (
        f"import pathlib, time\nwhile time.process_time() < 0.4: pass\n"
        f"pathlib.Path({str(done)!r}).touch()\ntime.sleep(60)"
    )
    spinner = "while True: pass"
    with ServerProcess(
        "tail", [sys.executable, "-c", tail], env={}, log_path=tmp_path / "t.log", ready_url="http://127.0.0.1:9/"
    ) as busy:
        idle, _ = wait_until_idle([busy], max_cores=0.05, window_s=0.2, timeout_s=60)
        assert idle and done.exists()
    with ServerProcess(
        "spin", [sys.executable, "-c", spinner], env={}, log_path=tmp_path / "s.log", ready_url="http://127.0.0.1:9/"
    ) as spin:
        idle, waited = wait_until_idle([spin], max_cores=0.05, window_s=0.2, timeout_s=0.5)
        assert not idle and waited >= 0.5


def test_log_tail_is_one_truncated_line(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("\n".join(f"line {i} " + "x" * 200 for i in range(50)) + "\n")
    tail = log_tail(log)
    assert "\n" not in tail and len(tail) <= 603 and tail.endswith("x") and "line 49" in tail


# --- launch plan -------------------------------------------------------------------


def test_launch_plan_binds_cores_pins_the_hash_seed_and_keeps_caches_inside(tmp_path):
    pair = VllmPair(
        VllmSettings(device="cpu", producer_cpus="0", consumer_cpus="1", cache_dir=tmp_path, run_dir=tmp_path / "run")
    )
    producer, consumer = pair.dry_run_commands()
    assert "VLLM_CPU_OMP_THREADS_BIND=0 " in producer and "VLLM_CPU_OMP_THREADS_BIND=1 " in consumer
    assert "KVCAL_CPU_AFFINITY=0 " in producer and "KVCAL_CPU_AFFINITY=1 " in consumer  # the whole server tree
    for command in (producer, consumer):
        assert "PYTHONHASHSEED=0 " in command and "HF_HUB_OFFLINE=1" in command
        assert (
            f"VLLM_CACHE_ROOT={tmp_path}/vllm" in command and f"TORCHINDUCTOR_CACHE_DIR={tmp_path}/inductor" in command
        )
        assert "-m kvcal.engines.serve" in command and "--load-format dummy" in command and "--block-size 64" in command
    assert '"kv_role":"kv_producer"' in producer and '"kv_role":"kv_consumer"' in consumer
    ports = pair.plan.ports()
    assert len(set(ports.values())) == 4
    assert f"VLLM_NIXL_SIDE_CHANNEL_PORT={ports['producer_side']}" in producer
    assert f"--port {ports['consumer_http']}" in consumer


def test_attach_mode_launches_nothing_and_needs_both_urls():
    assert VllmPair(VllmSettings(producer_url="http://a:1", consumer_url="http://b:2")).dry_run_commands() == []
    with pytest.raises(InputError, match="both"):
        VllmPair(VllmSettings(producer_url="http://a:1"))


def test_p2p_tier_attach_needs_the_producers_side_channel():
    pair = VllmPair(VllmSettings(transport="p2p-tier", producer_url="http://a:1", consumer_url="http://b:2"))
    with pytest.raises(InputError, match="--producer-p2p-host"):
        pair.start()


def test_unknown_local_model_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not found"):
        VllmPair(VllmSettings(model=str(tmp_path / "missing")))


def test_attach_to_an_unreachable_engine_fails_quickly():
    port = free_ports(1)[0]
    pair = VllmPair(VllmSettings(producer_url=f"http://127.0.0.1:{port}", consumer_url=f"http://127.0.0.1:{port}"))
    began = time.monotonic()
    with pytest.raises(EngineError, match="unreachable"):
        pair.start()
    assert time.monotonic() - began < 5


def test_cpu_ranges():
    assert _cpu_ranges([0]) == "0"
    assert _cpu_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_tiny_model_folder_is_complete_and_reused(tmp_path):
    from tokenizers import Tokenizer

    from kvcal.estimate.hfconfig import model_profile_from_config
    from kvcal.estimate.profiles import kv_bytes_per_token
    from kvcal.engines.tinymodel import ensure_tiny_model

    folder = ensure_tiny_model(tmp_path)
    stamp = (folder / "config.json").stat().st_mtime_ns
    assert ensure_tiny_model(tmp_path) == folder and (folder / "config.json").stat().st_mtime_ns == stamp
    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_key_value_heads"], config["head_dim"]) == (
        256,
        4,
        2,
        64,
    )
    assert Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size() == config["vocab_size"]
    assert json.loads((folder / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert kv_bytes_per_token(model_profile_from_config(folder / "config.json")) == 2048


# --- the server entry --------------------------------------------------------------


def test_serve_answers_the_vllm_metadata_lookup():
    import importlib.metadata as md

    import kvcal.engines.serve  # noqa: F401  (installs the answer)

    try:
        md.version("vllm-cpu")
    except md.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed")
    assert md.version("vllm").endswith("+cpu")  # the suffix selects vLLM's CPU platform


def test_serve_parses_the_cpu_lists_it_confines_servers_to():
    from kvcal.engines.serve import parse_cpu_list

    assert parse_cpu_list("0") == {0}
    assert parse_cpu_list("0-2,5, 7-8") == {0, 1, 2, 5, 7, 8}


def test_a_confined_server_keeps_every_later_affinity_request_inside_its_cores(monkeypatch):
    # vLLM's NixlConnector on CPU moves its calling thread, the worker's compute thread, to the NUMA node's last core.
    import os

    from kvcal.engines.serve import confine_affinity

    calls = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, mask: calls.append((pid, set(mask))))
    confine_affinity({0})
    os.sched_setaffinity(0, [1])  # wholly outside: the role's cores instead
    os.sched_setaffinity(7, [0, 1])  # partly outside: the part inside
    confine_affinity({0, 2})  # confining again wraps the original call, not the wrapper
    os.sched_setaffinity(0, [1, 2, 3])
    assert calls == [(0, {0}), (0, {0}), (7, {0}), (0, {0, 2}), (0, {2})]


def test_serve_gives_nixls_progress_thread_a_poll_timeout(monkeypatch):
    from kvcal.engines.serve import install_nixl_progress_delay

    made = []
    bindings = types.SimpleNamespace(nixlAgent=lambda name, config: made.append((name, config.pthrDelay)))
    monkeypatch.setitem(sys.modules, "nixl._api", types.SimpleNamespace(nixlBind=bindings))
    install_nixl_progress_delay(1000)
    install_nixl_progress_delay(5)  # a second install keeps the first
    bindings.nixlAgent("a", types.SimpleNamespace(useProgThread=True, pthrDelay=0))
    bindings.nixlAgent("b", types.SimpleNamespace(useProgThread=True, pthrDelay=7))
    assert made == [("a", 1000), ("b", 7)]
