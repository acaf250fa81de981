"""kvcal/cli/help_tables.py is what scripts/gen_help_tables.py makes of the settings models: each table is compared
with its model, so that no flag's default, bound or help is kept by hand in a second place (issue 52)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kvcal.cli import help_tables

ROOT = Path(__file__).resolve().parents[3]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_help_tables", ROOT / "scripts" / "gen_help_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


@pytest.mark.parametrize("name", sorted(GENERATOR.tables()))
def test_each_generated_table_is_what_its_model_says(name):
    assert getattr(help_tables, name) == GENERATOR.tables()[name], (
        f"kvcal/cli/help_tables.py's {name} differs from its settings model: rerun scripts/gen_help_tables.py"
    )


def test_the_committed_module_is_the_generators_text():
    if not GENERATOR.RUFF.exists():  # the script formats its text with the project's ruff; the tables are checked above
        pytest.skip("no ruff beside this Python")
    assert (ROOT / "kvcal" / "cli" / "help_tables.py").read_text() == GENERATOR.render()


def test_the_module_holds_only_generated_tables():
    public = {name for name in vars(help_tables) if name.isupper()}
    assert public == set(GENERATOR.tables())


def test_a_changed_default_is_caught(monkeypatch):
    """The comparison can fail: a model whose default moved no longer matches the committed table."""
    from kvcal.settings.sweep import flat_field

    monkeypatch.setattr(flat_field("reps"), "default", 7)
    assert GENERATOR.tables()["SWEEP_FLAGS"] != help_tables.SWEEP_FLAGS


def test_a_changed_bound_is_caught(monkeypatch):
    from annotated_types import Le

    from kvcal.fleet.settings import FleetConfig

    field = FleetConfig.model_fields["seeds"]
    monkeypatch.setattr(field, "metadata", [Le(999) if isinstance(mark, Le) else mark for mark in field.metadata])
    assert GENERATOR.tables()["FLEET_SETTINGS"]["seeds"]["le"] == 999 != help_tables.FLEET_SETTINGS["seeds"]["le"]
