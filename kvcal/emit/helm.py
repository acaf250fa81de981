"""Helm values patching: set ``minCachedTokenDelta`` inside the EPP configs embedded as strings.

llm-d's router values carry the whole EndpointPickerConfig as a YAML *string*
(``router.epp.pluginsCustomConfig.<file>: |``, or ``inferenceExtension.pluginsCustomConfig``
in older charts), so ``helm --set`` cannot reach the key. This stage finds every such
embedded config that has a ``p2p-source-producer`` and sets the key there.

How the edit stays minimal: ruamel.yaml composes both the values file and each embedded
config into nodes that carry exact start/end marks. The new value is spliced into the
embedded text at its scalar's marks; a block literal's lines map one-to-one onto lines of
the values file (plus the block's indent), so the changed embedded lines are written back
at their own lines and every other byte of the file is left as it was. Structural edits
(a missing key, ``--add-plugin``) go through a ruamel round-trip of the embedded config
only, with its indentation guessed. An embedded config that is not a block literal is
rewritten as one through a ruamel round-trip of the whole file (reported as a note).
Before anything is returned, the result is re-parsed and compared with the input: it
must equal the input with exactly the intended edits applied, or nothing is written.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from kvcal.emit.affinity import AFFINITY_KEY, AFFINITY_TYPE
from kvcal.emit.helm_files import check_writable, folded_config_problem, found_names, read_threshold, write_in_place  # noqa: F401 (read_threshold: re-exported)
from kvcal.emit.helm_flags import expect_flag, set_alpha_flag
from kvcal.emit.helm_text import (
    Embedded,
    compose,
    find_embedded,
    get_key,
    lookup_path,
    node_at,
    plugins_node,
    problem,
    rt_yaml,
    safe_load,
    scalar,
    set_path,
    unified_diff,
    write_back,
)
from kvcal.emit.router import PLUGIN_PARAMETERS, PLUGIN_TYPE, plugin_names
from kvcal.errors import InputError, KvcalError
from kvcal.outputs import writer_lock
from kvcal.userfiles import read_text

log = logging.getLogger(__name__)

KEY = "minCachedTokenDelta"
COST_MODEL_KEY = "costModel"


@dataclass(frozen=True)
class PluginSpec:
    """What to set, and how to name a plugin entry kvcal inserts (``--add-plugin``).

    ``prefix_match_producer`` / ``prefill_profile`` None: taken from each config (its
    prefix-match producer, its scheduling profiles), else the deployment shape's default
    (:func:`kvcal.emit.router.plugin_names`). ``cost_model`` (``--with-costmodel`` only)
    is written under the plugin's parameters; ``peak_prefill_throughput`` is set in every
    ``prefix-cache-affinity-filter`` of a patched config.
    """

    min_cached_token_delta: int
    prefix_match_producer: str | None = None
    prefill_profile: str | None = None
    deployment: str | None = None
    transport: str | None = None
    cost_model: dict[str, Any] | None = None
    peak_prefill_throughput: int | None = None


@dataclass(frozen=True)
class ConfigChange:
    """What happened to one embedded config (``where`` is its key path and line in the values file)."""

    where: str
    action: str  # "set", "unchanged", "added-plugin", "no-plugin"
    old_values: tuple[Any, ...] = ()


@dataclass(frozen=True)
class PatchResult:
    text: str
    changes: tuple[ConfigChange, ...]
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class FilePatch:
    """What ``patch_values_file`` did: stdout text, notes for stderr, and files written."""

    stdout: str
    result: PatchResult
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    written: Path | None = None
    backup: Path | None = None


def _entries(plugins: SequenceNode, plugin_type: str) -> list[MappingNode]:
    return [p for p in plugins.value if isinstance(p, MappingNode) and scalar(get_key(p, "type")) == plugin_type]


def _p2p_entries(plugins: SequenceNode) -> list[MappingNode]:
    return _entries(plugins, PLUGIN_TYPE)


def _insert_index(plugins: list[Any], producer: str) -> int:
    """Right after the prefix-match producer (by name, else by type); at the end if absent."""
    for i, entry in enumerate(plugins):
        if isinstance(entry, dict) and (entry.get("name") == producer or (entry.get("name") is None and entry.get("type") == producer)):
            return i + 1
    return len(plugins)


def _names(doc: Any, spec: PluginSpec, where: str = "") -> tuple[str, str, tuple[str, ...]]:
    names = plugin_names(prefix_match_producer=spec.prefix_match_producer, prefill_profile=spec.prefill_profile,
                         deployment=spec.deployment, transport=spec.transport, found=found_names(doc, where))
    return names.prefix_match_producer, names.prefill_profile, names.notes


def _params(entry: Any) -> Any:
    """The plugin's parameters mapping, made when absent; anything else there is the user's to fix, not to replace."""
    params = entry.get("parameters")
    if params is None:
        entry["parameters"] = params = type(entry)()
    if not isinstance(params, dict):
        kind = "a list" if isinstance(params, list) else f"the value {str(params)[:40]!r}"
        raise InputError(f"the {entry.get('type', 'plugin')} entry's parameters are {kind}, not a mapping of "
                         "name: value; fix the values file (nothing was written)")
    return params


def _intend(doc: Any, spec: PluginSpec, add_plugin: bool) -> str:
    """Apply the intended edit to loaded data (ruamel round-trip or plain); returns the action.

    The same function builds the expectation the patched text is checked against.
    """
    plugins = doc.get("plugins") if isinstance(doc, dict) else None
    entries = [p for p in plugins if isinstance(p, dict) and p.get("type") == PLUGIN_TYPE] if isinstance(plugins, list) else []
    action = "no-plugin"
    if entries:
        for entry in entries:
            _params(entry)[KEY] = spec.min_cached_token_delta
            if spec.cost_model is not None:
                _params(entry)[COST_MODEL_KEY] = copy.deepcopy(spec.cost_model)
        action = "set"
    elif add_plugin and isinstance(plugins, list):
        producer, profile, _ = _names(doc, spec)
        mapping = type(doc)
        entry = mapping()
        entry["type"] = PLUGIN_TYPE
        entry["parameters"] = mapping()
        entry["parameters"].update({"prefixMatchInfoProducerName": producer, "prefillProfileName": profile,
                                    KEY: spec.min_cached_token_delta})
        if spec.cost_model is not None:
            entry["parameters"][COST_MODEL_KEY] = copy.deepcopy(spec.cost_model)
        plugins.insert(_insert_index(plugins, producer), entry)
        action = "added-plugin"
    if action != "no-plugin" and spec.peak_prefill_throughput is not None and isinstance(plugins, list):
        for entry in plugins:
            if isinstance(entry, dict) and entry.get("type") == AFFINITY_TYPE:
                _params(entry)[AFFINITY_KEY] = spec.peak_prefill_throughput
    return action


def _splice_value(inner: str, inner_root: Any, spec: PluginSpec) -> str | None:
    """Set the keys by replacing each existing scalar's text; None when a structural edit is needed."""
    if spec.cost_model is not None:
        return None
    plugins = plugins_node(inner_root)
    targets = [(e, KEY, spec.min_cached_token_delta) for e in _p2p_entries(plugins)] if plugins is not None else []
    if plugins is not None and spec.peak_prefill_throughput is not None:
        targets += [(e, AFFINITY_KEY, spec.peak_prefill_throughput) for e in _entries(plugins, AFFINITY_TYPE)]
    edits: list[tuple[int, int, int]] = []
    for entry, key, new in targets:
        value = get_key(get_key(entry, "parameters"), key)
        if not isinstance(value, ScalarNode):
            return None
        edits.append((value.start_mark.index, value.end_mark.index, new))
    out = inner
    for start, end, new in sorted(edits, reverse=True):
        out = out[:start] + str(new) + out[end:]
    return out


