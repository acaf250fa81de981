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

import copy
import difflib
import io
import logging
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.scalarstring import LiteralScalarString

from kvcal.errors import InputError, KvcalError

log = logging.getLogger(__name__)

PLUGIN_TYPE = "p2p-source-producer"
KEY = "minCachedTokenDelta"


@dataclass(frozen=True)
class PluginSpec:
    """The threshold to set and the parameters of a plugin entry kvcal inserts (``--add-plugin``)."""

    min_cached_token_delta: int
    prefix_match_producer: str = "precise-prefix-cache-producer"
    prefill_profile: str = "default"


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


@dataclass
class _Embedded:
    path: tuple[Any, ...]  # keys from the document root to the string
    where: str
    node: ScalarNode
    key_column: int
    active: bool | None  # None when no pluginsConfigFile names the active file


def _problem(err: YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    what = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{what} at line {mark.line + 1}" if mark is not None else str(what)


def _compose(text: str, what: str) -> Any:
    try:
        return YAML(typ="rt").compose(text)
    except YAMLError as err:
        raise InputError(f"{what} is not valid YAML: {_problem(err)}") from None


def _scalar(node: Any) -> str | None:
    return node.value if isinstance(node, ScalarNode) else None


def _get(node: Any, key: str) -> Any:
    if isinstance(node, MappingNode):
        for k, v in node.value:
            if _scalar(k) == key:
                return v
    return None


def _find_embedded(root: Any) -> list[_Embedded]:
    """Every string under a ``pluginsCustomConfig`` mapping, anywhere in the document."""
    found: list[_Embedded] = []
    seen: set[int] = set()

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for k, v in node.value:
                key = _scalar(k)
                if key == "pluginsCustomConfig" and isinstance(v, MappingNode):
                    active_name = _scalar(_get(node, "pluginsConfigFile"))
                    for fk, fv in v.value:
                        fname = _scalar(fk)
                        if isinstance(fv, ScalarNode) and str(fv.tag).endswith(":str") and id(fv) not in seen:
                            seen.add(id(fv))
                            where = ".".join(str(p) for p in path + (key,)) + f"[{fname}] (line {fv.start_mark.line + 1})"
                            active = None if active_name is None else active_name == fname
                            found.append(_Embedded(path + (key, fname), where, fv, fk.start_mark.column, active))
                else:
                    walk(v, path + (key,))
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,))

    walk(root, ())
    return found


def _split(text: str) -> list[str]:
    """Lines of a scalar's text, one trailing newline dropped (so ``|`` and ``|-`` compare alike)."""
    return (text[:-1] if text.endswith("\n") else text).split("\n")


def _plugins_node(root: Any) -> SequenceNode | None:
    plugins = _get(root, "plugins")
    return plugins if isinstance(plugins, SequenceNode) else None


def _p2p_entries(plugins: SequenceNode) -> list[MappingNode]:
    return [p for p in plugins.value if isinstance(p, MappingNode) and _scalar(_get(p, "type")) == PLUGIN_TYPE]


def _insert_index(plugins: list[Any], producer: str) -> int:
    """Right after the prefix-match producer (by name, else by type); at the end if absent."""
    for i, entry in enumerate(plugins):
        if isinstance(entry, dict) and (entry.get("name") == producer or (entry.get("name") is None and entry.get("type") == producer)):
            return i + 1
    return len(plugins)


def _intend(doc: Any, spec: PluginSpec, add_plugin: bool) -> str:
    """Apply the intended edit to loaded data (ruamel round-trip or plain); returns the action.

    The same function builds the expectation the patched text is checked against.
    """
    plugins = doc.get("plugins") if isinstance(doc, dict) else None
    entries = [p for p in plugins if isinstance(p, dict) and p.get("type") == PLUGIN_TYPE] if isinstance(plugins, list) else []
    if entries:
        for entry in entries:
            if not isinstance(entry.get("parameters"), dict):
                entry["parameters"] = type(entry)()
            entry["parameters"][KEY] = spec.min_cached_token_delta
        return "set"
    if add_plugin and isinstance(plugins, list):
        params = {"prefixMatchInfoProducerName": spec.prefix_match_producer, "prefillProfileName": spec.prefill_profile,
                  KEY: spec.min_cached_token_delta}
        mapping = type(doc)
        entry = mapping()
        entry["type"] = PLUGIN_TYPE
        entry["parameters"] = mapping()
        entry["parameters"].update(params)
        plugins.insert(_insert_index(plugins, spec.prefix_match_producer), entry)
        return "added-plugin"
    return "no-plugin"


