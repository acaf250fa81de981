"""The check every Helm patch passes before anything is returned: the input with exactly the intended edits.

The patched values file is re-parsed and compared with the input: each patched config must load
as its old text with :func:`kvcal.emit.epp_config_edit.intend` applied (the same function that made
the edit), every other value must be unchanged, and an edited block literal must stay one. Else
the patch is refused and nothing is written (:mod:`kvcal.emit.helm_patch`).
"""

from __future__ import annotations

import copy
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from kvcal.emit.alpha_plugin_flag import expect_flag
from kvcal.emit.embedded_configs import Embedded, lookup_path, node_at, problem, safe_load, set_path
from kvcal.emit.epp_config_edit import KEY, PluginSpec, intend
from kvcal.errors import InputError, KvcalError


def verify(
    old_text: str,
    new_text: str,
    plans: list[tuple[Embedded, str, str]],
    spec: PluginSpec,
    add_plugin: bool,
    name: str,
    flagged: tuple[tuple[Any, ...], ...] = (),
) -> None:
    """The patched file parses and equals the input with exactly the intended edits; else refuse."""
    try:
        expected, got = safe_load(old_text), safe_load(new_text)
        new_root = YAML(typ="rt").compose(new_text)
    except YAMLError as err:
        raise KvcalError(f"internal: the patched {name} does not parse ({problem(err)}); nothing written") from None
    for emb, old, new in plans:
        set_path(expected, emb.path, lookup_path(got, emb.path))
        verify_config(old, lookup_path(got, emb.path), emb.where, spec, add_plugin, name)
        node = node_at(new_root, emb.path)
        if old != new and (node is None or node.style != "|"):
            raise KvcalError(f"internal: {emb.where} is no longer a block literal after patching; nothing written")
    for epp_path in flagged:
        expect_flag(expected, epp_path)
    if expected != got:
        raise KvcalError(_refusal(name))


def _refusal(name: str, where: str = "") -> str:
    inside = f" (inside {where})" if where else ""
    return f"internal: refusing to write {name}: the patched file would differ from the input beyond {KEY}{inside}"


def verify_config(old: str, new: str, where: str, spec: PluginSpec, add_plugin: bool, name: str) -> None:
    """One config's patched text loads as its old text with exactly the intended edit; else refuse."""
    try:
        want = copy.deepcopy(safe_load(old))
    except YAMLError as err:  # a lenient first read let it through (duplicate keys)
        raise InputError(
            f"{name}: the embedded config {where} is not valid YAML ({problem(err)}); "
            "fix it first (nothing was written)"
        ) from None
    intend(want, spec, add_plugin)
    try:
        patched = safe_load(new)
    except YAMLError as err:
        raise InputError(
            f"{name}: setting {KEY} in {where} would break its YAML ({problem(err)}); the value "
            "is probably a YAML anchor or alias: set it by hand (nothing was written)"
        ) from None
    if patched != want:
        raise KvcalError(_refusal(name, where))
