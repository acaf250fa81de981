"""Emit stage entry point: a fit in, the artifact of one ``--format`` out.

Each concern has its module; this one loads the input and dispatches:

- :mod:`kvcal.threshold.choose`: the threshold rule (``minCachedTokenDelta``);
- :mod:`kvcal.emit.router`: the ``p2p-source-producer`` entry, ``env`` and ``json``;
- :mod:`kvcal.emit.affinity`: ``peakPrefillThroughput`` of ``prefix-cache-affinity-filter``;
- :mod:`kvcal.emit.work_range`: the prefill work-range boundary of remaining-work routing (``work-range``);
- :mod:`kvcal.emit.costmodel_block`: the ``costModel`` block (not for llm-d-router main);
- :mod:`kvcal.emit.engine_container`: the vLLM engines' settings, rendered by the sweep's own transports;
- :mod:`kvcal.emit.helm_patch`: patching a Helm values file (with ``embedded_configs``, ``epp_config_edit``
  and ``alpha_plugin_flag``);
- :mod:`kvcal.emit.deployed_values`: what a deployed Helm values file says (threshold, plugin names);
- :mod:`kvcal.emit.run_context`: the run facts all of them read from the fit.

Names used elsewhere are re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from kvcal.emit import helm_patch
from kvcal.emit.affinity import peak_prefill, render_affinity
from kvcal.emit.costmodel_block import (
    COSTMODEL_FLOOR_TOKENS,
    LOAD_DEPENDENT_COST_KEYS,
    costmodel_values,
    render_costmodel,
)
from kvcal.emit.deployed_values import read_names
from kvcal.emit.engine_container import engine_spec, render_vllm
from kvcal.emit.options import FORMATS, TRANSPORTS, EmitOptions, EmitResult, canonical_transport
from kvcal.emit.remaining_work_values import RemainingWork
from kvcal.emit.router import (
    ALPHA_FLAG,
    ALPHA_NOTE,
    PLUGIN_PARAMETERS,
    PLUGIN_TYPE,
    plugin_names,
    render_env,
    render_json,
    render_plugin,
)
from kvcal.emit.run_context import RunContext, run_context
from kvcal.emit.work_range import WORK_RANGE_PRODUCER, WorkRange, render_work_range, work_range, work_range_entries
from kvcal.errors import InputError
from kvcal.fit.inputs import load_fit_input
from kvcal.records.fit import FitResult
from kvcal.settings.sweep import DEFAULT_BLOCK_SIZE
from kvcal.threshold.choose import Threshold, check_threshold, compute_threshold, resolve_block_size, round_up
from kvcal.threshold.class_mix import MixThreshold, mix_threshold
from kvcal.threshold.delta_weights import Deltas
from kvcal.threshold.deltas import read_deltas
from kvcal.threshold.limits import DEFAULT_MARGIN, validate_block_size, validate_margin

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MARGIN",
    "FORMATS",
    "LOAD_DEPENDENT_COST_KEYS",
    "PLUGIN_PARAMETERS",
    "PLUGIN_TYPE",
    "TRANSPORTS",
    "EmitOptions",
    "EmitResult",
    "Threshold",
    "canonical_transport",
    "check_threshold",
    "compute_threshold",
    "emit",
    "load_input",
    "resolve_block_size",
    "validate_block_size",
    "validate_margin",
]

log = logging.getLogger(__name__)


def load_input(path: Path) -> FitResult:
    """A FitResult from any input :func:`kvcal.fit.load_fit_input` accepts (fitted now when it has no fit)."""
    return load_fit_input(path, probes=False).fitted()


def _affinity_json(fit: FitResult, ctx: RunContext, chunk: int | None, warnings: list[str]) -> dict:
    try:
        p = peak_prefill(fit, ctx, chunk)
    except InputError as err:
        warnings.append(f"peakPrefillThroughput not derived: {err}")
        return {"peakPrefillThroughput": None}
    warnings.extend(p.warnings)
    return p.as_json()


@dataclass(frozen=True)
class _Render:
    """What every format's renderer gets: the fit, its run facts, the threshold (None for affinity), the options."""

    fit: FitResult
    ctx: RunContext
    t: Threshold | None
    options: EmitOptions
    origin: str
    notes: list[str]
    warnings: list[str]
    mix: MixThreshold | None = None  # a fit with link classes: the common threshold and each class's
    deltas: Deltas | None = None  # --deltas: what the threshold was priced over

    @property
    def threshold(self) -> Threshold:
        assert self.t is not None
        return self.t

    def result(
        self, text: str, notes: list[str] | tuple[str, ...] = (), warnings: list[str] | tuple[str, ...] = ()
    ) -> EmitResult:
        return EmitResult(text, self.t, tuple(self.notes + list(notes)), tuple(self.warnings + list(warnings)))


