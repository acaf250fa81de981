"""kvcal/cli/help_tables.py is what scripts/gen_help_tables.py makes of the settings models: each table is compared
with its model, so that no flag's default, bound or help is kept by hand in a second place (issue 52)."""

from __future__ import annotations

import importlib
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


def test_a_moved_emit_default_or_bound_is_caught(monkeypatch):
    """EMIT_SETTINGS follows EmitOptions: a moved default (the P2P port) or bound (the longest context) shows."""
    from annotated_types import Le

    from kvcal.emit.options import EmitOptions

    monkeypatch.setattr(EmitOptions.model_fields["p2p_port"], "default", 7778)
    field = EmitOptions.model_fields["max_model_len"]
    monkeypatch.setattr(field, "metadata", [Le(4096) if isinstance(mark, Le) else mark for mark in field.metadata])
    table = GENERATOR.tables()["EMIT_SETTINGS"]
    assert table["p2p_port"]["default"] == 7778 != help_tables.EMIT_SETTINGS["p2p_port"]["default"]
    assert table["max_model_len"]["le"] == 4096 != help_tables.EMIT_SETTINGS["max_model_len"]["le"]


@pytest.mark.parametrize(
    ("module", "command", "table"),
    [
        ("emit_cmd", "emit_config", "EMIT_SETTINGS"),
        ("predict_cmd", "predict", "PREDICT_SETTINGS"),
        ("k8s_cmd", "k8s_job", "K8S_JOB_SETTINGS"),
    ],
)
def test_a_commands_flags_default_as_its_settings_do(module, command, table):
    """No such flag keeps a default of its own: each one named like a field of the command's settings defaults to
    the settings' default (a flag passes its value on, so a different one would silently replace the settings')."""
    import importlib
    import inspect

    settings = getattr(help_tables, table)
    function = getattr(importlib.import_module(f"kvcal.cli.{module}"), command)
    field_of = {"ttl": "ttl_seconds"}  # k8s-job's --ttl sets the Job's ttlSecondsAfterFinished
    params = inspect.signature(function).parameters.values()
    shared = [p for p in params if field_of.get(p.name, p.name) in settings]
    assert len(shared) == len(settings)  # every field is a flag
    for param in shared:
        assert param.default.default == settings[field_of.get(param.name, param.name)]["default"], param.name
        assert param.default.min is None and param.default.max is None, f"{param.name}: bounds are the settings'"


def test_a_moved_predict_default_is_caught(monkeypatch):
    """PREDICT_SETTINGS follows the PredictSettings dataclass (a plain record, no model)."""
    import dataclasses

    from kvcal.estimate.predict import PredictSettings

    (devices,) = [item for item in dataclasses.fields(PredictSettings) if item.name == "devices"]
    monkeypatch.setattr(devices, "default", 2)
    assert (
        GENERATOR.tables()["PREDICT_SETTINGS"]["devices"]["default"]
        == 2
        != help_tables.PREDICT_SETTINGS["devices"]["default"]
    )


def test_a_moved_predict_bound_is_caught_and_the_help_quotes_the_table(monkeypatch):
    """--mfu's bounds are declared once, in PredictSettings' field: the table follows it, the help quotes the table."""
    import dataclasses
    import inspect

    from kvcal.cli.predict_cmd import predict
    from kvcal.estimate.predict import PredictSettings
    from kvcal.settings.bounds import bounds_in_words

    (mfu,) = [item for item in dataclasses.fields(PredictSettings) if item.name == "mfu"]
    monkeypatch.setattr(mfu, "metadata", {"gt": 0, "le": 0.9})
    assert GENERATOR.tables()["PREDICT_SETTINGS"]["mfu"]["le"] == 0.9 != help_tables.PREDICT_SETTINGS["mfu"]["le"]
    words = bounds_in_words(help_tables.PREDICT_SETTINGS["mfu"])
    assert words == "be above 0 and at most 1"
    assert f"(must {words})" in inspect.signature(predict).parameters["mfu"].default.help


def test_a_moved_emit_fallback_is_caught(monkeypatch):
    """EMIT_FALLBACKS follows the module that applies each fallback (here the affinity filter's prefill chunk)."""
    from kvcal.emit import affinity

    monkeypatch.setattr(affinity, "DEFAULT_CHUNK", 4096)
    assert GENERATOR.tables()["EMIT_FALLBACKS"]["chunk_size"] == 4096 != help_tables.EMIT_FALLBACKS["chunk_size"]


def test_a_moved_observe_window_is_caught(monkeypatch):
    from kvcal.observe import run

    monkeypatch.setattr(run, "DEFAULT_SINCE", "1h")
    assert GENERATOR.tables()["OBSERVE_FALLBACKS"]["since"] == "1h" != help_tables.OBSERVE_FALLBACKS["since"]


def test_a_moved_thresholds_word_is_caught(monkeypatch):
    """fleet --thresholds' word for the spread is declared in fleet/settings.py; the command reads it from the table."""
    from kvcal.cli import fleet_cmd
    from kvcal.fleet import settings

    monkeypatch.setattr(settings, "AUTO_THRESHOLDS", "spread")
    assert GENERATOR.tables()["FLEET_FALLBACKS"]["thresholds"] == "spread" != help_tables.FLEET_FALLBACKS["thresholds"]
    assert '"auto"' not in Path(fleet_cmd.__file__).read_text()  # no second copy: the command reads the table


def test_a_moved_plan_fallback_is_caught(monkeypatch):
    """PLAN_FALLBACKS follows plan/priors.py, which applies them (here the noise a prior without one gets)."""
    from kvcal.plan import priors

    monkeypatch.setattr(priors, "DEFAULT_NOISE_CV", 0.1)
    assert GENERATOR.tables()["PLAN_FALLBACKS"]["noise_cv"] == 0.1 != help_tables.PLAN_FALLBACKS["noise_cv"]


@pytest.mark.parametrize(
    "module, name, table, key",
    [
        ("kvcal.settings.sweep_groups", "DEFAULT_BUSY_QUEUE_THRESHOLD", "FIT_FALLBACKS", "busy_queue_threshold"),
        ("kvcal.gate.deployed", "REGRET_TOLERANCE_PCT", "COMPARE_FALLBACKS", "strict_deployed_regret_pct"),
    ],
)
def test_a_moved_fit_or_compare_fallback_is_caught(monkeypatch, module, name, table, key):
    """fit's busy threshold and compare's tolerated regret are declared where they apply; the helps quote the table."""
    monkeypatch.setattr(importlib.import_module(module), name, 7)
    assert GENERATOR.tables()[table][key] == 7 != getattr(help_tables, table)[key]


def test_a_moved_json_schema_is_caught(monkeypatch):
    """--json's help names the schema its record declares (fleet/result.py's FLEET_SCHEMA here)."""
    from kvcal.fleet import result

    monkeypatch.setattr(result, "FLEET_SCHEMA", "kvcal.fleet/2")
    assert GENERATOR.tables()["JSON_SCHEMAS"]["fleet"] == "kvcal.fleet/2" != help_tables.JSON_SCHEMAS["fleet"]
