"""A package's public API by name, imported on first use.

Each stage's ``__init__`` lists its public names and the module that defines each; the
module is imported when a name is first read, so importing one light module of a
package (the CLI's ``--help`` imports ``kvcal.settings.sweep`` and ``kvcal.sweep.validate``) does not import the stage.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def public_api(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving ``names`` (public name -> defining module)."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