def _render_affinity(r: _Render) -> EmitResult:
    p = peak_prefill(r.fit, r.ctx, r.options.chunk_size)
    return EmitResult(render_affinity(p, origin=r.origin), None, p.notes, p.warnings)


def _render_env(r: _Render) -> EmitResult:
    return r.result(render_env(r.threshold))


def _render_json(r: _Render) -> EmitResult:
    extra = _affinity_json(r.fit, r.ctx, r.options.chunk_size, r.warnings)
    if r.mix is not None:
        extra["classes"] = r.mix.classes_json()
    warnings: list[str] = []
    if r.options.ttft_penalty_ms is not None:
        wr = _work_range(r)
        extra["work_range"] = wr.as_json()
        warnings += wr.warnings
        if wr.boundary is None:
            warnings.append(wr.empty_band())
        if wr.max_model_len is None:
            warnings.append(
                "work_range.max_model_len is null: the fit records no max model length; pass --max-model-len"
            )
    return r.result(render_json(r.threshold, extra), warnings=warnings)


def _work_range(r: _Render) -> WorkRange:
    o = r.options
    assert o.ttft_penalty_ms is not None
    return work_range(r.fit, r.threshold, o.ttft_penalty_ms, o.max_model_len or r.ctx.max_model_len, r.deltas)


def _render_work_range(r: _Render) -> EmitResult:
    """The remaining-work set: labels for B and MAX, and the EPP entries to merge (kvcal.emit.work_range)."""
    o = r.options
    assert o.ttft_penalty_ms is not None
    wr = _work_range(r)
    labels = wr.labels()  # exit 3 on an empty band, 2 without MAX
    peak = peak_prefill(r.fit, r.ctx, o.chunk_size)
    names = plugin_names(
        prefix_match_producer=o.prefix_match_producer or WORK_RANGE_PRODUCER,
        prefill_profile=o.prefill_profile,
        deployment=o.deployment,
        transport=_transport_of(r.ctx, o),
    )
    about = (
        f"{'from ' + r.origin + '; ' if r.origin else ''}T: {r.threshold.cost_line()}; merge these entries into the "
        "EPP config and label the prefill pods"
    )
    entries = work_range_entries(names, peak.tokens_per_s, o.ttft_penalty_ms)
    text = render_work_range(wr, labels, entries, about=about)
    d_note = (
        f"the P2P source keeps minCachedTokenDelta 1 (it publishes S - D + 1 reusable tokens: a larger D lengthens "
        f"every routed request by D - 1); the threshold T {wr.threshold} sets B instead"
    )
    return r.result(text, [d_note, *names.notes, *peak.notes, labels.line()], [*wr.warnings, *peak.warnings])


def _render_plugin(r: _Render) -> EmitResult:
    o = r.options
    found = read_names(o.values) if o.values is not None else None
    names = plugin_names(
        prefix_match_producer=o.prefix_match_producer,
        prefill_profile=o.prefill_profile,
        deployment=o.deployment,
        transport=_transport_of(r.ctx, o),
        found=found,
    )
    return r.result(render_plugin(r.threshold, names, origin=r.origin), names.notes)


