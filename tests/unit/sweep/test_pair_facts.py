"""What the pair is travels as typed PairFacts in run.json; monitor, warm-up default and fit read them."""

from __future__ import annotations

import json

import factories

from kvcal.engines.vllm import VllmPair, VllmSettings
from kvcal.records.run import RUN_SCHEMA, PairFacts, RoleFacts
from kvcal.records import disturbance_bounds
from kvcal.sweep import host_monitors, warmup
from kvcal.settings.sweep import SweepConfig
from kvcal.records.run_folder import RunFolder
from kvcal.sweep.runner import run_sweep


def test_a_sim_run_records_its_pair_facts_and_a_version_2_run_still_loads(tmp_path):
    outcome = run_sweep(SweepConfig(engine="sim", prefix_lengths=[256, 1024], reps=1, output_dir=tmp_path, name="r"))
    raw = json.loads((outcome.run_dir / "run.json").read_text())
    assert raw["schema"] == RUN_SCHEMA and raw["pair"]["engine"] == "sim"
    raw.pop("pair")
    raw["schema"] = "kvcal.run/2"
    raw["settings"] = factories.flat_settings(RunFolder(outcome.run_dir).manifest().settings)  # flat until version 4
    raw["provenance"]["engine"] = {"engine": "vllm", "mode": "launch", "device": "cpu",
                                   "env": {"producer": {"VLLM_CPU_OMP_THREADS_BIND": "2"},
                                           "consumer": {"VLLM_CPU_OMP_THREADS_BIND": "3"}}}
    (outcome.run_dir / "run.json").write_text(json.dumps(raw))
    pair = RunFolder(outcome.run_dir).manifest().pair
    assert pair.mode == "launch" and pair.device == "cpu" and (pair.producer.cpus, pair.consumer.cpus) == ("2", "3")
    assert disturbance_bounds.resource_of(pair) == "cpu cores 2,3"


def test_monitor_and_warm_up_default_follow_the_typed_facts():
    cuda = PairFacts(engine="vllm", mode="launch", device="cuda", producer=RoleFacts(gpus="0"), consumer=RoleFacts(gpus="1"))
    assert disturbance_bounds.resource_of(cuda) == "gpu 0,1" and warmup.enabled(None, cuda)
    attached = PairFacts(engine="vllm", mode="attach")
    assert host_monitors.monitor_for(attached) is None and warmup.enabled(None, attached)
    assert not warmup.enabled(None, PairFacts(engine="sim")) and warmup.enabled(True, PairFacts(engine="sim"))


def test_a_launched_vllm_pair_states_what_kvcal_sets_per_role(tmp_path):
    pair = VllmPair(VllmSettings(device="cpu", producer_cpus="0", consumer_cpus="1", run_dir=tmp_path,
                                 engine_args=("--tensor-parallel-size", "2")))
    facts = pair.facts()
    assert facts.mode == "launch" and facts.device == "cpu"
    assert (facts.producer.cpus, facts.consumer.cpus) == ("0", "1")
    assert facts.producer.env["PYTHONHASHSEED"] == "0"  # parallel sizes: the launch computes them on GPU hosts only
    attached = VllmPair(VllmSettings(producer_url="http://a:1", consumer_url="http://b:2", dp_ranks=4, run_dir=tmp_path))
    assert attached.facts().mode == "attach" and attached.facts().producer.data_parallel_size == 4
