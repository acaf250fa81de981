"""Remaining-work routing in an EPP config being patched: which configs route on it, and what in them defeats it.

A config routes on remaining prefill work when its ``context-length-aware`` plugin names a
``reusableTokensProducerName`` (llm-d-router PR 2559). There ``minCachedTokenDelta`` does double
duty: the P2P source publishes ``G = S - D + 1`` reusable tokens, so a ``D`` above 1 lengthens every
routed request by ``D - 1`` and ``--format helm`` sets it to 1 (:mod:`kvcal.emit.epp_config_edit`).
What the guide warns of, checked here (each a warning naming its line, nothing changed):

* a ``p2p-source-producer`` without ``prefixMatchInfoProducerName``, which silently wires the
  approximate producer, or one naming no plugin of the config;
* an ``affinityThreshold`` at or above what a fully cached prefix can score: the CPU tier's weight
  (``indexerConfig.kvCacheBackendConfigs`` of the precise producer, llm-d's default 0.8) x 0.99, the
  guide's "0.35 < 0.4 x 0.99".

Both the loaded-data form (:func:`routes_on_remaining_work`, for the edit and its expectation) and
the composed-node form (:func:`inspect`, for lines) read the same keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.nodes import MappingNode, Node, SequenceNode

from kvcal.emit.affinity import AFFINITY_TYPE
from kvcal.emit.embedded_configs import get_key, plugins_node, scalar
from kvcal.emit.router import DEFAULT_PREFIX_MATCH_PRODUCER, PLUGIN_TYPE, THRESHOLD_KEY
from kvcal.emit.work_range import CONTEXT_LENGTH_TYPE, PENALTY_KEY, REMAINING_WORK_DELTA, REUSABLE_KEY

PRODUCER_KEY = "prefixMatchInfoProducerName"
AFFINITY_THRESHOLD_KEY = "affinityThreshold"
CPU_TIER = "cpu"
DEFAULT_CPU_WEIGHT = 0.8
"""llm-d's CPU-tier weight in the precise index when the config sets none (GPU 1.0)."""
FULL_PREFIX_SHARE = 0.99
"""The cached share a fully cached prefix scores by (the guide: affinityThreshold 0.35 < 0.4 x 0.99)."""

Where = Callable[[Node], str]  # a node -> "FILE line N", for a warning


@dataclass(frozen=True)
class RemainingWork:
    """One config that routes on remaining work: where it is, and the budget it sets itself (None: none)."""

    where: str
    penalty_ms: float | None


def routes_on_remaining_work(plugins: Any) -> bool:
    """Loaded data: a ``context-length-aware`` entry with ``reusableTokensProducerName`` in the plugin list."""
    return isinstance(plugins, list) and any(
        isinstance(p, dict)
        and p.get("type") == CONTEXT_LENGTH_TYPE
        and isinstance(p.get("parameters"), dict)
        and p["parameters"].get(REUSABLE_KEY) is not None
        for p in plugins
    )


def routes_node(plugins: SequenceNode | None) -> bool:
    """The same test on a composed plugin list."""
    return plugins is not None and any(
        isinstance(p, MappingNode)
        and scalar(get_key(p, "type")) == CONTEXT_LENGTH_TYPE
        and get_key(get_key(p, "parameters"), REUSABLE_KEY) is not None
        for p in plugins.value
    )


def inspect(inner_root: Any, where: str, line: Where) -> tuple[RemainingWork | None, list[str]]:
    """The config's remaining-work record (None when it does not route on remaining work) and its warnings."""
    plugins = plugins_node(inner_root)
    if not routes_node(plugins):
        return None, []
    assert plugins is not None
    entries = [p for p in plugins.value if isinstance(p, MappingNode)]
    warnings = _delta_warnings(entries, line) + _producer_warnings(entries, line)
    warnings += _affinity_warnings(entries, line)
    penalties = [_number(_param(e, PENALTY_KEY)) for e in _of(entries, AFFINITY_TYPE)]
    found = [p for p in penalties if p is not None]
    return RemainingWork(where, found[0] if found else None), warnings


def _of(entries: list[MappingNode], plugin_type: str) -> list[MappingNode]:
    return [e for e in entries if scalar(get_key(e, "type")) == plugin_type]


def _param(entry: MappingNode, key: str) -> Any:
    return get_key(get_key(entry, "parameters"), key)


def _number(node: Any) -> float | None:
    text = scalar(node)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _delta_warnings(entries: list[MappingNode], line: Where) -> list[str]:
    out = []
    for entry in _of(entries, PLUGIN_TYPE):
        value = _param(entry, THRESHOLD_KEY)
        old = scalar(value)
        if old is not None and _number(value) != REMAINING_WORK_DELTA:
            out.append(
                f"{line(value)}: {THRESHOLD_KEY} {old} reset to {REMAINING_WORK_DELTA}: this config routes on "
                f"remaining work ({CONTEXT_LENGTH_TYPE} with {REUSABLE_KEY}), where the source publishes "
                f"S - D + 1 reusable tokens, so D = {old} would lengthen every routed request by D - 1; "
                "the threshold sets the work-range boundary instead"
            )
    return out


def _producer_warnings(entries: list[MappingNode], line: Where) -> list[str]:
    names = {scalar(get_key(e, "name")) or scalar(get_key(e, "type")) for e in entries}
    out = []
    for entry in _of(entries, PLUGIN_TYPE):
        value = _param(entry, PRODUCER_KEY)
        producer = scalar(value)
        if value is None:
            out.append(
                f"{line(entry)}: {PLUGIN_TYPE} has no {PRODUCER_KEY}: the router then wires the approximate "
                f"prefix producer, silently; name the {DEFAULT_PREFIX_MATCH_PRODUCER} entry's name there"
            )
        elif producer not in names:
            out.append(
                f"{line(value)}: {PRODUCER_KEY} {producer!r} names no plugin in this config; name the "
                f"{DEFAULT_PREFIX_MATCH_PRODUCER} entry's name (or add one so named)"
            )
    return out


def _affinity_warnings(entries: list[MappingNode], line: Where) -> list[str]:
    weight, source = _cpu_weight(entries)
    limit = weight * FULL_PREFIX_SHARE
    out = []
    for entry in _of(entries, AFFINITY_TYPE):
        value = _param(entry, AFFINITY_THRESHOLD_KEY)
        threshold = _number(value)
        if threshold is not None and threshold >= limit:
            out.append(
                f"{line(value)}: {AFFINITY_THRESHOLD_KEY} {scalar(value)} is at or above what a fully cached prefix "
                f"can score ({source} {weight:g} x {FULL_PREFIX_SHARE:g} = {limit:.4g}): a prefix held in the CPU "
                f"tier never keeps its request; set it below {limit:.4g} (the guide: 0.35 with a CPU weight of 0.4)"
            )
    return out


def _cpu_weight(entries: list[MappingNode]) -> tuple[float, str]:
    """The CPU tier's weight the precise producer gives (and where it came from), else llm-d's default."""
    for entry in _of(entries, DEFAULT_PREFIX_MATCH_PRODUCER):
        tiers = get_key(_param(entry, "indexerConfig"), "kvCacheBackendConfigs")
        for tier in tiers.value if isinstance(tiers, SequenceNode) else []:
            weight = _number(get_key(tier, "weight"))
            if scalar(get_key(tier, "name")) == CPU_TIER and weight is not None:
                return weight, "the config's CPU-tier weight"
    return DEFAULT_CPU_WEIGHT, "llm-d's default CPU-tier weight"