def _unknown_parameters(inner_root: Any, allowed: set[str]) -> list[str]:
    """Keys of existing p2p-source-producer entries that llm-d-router main would reject."""
    plugins = plugins_node(inner_root)
    found: list[str] = []
    for entry in _p2p_entries(plugins) if plugins is not None else []:
        params = get_key(entry, "parameters")
        if isinstance(params, MappingNode):
            found += [str(scalar(k)) for k, _ in params.value if scalar(k) not in allowed]
    return found


def _roundtrip_inner(inner: str, inner_root: Any, spec: PluginSpec, add_plugin: bool) -> str:
    yaml = rt_yaml(inner_root)
    doc = yaml.load(inner)
    _intend(doc, spec, add_plugin)
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


def patch_values_text(text: str, spec: PluginSpec, *, add_plugin: bool = False, name: str = "values file") -> PatchResult:
    """Set ``minCachedTokenDelta`` in every embedded EPP config with the plugin; text in, text out."""
    if isinstance(spec.min_cached_token_delta, bool) or not isinstance(spec.min_cached_token_delta, int) or spec.min_cached_token_delta < 1:
        raise KvcalError(f"internal: minCachedTokenDelta must be an int >= 1 (got {spec.min_cached_token_delta!r})")
    crlf = "\r\n" in text
    bom = text.startswith("\ufeff")
    work = text.lstrip("\ufeff").replace("\r\n", "\n") if (crlf or bom) else text
    root = compose(work, name)
    if root is not None and not isinstance(root, MappingNode):
        raise InputError(f"{name} is not a Helm values mapping (its top level is a {type(root).__name__.replace('Node', '').lower()})")
    embedded = find_embedded(root) if root is not None else []
    changes: list[ConfigChange] = []
    notes: list[str] = []
    warnings: list[str] = []
    plans: list[tuple[Embedded, str, str]] = []  # (config, old inner, new inner)
    configs: list[tuple[Embedded, Any, tuple[Any, ...]]] = []  # EPP configs: (where, inner root, old values)
    for emb in embedded:
        if emb.node.style == ">":  # ruamel also marks the folds with \a inside the value: the parse error would name that
            raise InputError(folded_config_problem(name, emb.where))
        inner_root = compose(emb.node.value, f"{name}: embedded config {emb.where}")
        plugin_list = plugins_node(inner_root)
        if plugin_list is None:
            notes.append(f"{emb.where}: not an EndpointPickerConfig (no plugins list); left as is")
            continue
        olds = tuple(scalar(get_key(get_key(e, "parameters"), KEY)) for e in _p2p_entries(plugin_list))
        configs.append((emb, inner_root, olds))
        allowed = set(PLUGIN_PARAMETERS) | ({COST_MODEL_KEY} if spec.cost_model is not None else set())
        extra = _unknown_parameters(inner_root, allowed)
        if extra:
            warnings.append(f"{emb.where}: {PLUGIN_TYPE} has parameter(s) {', '.join(sorted(set(extra)))} that llm-d-router main "
                            "rejects (it then refuses the whole config); left as they are: remove them unless your router build has them")
    if not configs:
        raise InputError(f"{name} has no embedded EPP config (router.epp.pluginsCustomConfig or inferenceExtension.pluginsCustomConfig)")
    with_plugin = [c for c in configs if c[2]]
    targets = _add_targets(configs) if add_plugin and not with_plugin else []
    if not with_plugin and not targets:
        hint = "" if add_plugin else " (pass --add-plugin to insert it)"
        raise InputError(f"{name} has no {PLUGIN_TYPE} plugin in any embedded EPP config{hint}")
    if add_plugin and with_plugin:
        notes.append(f"--add-plugin not needed: {PLUGIN_TYPE} is already configured; configs without it are left as they are")
    for emb, inner_root, olds in configs:
        inner = emb.node.value
        if not olds and emb not in targets:
            changes.append(ConfigChange(emb.where, "no-plugin"))
            notes.append(f"{emb.where}: no {PLUGIN_TYPE}; left as is")
            continue
        new_inner = _splice_value(inner, inner_root, spec) if olds else None
        if new_inner is None:
            new_inner = _roundtrip_inner(inner, inner_root, spec, add_plugin=not olds)
            if not inner.endswith("\n"):  # keep the chomping (|-) the input had
                new_inner = new_inner.rstrip("\n")
        action = "unchanged" if new_inner == inner else ("set" if olds else "added-plugin")
        changes.append(ConfigChange(emb.where, action, olds))
        if emb.active is False:
            warnings.append(f"{emb.where} is patched but pluginsConfigFile selects another file: the router will not read it")
        plugin_list = plugins_node(inner_root)
        if spec.peak_prefill_throughput is not None and plugin_list is not None \
                and _entries(plugin_list, AFFINITY_TYPE):
            notes.append(f"{emb.where}: {AFFINITY_TYPE} {AFFINITY_KEY} -> {spec.peak_prefill_throughput}")
        if action == "added-plugin":
            loaded = safe_load(inner)
            producer, _profile, name_notes = _names(loaded, spec, emb.where)
            notes.extend(f"{emb.where}: {n}" for n in name_notes)
            names = [p.get("name") or p.get("type") for p in (loaded.get("plugins") or []) if isinstance(p, dict)]
            if producer not in names:
                warnings.append(f"{emb.where}: no plugin named {producer!r} for prefixMatchInfoProducerName: "
                                "add it or pass --prefix-match-producer")
            notes.append(f"{emb.where}: inserted a {PLUGIN_TYPE} entry (no scheduling profile references it; producers need none)")
        plans.append((emb, inner, new_inner))
    new_text = write_back(work, plans, notes)
    # The EPP that reads a patched config must allow the alpha plugin (kvcal/emit/helm_flags.py).
    flagged = set_alpha_flag(new_text, [emb.path[:-2] for emb, _, _ in plans if emb.active is not False], name)
    new_text = flagged.text
    notes.extend(flagged.notes)
    warnings.extend(flagged.warnings)
    _verify(work, new_text, plans, spec, add_plugin, name, flagged.carrying)
    if bom:
        new_text = "\ufeff" + new_text
    if crlf:
        new_text = new_text.replace("\n", "\r\n")
    return PatchResult(new_text, tuple(changes), tuple(notes), tuple(warnings))


