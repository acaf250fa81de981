"""The EPP configs a Helm values file embeds as strings: found, composed, and edited lines written back.

See :mod:`kvcal.emit.helm_patch` for why the edit is done at the text level. ruamel.yaml
composes the values file and each embedded config into nodes with exact marks; a block
literal's lines map one-to-one onto lines of the values file (plus the block's indent),
so changed embedded lines are written back at their own lines.
"""

from __future__ import annotations

import difflib
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.scalarstring import LiteralScalarString

from kvcal.errors import InputError
from kvcal.yaml_guard import describe as problem
from kvcal.yaml_guard import guarded_compose


@dataclass
class Embedded:
    path: tuple[Any, ...]  # keys from the document root to the string
    where: str
    node: ScalarNode
    key_column: int
    active: bool | None  # None when no pluginsConfigFile names the active file
    bare: bool = False  # the file itself is the EndpointPickerConfig (path (), node its whole text)


def bare_config(text: str, name: str) -> Embedded:
    """A values file that is itself an EndpointPickerConfig, as the one config to patch."""
    return Embedded((), f"{name} (an EndpointPickerConfig)", ScalarNode("tag:yaml.org,2002:str", text), 0, None, True)


def line_of(emb: Embedded, name: str) -> Callable[[Node], str]:
    """A node of the embedded config -> where it is in the values file ("FILE line N"), for a warning."""

    def line(node: Node) -> str:
        if emb.bare:
            return f"{name} line {node.start_mark.line + 1}"
        if emb.node.style == "|":  # a block literal's lines map one-to-one, from the line after its indicator
            return f"{name} line {emb.node.start_mark.line + 2 + node.start_mark.line}"
        return f"{emb.where}, line {node.start_mark.line + 1} of the config"

    return line


def compose(text: str, what: str) -> Any:
    try:
        return guarded_compose(lambda: YAML(typ="rt").compose(text), what)  # kvcal/yaml_guard.py: aliases bounded
    except YAMLError as err:
        raise InputError(f"{what} is not valid YAML: {problem(err)}") from None


def scalar(node: Any) -> str | None:
    return node.value if isinstance(node, ScalarNode) else None


def get_key(node: Any, key: str) -> Any:
    if isinstance(node, MappingNode):
        for k, v in node.value:
            if scalar(k) == key:
                return v
    return None


def find_embedded(root: Any) -> list[Embedded]:
    """Every string under a ``pluginsCustomConfig`` mapping, anywhere in the document."""
    found: list[Embedded] = []
    seen: set[int] = set()

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for k, v in node.value:
                key = scalar(k)
                if key == "pluginsCustomConfig" and isinstance(v, MappingNode):
                    active_name = scalar(get_key(node, "pluginsConfigFile"))
                    for fk, fv in v.value:
                        fname = scalar(fk)
                        if isinstance(fv, ScalarNode) and str(fv.tag).endswith(":str") and id(fv) not in seen:
                            seen.add(id(fv))
                            where = (
                                ".".join(str(p) for p in path + (key,)) + f"[{fname}] (line {fv.start_mark.line + 1})"
                            )
                            active = None if active_name is None else active_name == fname
                            found.append(Embedded(path + (key, fname), where, fv, fk.start_mark.column, active))
                else:
                    walk(v, path + (key,))
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,))

    walk(root, ())
    return found


def split_lines(text: str) -> list[str]:
    """Lines of a scalar's text, one trailing newline dropped (so ``|`` and ``|-`` compare alike)."""
    return (text[:-1] if text.endswith("\n") else text).split("\n")


def plugins_node(root: Any) -> SequenceNode | None:
    plugins = get_key(root, "plugins")
    return plugins if isinstance(plugins, SequenceNode) else None


def guess_indent(root: Any) -> tuple[int, int, int]:
    """(mapping, sequence, offset) as ruamel's ``indent()`` takes them, the most common in the text."""
    maps: list[int] = []
    seqs: list[tuple[int, int]] = []

    def walk(node: Any, column: int) -> None:
        if isinstance(node, MappingNode):
            for k, v in node.value:
                if isinstance(v, MappingNode) and not v.flow_style and v.value:
                    maps.append(v.start_mark.column - k.start_mark.column)
                if isinstance(v, SequenceNode) and not v.flow_style and v.value:
                    seqs.append(
                        (v.value[0].start_mark.column - k.start_mark.column, v.start_mark.column - k.start_mark.column)
                    )
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


def rt_yaml(root: Any) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    mapping, sequence, offset = guess_indent(root)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


def literal_lines(lines: list[str], emb: Embedded) -> tuple[int, int] | None:
    """(first content line, indent) when the block literal's lines map one-to-one onto ``lines``."""
    node = emb.node
    if node.style != "|":
        return None
    start = node.start_mark.line + 1
    inner_lines = split_lines(node.value)
    content = [ln for ln in lines[start : start + len(inner_lines)] if ln.strip()]
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


def apply_line_edits(lines: list[str], start: int, indent: int, old: list[str], new: list[str]) -> list[str]:
    """Write the embedded config's changed lines back at their own lines of the values file."""
    region = lines[start : start + len(old)]
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op == "equal":
            out.extend(region[i1:i2])
        else:
            out.extend(" " * indent + ln if ln else "" for ln in new[j1:j2])
    return lines[:start] + out + lines[start + len(old) :]


def lookup_path(doc: Any, path: tuple[Any, ...]) -> Any:
    """Follow keys (compared as text: the composer's keys are strings) and list indices."""
    for key in path:
        doc = doc[key] if isinstance(doc, list) else next(v for k, v in doc.items() if str(k) == str(key))
    return doc


def set_path(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    parent = lookup_path(doc, path[:-1])
    parent[next(k for k in parent if str(k) == str(path[-1]))] = value


def safe_load(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(text)


def write_back(work: str, plans: list[tuple[Embedded, str, str]], notes: list[str]) -> str:
    lines = work.split("\n")
    mapped = [(emb, old, new, literal_lines(lines, emb)) for emb, old, new in plans if old != new]
    placed = [(emb, old, new, at) for emb, old, new, at in mapped if at is not None]
    if len(placed) == len(mapped):
        for _emb, old, new, (start, indent) in sorted(placed, key=lambda m: m[3][0], reverse=True):
            lines = apply_line_edits(lines, start, indent, split_lines(old), split_lines(new))
        return "\n".join(lines)
    # An embedded config that is not a block literal: round-trip the whole file, making each a literal.
    yaml = rt_yaml(YAML(typ="rt").compose(work))
    doc = yaml.load(work)
    for emb, _old, new, m in mapped:
        set_path(doc, emb.path, LiteralScalarString(new))
        if m is None:
            notes.append(
                f"{emb.where} was not a block literal: rewrote it as one (the file was re-serialized; review the diff)"
            )
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


def node_at(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        items = enumerate(node.value) if isinstance(node, SequenceNode) else ((scalar(k), v) for k, v in node.value)
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
