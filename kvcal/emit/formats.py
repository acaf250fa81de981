"""Emit stage: turn a fit into the router threshold and the configs that carry it.

This module renders every output format except the Helm values patch (``kvcal.emit.helm``);
the threshold rule itself lives in :mod:`kvcal.emit.threshold` (one place, one statement).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcal.emit.threshold import (DEFAULT_BLOCK_SIZE, DEFAULT_MARGIN, Threshold, check_threshold, compute_threshold, fmt,
                                  resolve_block_size, validate_block_size, validate_margin)
from kvcal.errors import InputError, KvcalError, NotRecommended
from kvcal.fit.inputs import load_fit_input
from kvcal.records import CurveFit, FitResult

__all__ = ["DEFAULT_BLOCK_SIZE", "DEFAULT_MARGIN", "Threshold", "check_threshold", "compute_threshold", "resolve_block_size",
           "validate_block_size", "validate_margin", "EmitOptions", "EmitResult", "emit", "FORMATS"]

log = logging.getLogger(__name__)

GUIDE_PREFIX_MATCH_PRODUCER = "precise-prefix-cache-producer"
GUIDE_PREFILL_PROFILE = "default"
PLUGIN_TYPE = "p2p-source-producer"
FORMATS = ("plugin", "helm", "costmodel", "vllm", "env", "json")
TRANSPORTS = ("p2p-tier", "nixl-pd")
_TRANSPORT_ALIASES = {
    "p2p-tier": "p2p-tier", "p2p": "p2p-tier", "offloading": "p2p-tier", "offloadingconnector": "p2p-tier",
    "nixl-pd": "nixl-pd", "nixl": "nixl-pd", "pd": "nixl-pd", "nixlconnector": "nixl-pd",
}
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}
LOAD_DEPENDENT_COST_KEYS = ("sourceWaitMs", "requeueMs", "busyQueueThreshold", "fleetWeight")


@dataclass(frozen=True)
class EmitOptions:
    """Resolved ``emit-config`` settings; construction validates them (InputError on bad values)."""

    format: str = "plugin"
    margin: float = DEFAULT_MARGIN
    block_size: int | None = None
    values: Path | None = None
    in_place: bool = False
    diff: bool = False
    add_plugin: bool = False
    prefix_match_producer: str = GUIDE_PREFIX_MATCH_PRODUCER
    prefill_profile: str = GUIDE_PREFILL_PROFILE
    transport: str | None = None
    allow_extrapolation: bool = False
    allow_disturbed: bool = False

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise InputError(f"unknown --format {self.format!r}; choose one of {', '.join(FORMATS)}")
        validate_margin(self.margin)
        if self.block_size is not None:
            validate_block_size(self.block_size)
        if self.format == "helm" and self.values is None:
            raise InputError("--format helm needs --values FILE (the Helm values file to patch)")
        if self.format != "helm":
            for flag, on in (("--values", self.values is not None), ("--in-place", self.in_place),
                             ("--diff", self.diff), ("--add-plugin", self.add_plugin)):
                if on:
                    raise InputError(f"{flag} applies only to --format helm")
        for flag, name in (("--prefix-match-producer", self.prefix_match_producer), ("--prefill-profile", self.prefill_profile)):
            if not name or name != name.strip() or any(c.isspace() for c in name):
                raise InputError(f"{flag} must be a non-empty name without spaces (got {name!r})")
        if self.transport is not None:
            canonical_transport(self.transport)


@dataclass(frozen=True)
class EmitResult:
    """What ``emit`` produced: stdout text, stderr notes and warnings, files written."""

    stdout: str
    threshold: Threshold
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    written: Path | None = None
    backup: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def canonical_transport(name: str) -> str:
    """Map a recorded or given transport name to ``p2p-tier`` or ``nixl-pd``; InputError otherwise."""
    key = str(name).strip().lower().replace("_", "-")
    if key not in _TRANSPORT_ALIASES:
        raise InputError(f"unknown transport {name!r}; --format vllm knows {', '.join(TRANSPORTS)} (pass --transport)")
    return _TRANSPORT_ALIASES[key]


_fmt = fmt


# ---------------------------------------------------------------- formats


def render_plugin(t: Threshold, *, prefix_match_producer: str = GUIDE_PREFIX_MATCH_PRODUCER,
                  prefill_profile: str = GUIDE_PREFILL_PROFILE, origin: str = "") -> str:
    """The plugin entry as a one-item YAML list, ready to paste under ``plugins:``."""
    head = f"# kvcal: from {origin}; " if origin else "# kvcal: "
    return (
        f"{head}break-even {_ci_text(t)}, margin {t.margin:g}, block size {t.block_size}\n"
        f"- type: {PLUGIN_TYPE}\n"
        "  parameters:\n"
        f"    prefixMatchInfoProducerName: {_yaml_str(prefix_match_producer)}\n"
        f"    prefillProfileName: {_yaml_str(prefill_profile)}\n"
        f"    minCachedTokenDelta: {t.min_cached_token_delta}\n"
    )


def _yaml_str(value: str) -> str:
    """Plain when it cannot be misread (as the guide writes names), else double-quoted."""
    return value if re.fullmatch(r"[A-Za-z][A-Za-z0-9._/-]*", value) and value.lower() not in _YAML_WORDS else json.dumps(value)


def render_env(t: Threshold) -> str:
    """Exactly one line, as the llm-d recipe prints it."""
    return f"MIN_CACHED_TOKEN_DELTA={t.min_cached_token_delta}\n"


def render_json(t: Threshold) -> str:
    return json.dumps(t.as_json(), indent=2) + "\n"


def _ci_text(t: Threshold) -> str:
    point = _fmt(t.break_even_tokens) if t.break_even_tokens is not None else "n/a"
    return f"{point} [{_fmt(t.break_even_ci[0])}, {_fmt(t.break_even_ci[1])}]" if t.break_even_ci else point


def curve_ms(c: CurveFit, n: float) -> float:
    """CurveFit value at ``n`` tokens, in ms (the fit stage's formula)."""
    from kvcal.fit import curve_ms as fit_curve_ms

    return float(fit_curve_ms(c, n))


def cost_model(fit: FitResult) -> tuple[dict[str, float], list[str], list[str]]:
    """P, T, F for the router's per-request comparison, and the notes/warnings behind them.

    The router compares P*n (recompute, us) with F*1e3 + T*n (pull). With the pull fit
    pull(n) = F + T*n (ms; F = intercept, T = slope), choosing P as the recompute
    curve's secant slope from the origin at the break-even n*,

        P = recompute(n*) / n*   (us/token, recompute in ms x 1e3),

    makes the router's idle crossover F/(P - T) equal n* exactly, because recompute(n*) =
    pull(n*). A convex (quadratic) recompute has no single per-token figure; the secant at
    n* is the one that keeps the decision right on both sides of the break-even. With no
    crossover (pull-always-wins) n* is replaced by the shortest measured length.
    """
    notes: list[str] = []
    warnings: list[str] = []
    if fit.status == "recompute-always-wins":
        raise NotRecommended("P2P is not recommended on this setup: recomputing beat the pull at every measured length; no cost model emitted")
    n_eval: float | None = None
    if fit.status == "crossover" and fit.break_even_tokens and fit.break_even_tokens > 0:
        n_eval, where = float(fit.break_even_tokens), "the break-even"
    elif fit.measured_range:
        n_eval, where = float(fit.measured_range[0]), "the shortest measured length"
    if not n_eval or n_eval <= 0:
        raise InputError("the fit records neither a break-even nor a measured range; cannot place the cost model's per-token figures")
    fixed_ms = fit.pull.intercept_ms
    if fixed_ms < 0:
        warnings.append(f"the pull fit's intercept is negative ({fixed_ms:.3g} ms); transferFixedMs set to 0: sweep shorter prefixes to pin the floor")
        fixed_ms = 0.0
    transfer_us = (curve_ms(fit.pull, n_eval) - fit.pull.intercept_ms) * 1e3 / n_eval
    prefill_us = curve_ms(fit.recompute, n_eval) * 1e3 / n_eval
    notes.append(
        f"prefillMicrosecondsPerToken = recompute({n_eval:,.0f}) / {n_eval:,.0f} = {prefill_us:.3f} us/token: "
        f"the {fit.recompute.model} recompute curve's secant slope from 0 at {where}, so the router's idle comparison "
        "crosses where the measured curves do"
    )
    if fit.pull.per_token2_ns:
        notes.append(f"the pull fit is {fit.pull.model}: transferMicrosecondsPerToken is its secant slope above the floor at {n_eval:,.0f}")
    if prefill_us <= transfer_us:
        warnings.append("prefill per token does not exceed transfer per token at the evaluation point: the router would never pull")
    values = {
        "prefillMicrosecondsPerToken": round(prefill_us, 3),
        "transferMicrosecondsPerToken": round(transfer_us, 3),
        "transferFixedMs": round(fixed_ms, 3),
    }
    return values, notes, warnings


def render_costmodel(fit: FitResult, origin: str = "") -> tuple[str, list[str], list[str]]:
    """The ``costModel`` block; load-dependent keys are commented out as not calibrated."""
    values, notes, warnings = cost_model(fit)
    lines = [
        f"# kvcal: idle pull-versus-recompute fit{' of ' + origin if origin else ''}; place under the {PLUGIN_TYPE} parameters.",
        "# prefillMicrosecondsPerToken: recompute curve's secant slope at the break-even (see docs/emit.md).",
        "costModel:",
        *(f"  {k}: {v}" for k, v in values.items()),
        "  # Not calibrated by kvcal (load-dependent): measure under production load, then set:",
        *(f"  # {k}:" for k in LOAD_DEPENDENT_COST_KEYS),
    ]
    return "\n".join(lines) + "\n", notes, warnings


def _recorded_kv_config(fit: FitResult) -> dict[str, Any]:
    """The consumer's kv-transfer-config the run used (the engine that pulls), else {}."""
    return dict((fit.setup.kv_transfer_config or {}).get("consumer") or {})


def engine_side(fit: FitResult, block_size: int, transport: str | None = None) -> tuple[dict[str, Any], list[str], list[str]]:
    """Container ``args`` and ``env`` for the measured transport (documented shapes, see module docs).

    Kubernetes expands ``$(POD_IP)`` in args and later env values from the earlier
    ``POD_IP`` env (downward API), so the side channel binds the pod's own address.
    """
    notes: list[str] = []
    warnings: list[str] = []
    name = transport or fit.setup.transport
    if not name:
        raise InputError("--format vllm needs the measured transport and the fit records none: pass --transport p2p-tier|nixl-pd")
    kind = canonical_transport(str(name))
    recorded = _recorded_kv_config(fit)
    seed = fit.setup.python_hash_seed
    extra = dict(recorded.get("kv_connector_extra_config") or {})
    pod_ip = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    if kind == "p2p-tier":
        if "cpu_bytes_to_use" not in extra:
            extra["cpu_bytes_to_use"] = 64 * 2**30
            warnings.append("cpu_bytes_to_use is a default (64 GiB over all workers), not from the run: size it to the host memory the tier may use")
        extra.setdefault("spec_name", "TieringOffloadingSpec")
        extra.setdefault("offload_prompt_only", True)
        tiers = extra.get("secondary_tiers") or [{"type": "p2p", "port": 7777}]
        extra["secondary_tiers"] = [{**tier, "host": "$(POD_IP)"} for tier in tiers]
        config = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra}
        env = pod_ip + [
            {"name": "VLLM_P2P_SIDE_CHANNEL_HOST", "value": "$(POD_IP)"},
            {"name": "VLLM_P2P_SIDE_CHANNEL_PORT", "value": "5710"},
            {"name": "PYTHONHASHSEED", "value": str(seed if seed is not None else 0)},
        ]
        if seed is None:
            warnings.append("PYTHONHASHSEED 0 is a default, not from the run (it records none): use the value every engine runs with")
        notes.append("PYTHONHASHSEED must be the same on every engine, or no block hash matches and pulls silently move nothing")
    else:
        config = {"kv_connector": "NixlConnector", "kv_role": "kv_both",
                  "kv_buffer_device": recorded.get("kv_buffer_device", "cuda")}
        if "kv_buffer_device" in recorded:
            notes.append(f"kv_buffer_device {recorded['kv_buffer_device']!r} as in the run; use 'cuda' on GPU engines")
        env = pod_ip + [
            {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "$(POD_IP)"},
            {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": "5600"},
        ]
        warnings.append(
            f"this run measured the P/D handoff (NixlConnector), but {PLUGIN_TYPE} drives the P2P tier (OffloadingConnector): "
            "treat the threshold as a proxy and re-measure with --transport p2p-tier on GPU engines"
        )
    args = ["--block-size", str(block_size), "--kv-transfer-config", json.dumps(config, separators=(",", ":"))]
    return {"transport": kind, "args": args, "env": env}, notes, warnings


def render_vllm(fit: FitResult, block_size: int, transport: str | None = None, origin: str = "") -> tuple[str, list[str], list[str]]:
    """A container-spec fragment (``args`` + ``env``) for every vLLM engine in the pool."""
    from ruamel.yaml import YAML
    import io

    spec, notes, warnings = engine_side(fit, block_size, transport)
    buf = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.dump({"args": spec["args"], "env": spec["env"]}, buf)
    head = (f"# kvcal: vLLM engine side for transport {spec['transport']}{' (measured by ' + origin + ')' if origin else ''}.\n"
            "# Merge into each engine container; keep --block-size equal to the router's index block size.\n")
    return head + buf.getvalue(), notes, warnings


# ---------------------------------------------------------------- entry point


def load_input(path: Path) -> FitResult:
    """A FitResult from any input :func:`kvcal.fit.load_fit_input` accepts (fitted now when it has no fit)."""
    return load_fit_input(path, probes=False).fitted()


def emit(source: Path | FitResult, options: EmitOptions) -> EmitResult:
    """Compute the threshold and render ``options.format``; for helm, patch (and maybe write) the values file."""
    fit = source if isinstance(source, FitResult) else load_input(Path(source))
    origin = "" if isinstance(source, FitResult) else str(source)
    t = compute_threshold(fit, margin=options.margin, block_size=options.block_size,
                          allow_extrapolation=options.allow_extrapolation, allow_disturbed=options.allow_disturbed)
    notes: list[str] = list(t.steps)
    warnings: list[str] = list(t.warnings)
    if options.format == "env":
        return EmitResult(render_env(t), t, tuple(notes), tuple(warnings))
    if options.format == "json":
        return EmitResult(render_json(t), t, tuple(notes), tuple(warnings))
    if options.format == "plugin":
        text = render_plugin(t, prefix_match_producer=options.prefix_match_producer,
                             prefill_profile=options.prefill_profile, origin=origin)
        return EmitResult(text, t, tuple(notes), tuple(warnings))
    if options.format == "costmodel":
        text, more_notes, more_warn = render_costmodel(fit, origin)
        return EmitResult(text, t, tuple(notes + more_notes), tuple(warnings + more_warn))
    if options.format == "vllm":
        text, more_notes, more_warn = render_vllm(fit, t.block_size, options.transport, origin)
        return EmitResult(text, t, tuple(notes + more_notes), tuple(warnings + more_warn))
    from kvcal.emit import helm
    assert options.values is not None
    spec = helm.PluginSpec(t.min_cached_token_delta, options.prefix_match_producer, options.prefill_profile)
    out = helm.patch_values_file(options.values, spec, add_plugin=options.add_plugin,
                                 in_place=options.in_place, diff=options.diff)
    return EmitResult(out.stdout, t, tuple(notes + list(out.notes)), tuple(warnings + list(out.warnings)),
                      written=out.written, backup=out.backup)