def _add_targets(configs: list[tuple[Embedded, Any, tuple[Any, ...]]]) -> list[Embedded]:
    """Where ``--add-plugin`` inserts: the configs the chart reads (named by pluginsConfigFile), else all."""
    active = [emb for emb, _, _ in configs if emb.active]
    return active or [emb for emb, _, _ in configs if emb.active is None] or [emb for emb, _, _ in configs]


def _verify(old_text: str, new_text: str, plans: list[tuple[Embedded, str, str]], spec: PluginSpec,
            add_plugin: bool, name: str, flagged: tuple[tuple[Any, ...], ...] = ()) -> None:
    """The patched file parses and equals the input with exactly the intended edits; else refuse."""
    refuse = f"internal: refusing to write {name}: the patched file would differ from the input beyond {KEY}"
    try:
        expected, got = safe_load(old_text), safe_load(new_text)
        new_root = YAML(typ="rt").compose(new_text)
    except YAMLError as err:
        raise KvcalError(f"internal: the patched {name} does not parse ({problem(err)}); nothing written") from None
    for emb, old, new in plans:
        set_path(expected, emb.path, lookup_path(got, emb.path))
        try:
            want = copy.deepcopy(safe_load(old))
        except YAMLError as err:  # a lenient first read let it through (duplicate keys)
            raise InputError(f"{name}: the embedded config {emb.where} is not valid YAML ({problem(err)}); "
                             "fix it first (nothing was written)") from None
        _intend(want, spec, add_plugin)
        try:
            patched = safe_load(lookup_path(got, emb.path))
        except YAMLError as err:
            raise InputError(f"{name}: setting {KEY} in {emb.where} would break its YAML ({problem(err)}); the value "
                             "is probably a YAML anchor or alias: set it by hand (nothing was written)") from None
        if patched != want:
            raise KvcalError(refuse + f" (inside {emb.where})")
        node = node_at(new_root, emb.path)
        if old != new and (node is None or node.style != "|"):
            raise KvcalError(f"internal: {emb.where} is no longer a block literal after patching; nothing written")
    for epp_path in flagged:
        expect_flag(expected, epp_path)
    if expected != got:
        raise KvcalError(refuse)


