"""Each sweep setting is declared once, in SweepConfig: flags, launch settings and the k8s Job derive from it."""

from __future__ import annotations

import pytest

from kvcal.emit import k8s
from kvcal.engines.transports import available, transport_names
from kvcal.engines.vllm_launch import SWEEP_NAMES, VllmSettings, settings_from_config
from kvcal.errors import InputError
from kvcal.sweep.config import SimSettings, SweepConfig, flag_help, flag_of, launch_only_flags, resolve_config, sweep_argv
from kvcal.engines.sim_costs import SimCosts

SHARED = {name: SWEEP_NAMES.get(name, name) for name in VllmSettings.__dataclass_fields__
          if SWEEP_NAMES.get(name, name) in SweepConfig.model_fields}
# Values unlike every default, so a setting that is not copied shows.
ODD = {"model": "/m", "transport": "p2p-tier", "producer_url": "http://a:1", "consumer_url": "http://b:2",
       "producer_p2p_host": "h", "producer_p2p_port": 7, "block_size": 16, "max_model_len": 4096, "producer_gpus": "0",
       "consumer_gpus": "1", "producer_cpus": "2", "consumer_cpus": "3", "engine_args": ["--x"], "python_hash_seed": 11,
       "startup_timeout_s": 12.0, "probe_timeout_s": 13.0, "dp_ranks": 3, "share_gpu": [0.4, 0.4]}


def test_every_launch_setting_the_sweep_declares_is_copied_by_settings_from_config():
    assert set(SHARED.values()) <= set(ODD), "a new shared setting needs an odd value here"
    settings = settings_from_config(SweepConfig(**ODD))
    for launch_name, sweep_name in SHARED.items():
        value = getattr(settings, launch_name)
        expected = ODD[sweep_name]
        assert value == (tuple(expected) if isinstance(expected, list) else str(expected) if launch_name == "python_hash_seed"
                         else expected), launch_name


def test_launch_defaults_are_the_sweeps():
    defaults = settings_from_config(SweepConfig())
    plain = VllmSettings()
    for launch_name in SHARED:
        assert getattr(plain, launch_name) == getattr(defaults, launch_name), launch_name


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
    assert transport_names() == tuple(sorted(available())) == ("nixl-pd", "p2p-tier")
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
