"""KV transports the vLLM pair can use; each is one module here defining ``TRANSPORT``.

Modules are discovered by name, so adding a transport is adding one file.

A base package: it imports nothing of kvcal but errors, so everything that names a
transport stands on it, the sweep's settings (which check the transport setting against
these names and default to the P2P tier's port) as well as the engines, the fit and emit.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from kvcal.errors import InputError
from kvcal.transports.base import Transport

_NOT_TRANSPORTS = {"base"}


def available() -> dict[str, type[Transport]]:
    """Transport name (e.g. 'nixl-pd') -> class, for every module in this package."""
    found: dict[str, type[Transport]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in _NOT_TRANSPORTS or info.name.startswith("_"):
            continue
        cls = getattr(importlib.import_module(f"{__name__}.{info.name}"), "TRANSPORT", None)
        if cls is not None:
            found[cls.name] = cls
    return found


def transport_names() -> tuple[str, ...]:
    """Every transport's name, sorted: the one list flags, settings and manifests check against."""
    return tuple(sorted(available()))


def get_transport(name: str, options: dict[str, Any] | None = None) -> Transport:
    """Build the transport called ``name``; InputError naming the choices if unknown."""
    choices = available()
    if name not in choices:
        raise InputError(f"unknown transport {name!r}; choose one of: {', '.join(sorted(choices))}")
    return choices[name](options)
