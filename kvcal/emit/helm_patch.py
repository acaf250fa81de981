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

The parts: :mod:`kvcal.emit.embedded_configs` (finding the embedded configs, writing edited
lines back), :mod:`kvcal.emit.epp_config_edit` (the edit to one config),
:mod:`kvcal.emit.alpha_plugin_flag` (the EPP's ``--allow-experimental-plugins``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.nodes import MappingNode

from kvcal.emit.affinity import AFFINITY_TYPE
from kvcal.emit.alpha_plugin_flag import set_alpha_flag
from kvcal.emit.deployed_values import folded_config_problem
from kvcal.emit.embedded_configs import (
    Embedded,
    bare_config,
    compose,
    find_embedded,
    get_key,
    line_of,
    plugins_node,
    safe_load,
    scalar,
    unified_diff,
    write_back,
)
from kvcal.emit.epp_config_edit import (
    COST_MODEL_KEY,
    KEY,
    PluginSpec,
    affinity_values,
    entries_of,
    entry_names,
    p2p_entries,
    roundtrip_config,
    splice_value,
    unknown_parameters,
)
from kvcal.emit.helm_verify import verify, verify_config
from kvcal.emit.remaining_work_values import RemainingWork, inspect, routes_node
from kvcal.emit.router import PLUGIN_PARAMETERS, PLUGIN_TYPE
from kvcal.errors import InputError, KvcalError
from kvcal.outputs import exclusive_backup, write_file, writer_lock
from kvcal.userfiles import is_stdin_copy, read_text

log = logging.getLogger(__name__)

__all__ = ["ConfigChange", "FilePatch", "PatchResult", "PluginSpec", "patch_values_file", "patch_values_text"]


@dataclass(frozen=True)
class ConfigChange:
    """What happened to one embedded config (``where`` is its key path and line in the values file)."""

    where: str
    action: str  # "set", "unchanged", "added-plugin", "no-plugin"
    old_values: tuple[Any, ...] = ()
    new_value: int | None = None  # the minCachedTokenDelta set
    remaining_work: bool = False  # the config routes on remaining work: the value set is 1, not the threshold


@dataclass(frozen=True)
class PatchResult:
    text: str
    changes: tuple[ConfigChange, ...]
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    remaining_work: tuple[RemainingWork, ...] = ()  # the patched configs that route on remaining work


@dataclass(frozen=True)
class FilePatch:
    """What ``patch_values_file`` did: stdout text, notes for stderr, and files written."""

    stdout: str
    result: PatchResult
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    written: Path | None = None
    backup: Path | None = None


def patch_values_text(
    text: str, spec: PluginSpec, *, add_plugin: bool = False, name: str = "values file"
) -> PatchResult:
    """Set ``minCachedTokenDelta`` in every embedded EPP config with the plugin; text in, text out."""
    delta = spec.min_cached_token_delta
    if isinstance(delta, bool) or not isinstance(delta, int) or delta < 1:
        raise KvcalError(f"internal: minCachedTokenDelta must be an int >= 1 (got {delta!r})")
    crlf = "\r\n" in text
    bom = text.startswith("\ufeff")
    work = text.lstrip("\ufeff").replace("\r\n", "\n") if (crlf or bom) else text
    configs, notes, warnings = _epp_configs(work, spec, name)
    targets = _insert_targets(configs, add_plugin, name, notes)
    changes: list[ConfigChange] = []
    plans: list[tuple[Embedded, str, str]] = []  # (config, old inner, new inner)
    remaining: list[RemainingWork] = []
    for emb, inner_root, olds in configs:
        change, new_inner = _patch_config(emb, inner_root, olds, spec, emb in targets, notes, warnings)
        changes.append(change)
        found, advice = inspect(inner_root, emb.where, line_of(emb, name)) if new_inner is not None else (None, [])
        remaining += [found] if found is not None else []
        warnings += advice
        if new_inner is not None:
            plans.append((emb, emb.node.value, new_inner))
    if configs[0][0].bare:  # the file is the config: no chart around it to carry the EPP's flags
        new_text = plans[0][2] if plans else work
        verify_config(work, new_text, f"{name} (an EndpointPickerConfig)", spec, add_plugin, name)
        return PatchResult(
            _restore(new_text, bom, crlf), tuple(changes), tuple(notes), tuple(warnings), tuple(remaining)
        )
    new_text = write_back(work, plans, notes)
    # The EPP that reads a patched config must allow the alpha plugin (kvcal/emit/alpha_plugin_flag.py).
    flagged = set_alpha_flag(new_text, [emb.path[:-2] for emb, _, _ in plans if emb.active is not False], name)
    new_text = flagged.text
    notes.extend(flagged.notes)
    warnings.extend(flagged.warnings)
    verify(work, new_text, plans, spec, add_plugin, name, flagged.carrying)
    return PatchResult(_restore(new_text, bom, crlf), tuple(changes), tuple(notes), tuple(warnings), tuple(remaining))


def _restore(text: str, bom: bool, crlf: bool) -> str:
    """The input's byte-order mark and line endings back on the patched text."""
    text = "\ufeff" + text if bom else text
    return text.replace("\n", "\r\n") if crlf else text


_Config = tuple[Embedded, Any, tuple[Any, ...]]  # an EPP config: (where, inner root, old values)


def _epp_configs(work: str, spec: PluginSpec, name: str) -> tuple[list[_Config], list[str], list[str]]:
    """The embedded configs that are EPP configs, with notes and warnings about them; refused when there is none."""
    root = compose(work, name)
    if root is not None and not isinstance(root, MappingNode):
        kind = type(root).__name__.replace("Node", "").lower()
        raise InputError(f"{name} is not a Helm values mapping (its top level is a {kind})")
    notes: list[str] = []
    warnings: list[str] = []
    configs: list[_Config] = []
    allowed = set(PLUGIN_PARAMETERS) | ({COST_MODEL_KEY} if spec.cost_model is not None else set())
    found = find_embedded(root) if root is not None else []
    if not found and plugins_node(root) is not None:  # not Helm values: the EndpointPickerConfig file itself
        found = [bare_config(work, name)]
    for emb in found:
        if (
            emb.node.style == ">"
        ):  # ruamel also marks the folds with \a inside the value: the parse error would name that
            raise InputError(folded_config_problem(name, emb.where))
        inner_root = root if emb.bare else compose(emb.node.value, f"{name}: embedded config {emb.where}")
        plugin_list = plugins_node(inner_root)
        if plugin_list is None:
            notes.append(f"{emb.where}: not an EndpointPickerConfig (no plugins list); left as is")
            continue
        olds = tuple(scalar(get_key(get_key(e, "parameters"), KEY)) for e in p2p_entries(plugin_list))
        configs.append((emb, inner_root, olds))
        extra = unknown_parameters(inner_root, allowed)
        if extra:
            warnings.append(
                f"{emb.where}: {PLUGIN_TYPE} has parameter(s) {', '.join(sorted(set(extra)))} that llm-d-router main "
                "rejects (it then refuses the whole config); left as they are: remove them unless your router "
                "build has them"
            )
    if not configs:
        raise InputError(
            f"{name} has no embedded EPP config "
            "(router.epp.pluginsCustomConfig or inferenceExtension.pluginsCustomConfig) and is no EndpointPickerConfig "
            "(no plugins list)"
        )
    return configs, notes, warnings


def _insert_targets(configs: list[_Config], add_plugin: bool, name: str, notes: list[str]) -> list[Embedded]:
    """Where ``--add-plugin`` inserts an entry (none when a config has one); refused when nothing would be set."""
    with_plugin = [c for c in configs if c[2]]
    targets = _add_targets(configs) if add_plugin and not with_plugin else []
    if not with_plugin and not targets:
        hint = "" if add_plugin else " (pass --add-plugin to insert it)"
        raise InputError(f"{name} has no {PLUGIN_TYPE} plugin in any embedded EPP config{hint}")
    if add_plugin and with_plugin:
        notes.append(
            f"--add-plugin not needed: {PLUGIN_TYPE} is already configured; configs without it are left as they are"
        )
    return targets


def _patch_config(
    emb: Embedded,
    inner_root: Any,
    olds: tuple[Any, ...],
    spec: PluginSpec,
    insert: bool,
    notes: list[str],
    warnings: list[str],
) -> tuple[ConfigChange, str | None]:
    """One EPP config's change and its new text (None: left as is)."""
    inner = emb.node.value
    if not olds and not insert:
        notes.append(f"{emb.where}: no {PLUGIN_TYPE}; left as is")
        return ConfigChange(emb.where, "no-plugin"), None
    new_inner = splice_value(inner, inner_root, spec) if olds else None
    if new_inner is None:
        new_inner = roundtrip_config(inner, inner_root, spec, add_plugin=not olds)
        if not inner.endswith("\n"):  # keep the chomping (|-) the input had
            new_inner = new_inner.rstrip("\n")
    action = "unchanged" if new_inner == inner else ("set" if olds else "added-plugin")
    if emb.active is False:
        warnings.append(
            f"{emb.where} is patched but pluginsConfigFile selects another file: the router will not read it"
        )
    plugin_list = plugins_node(inner_root)
    remaining = routes_node(plugin_list)
    if plugin_list is not None and entries_of(plugin_list, AFFINITY_TYPE):
        notes += [f"{emb.where}: {AFFINITY_TYPE} {key} -> {value}" for key, value in affinity_values(spec, remaining)]
    if action == "added-plugin":
        _note_inserted(emb, inner, spec, notes, warnings)
    return ConfigChange(emb.where, action, olds, spec.delta_for(remaining), remaining), new_inner


def _note_inserted(emb: Embedded, inner: str, spec: PluginSpec, notes: list[str], warnings: list[str]) -> None:
    """What the user must know about an inserted entry: the names it took, a producer the config lacks."""
    loaded = safe_load(inner)
    producer, _profile, name_notes = entry_names(loaded, spec, emb.where)
    notes.extend(f"{emb.where}: {n}" for n in name_notes)
    names = [p.get("name") or p.get("type") for p in (loaded.get("plugins") or []) if isinstance(p, dict)]
    if producer not in names:
        warnings.append(
            f"{emb.where}: no plugin named {producer!r} for prefixMatchInfoProducerName: "
            "add it or pass --prefix-match-producer"
        )
    notes.append(
        f"{emb.where}: inserted a {PLUGIN_TYPE} entry (no scheduling profile references it; producers need none)"
    )


def _add_targets(configs: list[_Config]) -> list[Embedded]:
    """Where ``--add-plugin`` inserts: the configs the chart reads (named by pluginsConfigFile), else all."""
    active = [emb for emb, _, _ in configs if emb.active]
    return active or [emb for emb, _, _ in configs if emb.active is None] or [emb for emb, _, _ in configs]


def patch_values_file(
    path: Path, spec: PluginSpec, *, add_plugin: bool = False, in_place: bool = False, diff: bool = False
) -> FilePatch:
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
            same = change.action == "unchanged" or all(str(v) == str(change.new_value) for v in change.old_values)
            why = (
                " (the config routes on remaining work: D is 1 there, the threshold sets the work-range boundary)"
                if change.remaining_work
                else ""
            )
            notes.append(
                f"{change.where}: {KEY} already {change.new_value}{why}"
                if same
                else f"{change.where}: {KEY} {old} -> {change.new_value}{why}"
            )
    written = backup = None
    if in_place and result.text != text:
        backup = write_in_place(path, result.text)
        written = path
        notes.append(f"wrote {path} (backup: {backup})")
    elif in_place:
        values = "/".join(dict.fromkeys(str(c.new_value) for c in result.changes if c.new_value is not None))
        notes.append(f"{path} already carries {KEY}={values}; not rewritten")
    stdout = unified_diff(text, result.text, path.name) if diff else ("" if in_place else result.text)
    return FilePatch(stdout, result, tuple(notes), result.warnings, written, backup)


def check_writable(path: Path) -> None:
    """Refuse an in-place patch of standard input, of a read-only file, or where no backup can be written."""
    if is_stdin_copy(path):
        raise InputError(
            "--in-place: --values - is standard input, which cannot be patched; drop --in-place and redirect stdout"
        )
    mode = path.stat().st_mode
    if not os.access(path, os.W_OK) or not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise InputError(f"--in-place: {path} is read-only; make it writable or drop --in-place and redirect stdout")
    if not os.access(path.parent, os.W_OK):
        raise InputError(f"--in-place: cannot write a backup in {path.parent} (directory is read-only)")


def write_in_place(path: Path, new_text: str) -> Path:
    """Back up ``path`` (``FILE.bak``, ``.bak.1``, ...) then replace it atomically; returns the backup."""
    target = path.resolve()
    try:
        backup = exclusive_backup(target)  # O_EXCL, never through a (dangling) link: kvcal/outputs.py
    except OSError as err:
        raise InputError(f"--in-place: could not back up {path}: {err.strerror or err}; nothing was written") from None
    try:
        write_file(target, new_text, f"--in-place {path}")
    except InputError:
        backup.unlink(missing_ok=True)  # the file is unchanged: its backup would only be clutter
        raise
    log.info("wrote %s (backup %s)", target, backup)
    return backup
