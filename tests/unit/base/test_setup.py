"""The run's setup: built once by the sweep, stored in run.json, copied into fit.json, read typed everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvcal.emit import formats as em
from kvcal.engines.vllm import VllmPair, VllmSettings, pair_from_config
from kvcal.engines.vllm_launch import ROLES
from kvcal.fit import fit_table, load_fit, load_fit_input, write_fit
from factories import sim_table
from kvcal.records.fit import FIT_SCHEMA, FitResult
from kvcal.records.run import RUN_SCHEMA, RunSetup
from kvcal.records.manifest import RunManifest
from kvcal.records.fit import FitSettings
from kvcal.settings.sweep import SweepConfig
from kvcal.records.run_folder import RunFolder
from kvcal.engines.sim import SimCosts

import factories

REPO = Path(__file__).resolve().parents[3]
# the CPU baseline as committed on 2026-12-02, in the version 1 formats (results/baselines/cpu-tiny is newer)
BASELINE = REPO / "tests" / "fixtures" / "runs" / "cpu-tiny-v1"
CONTRACT_KEYS = {"model", "engine", "transport", "block_size", "kv_bytes_per_token", "kv_dtype", "accelerator",
                 "device_count", "python_hash_seed", "kv_transfer_config", "created_at"}


def test_the_committed_version_1_baseline_still_loads_with_its_setup():
    assert json.loads((BASELINE / "run.json").read_text())["schema"] == "kvcal.run/1"
    assert json.loads((BASELINE / "fit.json").read_text())["schema"] == "kvcal.fit/1"
    manifest = RunFolder(BASELINE).manifest()
    assert manifest.schema_ == RUN_SCHEMA and manifest.settings.probe.reps == 3
    setup = manifest.setup
    assert (setup.model, setup.engine, setup.transport, setup.block_size, setup.kv_bytes_per_token) == (
        "tiny-llama", "vllm", "nixl-pd", 64, 2048)
    assert setup.python_hash_seed == 0  # what the sweep set for both engines (provenance.engine.env)
    assert set(setup.kv_transfer_config) == {"producer", "consumer"}
    assert setup.created_at == manifest.created_at and setup.engine_versions["vllm"]
    fit = load_fit(BASELINE / "fit.json")
    assert fit.schema_ == FIT_SCHEMA and fit.source.kind == "run-folder" and fit.bootstrap.break_even_samples
    assert fit.setup.model_dump(exclude={"created_at"}) == setup.model_dump(exclude={"created_at"})


def test_a_version_1_fit_gives_the_runs_seed_and_config_to_emit(tmp_path):
    res = em.emit(BASELINE / "fit.json", em.EmitOptions(format="vllm"))
    env = {e["name"]: e.get("value") for e in yaml.safe_load(res.stdout)["env"]}
    args = yaml.safe_load(res.stdout)["args"]
    # Deployed engines are GPU engines; the run's CPU buffer (the consumer's) is reported, not copied.
    assert json.loads(args[args.index("--kv-transfer-config") + 1])["kv_buffer_device"] == "cuda"
    assert any("the run used kv_buffer_device 'cpu'" in n for n in res.notes)
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT" in env
    p2p = em.emit(BASELINE / "fit.json", em.EmitOptions(format="vllm", transport="p2p-tier"))
    assert {e["name"]: e.get("value") for e in yaml.safe_load(p2p.stdout)["env"]}["PYTHONHASHSEED"] == "0"
    assert any("PYTHONHASHSEED 0: the run's" in n for n in p2p.notes)


def test_a_version_2_run_folder_round_trips_and_its_fit_copies_the_setup(tmp_path):
    setup = RunSetup(model="m", engine="vllm", transport="p2p-tier", block_size=16, kv_bytes_per_token=4096,
                     kv_dtype="fp8", accelerator="NVIDIA H200", device_count=2, tensor_parallel_size=2,
                     python_hash_seed=99, kv_transfer_config={"producer": {"a": 1}, "consumer": {"b": 2}},
                     engine_versions={"vllm": "1.0"}, created_at="2026-02-02T00:00:00+00:00")
    manifest = factories.make_manifest(setup=setup, created_at=setup.created_at)
    folder = factories.write_run_folder(tmp_path / "run", sim_table(SimCosts(), [256, 1024, 4096], 2, seed=1, block_size=16),
                                        manifest=manifest)
    raw = json.loads((folder / "run.json").read_text())
    assert raw["schema"] == RUN_SCHEMA and set(raw["setup"]) >= CONTRACT_KEYS
    assert RunFolder(folder).manifest() == manifest
    found = load_fit_input(folder)
    assert found.fit is None and found.setup == setup and found.manifest == manifest
    fit = found.fresh_fit(settings=FitSettings(n_resamples=0))
    write_fit(fit, folder / "fit.json")
    assert json.loads((folder / "fit.json").read_text())["setup"] == raw["setup"]
    again = load_fit_input(folder / "fit.json")
    assert again.fit == fit and again.manifest == manifest and again.table is not None


@pytest.mark.parametrize("supplied", [RunSetup(), RunSetup(block_size=100, transport="p2p-tier"), RunSetup(model="x")])
def test_a_table_carries_only_what_the_flags_supply(tmp_path, supplied):
    csv = tmp_path / "probes.csv"
    sim_table(SimCosts(), [256, 1024, 4096], 2, seed=1).probes.to_csv(csv, index=False)
    found = load_fit_input(csv, supplied=supplied)
    assert found.setup == supplied and found.fit is None and found.manifest is None
    assert fit_table(found.table, settings=FitSettings(n_resamples=0)).setup == supplied
    assert any("not multiples of the block size 100" in w for w in found.table.warnings) == (supplied.block_size == 100)


def test_one_rule_for_json_inputs(tmp_path):
    fit = fit_table(sim_table(SimCosts(), [256, 1024, 4096], 2, seed=1), settings=FitSettings(n_resamples=0))
    odd_name = tmp_path / "result.txt"  # a fit.json under another name is still a fit
    odd_name.write_text("\ufeff  " + FitResult.model_dump_json(fit, by_alias=True))
    assert load_fit_input(odd_name).fit == fit


def test_launch_mode_records_the_hash_seed_it_sets(tmp_path):
    pair = VllmPair(VllmSettings(device="cpu", python_hash_seed="4242", cache_dir=tmp_path / "cache", run_dir=tmp_path / "run",
                                 engine_args=("--kv-cache-dtype", "fp8", "--tensor-parallel-size=2")))
    setup = pair.setup()
    assert {pair.plan.env(role)["PYTHONHASHSEED"] for role in ROLES} == {"4242"}
    assert setup.python_hash_seed == 4242 and setup.kv_dtype == "fp8" and setup.tensor_parallel_size == 2
    assert setup.kv_transfer_config == {r.value: pair.transport.kv_transfer_config(r, "cpu", pair.plan.side(r)) for r in ROLES}
    assert setup.engine == "vllm" and setup.transport == "nixl-pd" and setup.device_count == 1


def test_attach_mode_leaves_what_it_cannot_know_unknown():
    pair = VllmPair(VllmSettings(producer_url="http://a:1", consumer_url="http://b:2", block_size=32))
    setup = pair.setup()
    assert setup.block_size == 32 and setup.python_hash_seed is None and setup.kv_transfer_config is None
    assert setup.accelerator is None and setup.engine_versions is None


def test_the_sweeps_hash_seed_reaches_the_launched_engines(tmp_path):
    config = SweepConfig(python_hash_seed=17, output_dir=tmp_path)
    pair = pair_from_config(config, RunFolder(tmp_path / "run"))
    assert pair.settings.python_hash_seed == 17
    assert all(cmd.startswith("PYTHONHASHSEED=17 ") for cmd in pair.plan.commands())


def test_the_python_hash_seed_flag_sets_the_engines_seed(tmp_path, kvcal):
    result = kvcal("sweep", "--python-hash-seed", "5", "--dry-run", "--output-dir", tmp_path)
    assert result.code == 0, result.err
    commands = [line for line in result.out.splitlines() if "kvcal.engines.serve" in line]
    assert len(commands) == 2 and all(line.startswith("PYTHONHASHSEED=5 ") for line in commands)


def test_fit_flags_fill_a_job_logs_setup_and_nothing_else(tmp_path, kvcal):
    log = REPO / "tests" / "fixtures" / "llmd" / "gpt-oss-120b-job.log"
    out = tmp_path / "job.fit.json"
    result = kvcal("fit", log, "--model", "openai/gpt-oss-120b", "--transport", "p2p-tier", "--block-size", "64",
                   "-o", out, "--resamples", "0")
    assert result.code == 0, result.err
    setup = json.loads(out.read_text())["setup"]
    assert (setup["model"], setup["transport"], setup["block_size"]) == ("openai/gpt-oss-120b", "p2p-tier", 64)
    assert {k: v for k, v in setup.items() if k not in ("model", "transport", "block_size")} == dict.fromkeys(
        set(setup) - {"model", "transport", "block_size"})


@pytest.mark.parametrize("args,message", [
    (["--transport", "tcp"], "--transport must be one of"),
    (["--block-size", "0"], "--block-size must be a positive"),
])
def test_fit_setup_flags_are_checked(tmp_path, kvcal, args, message):
    log = REPO / "tests" / "fixtures" / "llmd" / "gpt-oss-120b-job.log"
    result = kvcal("fit", log, *args, "-o", tmp_path / "f.json")
    assert result.code == 2 and message in result.err


def test_a_run_folder_keeps_its_own_setup(tmp_path, kvcal):
    folder = factories.write_run_folder(tmp_path / "run", sim_table(SimCosts(), [256, 1024, 4096], 2, seed=1))
    result = kvcal("fit", folder, "--model", "other")
    assert result.code == 2 and "records its own setup" in result.err
