"""The edit to one embedded EPP config: set ``minCachedTokenDelta`` (and ``costModel``) in its
``p2p-source-producer`` entries, or insert one (``--add-plugin``).

In a config that routes on remaining work (:mod:`kvcal.emit.remaining_work_values`) the value set
is 1, not the threshold, and the affinity filter's ``maxTTFTPenaltyMs`` is set when
``--ttft-penalty-ms`` gives one.

:func:`intend` applies the edit to loaded data; the same function builds the expectation the
patched text is checked against (:mod:`kvcal.emit.helm_patch`). :func:`splice_value` makes the
edit in the config's text when only existing scalars change; :func:`roundtrip_config` when the
structure changes (a missing key, a new entry).
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from kvcal.emit.affinity import AFFINITY_KEY, AFFINITY_TYPE
from kvcal.emit.deployed_values import found_names
from kvcal.emit.embedded_configs import get_key, plugins_node, rt_yaml, scalar
from kvcal.emit.remaining_work_values import routes_node, routes_on_remaining_work
from kvcal.emit.router import PLUGIN_TYPE, plugin_names
from kvcal.emit.router import THRESHOLD_KEY as KEY
from kvcal.emit.work_range import PENALTY_KEY, REMAINING_WORK_DELTA, penalty_value
from kvcal.errors import InputError

COST_MODEL_KEY = "costModel"


@dataclass(frozen=True)
class PluginSpec:
    """What to set, and how to name a plugin entry kvcal inserts (``--add-plugin``).

    ``prefix_match_producer`` / ``prefill_profile`` None: taken from each config (its
    prefix-match producer, its scheduling profiles), else the deployment shape's default
    (:func:`kvcal.emit.router.plugin_names`). ``cost_model`` (``--with-costmodel`` only)
    is written under the plugin's parameters; ``peak_prefill_throughput`` is set in every
    ``prefix-cache-affinity-filter`` of a patched config, ``ttft_penalty_ms`` (``--ttft-penalty-ms``)
    in those of a config that routes on remaining work.
    """

    min_cached_token_delta: int
    prefix_match_producer: str | None = None
    prefill_profile: str | None = None
    deployment: str | None = None
    transport: str | None = None
    cost_model: dict[str, Any] | None = None
    peak_prefill_throughput: int | None = None
    ttft_penalty_ms: float | None = None

    def delta_for(self, remaining_work: bool) -> int:
        """The ``minCachedTokenDelta`` a config gets: 1 where it routes on remaining work, else the threshold."""
        return REMAINING_WORK_DELTA if remaining_work else self.min_cached_token_delta


def entries_of(plugins: SequenceNode, plugin_type: str) -> list[MappingNode]:
    return [p for p in plugins.value if isinstance(p, MappingNode) and scalar(get_key(p, "type")) == plugin_type]


def p2p_entries(plugins: SequenceNode) -> list[MappingNode]:
    return entries_of(plugins, PLUGIN_TYPE)


def _insert_index(plugins: list[Any], producer: str) -> int:
    """Right after the prefix-match producer (by name, else by type); at the end if absent."""
    for i, entry in enumerate(plugins):
        if not isinstance(entry, dict):
            continue
        if entry.get("name") == producer or (entry.get("name") is None and entry.get("type") == producer):
            return i + 1
    return len(plugins)


def entry_names(doc: Any, spec: PluginSpec, where: str = "") -> tuple[str, str, tuple[str, ...]]:
    """(prefix-match producer, prefill profile, notes) an inserted entry names."""
    names = plugin_names(
        prefix_match_producer=spec.prefix_match_producer,
        prefill_profile=spec.prefill_profile,
        deployment=spec.deployment,
        transport=spec.transport,
        found=found_names(doc, where),
    )
    return names.prefix_match_producer, names.prefill_profile, names.notes


def _params(entry: Any) -> Any:
    """The plugin's parameters mapping, made when absent; anything else there is the user's to fix, not to replace."""
    params = entry.get("parameters")
    if params is None:
        entry["parameters"] = params = type(entry)()
    if not isinstance(params, dict):
        kind = "a list" if isinstance(params, list) else f"the value {str(params)[:40]!r}"
        raise InputError(
            f"the {entry.get('type', 'plugin')} entry's parameters are {kind}, not a mapping of "
            "name: value; fix the values file (nothing was written)"
        )
    return params


def _new_entry(doc: Any, spec: PluginSpec, delta: int) -> tuple[Any, str]:
    """A p2p-source-producer entry of ``doc``'s mapping type, and the producer it names."""
    producer, profile, _ = entry_names(doc, spec)
    mapping = type(doc)
    entry = mapping()
    entry["type"] = PLUGIN_TYPE
    entry["parameters"] = mapping()
    entry["parameters"].update({"prefixMatchInfoProducerName": producer, "prefillProfileName": profile, KEY: delta})
    if spec.cost_model is not None:
        entry["parameters"][COST_MODEL_KEY] = copy.deepcopy(spec.cost_model)
    return entry, producer