def _splice_value(inner: str, inner_root: Any, spec: PluginSpec) -> str | None:
    """Set the key by replacing each existing scalar's text; None when a structural edit is needed."""
    plugins = _plugins_node(inner_root)
    edits: list[tuple[int, int]] = []
    for entry in _p2p_entries(plugins) if plugins is not None else []:
        value = _get(_get(entry, "parameters"), KEY)
        if not isinstance(value, ScalarNode):
            return None
        edits.append((value.start_mark.index, value.end_mark.index))
    out = inner
    for start, end in sorted(edits, reverse=True):
        out = out[:start] + str(spec.min_cached_token_delta) + out[end:]
    return out


def _guess_indent(root: Any) -> tuple[int, int, int]:
    """(mapping, sequence, offset) as ruamel's ``indent()`` takes them, the most common in the text."""
    maps: list[int] = []
    seqs: list[tuple[int, int]] = []

    def walk(node: Any, column: int) -> None:
        if isinstance(node, MappingNode):
            for k, v in node.value:
                if isinstance(v, MappingNode) and not v.flow_style and v.value:
                    maps.append(v.start_mark.column - k.start_mark.column)
                if isinstance(v, SequenceNode) and not v.flow_style and v.value:
                    seqs.append((v.value[0].start_mark.column - k.start_mark.column, v.start_mark.column - k.start_mark.column))
                walk(v, k.start_mark.column)
        elif isinstance(node, SequenceNode):
            for item in node.value:
                walk(item, column)

    walk(root, 0)
    mapping = max(set(maps), key=maps.count) if maps else 2
    sequence, offset = max(set(seqs), key=seqs.count) if seqs else (mapping, 0)
    if sequence < offset + 2 or mapping < 1:
        return 2, 4, 2
    return mapping, sequence, offset


def _rt_yaml(root: Any) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    mapping, sequence, offset = _guess_indent(root)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


def _roundtrip_inner(inner: str, inner_root: Any, spec: PluginSpec, add_plugin: bool) -> str:
    yaml = _rt_yaml(inner_root)
    doc = yaml.load(inner)
    _intend(doc, spec, add_plugin)
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


def _literal_lines(lines: list[str], emb: _Embedded) -> tuple[int, int] | None:
    """(first content line, indent) when the block literal's lines map one-to-one onto ``lines``."""
    node = emb.node
    if node.style != "|":
        return None
    start = node.start_mark.line + 1
    inner_lines = _split(node.value)
    content = [ln for ln in lines[start:start + len(inner_lines)] if ln.strip()]
    if not content:
        return None
    indent = len(content[0]) - len(content[0].lstrip(" "))
    for i, il in enumerate(inner_lines):
        if start + i >= len(lines):
            return None
        ol = lines[start + i]
        if not (ol == " " * indent + il or (il == "" and ol.strip() == "")):
            return None
    return start, indent


def _apply_line_edits(lines: list[str], start: int, indent: int, old: list[str], new: list[str]) -> list[str]:
    """Write the embedded config's changed lines back at their own lines of the values file."""
    region = lines[start:start + len(old)]
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op == "equal":
            out.extend(region[i1:i2])
        else:
            out.extend(" " * indent + ln if ln else "" for ln in new[j1:j2])
    return lines[:start] + out + lines[start + len(old):]


def _lookup_path(doc: Any, path: tuple[Any, ...]) -> Any:
    """Follow keys (compared as text: the composer's keys are strings) and list indices."""
    for key in path:
        doc = doc[key] if isinstance(doc, list) else next(v for k, v in doc.items() if str(k) == str(key))
    return doc


