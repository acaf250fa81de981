"""kvcal's readings of /metrics pages written by vLLM 0.33's own Prometheus logger.

``vllm_judge.py metrics`` builds vLLM's ``PrometheusStatLogger`` for a config.json model
with each transport's connector, and drives its counters through vLLM's stats objects:
the tiering tracker's promotion jobs (a read from the P2P tier into the CPU tier), the
offloading stats' CPU-to-GPU load counter, NIXL's transfer telemetry, the scheduler's
queue gauges. kvcal reads the pages over HTTP from a loopback server, through the same
code that reads a live engine: attach mode (block size), the load controller (waiting
queue) and the pair's pull proof.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from conformance_support import judge
from kvcal.engines.metrics import parse_metrics
from kvcal.transports.base import Role
from kvcal.engines.vllm import VllmPair
from kvcal.engines.vllm_launch import VllmSettings
from kvcal.engines.vllm_load import VllmLoadTarget

pytestmark = pytest.mark.conformance

CHUNK_BYTES = 64 * 2048  # one offloaded chunk of the fake model
P2P_CONFIG = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
              "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 2**30,
                                            "offload_prompt_only": False, "self_describing_kv_events": True,
                                            "secondary_tiers": [{"type": "p2p", "host": "127.0.0.1", "port": 7777}]}}
NIXL_CONFIG = {"kv_connector": "NixlConnector", "kv_role": "kv_consumer", "kv_buffer_device": "cpu"}
# Each scenario: the steps one engine's stats go through; a page is written before the first and after each.
SCENARIOS = {
    # a pull: 10 chunks read from the P2P tier (the first secondary tier); 12 loaded to the GPU, 2 of them
    # already in the consumer's own CPU tier
    "p2p-pull": {"kv_transfer_config": P2P_CONFIG, "block_size": 64,
                 "steps": [{"promotions": [[0, 10]], "gpu_loads": [12 * CHUNK_BYTES], "waiting": 3, "running": 2}]},
    # after a pull, a probe served from the consumer's own CPU tier: loaded to the GPU, nothing read from a peer
    "p2p-then-local-hit": {"kv_transfer_config": P2P_CONFIG, "block_size": 64,
                           "steps": [{"promotions": [[0, 4]], "gpu_loads": [4 * CHUNK_BYTES]},
                                     {"gpu_loads": [7 * CHUNK_BYTES], "waiting": 0, "running": 1}]},
    "nixl-pull": {"kv_transfer_config": NIXL_CONFIG, "block_size": 16,
                  "steps": [{"nixl_transfers": [1_000_000, 500_000], "waiting": 5, "running": 0}]},
}


@pytest.fixture(scope="session")
def pages(tmp_path_factory: pytest.TempPathFactory, model_dir) -> dict[str, list[str]]:
    work = tmp_path_factory.mktemp("conformance-metrics")
    return judge("metrics", {"model_dir": str(model_dir), "chunk_bytes": CHUNK_BYTES, "scenarios": SCENARIOS}, work)


@contextmanager
def attached(server, transport: str, page: str) -> Iterator[VllmPair]:
    """kvcal's pair in attach mode against the loopback server serving ``page``."""
    server.page = page
    pair = VllmPair(VllmSettings(transport=transport, producer_url=server.url, consumer_url=server.url,
                                 producer_p2p_host="127.0.0.1", producer_p2p_port=7777))
    pair.start()
    try:
        yield pair
    finally:
        pair.stop()


PREFIX_TOKENS = 4096  # any prefix whose KV bound is far above the bytes these pages move


def proof(pair: VllmPair, before: str, after: str) -> tuple[int | None, str | None]:
    """kvcal's reading of a probe between two pages: the bytes moved and the counter that proved them."""
    return pair._bytes_moved({Role.CONSUMER: parse_metrics(before), Role.PRODUCER: {}},
                             {Role.CONSUMER: parse_metrics(after), Role.PRODUCER: {}}, PREFIX_TOKENS)


def pulled(pair: VllmPair, before: str, after: str) -> Any:
    return proof(pair, before, after)[0]


def test_vllm_labels_the_p2p_tier_by_position_and_type(pages: dict[str, list[str]]) -> None:
    """What the proof must match: vLLM 0.33 writes tier="1:p2p", never tier="p2p"."""
    after = pages["p2p-pull"][-1]
    assert 'vllm:kv_offload_tiering_read_bytes_total{engine="0",model_name=' in after and 'tier="1:p2p"' in after
    assert 'tier="p2p"' not in after


def test_p2p_pull_proof_reads_the_p2p_tiers_bytes(pages: dict[str, list[str]], page_server) -> None:
    before, after = pages["p2p-pull"]
    with attached(page_server, "p2p-tier", before) as pair:
        moved, counter = proof(pair, before, after)
    assert moved == 10 * CHUNK_BYTES
    assert counter is not None and 'vllm:kv_offload_tiering_read_bytes_total{tier="1:p2p"}' in counter


def test_a_local_cpu_tier_hit_is_not_taken_for_a_pull(pages: dict[str, list[str]], page_server) -> None:
    """Issue 28, finding 1: after a real P2P read, a load served by the consumer's own CPU tier proves no pull."""
    _, before, after = pages["p2p-then-local-hit"]
    with attached(page_server, "p2p-tier", before) as pair:
        assert pulled(pair, before, after) == 0


def test_nixl_pull_proof_reads_the_consumers_transfer_histogram(pages: dict[str, list[str]], page_server) -> None:
    before, after = pages["nixl-pull"]
    with attached(page_server, "nixl-pd", before) as pair:
        assert pulled(pair, before, after) == 1_500_000


@pytest.mark.parametrize("scenario, transport, block_size", [("p2p-pull", "p2p-tier", 64), ("nixl-pull", "nixl-pd", 16)])
def test_block_size_is_read_from_vllms_cache_config_info(pages: dict[str, list[str]], page_server, scenario: str,
                                                         transport: str, block_size: int) -> None:
    with attached(page_server, transport, pages[scenario][-1]) as pair:
        assert pair.block_size == block_size


@pytest.mark.parametrize("scenario, waiting", [("p2p-pull", 3), ("nixl-pull", 5), ("p2p-then-local-hit", 0)])
def test_queue_reading_is_vllms_waiting_gauge(pages: dict[str, list[str]], page_server, scenario: str, waiting: int) -> None:
    page_server.page = pages[scenario][-1]
    target = VllmLoadTarget("consumer", page_server.url, "kvcal-model")
    try:
        assert target.waiting_requests() == waiting
    finally:
        target.close()
