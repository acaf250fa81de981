"""Each sweep setting is declared once, in SweepConfig's groups: flags, launch settings and the k8s Job derive from it."""

from __future__ import annotations

import pytest

from kvcal.k8s import job as k8s
from kvcal.transports import available, transport_names
from kvcal.engines import vllm_launch
from kvcal.engines.vllm_launch import VllmSettings
from kvcal.errors import InputError
from kvcal.settings.sweep import (FLAT_ORDER, GROUPS, P2P_PORT as SETTINGS_P2P_PORT, PATHS, TRANSPORT_NAMES, AttachSettings,
                            EngineSettings, PairSpec, SimSettings, SweepConfig, grouped_from_flat)
from kvcal.settings.sweep_flags import flag_help, flag_of, launch_only_flags, marked, sweep_argv
from kvcal.sweep.validate import resolve_config
from kvcal.costs.simulated import SimCosts

SHARED = tuple(EngineSettings.model_fields)
# Values unlike every default, so a setting that is not copied shows.
ODD = {"model": "/m", "transport": "p2p-tier", "producer_url": "http://a:1", "consumer_url": "http://b:2",
       "producer_p2p_host": "h", "producer_p2p_port": 7, "block_size": 16, "max_model_len": 4096, "producer_gpus": "0",
       "consumer_gpus": "1", "producer_cpus": "2", "consumer_cpus": "3", "engine_args": ["--x"], "python_hash_seed": 11,
       "startup_timeout_s": 12.0, "probe_timeout_s": 13.0, "dp_ranks": 3, "share_gpu": [0.4, 0.4]}


def test_the_vllm_launch_settings_are_the_engine_group_built_on():
    """No launch setting restates a sweep setting: VllmSettings extends the engine group and is built from it."""
    assert issubclass(VllmSettings, EngineSettings) and set(SHARED) < set(VllmSettings.model_fields)
    assert not {"SWEEP_NAMES", "settings_from_config"} & set(vars(vllm_launch))  # no copied names
    config = SweepConfig(**ODD)
    assert {PATHS[name][1] for name in ODD} - {"kind"} <= set(SHARED), "a new engine setting needs an odd value here"
    settings = VllmSettings.from_engine(config.engine, device="cpu")
    for name in SHARED:
        assert getattr(settings, name) == getattr(config.engine, name), name
    assert settings.block_size_given and not VllmSettings.from_engine(SweepConfig().engine).block_size_given
    assert settings.transport_options == {} and VllmSettings(cpu_bytes_to_use=5).transport_options == {
        "cpu_bytes_to_use": 5}


def test_launch_defaults_are_the_sweeps():
    defaults = VllmSettings.from_engine(SweepConfig().engine)
    plain = VllmSettings()
    for name in SHARED:
        assert getattr(plain, name) == getattr(defaults, name) == getattr(SweepConfig().engine, name), name


def test_attach_is_declared_once_and_pairs_reuse_it():
    owners = [cls.__name__ for cls in (AttachSettings, EngineSettings, VllmSettings, PairSpec, SweepConfig)
              if "attach" in vars(cls)]
    assert owners == ["AttachSettings"]
    assert issubclass(PairSpec, AttachSettings) and issubclass(EngineSettings, AttachSettings)
    for name in AttachSettings.model_fields:
        assert PairSpec.model_fields[name].description == EngineSettings.model_fields[name].description, name
    assert VllmSettings(producer_url="http://a:1", consumer_url="http://b:2").attach and not VllmSettings().attach


def test_every_setting_has_one_flat_name_in_one_group():
    assert sorted(FLAT_ORDER) == sorted(PATHS) and len(set(FLAT_ORDER)) == len(FLAT_ORDER)
    fields = [(group, field) for group, model in GROUPS.items() for field in model.model_fields]
    assert sorted(fields) == sorted(path for path in PATHS.values() if path[1] is not None)
    flat = {**ODD, "engine": "sim", "adaptive": True, "reps": 2, "output_dir": "o", "load_states": ["idle"]}
    grouped = grouped_from_flat(flat)
    assert grouped["engine"]["kind"] == "sim" and grouped["adaptive"] == {"enabled": True}
    assert grouped["probe"]["reps"] == 2 and grouped["output"] == {"output_dir": "o"}
    assert grouped_from_flat(grouped) == grouped  # grouped settings come back as they are
    config = SweepConfig.model_validate(grouped)
    assert config == SweepConfig(**flat) == SweepConfig.model_validate(config.model_dump())
    assert {name: config.value(name) for name in flat} == {**flat, "output_dir": config.output.output_dir}


def test_flag_help_shows_the_declared_default(kvcal):
    assert flag_help("reps").endswith("(default: 3)") and flag_help("startup_timeout_s").endswith("(default: 900.0)")
    assert "(default" not in flag_help("prefix_lengths")  # None: no default to show
    out = kvcal("sweep", "--help").out
    for name in ("reps", "block_size", "python_hash_seed", "startup_timeout_s", "engine_args"):
        assert flag_of(name) in out, name


def test_sim_settings_extend_the_sim_costs():
    assert set(SimCosts.model_fields) < set(SimSettings.model_fields)
    sim = SimSettings(pull_intercept_ms=30.0, fail_pull_rate=0.1)
    assert sim.costs == SimCosts(pull_intercept_ms=30.0)


def test_transport_names_live_with_the_transports():
    assert transport_names() == tuple(sorted(available())) == TRANSPORT_NAMES == ("nixl-pd", "p2p-tier")
    assert k8s.TRANSPORTS == transport_names()
    with pytest.raises(InputError, match="unknown transport 'tcp'"):
        resolve_config({}, {"transport": "tcp"})


