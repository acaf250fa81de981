"""YAML from users, checked as a node graph before anything walks or builds it.

A YAML alias (``*a``) refers to an anchored node (``&a``) without copying it, so a
1 KB file of nested aliases ("billion laughs") stands for a tree of billions of
nodes. Loading shares the references, but every walk over the loaded data (finding
the router plugin, comparing a patched file with its input) visits the tree expanded
and runs for minutes. So each user YAML text is first *composed* (parsed into nodes,
aliases not expanded), and refused when

* its tree, with aliases expanded, would exceed ``MAX_NODES`` nodes, or an alias
  refers to a node that contains it (a cycle);
* it carries a ``!!python/...`` tag (no kvcal file holds Python objects);
* it nests too deeply for the parser (reported instead of a RecursionError).

Works on PyYAML and ruamel.yaml nodes alike (same ``tag``/``value`` shape).
"""

from __future__ import annotations

from typing import Any, Callable

from kvcal.errors import InputError

MAX_NODES = 200_000  # a large real Helm values file has a few thousand
PYTHON_TAG = "tag:yaml.org,2002:python/"


def _kind(node: Any) -> str:
    return type(node).__name__  # ScalarNode, SequenceNode, MappingNode in both libraries


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
            raise InputError(f"{what}: YAML tag {tag.replace('tag:yaml.org,2002:', '!!')} asks for a Python object; "
                             "kvcal reads plain data only")
        active.add(key)
        total = 1
        kind = _kind(n)
        if kind == "SequenceNode":
            for child in n.value:
                total += size(child)
                if total > limit:
                    break
        elif kind == "MappingNode":
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
            return loader.construct_document(node)
        except RecursionError:
            raise InputError(f"{what}: YAML nested too deeply to read") from None
    finally:
        loader.dispose()


def check_ruamel_text(text: str, what: str) -> None:
    """Compose ``text`` with ruamel (no construction) and check it; YAMLError propagates."""
    from ruamel.yaml import YAML

    guarded_compose(lambda: YAML(typ="safe", pure=True).compose(text), what)
