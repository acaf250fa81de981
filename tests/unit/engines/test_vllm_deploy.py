"""The vLLM pair against real deployments: GPU split, /dev/shm, data-parallel seeding, the p2p proof counters.

No GPU and no vLLM here: the GPU host is faked at the launch plan's inventory, the
engines by httpx mock transports that keep Prometheus counters like vLLM's.
"""

from __future__ import annotations

import json
from collections import namedtuple

import httpx
import pytest

from kvcal.engines import vllm_launch
from kvcal.engines.http import EngineClient
from kvcal.engines.metrics import parse_metrics
from kvcal.transports import get_transport
from kvcal.transports.base import MetricRef, Role
from kvcal.engines.vllm import VllmPair, VllmSettings, pair_from_config
from kvcal.engines.vllm_measure import DP_RANK_HEADER, proving_ref
from kvcal.errors import HardwareError, InputError
from kvcal.records.run import Leg


def gpu_plan(tmp_path, monkeypatch, devices: int, visible: str | None = None, **kw) -> VllmPair:
    monkeypatch.setattr(vllm_launch, "gpu_inventory", lambda: {"gpu": "H100", "devices": devices})
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return VllmPair(VllmSettings(model="org/m", cache_dir=tmp_path, run_dir=tmp_path / "run", **kw))


@pytest.mark.parametrize("devices, visible, producer, consumer", [
    (2, None, "0", "1"), (4, None, "0,1", "2,3"), (3, None, "0", "1"), (8, "4,5", "4", "5"),
])
def test_launch_splits_the_visible_gpus_between_the_roles(tmp_path, monkeypatch, devices, visible, producer, consumer):
    pair = gpu_plan(tmp_path, monkeypatch, devices, visible)
    assert pair.plan.env(Role.PRODUCER)["CUDA_VISIBLE_DEVICES"] == producer
    assert pair.plan.env(Role.CONSUMER)["CUDA_VISIBLE_DEVICES"] == consumer
    assert set(producer.split(",")).isdisjoint(consumer.split(","))


def test_explicit_gpus_win(tmp_path, monkeypatch):
    pair = gpu_plan(tmp_path, monkeypatch, 2, producer_gpus="1", consumer_gpus="0")
    assert pair.plan.gpu_assignment() == {Role.PRODUCER: "1", Role.CONSUMER: "0"}


def test_one_gpu_is_refused_in_one_line_unless_shared(tmp_path, monkeypatch):
    pair = gpu_plan(tmp_path, monkeypatch, 1)
    with pytest.raises(InputError, match="--share-gpu") as err:
        pair.dry_run_commands()
    assert "\n" not in str(err.value)
    shared = gpu_plan(tmp_path, monkeypatch, 1, share_gpu=(0.45, 0.4))
    producer, consumer = shared.dry_run_commands()
    assert "CUDA_VISIBLE_DEVICES=0 " in producer and "CUDA_VISIBLE_DEVICES=0 " in consumer
    assert "--gpu-memory-utilization 0.45" in producer and "--gpu-memory-utilization 0.4" in consumer


@pytest.mark.parametrize("share", [(0.6, 0.5), (0.0, 0.5), (1.0, 0.1)])
def test_bad_memory_fractions_are_refused(tmp_path, monkeypatch, share):
    with pytest.raises(InputError, match="--share-gpu"):
        gpu_plan(tmp_path, monkeypatch, 1, share_gpu=share).plan.gpu_assignment()


def test_cpu_hosts_get_no_gpu_split(tmp_path):
    pair = VllmPair(VllmSettings(device="cpu", cache_dir=tmp_path, run_dir=tmp_path / "run"))
    assert pair.plan.gpu_assignment() is None and "CUDA_VISIBLE_DEVICES" not in pair.plan.env(Role.PRODUCER)


Usage = namedtuple("Usage", "total used free")


def test_dev_shm_is_checked_against_both_tiers(monkeypatch):
    tier = get_transport("p2p-tier", {"cpu_bytes_to_use": 4 * 2**30})
    monkeypatch.setattr(vllm_launch.shutil, "disk_usage", lambda p: Usage(0, 0, 6 * 2**30))
    with pytest.raises(HardwareError, match=r"/dev/shm has 6.0 GiB free .* 2 x 4 GiB .*--shm-size=9g.*--cpu-bytes-to-use") as err:
        vllm_launch.check_shm(tier)
    assert "\n" not in str(err.value)
    monkeypatch.setattr(vllm_launch.shutil, "disk_usage", lambda p: Usage(0, 0, 8 * 2**30))
    vllm_launch.check_shm(tier)  # exactly enough
    vllm_launch.check_shm(get_transport("nixl-pd"))  # maps nothing there


