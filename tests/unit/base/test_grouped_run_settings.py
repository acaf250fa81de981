"""run.json's settings are grouped from kvcal.run/4 on; every older file (flat settings) loads into the groups,
and a sweep resumed on an older run folder continues it with the flags compared as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import factories
from kvcal.records.run import RUN_SCHEMA
from kvcal.records.run_folder import RunFolder
from kvcal.settings.sweep import FLAT_ORDER, GROUPS, SweepConfig, grouped_from_flat
from kvcal.sweep.runner import run_sweep

BASELINE = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "runs" / "cpu-tiny-v1"  # the version 1 run
SETTINGS = dict(engine="sim", prefix_lengths=[256, 1024], reps=2, seed=4, adaptive=False, busy_queue_threshold=3,
                cold_sessions=2, name="r")


def _sim_run(tmp_path: Path) -> tuple[Path, SweepConfig]:
    outcome = run_sweep(SweepConfig(**SETTINGS, output_dir=tmp_path))
    return outcome.run_dir, RunFolder(outcome.run_dir).manifest().settings


def _as_older(run_dir: Path, schema: str) -> dict:
    """Rewrite run.json as ``schema`` wrote it: flat settings, and no field that version lacked."""
    raw = json.loads((run_dir / "run.json").read_text())
    raw["schema"] = schema
    raw["settings"] = factories.flat_settings(RunFolder(run_dir).manifest().settings)
    if schema in ("kvcal.run/2", "kvcal.run/3"):
        for entry in raw["plan"]:
            del entry["pair"], entry["link_class"]
        for key in ("pairs", "cold_sessions"):
            del raw["settings"][key]
    if schema == "kvcal.run/2":
        raw.pop("pair")
    (run_dir / "run.json").write_text(json.dumps(raw))
    return raw


def test_a_new_run_json_holds_its_settings_in_groups(tmp_path):
    run_dir, settings = _sim_run(tmp_path)
    raw = json.loads((run_dir / "run.json").read_text())
    assert raw["schema"] == RUN_SCHEMA == "kvcal.run/4"
    assert set(raw["settings"]) == {*GROUPS, "sim", "pairs"}
    assert raw["settings"]["engine"]["kind"] == "sim" and raw["settings"]["probe"]["reps"] == 2
    assert raw["settings"]["adaptive"]["enabled"] is False and raw["settings"]["output"]["name"] == "r"
    assert SweepConfig.model_validate(raw["settings"]) == settings


@pytest.mark.parametrize("schema", ["kvcal.run/2", "kvcal.run/3", "kvcal.run/4"])
def test_every_older_flat_run_json_loads_into_the_groups(tmp_path, schema):
    run_dir, settings = _sim_run(tmp_path)
    raw = _as_older(run_dir, schema)
    assert "reps" in raw["settings"] and raw["settings"]["engine"] == "sim"  # flat, as that version wrote it
    loaded = RunFolder(run_dir).manifest()
    assert loaded.schema_ == RUN_SCHEMA
    expected = settings if schema == "kvcal.run/4" else settings.model_copy(
        update={"probe": settings.probe.model_copy(update={"cold_sessions": 1})})  # the default before version 4
    assert loaded.settings.model_dump() == expected.model_dump()
    assert (loaded.settings.engine.kind, loaded.settings.probe.seed, loaded.settings.load.busy_queue_threshold) == (
        "sim", 4, 3)


def test_the_version_1_baseline_reads_every_flat_setting_into_its_group():
    raw = json.loads((BASELINE / "run.json").read_text())
    assert raw["schema"] == "kvcal.run/1" and "reps" in raw["settings"]
    settings = RunFolder(BASELINE).manifest().settings
    for name, value in raw["settings"].items():
        got = settings.value(name)
        if hasattr(got, "model_dump"):  # the sim curves: keys added since keep their defaults
            got = {key: item for key, item in got.model_dump(mode="json").items() if key in value}
        assert (str(got) if name == "output_dir" else got) == value, name
    assert set(raw["settings"]) <= set(FLAT_ORDER)


def test_grouping_is_one_function_that_leaves_grouped_settings_and_unknown_keys_alone():
    flat = {"engine": "sim", "reps": 2, "adaptive": True, "output_dir": "o", "sim": {"noise_cv": 0.1}, "typo": 1}
    grouped = grouped_from_flat(flat)
    assert grouped == {"engine": {"kind": "sim"}, "probe": {"reps": 2}, "adaptive": {"enabled": True},
                       "output": {"output_dir": "o"}, "sim": {"noise_cv": 0.1}, "typo": 1}
    assert grouped_from_flat(grouped) == grouped
    with pytest.raises(ValueError, match="typo"):
        SweepConfig.model_validate(grouped)


@pytest.mark.parametrize("schema", ["kvcal.run/2", "kvcal.run/3", "kvcal.run/4"])
def test_a_sweep_resumed_on_an_older_run_folder_finishes_it(tmp_path, kvcal, schema):
    run_dir, _ = _sim_run(tmp_path)
    probes = run_dir / "probes.jsonl"
    lines = probes.read_text().splitlines(keepends=True)
    probes.write_text("".join(lines[: len(lines) // 2]))  # the run died half way
    _as_older(run_dir, schema)
    differs = kvcal("sweep", "--engine", "sim", "--reps", "3", "--output-dir", tmp_path, "--name", "r", "--resume")
    assert differs.code == 2 and "--reps 3 (the run has 2)" in differs.err
    same = kvcal("sweep", "--engine", "sim", "--reps", "2", "--seed", "4", "--output-dir", tmp_path, "--name", "r",
                 "--resume")
    assert same.code == 0, same.err
    done = {json.loads(line)["probe_id"] for line in probes.read_text().splitlines() if json.loads(line)["valid"]}
    assert {p.probe_id for p in RunFolder(run_dir).manifest().plan} <= done
