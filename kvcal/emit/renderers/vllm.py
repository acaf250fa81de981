"""``--format vllm``: the vLLM engines' args, env and /dev/shm volume, rendered by the sweep's transports."""

from __future__ import annotations

from kvcal.emit.engine_container import engine_spec, render_vllm
from kvcal.emit.options import EmitResult
from kvcal.emit.renderers.base import OutputFormat, Render, with_threshold_comment


def render(r: Render) -> EmitResult:
    o = r.options
    spec = engine_spec(
        r.ctx,
        block_size=r.threshold.block_size,
        threshold=r.threshold.min_cached_token_delta,
        transport=o.transport,
        p2p_port=o.p2p_port,
        cpu_bytes_to_use=o.cpu_bytes_to_use,
        model=o.model,
    )
    return r.result(with_threshold_comment(render_vllm(spec, origin=r.origin), r.threshold), spec.notes, spec.warnings)


FORMAT = OutputFormat("vllm", render, router_side=False)
