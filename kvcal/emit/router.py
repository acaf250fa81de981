"""The router side: the ``p2p-source-producer`` entry, and the one-line and JSON forms of the threshold.

The plugin (llm-d-router main) takes exactly three parameters and its config loader
rejects any other key, refusing the whole config: :data:`PLUGIN_PARAMETERS`. Names are
resolved in this order (:func:`plugin_names`): a flag, then the values file (its
existing plugin entry, its prefix-match producer, its scheduling profiles), then the
plugin's documented default for the deployment shape: ``prefill`` for a
prefill/decode deployment (the plugin's own default), ``default`` for the llm-d P2P
guide's single profile. The shape is ``--deployment``, else guessed from the measured
transport (p2p-tier: the P2P guide; otherwise P/D).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kvcal.threshold.choose import Threshold, fmt
from kvcal.transports import available

PLUGIN_TYPE = "p2p-source-producer"
ALPHA_FLAG = "allow-experimental-plugins"
"""The EPP flag without which it refuses a config that uses an alpha plugin, as p2p-source-producer is."""
ALPHA_NOTE = (
    f"{PLUGIN_TYPE} is an alpha plugin: the EPP must run with --{ALPHA_FLAG}=true "
    "or it refuses the whole config (Helm: router.epp.flags, see --format helm)"
)
"""The one stderr line every router-side format prints."""
THRESHOLD_KEY = "minCachedTokenDelta"
PLUGIN_PARAMETERS = ("prefixMatchInfoProducerName", THRESHOLD_KEY, "prefillProfileName")
"""Every parameter the router's p2p-source-producer accepts (llm-d-router main); nothing else may be emitted."""
DEFAULT_PREFIX_MATCH_PRODUCER = "precise-prefix-cache-producer"
PLUGIN_DEFAULT_PREFILL_PROFILE = "prefill"
"""The plugin's documented default: right for a prefill/decode deployment."""
P2P_GUIDE_PREFILL_PROFILE = "default"
"""What the single-profile llm-d P2P guide sets (its only scheduling profile)."""
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


@dataclass(frozen=True)
class FoundNames:
    """Names a values file gives (None where it says nothing) and where they were found."""

    prefix_match_producer: str | None = None
    prefill_profile: str | None = None
    where: str = ""


@dataclass(frozen=True)
class PluginNames:
    prefix_match_producer: str
    prefill_profile: str
    notes: tuple[str, ...] = ()


def shape_of(deployment: str | None, transport: str | None) -> tuple[str, str]:
    """(shape, why): ``p2p`` or ``pd``, from the flag or the measured transport."""
    if deployment:
        return deployment, f"--deployment {deployment}"
    if transport in available() and available()[transport].deployment == "p2p":
        return "p2p", "the run measured the P2P tier (the llm-d P2P guide's single profile)"
    return "pd", "no --deployment and the run did not measure the P2P tier"


def plugin_names(
    *,
    prefix_match_producer: str | None,
    prefill_profile: str | None,
    deployment: str | None,
    transport: str | None,
    found: FoundNames | None = None,
) -> PluginNames:
    """Resolve both names: flag, then the values file, then the deployment shape's default."""
    found = found or FoundNames()
    notes: list[str] = []
    producer = prefix_match_producer or found.prefix_match_producer or DEFAULT_PREFIX_MATCH_PRODUCER
    if not prefix_match_producer:
        where = (
            f"from {found.where}"
            if found.prefix_match_producer
            else "the guide's producer name (--prefix-match-producer)"
        )
        notes.append(f"prefixMatchInfoProducerName {producer}: {where}")
    profile = prefill_profile or found.prefill_profile
    if not prefill_profile:
        if profile:
            notes.append(f"prefillProfileName {profile}: from {found.where}")
        else:
            shape, why = shape_of(deployment, transport)
            profile = P2P_GUIDE_PREFILL_PROFILE if shape == "p2p" else PLUGIN_DEFAULT_PREFILL_PROFILE
            shape_name = "single-profile P2P" if shape == "p2p" else "prefill/decode"
            notes.append(
                f"prefillProfileName {profile}: the default for a {shape_name} "
                f"deployment ({why}); --prefill-profile or --values to change it"
            )
    return PluginNames(producer, profile or PLUGIN_DEFAULT_PREFILL_PROFILE, tuple(notes))  # set above; for the types


def plugin_parameters(t: Threshold, names: PluginNames) -> dict[str, Any]:
    """The entry's parameters, in the guide's order; keys are always a subset of :data:`PLUGIN_PARAMETERS`."""
    params = {
        "prefixMatchInfoProducerName": names.prefix_match_producer,
        "prefillProfileName": names.prefill_profile,
        "minCachedTokenDelta": t.min_cached_token_delta,
    }
    assert set(params) <= set(PLUGIN_PARAMETERS)
    return params


def render_plugin(t: Threshold, names: PluginNames, *, origin: str = "") -> str:
    """The plugin entry as a one-item YAML list, ready to paste under ``plugins:``."""
    head = f"# kvcal: from {origin}; " if origin else "# kvcal: "
    lines = [
        f"{head}break-even {ci_text(t)}, block size {t.block_size}; {t.cost_line()}",
        f"- type: {PLUGIN_TYPE}",
        "  parameters:",
    ]
    lines += [f"    {k}: {yaml_scalar(v)}" for k, v in plugin_parameters(t, names).items()]
    return "\n".join(lines) + "\n"


def yaml_scalar(value: Any) -> str:
    """Plain when it cannot be misread (as the guide writes names), else double-quoted."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    value = str(value)
    plain = re.fullmatch(r"[A-Za-z][A-Za-z0-9._/-]*", value) and value.lower() not in _YAML_WORDS
    return value if plain else json.dumps(value)


def render_env(t: Threshold) -> str:
    """Exactly one line, as the llm-d recipe prints it."""
    return f"MIN_CACHED_TOKEN_DELTA={t.min_cached_token_delta}\n"


def render_json(t: Threshold, affinity: dict[str, Any]) -> str:
    """The threshold's keys plus the affinity filter's ``peakPrefillThroughput`` (and its chunk and interval)."""
    return json.dumps({**t.as_json(), **affinity}, indent=2) + "\n"


def ci_text(t: Threshold) -> str:
    point = fmt(t.break_even_tokens) if t.break_even_tokens is not None else "n/a"
    return f"{point} [{fmt(t.break_even_ci[0])}, {fmt(t.break_even_ci[1])}]" if t.break_even_ci else point
