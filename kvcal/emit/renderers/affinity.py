"""``--format affinity``: ``prefix-cache-affinity-filter``'s ``peakPrefillThroughput``."""

from __future__ import annotations

from kvcal.emit.affinity import peak_prefill, render_affinity
from kvcal.emit.options import EmitResult
from kvcal.emit.renderers.base import OutputFormat, Render


def render(r: Render) -> EmitResult:
    p = peak_prefill(r.fit, r.ctx, r.options.chunk_size)
    return EmitResult(render_affinity(p, origin=r.origin), None, p.notes, p.warnings)


FORMAT = OutputFormat("affinity", render, needs_threshold=False)