def intend(doc: Any, spec: PluginSpec, add_plugin: bool) -> str:
    """Apply the intended edit to loaded data (ruamel round-trip or plain); returns the action.

    The same function builds the expectation the patched text is checked against.
    """
    plugins = doc.get("plugins") if isinstance(doc, dict) else None
    plugin_list = plugins if isinstance(plugins, list) else []
    remaining = routes_on_remaining_work(plugins)
    entries = [p for p in plugin_list if isinstance(p, dict) and p.get("type") == PLUGIN_TYPE]
    action = "no-plugin"
    if entries:
        for entry in entries:
            _params(entry)[KEY] = spec.delta_for(remaining)
            if spec.cost_model is not None:
                _params(entry)[COST_MODEL_KEY] = copy.deepcopy(spec.cost_model)
        action = "set"
    elif add_plugin and isinstance(plugins, list):
        entry, producer = _new_entry(doc, spec, spec.delta_for(remaining))
        plugins.insert(_insert_index(plugins, producer), entry)
        action = "added-plugin"
    if action != "no-plugin":
        for entry in plugin_list:
            if isinstance(entry, dict) and entry.get("type") == AFFINITY_TYPE:
                for key, value in affinity_values(spec, remaining):
                    _params(entry)[key] = value
    return action


def affinity_values(spec: PluginSpec, remaining_work: bool) -> list[tuple[str, int | float]]:
    """What the affinity filters of a patched config get: the peak throughput, and the budget under remaining work."""
    out: list[tuple[str, int | float]] = []
    if spec.peak_prefill_throughput is not None:
        out.append((AFFINITY_KEY, spec.peak_prefill_throughput))
    if remaining_work and spec.ttft_penalty_ms is not None:
        out.append((PENALTY_KEY, penalty_value(spec.ttft_penalty_ms)))
    return out


def splice_value(inner: str, inner_root: Any, spec: PluginSpec) -> str | None:
    """Set the keys by replacing each existing scalar's text; None when a structural edit is needed."""
    if spec.cost_model is not None:
        return None
    plugins = plugins_node(inner_root)
    if plugins is None:
        return inner
    remaining = routes_node(plugins)
    targets: list[tuple[MappingNode, str, int | float]] = [
        (e, KEY, spec.delta_for(remaining)) for e in p2p_entries(plugins)
    ]
    for key, new in affinity_values(spec, remaining):
        targets += [(e, key, new) for e in entries_of(plugins, AFFINITY_TYPE)]
    edits: list[tuple[int, int, int | float]] = []
    for entry, key, new in targets:
        value = get_key(get_key(entry, "parameters"), key)
        if not isinstance(value, ScalarNode):
            return None
        edits.append((value.start_mark.index, value.end_mark.index, new))
    out = inner
    for start, end, new in sorted(edits, reverse=True):
        out = out[:start] + str(new) + out[end:]
    return out


def unknown_parameters(inner_root: Any, allowed: set[str]) -> list[str]:
    """Keys of existing p2p-source-producer entries that llm-d-router main would reject."""
    plugins = plugins_node(inner_root)
    found: list[str] = []
    for entry in p2p_entries(plugins) if plugins is not None else []:
        params = get_key(entry, "parameters")
        if isinstance(params, MappingNode):
            found += [str(scalar(k)) for k, _ in params.value if scalar(k) not in allowed]
    return found


def roundtrip_config(inner: str, inner_root: Any, spec: PluginSpec, add_plugin: bool) -> str:
    """The config's text after :func:`intend`, through a ruamel round-trip with its indentation guessed."""
    yaml = rt_yaml(inner_root)
    doc = yaml.load(inner)
    intend(doc, spec, add_plugin)
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()
