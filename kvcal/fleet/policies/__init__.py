"""The fleet study's routing policies: one module here per policy, named in :data:`POLICIES`.

Each module defines ``POLICY``, a :class:`kvcal.fleet.policies.base.Policy` subclass. This
module imports none of them (nor numpy or pydantic): naming the policies loads no policy code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from kvcal.errors import InputError

if TYPE_CHECKING:
    from kvcal.fleet.policies.base import Policy

POLICIES: dict[str, str] = {
    "no-p2p": f"{__name__}.no_p2p",
    "always-pull": f"{__name__}.always_pull",
    "threshold": f"{__name__}.threshold",
    "costmodel": f"{__name__}.costmodel",
}
"""Every policy a study runs, in the order of its rows: name -> the module defining it."""


def policy_names() -> tuple[str, ...]:
    """Every policy's name, in the study's order."""
    return tuple(POLICIES)


def policy_class(name: str) -> type[Policy]:
    """The policy called ``name``; InputError naming the choices if unknown."""
    if name not in POLICIES:
        raise InputError(f"unknown fleet policy {name!r}; choose one of: {', '.join(POLICIES)}")
    cls: type[Policy] = importlib.import_module(POLICIES[name]).POLICY
    return cls


def policy_classes() -> list[type[Policy]]:
    """Every policy, in the study's order."""
    return [policy_class(name) for name in POLICIES]


def docs_list() -> str:
    """docs/fleet.md's list of policies (a test keeps the page equal to it)."""
    return "\n".join(f"* `{cls.name}`: {cls.summary}." for cls in policy_classes())