def test_the_k8s_job_sets_its_settings_through_the_config_flags():
    values = {name: ODD.get(name, "x") for name in k8s.JOB_SETTINGS}
    argv = sweep_argv(values)
    assert [a for a in argv if a.startswith("--")] == [flag_of(name) for name in k8s.JOB_SETTINGS]
    base = dict(image="img", producer_url="http://10.0.0.1:8000", consumer_url="http://10.0.0.2:8000", model="m")
    for flag in launch_only_flags():
        with pytest.raises(InputError, match="for launching engines"):
            k8s.JobSpec(**base, extra_args=(flag, "1"))
    assert "--python-hash-seed" in launch_only_flags()


def test_sweep_argv_repeats_engine_args_and_joins_lists():
    assert sweep_argv({"prefix_lengths": [256, 512], "engine_args": ["--a", "--b=1"], "reps": None}) == [
        "--prefix-lengths", "256,512", "--engine-arg=--a", "--engine-arg=--b=1"]


def _sweep_options() -> dict[str, str]:
    """Parameter name -> first flag of every option of ``kvcal sweep`` (typer's own view of the command)."""
    import inspect

    from kvcal.cli.sweep_cmd import sweep

    return {name: param.default.param_decls[0].split("/")[0]
            for name, param in inspect.signature(sweep).parameters.items()}


def test_every_sweep_flag_is_a_config_field_with_its_declared_flag():
    """A renamed SweepConfig field (or a renamed parameter) fails here instead of silently dropping its flag."""
    from kvcal.settings.sweep_flags import flag_fields

    # --pairs reads a file into the campaign-file-only pairs setting (kvcal.sweep.validate.load_pairs_file)
    own = ("resume", "config", "dry_run", "pairs")
    options = {name: flag for name, flag in _sweep_options().items() if name not in own}
    assert set(options) == set(flag_fields())
    for name, flag in options.items():
        assert flag == flag_of(name), name


ATTACH = {"producer_url": "http://10.0.0.1:8000", "consumer_url": "http://10.0.0.2:8000"}
# What the engines kvcal launches are given, which an attached sweep and the k8s Job refuse.
LAUNCH_ONLY_FLAGS = ("--share-gpu", "--cpu-bytes-to-use", "--producer-gpus", "--consumer-gpus", "--producer-cpus",
                     "--consumer-cpus", "--engine-arg", "--python-hash-seed", "--cold-sessions")


def test_attach_refuses_exactly_the_settings_the_job_refuses():
    launch_only = marked("launch_only")
    assert launch_only_flags() == LAUNCH_ONLY_FLAGS  # a mark dropped or added shows here
    for name in launch_only:
        with pytest.raises(InputError, match=flag_of(name)):
            resolve_config({}, {**ATTACH, name: ODD.get(name, 1 if name != "engine_args" else ["--x"])})


# A value unlike the default for every setting an attached sweep may be given (ODD has the rest).
ATTACH_ODD = {"engine": "vllm", "reps": 2, "seed": 5, "name": "r", "max_attempts": 4, "min_pull_fraction": 0.6,
              "warmup_probes": True, "load_states": ["idle", "source-busy"], "background_concurrency": 4,
              "busy_queue_threshold": 2, "background_prompt_tokens": 512, "background_max_tokens": 2,
              "load_settle_timeout_s": 9.0, "adaptive": True, "target_width": 0.2, "target_regret": 0.01, "max_probes": 40,
              "max_engine_seconds": 60.0, "prefix_lengths": [256, 512]}
NOT_FOR_VLLM = {"sim"}  # the simulated pair's curves: refused with --engine vllm, attached or launched
BESIDE_URLS = {"pairs"}  # each pair names its own URLs: refused beside --producer-url (test_pairs.py)


def test_attach_accepts_every_setting_that_is_not_launch_only(tmp_path):
    allowed = [name for name in FLAT_ORDER
               if name not in marked("launch_only") and name not in NOT_FOR_VLLM | BESIDE_URLS]
    odd = {**ODD, **ATTACH_ODD, "output_dir": tmp_path}
    assert set(allowed) <= set(odd), "a new setting needs an odd value here"
    for name in allowed:
        config = resolve_config({}, {**ATTACH, "transport": "p2p-tier", name: odd[name]})  # p2p-tier: the side channel's too
        assert config.attached and config.value(name) == odd[name], name
    with pytest.raises(InputError, match="--engine sim only"):
        resolve_config({"sim": {"noise_cv": 0.1}}, ATTACH)


def test_fit_defaults_are_declared_once():
    import inspect

    from kvcal.cli import fit_cmd
    from kvcal.fit import fit_and_write, fit_input, fit_table
    from kvcal.records.fit import FIT_DEFAULTS

    for function in (fit_input, fit_and_write, fit_table):  # one settings object, not three loose numbers
        params = inspect.signature(function).parameters
        assert params["settings"].default is FIT_DEFAULTS
        assert not {"confidence", "seed", "n_resamples"} & set(params)
    import typer

    app = typer.Typer()
    fit_cmd.register(app)
    cli = inspect.signature(app.registered_commands[0].callback).parameters
    assert (cli["confidence"].default.default, cli["seed"].default.default, cli["resamples"].default.default) == (
        FIT_DEFAULTS.confidence, FIT_DEFAULTS.seed, FIT_DEFAULTS.n_resamples)


def test_emit_asks_the_transports_for_their_names_and_port():
    from kvcal.emit.options import P2P_PORT, canonical_transport
    from kvcal.transports.p2p_tier import P2pTier

    assert P2P_PORT == P2pTier.deployed_side_port == SweepConfig().engine.producer_p2p_port == SETTINGS_P2P_PORT == 7777
    for name, cls in available().items():
        for alias in (name, *cls.aliases):
            assert canonical_transport(alias) == name
