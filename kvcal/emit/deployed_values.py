"""What a deployed Helm values file says: the threshold its EPP config sets, the names its plugins take."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from kvcal.emit.router import DEFAULT_PREFIX_MATCH_PRODUCER, PLUGIN_TYPE, FoundNames
from kvcal.emit.router import THRESHOLD_KEY as KEY
from kvcal.errors import InputError
from kvcal.files.reading import read_text
from kvcal.files.yaml_guard import check_ruamel_text, describe

PREFIX_PRODUCER_TYPE = DEFAULT_PREFIX_MATCH_PRODUCER


def read_threshold(path: Path) -> int:
    """``minCachedTokenDelta`` of the ``p2p-source-producer`` plugin in a Helm values file.

    The EPP config sits in the values as a YAML *string* (``pluginsCustomConfig``), so
    every string that mentions the plugin is parsed as YAML too. The plugin's default
    (1) applies when it is configured without the key.
    """
    if not path.exists() and not path.is_symlink():
        raise InputError(f"{path}: no such values file")
    text = read_text(path, f"{path} (values file)")  # no FIFO, binary or unreadable file (kvcal/files/reading.py)
    yaml, data = _parse_values(text, path, str(path))
    if folded := _folded_configs(yaml.compose(text)):
        raise InputError(folded_config_problem(str(path), folded[0]))
    found: list[int] = []
    broken: list[str] = []
    _collect_thresholds(data, yaml, found, broken, str(path), "")
    if broken:  # the router would not start on it either: no threshold is read past it
        raise InputError(broken[0])
    if not found:
        raise InputError(f"{path}: no '{PLUGIN_TYPE}' plugin found (looked in the values and in embedded EPP configs)")
    if len(set(found)) > 1:
        raise InputError(
            f"{path}: several '{PLUGIN_TYPE}' plugins with different {KEY} {sorted(set(found))}; pass --deployed"
        )
    return found[0]


def folded_config_problem(name: str, where: str) -> str:
    return (
        f"{name}: the embedded config {where} is a folded block ('>'), which joins its lines "
        "into one: the router would not read it as YAML either; write it as a literal block ('|')"
    )


def _folded_configs(node: Any, where: str = "") -> list[str]:
    """Key paths of folded (``>``) scalars in a composed tree that name the plugin.

    Those are embedded configs the router cannot read.
    """
    if isinstance(node, MappingNode):
        return [
            found
            for key, value in node.value
            for found in _folded_configs(value, f"{where}.{key.value}" if where else str(key.value))
        ]
    if isinstance(node, SequenceNode):
        return [found for index, item in enumerate(node.value) for found in _folded_configs(item, f"{where}[{index}]")]
    if isinstance(node, ScalarNode) and node.style == ">" and PLUGIN_TYPE in str(node.value):
        return [where]
    return []


def _collect_thresholds(node: Any, yaml: Any, found: list[int], broken: list[str], path: str, where: str) -> None:
    """Every plugin entry's threshold; ``broken`` gets why each embedded config that names the plugin did not parse.

    ``where``: the key path of ``node`` in the values file, to name an embedded config in a message.
    """
    if isinstance(node, dict):
        if node.get("type") == PLUGIN_TYPE:
            params = node.get("parameters") or {}
            value = params.get(KEY, 1) if isinstance(params, dict) else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"{KEY} must be an integer >= 1, found {value!r}")
            found.append(value)
        for key, child in node.items():
            _collect_thresholds(child, yaml, found, broken, path, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            _collect_thresholds(child, yaml, found, broken, path, f"{where}[{index}]")
    elif isinstance(node, str) and "\n" in node and PLUGIN_TYPE in node:  # an embedded EPP config
        try:
            check_ruamel_text(node, f"{path}: the embedded config {where}")
            _collect_thresholds(yaml.load(io.StringIO(node)), yaml, found, broken, path, where)
        except YAMLError as err:
            broken.append(
                f"{path}: the embedded config {where} names {PLUGIN_TYPE} but is not valid YAML "
                f"({describe(err)}); the router could not read it either"
            )


def found_names(config: Any, where: str = "") -> FoundNames:
    """Names an EPP config already gives the plugin: its own entry's, else its producer's and its profiles'.

    - ``prefixMatchInfoProducerName``: an existing p2p-source-producer entry's value,
      else the name (or type) of the config's precise prefix-cache producer.
    - ``prefillProfileName``: an existing entry's value, else ``prefill`` when a scheduling
      profile has that name (a P/D deployment), else the name of the only profile.
    """
    if not isinstance(config, dict):
        return FoundNames(where=where)
    plugins = [p for p in config.get("plugins") or [] if isinstance(p, dict)]
    entry = next((p for p in plugins if p.get("type") == PLUGIN_TYPE), None)
    raw = entry.get("parameters") if entry is not None else None
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    producer = params.get("prefixMatchInfoProducerName")
    if not isinstance(producer, str):
        candidates = [p for p in plugins if str(p.get("type", "")).endswith("prefix-cache-producer")]
        preferred = [p for p in candidates if p.get("type") == PREFIX_PRODUCER_TYPE] or candidates
        producer = (preferred[0].get("name") or preferred[0].get("type")) if preferred else None
    profile = params.get("prefillProfileName")
    if not isinstance(profile, str):
        profiles = [
            str(p.get("name")) for p in config.get("schedulingProfiles") or [] if isinstance(p, dict) and p.get("name")
        ]
        profile = "prefill" if "prefill" in profiles else (profiles[0] if len(profiles) == 1 else None)
    return FoundNames(producer if isinstance(producer, str) else None, profile, where or "the values file")


def read_names(path: Path) -> FoundNames:
    """:func:`found_names` of the EPP config a values file deploys.

    That is the one ``pluginsConfigFile`` names, else the first.
    """
    text = read_text(Path(path), f"--values {path}")
    yaml, data = _parse_values(text, path, f"--values {path}")
    configs: list[tuple[bool, str, Any]] = []
    broken: list[str] = []
    _collect_configs(data, yaml, configs, broken, f"--values {path}")
    if not configs:
        raise InputError(
            broken[0]
            if broken
            else f"--values {path} has no embedded EPP config "
            "(router.epp.pluginsCustomConfig or inferenceExtension.pluginsCustomConfig)"
        )
    _active, fname, config = sorted(configs, key=lambda c: not c[0])[0]
    return found_names(config, f"{path} [{fname}]")


def _collect_configs(node: Any, yaml: Any, out: list[tuple[bool, str, Any]], broken: list[str], what: str) -> None:
    """(selected by pluginsConfigFile, file name, parsed config) for every embedded EPP config.

    Why the others failed goes to ``broken``.
    """
    if isinstance(node, dict):
        custom = node.get("pluginsCustomConfig")
        if isinstance(custom, dict):
            for fname, text in custom.items():
                if isinstance(text, str):
                    try:
                        check_ruamel_text(text, f"{what}: embedded config pluginsCustomConfig[{fname}]")
                        parsed = yaml.load(io.StringIO(text))
                    except YAMLError as err:
                        broken.append(
                            f"{what}: embedded config pluginsCustomConfig[{fname}] is not valid YAML ({describe(err)})"
                        )
                        continue
                    if isinstance(parsed, dict) and isinstance(parsed.get("plugins"), list):
                        out.append((node.get("pluginsConfigFile") == fname, str(fname), parsed))
        for key, child in node.items():
            if key != "pluginsCustomConfig":
                _collect_configs(child, yaml, out, broken, what)
    elif isinstance(node, list):
        for child in node:
            _collect_configs(child, yaml, out, broken, what)


def _parse_values(text: str, path: Path, label: str) -> tuple[YAML, Any]:
    """A values file's text read safely (user YAML checks first); InputError naming ``label`` if it is not YAML."""
    yaml = YAML(typ="safe", pure=True)
    try:
        check_ruamel_text(text, str(path))
        return yaml, yaml.load(text)
    except (YAMLError, UnicodeDecodeError) as err:
        raise InputError(f"{label}: not valid YAML ({describe(err)})") from None
