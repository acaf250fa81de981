"""The P2P tier llm-d uses: ``OffloadingConnector`` + ``TieringOffloadingSpec`` with a ``p2p`` secondary tier.

GPU engines only: on CPU vLLM refuses ("CPU Offloading is currently only supported
on CUDA-alike and XPU GPUs"), so kvcal raises HardwareError before launching anything
on a host without a GPU. NOT CHECKED ON HARDWARE: written against the llm-d P2P guide
and vLLM 0.33's sources as summarised in the project's upstream reference, never run by
kvcal's authors.

One config for every engine, sweep or deployment (``kv_both``, the guide's settings):
``cpu_bytes_to_use`` of CPU tier (an mmap under ``/dev/shm``), ``offload_prompt_only:
false`` (sources may serve decode-phase blocks too), ``self_describing_kv_events: true``
(CPU-tier store events carry their tokens, or the router's precise index may never
see the CPU copy), and a ``p2p`` secondary tier listening on ``host``/``port``. A sweep
places it on a local host and a free port; a deployment on ``$(POD_IP)`` and
:data:`P2P_PORT`, the port the router's sidecar always names. With
``--data-parallel-size`` > 1, rank r listens on ``port + r``.

``VLLM_P2P_SIDE_CHANNEL_PORT`` is not set: vLLM ignores it when the tier names a port.
Both side-channel hosts are set to the engine's own address.

The producer "holds" the prefix by serving it once as a plain request; its store to
the CPU tier is asynchronous, so the pair waits for the producer's store counter to
rise before it pulls. The consumer request carries ``remote_kv_source: {kv_request_id,
remote_host, remote_port}`` naming the producer's listener: lookup, response, fetch,
then the producer writes the matching blocks into the consumer's CPU tier; a miss is
recomputed. ``PYTHONHASHSEED`` must match on every engine (vLLM 0.33 refuses a
mismatch at the handshake).

Proof of a pull: the consumer's ``vllm:kv_offload_tiering_read_bytes_total`` with a
tier label of type ``p2p`` at any position: vLLM 0.33 labels a tier ``<position>:<type>``,
``tier="1:p2p"`` when the P2P tier is the first secondary tier (``tier_label`` in
``vllm/v1/kv_offload/tiering/metrics.py``; the primary CPU tier is ``0:primary``). On an
engine with tier metrics only that counter proves a pull: its CPU-to-GPU load counters
(``vllm:kv_offload_load_bytes_total``, the older ``vllm:kv_offload_total_bytes_total
{transfer_type="CPU_to_GPU"}``) count every load, a hit in the consumer's own CPU tier
included. They stand in only on an engine without tier metrics (another vLLM version),
and the probe's ``bytes_metric`` then names them. Tokens served from the tier:
``vllm:prompt_tokens_cached_by_source_total{source="p2p"}``; the time the tier's reads took,
``vllm:kv_offload_tiering_read_time_total`` on the same tier label (the engine side of a pull).
"""

from __future__ import annotations

from typing import Any

from kvcal.transports.base import BytesMetric, MetricRef, PullTime, Role, SideChannel, Transport

P2P_PORT = 7777
"""The P2P listener port of a deployed engine: the router's sidecar always tells the consumer to pull from it
(the sweep's ``producer_p2p_port`` defaults to it, :mod:`kvcal.settings`)."""
DEFAULT_CPU_BYTES = 8 * 1024**3
"""CPU tier per engine when nothing sets it: fits a sweep's prefixes; size a deployment's to its pods."""
KV_EVENTS_ENDPOINT = "tcp://*:5556"
KV_EVENTS_POD_PORT = "8000"  # the guide's topic names the routing sidecar's port
P2P_TOKENS = MetricRef("vllm:prompt_tokens_cached_by_source_total", (("source", "p2p"),))
P2P_READ_BYTES = MetricRef("vllm:kv_offload_tiering_read_bytes_total", (("tier", "*:p2p"),))
"""The P2P tier's own read counter, whatever the tier's position (vLLM 0.33: ``tier="1:p2p"``)."""
P2P_READ_TIME = MetricRef("vllm:kv_offload_tiering_read_time_total", (("tier", "*:p2p"),))
"""Seconds the consumer spent reading from the P2P tier (``TieringOffloadingMetrics.READ_TIME``, vLLM 0.32/0.33)."""


class P2pTier(Transport):
    name = "p2p-tier"
    needs_gpu = True
    pull_names_producer = True
    deployed_side_port = P2P_PORT
    aliases = ("p2p", "offloading", "offloadingconnector")
    deployment = "p2p"
    cpu_tier = True
    bytes_metrics = (
        BytesMetric(
            Role.CONSUMER,
            (
                P2P_READ_BYTES,
                MetricRef("vllm:kv_offload_load_bytes_total"),
                MetricRef("vllm:kv_offload_total_bytes_total", (("transfer_type", "CPU_to_GPU"),)),
            ),
            family_prefix="vllm:kv_offload_tiering_",
        ),
    )
    tokens_metric = P2P_TOKENS
    pull_time = PullTime(Role.CONSUMER, time=P2P_READ_TIME, bytes=P2P_READ_BYTES, tokens=P2P_TOKENS)
    hold_settle_metrics = (
        MetricRef("vllm:kv_offload_store_bytes_total"),
        MetricRef("vllm:kv_offload_total_bytes_total", (("transfer_type", "GPU_to_CPU"),)),
    )

    @property
    def cpu_bytes_to_use(self) -> int:
        return int(self.options.get("cpu_bytes_to_use") or DEFAULT_CPU_BYTES)

    def kv_transfer_config(self, role: Role, device: str, side: SideChannel) -> dict[str, Any]:
        return {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {
                "spec_name": "TieringOffloadingSpec",
                "cpu_bytes_to_use": self.cpu_bytes_to_use,
                "offload_prompt_only": False,
                "self_describing_kv_events": True,
                "secondary_tiers": [{"type": "p2p", "host": side.host, "port": side.port}],
            },
        }

    def env(self, role: Role, side: SideChannel) -> dict[str, str]:
        return {"VLLM_P2P_SIDE_CHANNEL_HOST": side.host, "VLLM_NIXL_SIDE_CHANNEL_HOST": side.host}

    def kv_events_config(self, model: str) -> dict[str, Any] | None:
        return {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": "$(KV_EVENTS_ENDPOINT)",
            "topic": f"kv@$(POD_IP):$(POD_PORT)@{model}",
        }

    def kv_events_env(self) -> dict[str, str]:
        return {"KV_EVENTS_ENDPOINT": KV_EVENTS_ENDPOINT, "POD_PORT": KV_EVENTS_POD_PORT}

    def shm_bytes(self) -> int | None:
        return self.cpu_bytes_to_use

    def hold_params(self, kv_request_id: str) -> dict[str, Any] | None:
        return None  # a plain request: the producer offloads the prompt to its CPU tier

    def pull_params(
        self, held: dict[str, Any] | None, kv_request_id: str, producer_side: SideChannel
    ) -> dict[str, Any]:
        return {
            "remote_kv_source": {
                "kv_request_id": kv_request_id,
                "remote_host": producer_side.host,
                "remote_port": producer_side.port,
            }
        }


TRANSPORT = P2pTier