def _render_costmodel(r: _Render) -> EmitResult:
    text, more_notes, more_warn = render_costmodel(r.fit, r.origin)
    return r.result(with_threshold_comment(text, r.threshold), more_notes, more_warn)


def _render_vllm(r: _Render) -> EmitResult:
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


def with_threshold_comment(text: str, t: Threshold) -> str:
    """``text`` with a comment line after its first (their label): the threshold, its rule and what it costs."""
    first, _, rest = text.partition("\n")
    return f"{first}\n# kvcal: minCachedTokenDelta {t.min_cached_token_delta} ({t.cost_line()})\n{rest}"


def _render_helm(r: _Render) -> EmitResult:
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


def _helm_labels(r: _Render, config: RemainingWork, notes: list[str], warnings: list[str]) -> None:
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


# One entry per --format: (needs the threshold, renderer). A new format is one entry and its renderer.
RENDERERS: dict[str, tuple[bool, Callable[[_Render], EmitResult]]] = {
    "plugin": (True, _render_plugin),
    "helm": (True, _render_helm),
    "affinity": (False, _render_affinity),
    "costmodel": (True, _render_costmodel),
    "vllm": (True, _render_vllm),
    "env": (True, _render_env),
    "json": (True, _render_json),
    "work-range": (True, _render_work_range),
}


def emit(source: Path | FitResult, options: EmitOptions) -> EmitResult:
    """Render ``options.format`` from a fit (or a fit.json / run folder); for helm, patch (and maybe write)
    the values file.

    Every router-side format (all but ``vllm``) says on one stderr line that the EPP needs
    ``--allow-experimental-plugins``; ``helm`` says what it set in the values file instead.
    """
    result = _emit(source, options)
    if options.format == "vllm" or any(ALPHA_FLAG in line for line in result.notes + result.warnings):
        return result
    return replace(result, notes=result.notes + (ALPHA_NOTE,))


def _emit(source: Path | FitResult, options: EmitOptions) -> EmitResult:
    deltas = read_deltas(options.deltas) if options.deltas is not None else None  # a bad file fails before the fit
    fit = source if isinstance(source, FitResult) else load_input(Path(source))
    origin = "" if isinstance(source, FitResult) else str(source)
    ctx = run_context(fit)
    needs_threshold, render = RENDERERS[options.format]
    t = mix = None
    if needs_threshold and (fit.classes or options.class_mix is not None):  # one threshold over the link classes
        mix = mix_threshold(fit, options, deltas)
        t = mix.threshold
    elif needs_threshold:  # affinity needs only the recompute curve
        t = compute_threshold(
            fit,
            rule=options.rule,
            margin=options.margin,
            block_size=options.block_size,
            allow_extrapolation=options.allow_extrapolation,
            allow_disturbed=options.allow_disturbed,
            deltas=deltas,
        )
    notes = [*t.steps, cost_note(t, deltas)] if t else []
    return render(_Render(fit, ctx, t, options, origin, notes, list(t.warnings) if t else [], mix, deltas))


def cost_note(t: Threshold, deltas: Deltas | None) -> str:
    """One stderr line: what the threshold costs over the deltas, and what the alternatives would."""
    over = deltas.source if deltas is not None else "deltas log-uniform over the measured range"
    alternatives = "; ".join(
        f"{name} {alt.threshold if alt.threshold is not None else 'refuses'}"
        + (f" ({alt.figures.expected_regret_pct:.3g}%)" if alt.figures.expected_regret_pct is not None else "")
        for name, alt in t.alternatives.items()
    )
    return f"{t.cost_line()} over {over}; alternatives: {alternatives}"


def _transport_of(ctx: RunContext, options: EmitOptions) -> str | None:
    name = options.transport or ctx.transport
    try:
        return canonical_transport(name) if name else None
    except InputError:
        return None


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
        _transport_of(ctx, options),
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
