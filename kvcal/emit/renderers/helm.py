"""``--format helm``: patch a Helm values file, and the work-range labels its remaining-work configs need."""

from __future__ import annotations

from dataclasses import replace

from kvcal.emit import helm_patch
from kvcal.emit.affinity import peak_prefill
from kvcal.emit.costmodel_block import COSTMODEL_FLOOR_TOKENS, costmodel_values
from kvcal.emit.options import EmitOptions, EmitResult
from kvcal.emit.remaining_work_values import RemainingWork
from kvcal.emit.renderers.base import OutputFormat, Render, transport_of
from kvcal.emit.router import PLUGIN_TYPE
from kvcal.emit.run_context import RunContext
from kvcal.emit.work_range import work_range
from kvcal.errors import InputError
from kvcal.records.fit import FitResult
from kvcal.threshold.choose import Threshold, round_up


def render(r: Render) -> EmitResult:
    result, remaining = _emit_helm(r.fit, r.ctx, r.threshold, r.options, r.notes, r.warnings)
    notes: list[str] = []
    warnings: list[str] = []
    for config in remaining:
        _helm_labels(r, config, notes, warnings)
    given = [
        flag
        for flag, v in (("--ttft-penalty-ms", r.options.ttft_penalty_ms), ("--max-model-len", r.options.max_model_len))
        if v is not None
    ]
    if given and not remaining:
        warnings.append(
            f"{' and '.join(given)} unused: no patched EPP config routes on remaining work "
            "(a context-length-aware plugin with reusableTokensProducerName)"
        )
    return replace(result, notes=result.notes + tuple(notes), warnings=result.warnings + tuple(warnings))


def _helm_labels(r: Render, config: RemainingWork, notes: list[str], warnings: list[str]) -> None:
    """The labels the prefill pods of a config that routes on remaining work must carry, or which flag is missing."""
    o = r.options
    penalty = o.ttft_penalty_ms if o.ttft_penalty_ms is not None else config.penalty_ms
    if penalty is None:
        warnings.append(
            f"{config.where} routes on remaining work but sets no maxTTFTPenaltyMs: pass --ttft-penalty-ms MS "
            "for the prefill work-range labels (B = min(threshold, SLO work))"
        )
        return
    wr = work_range(r.fit, r.threshold, penalty, o.max_model_len or r.ctx.max_model_len, r.deltas)
    warnings.extend(wr.warnings)
    source = "--ttft-penalty-ms" if o.ttft_penalty_ms is not None else "its maxTTFTPenaltyMs"
    if wr.boundary is None:
        warnings.append(f"{config.where}: {wr.empty_band()}")
    elif wr.max_model_len is None:
        warnings.append(
            f"{config.where}: work-range boundary B {wr.boundary:,} ({source} {penalty:g} ms); the labels' MAX "
            "is unknown (the fit records no max model length): pass --max-model-len N"
        )
    else:
        try:
            notes.append(f"{config.where}: {wr.labels().line()} (B from {source} {penalty:g} ms)")
        except InputError as err:
            warnings.append(f"{config.where}: {err}")


def _emit_helm(
    fit: FitResult, ctx: RunContext, t: Threshold, options: EmitOptions, notes: list[str], warnings: list[str]
) -> tuple[EmitResult, tuple[RemainingWork, ...]]:
    assert options.values is not None
    threshold = t.min_cached_token_delta
    cost = None
    if options.with_costmodel:
        cost, cost_notes, cost_warn = costmodel_values(fit)
        floor = min(threshold, round_up(COSTMODEL_FLOOR_TOKENS, t.block_size))
        notes += cost_notes
        warnings += cost_warn
        warnings.append(
            f"--with-costmodel: wrote costModel, which only a router build whose {PLUGIN_TYPE} accepts it can "
            f"load (llm-d-router main refuses the config); minCachedTokenDelta lowered from {threshold} to the "
            f"variant's floor {floor}, since the cost model now decides above it"
        )
        threshold = floor
    try:
        peak = peak_prefill(fit, ctx, options.chunk_size)
        peak_value: int | None = peak.tokens_per_s
        peak_warn = list(peak.warnings)
    except InputError as err:
        peak_value, peak_warn = None, [f"peakPrefillThroughput not derived: {err}"]
    spec = helm_patch.PluginSpec(
        threshold,
        options.prefix_match_producer,
        options.prefill_profile,
        options.deployment,
        transport_of(ctx, options),
        cost,
        peak_value,
        options.ttft_penalty_ms,
    )
    out = helm_patch.patch_values_file(
        options.values, spec, add_plugin=options.add_plugin, in_place=options.in_place, diff=options.diff
    )
    if any("prefix-cache-affinity-filter" in n for n in out.notes):
        warnings += peak_warn
    result = EmitResult(
        out.stdout,
        t,
        tuple(notes + list(out.notes)),
        tuple(warnings + list(out.warnings)),
        written=out.written,
        backup=out.backup,
    )
    return result, out.result.remaining_work


FORMAT = OutputFormat("helm", render)
