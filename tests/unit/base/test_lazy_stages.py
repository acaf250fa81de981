"""Importing a stage's package loads none of its modules: each ``__init__`` names its API lazily (kvcal/lazy.py)."""

from __future__ import annotations

import importlib
import sys
from unittest import mock

import pytest

STAGES = ("estimate", "engines", "fit", "threshold", "sweep", "plan", "emit", "k8s", "gate", "fleet", "observe", "report", "cli")


def _fresh_import(package: str) -> list[str]:
    """The stage's own modules that importing ``kvcal.<package>`` from scratch loads (sys.modules restored after)."""
    with mock.patch.dict(sys.modules):
        for name in [name for name in sys.modules if name == "kvcal" or name.startswith("kvcal.")]:
            del sys.modules[name]
        importlib.import_module(f"kvcal.{package}")
        return sorted(name for name in sys.modules if name.startswith(f"kvcal.{package}."))


@pytest.mark.parametrize("stage", STAGES)
def test_importing_a_stage_loads_none_of_its_modules(stage):
    assert _fresh_import(stage) == []


def test_a_lazy_name_is_the_defining_modules_own():
    from kvcal import fit
    from kvcal.fit.entry import fit_input
    from kvcal.fit.fitting import fit_table

    assert fit.fit_table is fit_table and fit.fit_input is fit_input
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        fit.no_such_name  # noqa: B018
