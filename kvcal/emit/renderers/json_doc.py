"""``--format json``: the threshold, its costs and alternatives, the affinity and work-range figures."""

from __future__ import annotations

from kvcal.emit.affinity import peak_prefill
from kvcal.emit.options import EmitResult
from kvcal.emit.renderers.base import OutputFormat, Render, work_range_of
from kvcal.emit.router import render_json
from kvcal.emit.run_context import RunContext
from kvcal.errors import InputError
from kvcal.records.fit import FitResult


def _affinity_json(fit: FitResult, ctx: RunContext, chunk: int | None, warnings: list[str]) -> dict:
    try:
        p = peak_prefill(fit, ctx, chunk)
    except InputError as err:
        warnings.append(f"peakPrefillThroughput not derived: {err}")
        return {"peakPrefillThroughput": None}
    warnings.extend(p.warnings)
    return p.as_json()


def render(r: Render) -> EmitResult:
    extra = _affinity_json(r.fit, r.ctx, r.options.chunk_size, r.warnings)
    if r.mix is not None:
        extra["classes"] = r.mix.classes_json()
    warnings: list[str] = []
    if r.options.ttft_penalty_ms is not None:
        wr = work_range_of(r)
        extra["work_range"] = wr.as_json()
        warnings += wr.warnings
        if wr.boundary is None:
            warnings.append(wr.empty_band())
        if wr.max_model_len is None:
            warnings.append(
                "work_range.max_model_len is null: the fit records no max model length; pass --max-model-len"
            )
    return r.result(render_json(r.threshold, extra), warnings=warnings)


FORMAT = OutputFormat("json", render)