def test_missing_dev_shm_is_a_clear_error(monkeypatch):
    def gone(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(vllm_launch.shutil, "disk_usage", gone)
    with pytest.raises(HardwareError, match="missing"):
        vllm_launch.check_shm(get_transport("p2p-tier"))


def test_sweep_settings_reach_the_pair(tmp_path):
    from kvcal.settings.sweep import SweepConfig

    config = SweepConfig(transport="p2p-tier", producer_url="http://p:8200", consumer_url="http://c:8200",
                         producer_p2p_host="10.0.0.5", dp_ranks=4, cpu_bytes_to_use=2**30)
    run = namedtuple("Run", "path")(tmp_path)
    pair = pair_from_config(config, run)
    assert pair.settings.producer_p2p_port == 7777 and pair.settings.dp_ranks == 4
    assert pair.transport.shm_bytes() == 2**30
    assert SweepConfig().engine.producer_p2p_port == 7777


def test_dp_ranks_is_for_attach_mode(tmp_path):
    with pytest.raises(InputError, match="attach"):
        VllmPair(VllmSettings(dp_ranks=2, cache_dir=tmp_path))


# --- a fake p2p-tier pair ------------------------------------------------------------


class FakeEngine:
    """Counts requests and the p2p tier's counters the way vLLM 0.33 exposes them."""

    def __init__(self, role: str, new_names: bool = True) -> None:
        self.role = role
        self.new_names = new_names
        self.done = 0
        self.stored = 0
        self.read_p2p = 0
        self.tokens_p2p = 0
        self.requests: list[tuple[dict, dict]] = []
        self.local_hit = False
        self.loaded_local = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=self.page())
        body = json.loads(request.content)
        self.requests.append((dict(request.headers), body))
        self.done += 1
        n = len(body["prompt"])
        if self.role == "producer":
            self.stored += n * 100
        elif "kv_transfer_params" in body and self.local_hit:
            self.loaded_local += n * 100
        elif "kv_transfer_params" in body:
            self.read_p2p += n * 100
            self.tokens_p2p += n
        if body.get("stream"):
            event = json.dumps({"choices": [{"text": "x"}]})
            return httpx.Response(200, content=f"data: {event}\n\ndata: [DONE]\n\n".encode())
        return httpx.Response(200, json={"choices": [{"text": "x"}], "kv_transfer_params": None})

    def page(self) -> str:
        lines = ["# TYPE vllm:request_success_total counter", f'vllm:request_success_total{{engine="0"}} {self.done}',
                 "# TYPE vllm:kv_offload_store_bytes_total counter", f"vllm:kv_offload_store_bytes_total {self.stored}"]
        if self.new_names:
            lines += ["# TYPE vllm:kv_offload_tiering_read_bytes_total counter",
                      f'vllm:kv_offload_tiering_read_bytes_total{{tier="0:primary"}} 777',
                      f'vllm:kv_offload_tiering_read_bytes_total{{tier="1:p2p"}} {self.read_p2p}',
                      "# TYPE vllm:kv_offload_load_bytes_total counter",
                      f"vllm:kv_offload_load_bytes_total {self.read_p2p + self.loaded_local}",
                      "# TYPE vllm:prompt_tokens_cached_by_source_total counter",
                      f'vllm:prompt_tokens_cached_by_source_total{{source="p2p"}} {self.tokens_p2p}']
        else:
            lines += ["# TYPE vllm:kv_offload_total_bytes_total counter",
                      f'vllm:kv_offload_total_bytes_total{{transfer_type="CPU_to_GPU"}} {self.read_p2p}']
        return "\n".join(lines) + "\n"


def fake_pair(dp_ranks: int, new_names: bool = True) -> tuple[VllmPair, FakeEngine, FakeEngine]:
    pair = VllmPair(VllmSettings(transport="p2p-tier", producer_url="http://p:8200", consumer_url="http://c:8200",
                                 producer_p2p_host="10.0.0.5", dp_ranks=dp_ranks, settle_timeout_s=1.0))
    producer, consumer = FakeEngine("producer", new_names), FakeEngine("consumer", new_names)
    for role, engine in ((Role.PRODUCER, producer), (Role.CONSUMER, consumer)):
        pair._clients[role] = EngineClient(f"http://{role.value}", name=role.value, model="m",
                                           transport=httpx.MockTransport(engine.handler))
    return pair, producer, consumer


