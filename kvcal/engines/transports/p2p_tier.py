"""The P2P tier llm-d uses: ``OffloadingConnector`` + ``TieringOffloadingSpec`` with a ``p2p`` secondary tier.

GPU engines only: on CPU vLLM refuses ("CPU Offloading is currently only supported
on CUDA-alike and XPU GPUs"), so kvcal raises HardwareError before launching anything
on a host without a GPU. NOT CHECKED ON HARDWARE: written against the documented
protocol (docs/engines.md) and the vLLM 0.32 sources, never run by kvcal's authors.

Both engines run the same ``kv_both`` config; each offloads its prompt blocks to its
CPU tier (``cpu_bytes_to_use`` bytes, ``offload_prompt_only``) and listens on its own
P2P side channel (``VLLM_P2P_SIDE_CHANNEL_HOST`` / ``_PORT``, also given to the tier as
``host`` / ``port``). The producer "holds" the prefix by serving it once as a plain
request; its store to the CPU tier is asynchronous, so the pair waits for the
producer's store counter to rise before it pulls. The consumer request carries
``remote_kv_source: {kv_request_id: <uuid>, remote_host, remote_port}`` naming the
producer's side channel: lookup, response, fetch, then the producer WRITEs the
matching blocks over NIXL into the consumer's CPU tier; a miss is recomputed.
``PYTHONHASHSEED`` must match on both engines or no block hash ever matches (the pair
pins it).

Bytes moved: the consumer's promotion from the p2p tier,
``vllm:kv_offload_tiering_read_bytes_total``, else its CPU-to-GPU load counters.
"""

from __future__ import annotations

from typing import Any

from kvcal.engines.transports.base import BytesMetric, MetricRef, Role, SideChannel, Transport

DEFAULT_CPU_BYTES = 8 * 1024**3


class P2pTier(Transport):
    name = "p2p-tier"
    needs_gpu = True
    pull_names_producer = True
    bytes_metrics = (
        BytesMetric(
            Role.CONSUMER,
            (
                MetricRef("vllm:kv_offload_tiering_read_bytes_total"),
                MetricRef("vllm:kv_offload_load_bytes_total"),
                MetricRef("vllm:kv_offload_total_bytes_total", (("transfer_type", "CPU_to_GPU"),)),
            ),
        ),
    )
    hold_settle_metrics = (
        MetricRef("vllm:kv_offload_store_bytes_total"),
        MetricRef("vllm:kv_offload_total_bytes_total", (("transfer_type", "GPU_to_CPU"),)),
    )

    def kv_transfer_config(self, role: Role, device: str, side: SideChannel) -> dict[str, Any]:
        return {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {
                "spec_name": "TieringOffloadingSpec",
                "cpu_bytes_to_use": int(self.options.get("cpu_bytes_to_use", DEFAULT_CPU_BYTES)),
                "offload_prompt_only": True,
                "secondary_tiers": [{"type": "p2p", "host": side.host, "port": side.port}],
            },
        }

    def env(self, role: Role, side: SideChannel) -> dict[str, str]:
        return {"VLLM_P2P_SIDE_CHANNEL_HOST": side.host, "VLLM_P2P_SIDE_CHANNEL_PORT": str(side.port)}

    def hold_params(self, kv_request_id: str) -> dict[str, Any] | None:
        return None  # a plain request: the producer offloads the prompt to its CPU tier

    def pull_params(self, held: dict[str, Any] | None, kv_request_id: str, producer_side: SideChannel) -> dict[str, Any]:
        return {
            "remote_kv_source": {
                "kv_request_id": kv_request_id,
                "remote_host": producer_side.host,
                "remote_port": producer_side.port,
            }
        }


TRANSPORT = P2pTier
