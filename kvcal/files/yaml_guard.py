"""YAML from users, checked as a node graph before anything walks or builds it.

A YAML alias (``*a``) refers to an anchored node (``&a``) without copying it, so a
1 KB file of nested aliases ("billion laughs") stands for a tree of billions of
nodes. Loading shares the references, but every walk over the loaded data (finding
the router plugin, comparing a patched file with its input) visits the tree expanded
and runs for minutes. So each user YAML text is first *composed* (parsed into nodes,
aliases not expanded), and refused when

* its tree, with aliases expanded, would exceed ``MAX_NODES`` nodes, or an alias
  refers to a node that contains it (a cycle);
* it carries a ``!!python/...`` tag (no kvcal file holds Python objects) or a local
  tag such as ``!custom`` (no loader knows it: without this check, a Helm patch
  failed its own re-read as an "internal" error);
* a mapping holds the same key twice: PyYAML keeps the last silently (a campaign
  file's second ``engine:`` won unannounced), ruamel refuses only after kvcal has
  worked on the text, and Helm (go-yaml v3) refuses the file outright ("mapping key
  already defined");
* it nests too deeply for the parser (reported instead of a RecursionError).

Works on PyYAML and ruamel.yaml nodes alike (same ``tag``/``value`` shape).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcal.errors import InputError

MAX_NODES = 200_000  # a large real Helm values file has a few thousand
STANDARD_TAG = "tag:yaml.org,2002:"
PYTHON_TAG = STANDARD_TAG + "python/"


def _kind(node: Any) -> str:
    return type(node).__name__  # ScalarNode, SequenceNode, MappingNode in both libraries


def _line(node: Any) -> int:
    mark = getattr(node, "start_mark", None)
    return mark.line + 1 if mark is not None else 0


def describe(err: Exception) -> str:
    """One line for a YAML parse error: the problem and its line.

    The first line of str(err) is often only the context.
    """
    mark = getattr(err, "problem_mark", None)
    what = getattr(err, "problem", None) or (str(err).splitlines() or [type(err).__name__])[0]
    return f"{what} at line {mark.line + 1}" if mark is not None else str(what)


def _check_keys(node: Any, what: str) -> None:
    """Refuse a mapping that holds the same plain key twice (merge keys, ``<<``, are YAML's own way to repeat)."""
    seen: dict[tuple[str, str], Any] = {}
    for key, _ in node.value:
        if _kind(key) != "ScalarNode" or str(key.tag).endswith(":merge"):
            continue
        ident = (str(key.tag), str(key.value))
        if ident in seen:
            raise InputError(
                f"{what}: key {key.value!r} appears twice in one mapping (lines {_line(seen[ident])} "
                f"and {_line(key)}); keep one"
            )
        seen[ident] = key


def expanded_size(node: Any, what: str, limit: int = MAX_NODES) -> int:
    """Nodes in the tree with every alias expanded; InputError past ``limit``, on a cycle or a python tag."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(n: Any) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise InputError(f"{what}: a YAML alias refers to a node that contains it (a cycle); not loaded")
        tag = str(getattr(n, "tag", "") or "")
        if tag.startswith(PYTHON_TAG) or tag.startswith("!!python/"):
            raise InputError(
                f"{what}: YAML tag {tag.replace('tag:yaml.org,2002:', '!!')} asks for a Python object; "
                "kvcal reads plain data only"
            )
        if tag and not tag.startswith(STANDARD_TAG):
            raise InputError(
                f"{what}: YAML tag {tag} (line {_line(n)}) is not a standard YAML type; "
                "kvcal reads plain data only: remove the tag"
            )
        active.add(key)
        total = 1
        kind = _kind(n)
        if kind == "SequenceNode":
            for child in n.value:
                total += size(child)
                if total > limit:
                    break
        elif kind == "MappingNode":
            _check_keys(n, what)
            for k, v in n.value:
                total += size(k) + size(v)
                if total > limit:
                    break
        active.discard(key)
        if total > limit:
            raise InputError(f"{what}: YAML aliases expand to more than {limit:,} nodes (an alias bomb?); not loaded")
        sizes[key] = total
        return total

    return size(node) if node is not None else 0


def guarded_compose(compose: Callable[[], Any], what: str) -> Any:
    """Run a composer (``lambda: YAML(typ='rt').compose(text)`` or PyYAML's), then check its node graph."""
    try:
        node = compose()
    except RecursionError:
        raise InputError(f"{what}: YAML nested too deeply to read") from None
    expanded_size(node, what)
    return node


def load_pyyaml(text: str, what: str) -> Any:
    """PyYAML safe load of user text, guarded (campaign files). YAMLError propagates for the caller's message."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = guarded_compose(loader.get_single_node, what)
        if node is None:
            return None
        try:
            data = loader.construct_document(node)
        except RecursionError:
            raise InputError(f"{what}: YAML nested too deeply to read") from None
    finally:
        loader.dispose()
    _refuse_surrogates(data, what)
    return data


def _refuse_surrogates(data: Any, what: str) -> None:
    """A "\\udcff" escape makes a string no UTF-8 record can hold (run.json would fail to write)."""
    pending = [data]
    while pending:  # a loop, not recursion: nesting is bounded by size only (expanded_size)
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend([*item.keys(), *item.values()])
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and any("\ud800" <= ch <= "\udfff" for ch in item):
            raise InputError(
                f"{what}: {item.encode('utf-8', 'backslashreplace').decode('ascii')!r} holds a "
                "surrogate escape, which no UTF-8 file can record"
            )


def check_ruamel_text(text: str, what: str) -> None:
    """Compose ``text`` with ruamel (no construction) and check it; YAMLError propagates."""
    from ruamel.yaml import YAML

    guarded_compose(lambda: YAML(typ="safe", pure=True).compose(text), what)


BOOL_NUMBER = "bool_number"  # the error type refuse_bool_numbers raises; ctx["field"] names the field


def refuse_bool_numbers(model: Any, data: Any) -> Any:
    """A ``model_validator(mode="before")`` body: refuse true/false where ``model`` wants a number.

    Pydantic's lax mode reads a bool as 1 or 0 for an int or float field, so a campaign
    file's ``prefix_lengths: [true, 512]`` (or YAML 1.1's ``yes``) became a length of 1
    token, reported as a block-size problem. Fields that admit a bool are left alone.
    """
    if not isinstance(data, dict):
        return data
    for name, value in data.items():
        field = model.model_fields.get(name)
        if field is None or "bool" in str(field.annotation):
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(item, bool) for item in items):
            from pydantic_core import PydanticCustomError

            raise PydanticCustomError(
                BOOL_NUMBER,
                "true/false where a number is wanted (YAML reads true, false, yes, no, on and off as booleans)",
                {"field": name},
            )
    return data