def test_every_dp_rank_is_seeded_and_the_pull_asks_rank_0_on_7777():
    pair, producer, consumer = fake_pair(dp_ranks=3)
    result = pair.measure(Leg.PULL, list(range(256)))
    ranks = [headers.get(DP_RANK_HEADER.lower()) for headers, _ in producer.requests]
    assert ranks == ["0", "1", "2"]
    (_, pull), = consumer.requests
    assert pull["kv_transfer_params"]["remote_kv_source"]["remote_host"] == "10.0.0.5"
    assert pull["kv_transfer_params"]["remote_kv_source"]["remote_port"] == 7777
    assert result.bytes_moved == 25_600  # the p2p tier's reads only, not the cpu tier's 777
    assert result.metrics_delta['consumer/vllm:prompt_tokens_cached_by_source_total{source="p2p"}'] == 256


def test_one_rank_sends_no_rank_header():
    pair, producer, _ = fake_pair(dp_ranks=1)
    pair.measure(Leg.PULL, list(range(64)))
    assert [DP_RANK_HEADER.lower() in headers for headers, _ in producer.requests] == [False]


def test_older_counters_are_the_fallback():
    pair, _, _ = fake_pair(dp_ranks=1, new_names=False)
    assert pair.measure(Leg.PULL, list(range(64))).bytes_moved == 6_400
    assert pair.measure(Leg.RECOMPUTE, list(range(64, 128))).bytes_moved == 0


def test_an_engine_without_tier_metrics_lets_the_load_counter_stand_in():
    snap = parse_metrics('# TYPE vllm:kv_offload_load_bytes_total counter\nvllm:kv_offload_load_bytes_total 9\n')
    (metric,) = get_transport("p2p-tier").bytes_metrics
    assert proving_ref(snap, metric) == MetricRef("vllm:kv_offload_load_bytes_total")


def test_an_engine_with_tier_metrics_proves_pulls_by_the_p2p_tier_alone():
    # vLLM 0.33 creates a tier's labelled counter at its first read: before the P2P tier's
    # first read only its family (and other tiers) are on the page; a local CPU-tier hit
    # moves the load counter and must not pass as a pull.
    (metric,) = get_transport("p2p-tier").bytes_metrics
    declared_only = parse_metrics('# TYPE vllm:kv_offload_tiering_read_bytes_total counter\n'
                                  '# TYPE vllm:kv_offload_load_bytes_total counter\nvllm:kv_offload_load_bytes_total 9\n')
    other_tier = parse_metrics('# TYPE vllm:kv_offload_tiering_write_bytes_total counter\n'
                               'vllm:kv_offload_tiering_write_bytes_total{tier="1:p2p"} 4\n'
                               '# TYPE vllm:kv_offload_load_bytes_total counter\nvllm:kv_offload_load_bytes_total 9\n')
    second_position = parse_metrics('# TYPE vllm:kv_offload_tiering_read_bytes_total counter\n'
                                    'vllm:kv_offload_tiering_read_bytes_total{tier="2:p2p"} 5\n')
    for snap in (declared_only, other_tier, second_position):
        assert proving_ref(snap, metric).name == "vllm:kv_offload_tiering_read_bytes_total"
    assert pair_measure_total(second_position) == 5


def pair_measure_total(snap) -> float:
    from kvcal.engines.metrics import total
    return total(snap, "vllm:kv_offload_tiering_read_bytes_total", tier="*:p2p")


def test_a_local_cpu_tier_hit_is_not_a_pull_and_the_record_names_the_tier_counter():
    pair, _, consumer = fake_pair(dp_ranks=1)
    result = pair.measure(Leg.PULL, list(range(64)))
    assert result.bytes_metric == 'consumer/vllm:kv_offload_tiering_read_bytes_total{tier="1:p2p"}'
    consumer.local_hit = True  # the next "pull" is served by the consumer's own CPU tier
    local = pair.measure(Leg.PULL, list(range(64, 128)))
    assert local.bytes_moved == 0

    old, _, _ = fake_pair(dp_ranks=1, new_names=False)
    assert old.measure(Leg.PULL, list(range(64))).bytes_metric == \
        'consumer/vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}'


@pytest.mark.parametrize("args, chunk", [(("--max-num-batched-tokens", "2048"), 2048),
                                         (("--enforce-eager", "--max-num-batched-tokens=4096"), 4096), ((), None)])
def test_the_runs_chunk_size_is_recorded_for_emit(tmp_path, args, chunk):
    pair = VllmPair(VllmSettings(device="cpu", engine_args=args, cache_dir=tmp_path, run_dir=tmp_path / "run"))
    assert pair.setup().max_num_batched_tokens == chunk
