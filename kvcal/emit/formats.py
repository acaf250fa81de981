"""Emit stage entry point: a fit in, the artifact of one ``--format`` out.

Each concern has its module; this one loads the input, computes the threshold and hands both to the
format's module (:mod:`kvcal.emit.renderers` names them), which renders with:

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
from dataclasses import replace
from pathlib import Path

from kvcal.emit.costmodel_block import (
    LOAD_DEPENDENT_COST_KEYS,
)
from kvcal.emit.options import TRANSPORTS, EmitOptions, EmitResult, canonical_transport
from kvcal.emit.renderers.base import OutputFormat, Render, get_format
from kvcal.emit.router import (
    ALPHA_FLAG,
    ALPHA_NOTE,
    PLUGIN_PARAMETERS,
    PLUGIN_TYPE,
)
from kvcal.emit.run_context import run_context
from kvcal.fit.inputs import load_fit_input
from kvcal.records.fit import FitResult
from kvcal.settings.sweep import DEFAULT_BLOCK_SIZE
from kvcal.threshold.choose import Threshold, check_threshold, compute_threshold, resolve_block_size, threshold_for
from kvcal.threshold.class_mix import mix_threshold
from kvcal.threshold.delta_weights import Deltas
from kvcal.threshold.deltas import read_deltas
from kvcal.threshold.limits import DEFAULT_MARGIN, validate_block_size, validate_margin

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MARGIN",
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


def emit(source: Path | FitResult, options: EmitOptions) -> EmitResult:
    """Render ``options.format`` from a fit (or a fit.json / run folder); for helm, patch (and maybe write)
    the values file.

    Every router-side format (all but ``vllm``) says on one stderr line that the EPP needs
    ``--allow-experimental-plugins``; ``helm`` says what it set in the values file instead.
    """
    fmt = get_format(options.format)
    result = _emit(source, options, fmt)
    if not fmt.router_side or any(ALPHA_FLAG in line for line in result.notes + result.warnings):
        return result
    return replace(result, notes=result.notes + (ALPHA_NOTE,))


def _emit(source: Path | FitResult, options: EmitOptions, fmt: OutputFormat) -> EmitResult:
    deltas = read_deltas(options.deltas) if options.deltas is not None else None  # a bad file fails before the fit
    fit = source if isinstance(source, FitResult) else load_input(Path(source))
    origin = "" if isinstance(source, FitResult) else str(source)
    ctx = run_context(fit)
    t = mix = None
    if fmt.needs_threshold and (fit.classes or options.class_mix is not None):  # one threshold over the link classes
        mix = mix_threshold(fit, options, deltas)
        t = mix.threshold
    elif fmt.needs_threshold:  # affinity needs only the recompute curve
        t = threshold_for(fit, options, deltas)
    notes = [*t.steps, cost_note(t, deltas)] if t else []
    return fmt.render(Render(fit, ctx, t, options, origin, notes, list(t.warnings) if t else [], mix, deltas))


def cost_note(t: Threshold, deltas: Deltas | None) -> str:
    """One stderr line: what the threshold costs over the deltas, and what the alternatives would."""
    over = deltas.source if deltas is not None else "deltas log-uniform over the measured range"
    alternatives = "; ".join(
        f"{name} {alt.threshold if alt.threshold is not None else 'refuses'}"
        + (f" ({alt.figures.expected_regret_pct:.3g}%)" if alt.figures.expected_regret_pct is not None else "")
        for name, alt in t.alternatives.items()
    )
    return f"{t.cost_line()} over {over}; alternatives: {alternatives}"