def _set_path(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    parent = _lookup_path(doc, path[:-1])
    parent[next(k for k in parent if str(k) == str(path[-1]))] = value


def _safe_load(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(text)


def patch_values_text(text: str, spec: PluginSpec, *, add_plugin: bool = False, name: str = "values file") -> PatchResult:
    """Set ``minCachedTokenDelta`` in every embedded EPP config with the plugin; text in, text out."""
    if isinstance(spec.min_cached_token_delta, bool) or not isinstance(spec.min_cached_token_delta, int) or spec.min_cached_token_delta < 1:
        raise KvcalError(f"internal: minCachedTokenDelta must be an int >= 1 (got {spec.min_cached_token_delta!r})")
    crlf = "\r\n" in text
    bom = text.startswith("\ufeff")
    work = text.lstrip("\ufeff").replace("\r\n", "\n") if (crlf or bom) else text
    root = _compose(work, name)
    if root is not None and not isinstance(root, MappingNode):
        raise InputError(f"{name} is not a Helm values mapping (its top level is a {type(root).__name__.replace('Node', '').lower()})")
    embedded = _find_embedded(root) if root is not None else []
    changes: list[ConfigChange] = []
    notes: list[str] = []
    warnings: list[str] = []
    plans: list[tuple[_Embedded, str, str]] = []  # (config, old inner, new inner)
    configs: list[tuple[_Embedded, Any, tuple[Any, ...]]] = []  # EPP configs: (where, inner root, old values)
    for emb in embedded:
        inner_root = _compose(emb.node.value, f"{name}: embedded config {emb.where}")
        if _plugins_node(inner_root) is None:
            notes.append(f"{emb.where}: not an EndpointPickerConfig (no plugins list); left as is")
            continue
        olds = tuple(_scalar(_get(_get(e, "parameters"), KEY)) for e in _p2p_entries(_plugins_node(inner_root)))
        configs.append((emb, inner_root, olds))
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
        if action == "added-plugin":
            names = [p.get("name") or p.get("type") for p in (_safe_load(inner).get("plugins") or []) if isinstance(p, dict)]
            if spec.prefix_match_producer not in names:
                warnings.append(f"{emb.where}: no plugin named {spec.prefix_match_producer!r} for prefixMatchInfoProducerName: "
                                "add it or pass --prefix-match-producer")
            notes.append(f"{emb.where}: inserted a {PLUGIN_TYPE} entry (no scheduling profile references it; producers need none)")
        plans.append((emb, inner, new_inner))
    new_text = _write_back(work, plans, notes)
    _verify(work, new_text, plans, spec, add_plugin, name)
    if bom:
        new_text = "\ufeff" + new_text
    if crlf:
        new_text = new_text.replace("\n", "\r\n")
    return PatchResult(new_text, tuple(changes), tuple(notes), tuple(warnings))


def _add_targets(configs: list[tuple[_Embedded, Any, tuple[Any, ...]]]) -> list[_Embedded]:
    """Where ``--add-plugin`` inserts: the configs the chart reads (named by pluginsConfigFile), else all."""
    active = [emb for emb, _, _ in configs if emb.active]
    return active or [emb for emb, _, _ in configs if emb.active is None] or [emb for emb, _, _ in configs]


def _write_back(work: str, plans: list[tuple[_Embedded, str, str]], notes: list[str]) -> str:
    lines = work.split("\n")
    mapped = [(emb, old, new, _literal_lines(lines, emb)) for emb, old, new in plans if old != new]
    if all(m is not None for *_, m in mapped):
        for emb, old, new, (start, indent) in sorted(mapped, key=lambda m: m[3][0], reverse=True):
            lines = _apply_line_edits(lines, start, indent, _split(old), _split(new))
        return "\n".join(lines)
    # An embedded config that is not a block literal: round-trip the whole file, making each a literal.
    yaml = _rt_yaml(YAML(typ="rt").compose(work))
    doc = yaml.load(work)
    for emb, old, new, m in mapped:
        _set_path(doc, emb.path, LiteralScalarString(new))
        if m is None:
            notes.append(f"{emb.where} was not a block literal: rewrote it as one (the file was re-serialized; review the diff)")
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


def _verify(old_text: str, new_text: str, plans: list[tuple[_Embedded, str, str]], spec: PluginSpec,
            add_plugin: bool, name: str) -> None:
    """The patched file parses and equals the input with exactly the intended edits; else refuse."""
    refuse = f"internal: refusing to write {name}: the patched file would differ from the input beyond {KEY}"
    try:
        expected, got = _safe_load(old_text), _safe_load(new_text)
        new_root = YAML(typ="rt").compose(new_text)
    except YAMLError as err:
        raise KvcalError(f"internal: the patched {name} does not parse ({_problem(err)}); nothing written") from None
    for emb, old, new in plans:
        _set_path(expected, emb.path, _lookup_path(got, emb.path))
        want = copy.deepcopy(_safe_load(old))
        _intend(want, spec, add_plugin)
        if _safe_load(_lookup_path(got, emb.path)) != want:
            raise KvcalError(refuse + f" (inside {emb.where})")
        node = _node_at(new_root, emb.path)
        if old != new and (node is None or node.style != "|"):
            raise KvcalError(f"internal: {emb.where} is no longer a block literal after patching; nothing written")
    if expected != got:
        raise KvcalError(refuse)


def _node_at(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        items = enumerate(node.value) if isinstance(node, SequenceNode) else ((_scalar(k), v) for k, v in node.value)
        node = next((v for k, v in items if str(k) == str(key)), None)
        if node is None:
            return None
    return node


def unified_diff(old: str, new: str, name: str) -> str:
    """A ``diff -u`` style patch of the values file (empty when nothing changed)."""
    def lines(text: str) -> list[str]:
        out = text.splitlines(keepends=True)
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n\\ No newline at end of file\n"
        return out

    return "".join(difflib.unified_diff(lines(old), lines(new), fromfile=f"a/{name}", tofile=f"b/{name}"))


def _check_writable(path: Path) -> None:
    mode = path.stat().st_mode
    if not os.access(path, os.W_OK) or not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise InputError(f"--in-place: {path} is read-only; make it writable or drop --in-place and redirect stdout")
    if not os.access(path.parent, os.W_OK):
        raise InputError(f"--in-place: cannot write a backup in {path.parent} (directory is read-only)")


def _backup_path(path: Path) -> Path:
    candidate = path.with_name(path.name + ".bak")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak.{n}")
        n += 1
    return candidate


def write_in_place(path: Path, new_text: str) -> Path:
    """Back up ``path`` (``FILE.bak``, ``.bak.1``, ...) then replace it atomically; returns the backup."""
    target = path.resolve()
    backup = _backup_path(target)
    try:
        shutil.copy2(target, backup)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(new_text)
            shutil.copymode(target, tmp)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise InputError(f"--in-place: could not write {path}: {err.strerror or err}") from None
    log.info("wrote %s (backup %s)", target, backup)
    return backup


def patch_values_file(path: Path, spec: PluginSpec, *, add_plugin: bool = False, in_place: bool = False,
                      diff: bool = False) -> FilePatch:
    """Patch ``path``: stdout is the whole file, or a unified diff with ``diff``; ``in_place`` writes it."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--values {path}: no such file")
    if in_place:
        _check_writable(path)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"--values {path}: cannot read it ({err})") from None
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


def read_threshold(path: Path) -> int:
    """``minCachedTokenDelta`` of the ``p2p-source-producer`` plugin in a Helm values file.

    The EPP config sits in the values as a YAML *string* (``pluginsCustomConfig``), so
    every string that mentions the plugin is parsed as YAML too. The plugin's default
    (1) applies when it is configured without the key.
    """
    if not path.is_file():
        raise InputError(f"{path}: no such values file")
    yaml = YAML(typ="safe", pure=True)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"))
    except (YAMLError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    found: list[int] = []
    _collect_thresholds(data, yaml, found)
    if not found:
        raise InputError(f"{path}: no '{PLUGIN_TYPE}' plugin found (looked in the values and in embedded EPP configs)")
    if len(set(found)) > 1:
        raise InputError(f"{path}: several '{PLUGIN_TYPE}' plugins with different {KEY} "
                         f"{sorted(set(found))}; pass --deployed")
    return found[0]


def _collect_thresholds(node: Any, yaml: Any, found: list[int]) -> None:
    if isinstance(node, dict):
        if node.get("type") == PLUGIN_TYPE:
            params = node.get("parameters") or {}
            value = params.get(KEY, 1) if isinstance(params, dict) else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"{KEY} must be an integer >= 1, found {value!r}")
            found.append(value)
        for child in node.values():
            _collect_thresholds(child, yaml, found)
    elif isinstance(node, list):
        for child in node:
            _collect_thresholds(child, yaml, found)
    elif isinstance(node, str) and "\n" in node and PLUGIN_TYPE in node:  # an embedded EPP config
        try:
            _collect_thresholds(yaml.load(io.StringIO(node)), yaml, found)
        except YAMLError:
            log.warning("a values string mentions %s but is not YAML; skipped", PLUGIN_TYPE)
