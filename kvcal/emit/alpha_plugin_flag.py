"""The EPP's ``--allow-experimental-plugins`` in Helm values, set where the values carry the EPP's flags.

``p2p-source-producer`` is registered with alpha stability: the EPP refuses to load a
config that uses it unless it runs with ``--allow-experimental-plugins`` (llm-d-router
main). llm-d's router charts take the EPP's extra flags as a map beside
``pluginsCustomConfig`` (``router.epp.flags``, ``inferenceExtension.flags``) and render
each entry as ``--<key>=<value>``, so ``allow-experimental-plugins: true`` there becomes
``--allow-experimental-plugins=true``, the form the router's own example deployment
passes. Like the threshold, the edit is made in the text (one inserted line, or one
scalar replaced), so every comment and every other byte of the file stays as it was;
:func:`expect_flag` gives the patch check in :mod:`kvcal.emit.helm_patch` the intended result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ruamel.yaml.nodes import MappingNode, ScalarNode

from kvcal.emit.embedded_configs import compose, guess_indent, lookup_path, node_at, scalar
from kvcal.emit.router import ALPHA_FLAG, PLUGIN_TYPE

FLAGS_KEY = "flags"
_CONFIG_KEY = "pluginsCustomConfig"
_TRUE = {"true", "True", "TRUE"}
_NULL = {"", "~", "null", "Null", "NULL"}


@dataclass(frozen=True)
class FlagEdit:
    """The values text with the flag set, the EPP mappings now carrying it, and what to tell the user."""

    text: str
    carrying: tuple[tuple[Any, ...], ...]
    notes: tuple[str, ...]
    warnings: tuple[str, ...]


def set_alpha_flag(text: str, epp_paths: list[tuple[Any, ...]], name: str) -> FlagEdit:
    """Set ``flags.allow-experimental-plugins: true`` in each EPP mapping at ``epp_paths`` (key paths)."""
    carrying: list[tuple[Any, ...]] = []
    notes: list[str] = []
    warnings: list[str] = []
    for path in dict.fromkeys(epp_paths):  # one edit per EPP, in file order; each edit re-reads the text
        where = ".".join(str(p) for p in path + (FLAGS_KEY,))
        new_text, outcome = _set_one(text, path, name)
        if new_text is None:
            warnings.append(
                f"{where}: {outcome}; set {ALPHA_FLAG}: true there by hand, or the EPP refuses {PLUGIN_TYPE}"
            )
            continue
        text = new_text
        carrying.append(path)
        notes.append(
            f"{where}.{ALPHA_FLAG}: {outcome} ({PLUGIN_TYPE} is an alpha plugin; the chart passes "
            f"--{ALPHA_FLAG}=true to the EPP)"
        )
    return FlagEdit(text, tuple(carrying), tuple(notes), tuple(warnings))


def expect_flag(doc: Any, path: tuple[Any, ...]) -> None:
    """Apply the intended edit to loaded values (the expectation the patched text is checked against)."""
    epp = lookup_path(doc, path)
    flags = epp.get(FLAGS_KEY)
    if not isinstance(flags, dict):
        epp[FLAGS_KEY] = flags = {}
    flags[ALPHA_FLAG] = True


def _set_one(text: str, path: tuple[Any, ...], name: str) -> tuple[str | None, str]:
    """(new text, what was done), or (None, why it cannot be done in the text)."""
    root = compose(text, name)
    epp = node_at(root, path)
    if not isinstance(epp, MappingNode) or epp.flow_style:
        return None, "the EPP's values are not a block mapping"
    step = guess_indent(root)[0]
    pairs = {scalar(k): (k, v) for k, v in epp.value}
    if FLAGS_KEY not in pairs:
        key = pairs[_CONFIG_KEY][0]
        col = key.start_mark.column
        return _insert(
            text,
            key.start_mark.line,
            [" " * col + f"{FLAGS_KEY}:", " " * (col + step) + f"{ALPHA_FLAG}: true"],
            col,
            "added (flags was absent)",
        )
    key, flags = pairs[FLAGS_KEY]
    if isinstance(flags, ScalarNode) and flags.value in _NULL and str(flags.tag).endswith(":null"):
        if flags.value == "":
            return _insert(
                text,
                key.start_mark.line + 1,
                [" " * (key.start_mark.column + step) + f"{ALPHA_FLAG}: true"],
                None,
                "added (flags was empty)",
            )
        return _splice(text, flags, f"{{{ALPHA_FLAG}: true}}"), "added (flags was null)"
    if not isinstance(flags, MappingNode):
        return None, f"{FLAGS_KEY} is not a mapping of flag: value"
    value = {scalar(k): v for k, v in flags.value}.get(ALPHA_FLAG)
    if value is not None:
        if not isinstance(value, ScalarNode):
            return None, f"{ALPHA_FLAG} is not a plain value"
        if value.value in _TRUE:
            return text, "already true"
        return _splice(text, value, "true"), f"{value.value!r} -> true"
    if flags.flow_style:
        if not flags.value:
            return _splice(text, flags, f"{{{ALPHA_FLAG}: true}}"), "added"
        at = flags.start_mark.index + 1
        return text[:at] + f"{ALPHA_FLAG}: true, " + text[at:], "added"
    first = flags.value[0][0]
    return _insert(
        text,
        first.start_mark.line,
        [" " * first.start_mark.column + f"{ALPHA_FLAG}: true"],
        first.start_mark.column,
        "added",
    )


def _insert(text: str, line: int, new_lines: list[str], column: int | None, outcome: str) -> tuple[str | None, str]:
    """Insert whole lines before ``line``; refused when the key there does not start its own line."""
    lines = text.split("\n")
    if column is not None and (line >= len(lines) or lines[line][:column].strip()):
        return None, "its keys do not start their own lines"
    return "\n".join(lines[:line] + new_lines + lines[line:]), outcome


def _splice(text: str, node: ScalarNode | MappingNode, new: str) -> str:
    return text[: node.start_mark.index] + new + text[node.end_mark.index :]