def patch_values_file(path: Path, spec: PluginSpec, *, add_plugin: bool = False, in_place: bool = False,
                      diff: bool = False) -> FilePatch:
    """Patch ``path``: stdout is the whole file, or a unified diff with ``diff``; ``in_place`` writes it."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise InputError(f"--values {path}: no such file")
    # Read, patch and write as one: a second in-place patch waits, then patches this one's result.
    with writer_lock(path, f"--in-place {path}") if in_place else contextlib.nullcontext():
        return _patch_file(path, spec, add_plugin=add_plugin, in_place=in_place, diff=diff)


def _patch_file(path: Path, spec: PluginSpec, *, add_plugin: bool, in_place: bool, diff: bool) -> FilePatch:
    text = read_text(path, f"--values {path}")  # kvcal/userfiles.py: no FIFO, binary or unreadable file
    if in_place:
        check_writable(path)
    result = patch_values_text(text, spec, add_plugin=add_plugin, name=str(path))
    notes = list(result.notes)
    for change in result.changes:
        if change.action in ("set", "unchanged"):
            old = ", ".join(str(v) for v in change.old_values)
            notes.append(f"{change.where}: {KEY} {old} -> {spec.min_cached_token_delta}" if change.action == "set"
                         else f"{change.where}: {KEY} already {spec.min_cached_token_delta}")
    written = backup = None
    if in_place and result.text != text:
        backup = write_in_place(path, result.text)
        written = path
        notes.append(f"wrote {path} (backup: {backup})")
    elif in_place:
        notes.append(f"{path} already carries {KEY}={spec.min_cached_token_delta}; not rewritten")
    stdout = unified_diff(text, result.text, path.name) if diff else ("" if in_place else result.text)
    return FilePatch(stdout, result, tuple(notes), result.warnings, written, backup)


