"""Every artifact kvcal emits, validated against the upstream shapes in tests/fixtures/upstream/.

The fixtures transcribe llm-d-router main's plugin parameters, the llm-d P2P guide's
engine patch and values file (vLLM 0.33). A validator built from them rejects unknown
plugin keys as the router does; the tests first show it can fail, then feed it the
plugin YAML, Helm patches and engine configs kvcal emits. The Kubernetes Job is checked
against the official client's V1Job model.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError,
                      create_model)

from kvcal.emit import formats as em
from kvcal.errors import InputError
from kvcal.engines import vllm_launch
from kvcal.transports.base import Role
from kvcal.engines.vllm import VllmPair, VllmSettings
from kvcal.fit import fit_table
from factories import sim_table
from kvcal.records.fit import FitResult
from kvcal.records.run import RunSetup
from kvcal.records.fit import FitSettings

UPSTREAM = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
VALUES = Path(__file__).resolve().parents[2] / "fixtures" / "values"
# A Go float64 field decodes an integer value as well as a decimal one; a bool or a string fails.
_TYPES = {"string": StrictStr, "integer": StrictInt, "number": StrictInt | StrictFloat, "boolean": StrictBool,
          "object": dict}


@lru_cache
def plugin_validators() -> dict[str, type[BaseModel]]:
    """One strict pydantic model per plugin type, built from router-plugins.yaml."""
    spec = yaml.safe_load((UPSTREAM / "router-plugins.yaml").read_text())
    models: dict[str, type[BaseModel]] = {}
    for plugin, desc in spec.items():
        fields: dict[str, Any] = {}
        for name, p in desc["parameters"].items():
            bounds = {bound: p[key] for key, bound in (("minimum", "ge"), ("maximum", "le")) if key in p}
            kind = Literal[tuple(p["enum"])] if "enum" in p else _TYPES[p["type"]]
            fields[name] = (kind | None, Field(None, **bounds))
        extra = "forbid" if desc["reject_unknown"] else "allow"
        models[plugin] = create_model(f"P_{plugin.replace('-', '_')}", __config__=ConfigDict(extra=extra), **fields)
    return models


def validate_entry(entry: dict) -> None:
    """ValidationError when the router would refuse this plugin entry."""
    model = plugin_validators().get(entry["type"])
    if model is not None:
        model.model_validate(entry.get("parameters") or {})


def epp_configs(values_text: str) -> list[dict]:
    found: list[dict] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                if key == "pluginsCustomConfig" and isinstance(child, dict):
                    found.extend(yaml.safe_load(text) for text in child.values() if isinstance(text, str))
                else:
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(yaml.safe_load(values_text))
    return found


def validate_values(values_text: str) -> list[dict]:
    """Validate every configured plugin of every embedded EPP config; returns the p2p entries."""
    entries = []
    for config in epp_configs(values_text):
        for entry in config.get("plugins") or []:
            validate_entry(entry)
            if entry.get("type") == "p2p-source-producer":
                entries.append(entry)
    return entries


@lru_cache
def sim_fit() -> FitResult:
    from kvcal.engines.sim import SimCosts

    table = sim_table(SimCosts(), [256, 512, 1024, 2048, 4096, 8192], 3, seed=1)
    return fit_table(table, settings=FitSettings(n_resamples=300))


def fit_with(**source: Any) -> FitResult:
    return sim_fit().model_copy(update={"setup": RunSetup(**source)})


# ------------------------------------------------------------------ the validators can fail


def test_the_guides_values_conform_and_unknown_keys_are_rejected() -> None:
    (entry,) = validate_values((UPSTREAM / "guide-values.yaml").read_text())
    assert entry["parameters"]["minCachedTokenDelta"] == 2048
    for bad in ({"costModel": {"transferFixedMs": 1}}, {"minCachedTokenDelta": 0}, {"minCachedTokenDelta": "2048"},
                {"prefillProfileName": 3}):
        with pytest.raises(ValidationError):
            validate_entry({"type": "p2p-source-producer", "parameters": {**entry["parameters"], **bad}})


def test_affinity_filter_is_decoded_strictly_and_takes_a_float() -> None:
    """The router decodes prefix-cache-affinity-filter strictly; peakPrefillThroughput is a float64."""
    for good in (15928, 15928.5, 0.0):
        validate_entry({"type": "prefix-cache-affinity-filter", "parameters": {"peakPrefillThroughput": good}})
    for bad in ({"peakPrefillThroughput": "15928"}, {"peakPrefillThroughput": True}, {"peakPrefillThroughput": -1},
                {"peakPrefillThrougput": 15928}, {"ttftSource": "queue"}, {"affinityThreshold": 1.5}):
        with pytest.raises(ValidationError):
            validate_entry({"type": "prefix-cache-affinity-filter", "parameters": bad})


# ------------------------------------------------------------------ router side


@pytest.mark.parametrize("opts", [{}, {"prefill_profile": "prefill"}, {"deployment": "p2p"},
                                  {"values": UPSTREAM / "guide-values.yaml"}, {"values": UPSTREAM / "pd-values.yaml"},
                                  {"prefix_match_producer": "idx", "rule": "upper", "margin": 0.0, "block_size": 16}])
def test_plugin_entry_conforms(opts: dict) -> None:
    out = em.emit(fit_with(transport="nixl-pd"), em.EmitOptions(format="plugin", **opts)).stdout
    (entry,) = yaml.safe_load(out)
    assert entry["type"] == "p2p-source-producer"
    assert set(entry["parameters"]) <= set(em.PLUGIN_PARAMETERS)
    validate_entry(entry)


@pytest.mark.parametrize("values", ["guide-values.yaml", "pd-values.yaml"])
def test_helm_patches_conform(values: str, tmp_path) -> None:
    res = em.emit(fit_with(transport="p2p-tier"), em.EmitOptions(format="helm", values=UPSTREAM / values, add_plugin=True))
    entries = validate_values(res.stdout)
    assert entries and all(e["parameters"]["minCachedTokenDelta"] == res.threshold.min_cached_token_delta for e in entries)


@pytest.mark.parametrize("values", sorted(p.name for p in VALUES.glob("*.yaml")))
def test_helm_patches_of_every_values_fixture_conform(values: str) -> None:
    try:
        res = em.emit(sim_fit(), em.EmitOptions(format="helm", values=VALUES / values, add_plugin=True))
    except InputError:
        pytest.skip(f"{values} is not patchable (a fixture for an error path)")
    for config in epp_configs(res.stdout):
        for entry in config.get("plugins") or []:
            if entry.get("type") == "p2p-source-producer":
                extra = set(entry.get("parameters") or {}) - set(em.PLUGIN_PARAMETERS)
                assert not extra or any("rejects" in w for w in res.warnings)  # kvcal adds none, and flags any it finds
                validate_entry({"type": entry["type"], "parameters": {k: v for k, v in entry["parameters"].items() if k not in extra}})


def test_costmodel_in_values_is_opt_in_and_would_break_a_main_router() -> None:
    """--with-costmodel writes what main rejects; the default helm patch never does."""
    plain = em.emit(sim_fit(), em.EmitOptions(format="helm", values=UPSTREAM / "guide-values.yaml"))
    validate_values(plain.stdout)
    assert "costModel" not in plain.stdout
    cm = em.emit(sim_fit(), em.EmitOptions(format="helm", values=UPSTREAM / "guide-values.yaml", with_costmodel=True))
    with pytest.raises(ValidationError):
        validate_values(cm.stdout)


def test_affinity_entry_and_helm_value_conform() -> None:
    (entry,) = yaml.safe_load(em.emit(sim_fit(), em.EmitOptions(format="affinity")).stdout)
    validate_entry(entry)
    patched = em.emit(sim_fit(), em.EmitOptions(format="helm", values=UPSTREAM / "guide-values.yaml"))
    (config,) = epp_configs(patched.stdout)
    (filt,) = [p for p in config["plugins"] if p["type"] == "prefix-cache-affinity-filter"]
    validate_entry(filt)
    assert filt["parameters"]["peakPrefillThroughput"] == entry["parameters"]["peakPrefillThroughput"] != 15928


def test_the_work_range_entries_use_only_parameters_the_reference_lists() -> None:
    """--format work-range: every entry's type and parameter is one router-plugins.yaml lists, each value valid."""
    spec = yaml.safe_load((UPSTREAM / "router-plugins.yaml").read_text())
    fit = fit_with(transport="nixl-pd", max_model_len=131072)
    for opts in ({}, {"prefix_match_producer": "idx", "prefill_profile": "default"}):
        out = yaml.safe_load(em.emit(fit, em.EmitOptions(format="work-range", ttft_penalty_ms=2500.5, **opts)).stdout)
        assert [e["type"] for e in out["plugins"]] == ["precise-prefix-cache-producer", "p2p-source-producer",
                                                       "context-length-aware", "prefix-cache-affinity-filter"]
        for entry in out["plugins"]:
            assert set(entry) <= {"type", "name", "parameters"}
            assert set(entry.get("parameters") or {}) <= set(spec[entry["type"]]["parameters"])
            validate_entry(entry)
        assert "affinityThreshold" not in out["plugins"][-1]["parameters"]  # kvcal does not measure it


def test_the_remaining_work_values_conform_and_so_does_their_patch() -> None:
    """The guide's remaining-work values (rebuilt from the reference) pass the validators, before and after helm."""
    values = UPSTREAM / "remaining-work-values.yaml"
    (entry,) = validate_values(values.read_text())
    assert entry["parameters"]["minCachedTokenDelta"] == 1
    with pytest.raises(ValidationError):
        validate_entry({"type": "context-length-aware", "parameters": {"enableFiltering": "false"}})
    with pytest.raises(ValidationError):
        validate_entry({"type": "context-length-aware", "parameters": {"reusableTokensProducer": "p2p-cache-source"}})
    res = em.emit(fit_with(transport="nixl-pd"), em.EmitOptions(format="helm", values=values, ttft_penalty_ms=3000.0))
    (patched,) = validate_values(res.stdout)
    assert patched["parameters"]["minCachedTokenDelta"] == 1


# ------------------------------------------------------------------ engine side


def guide_patch() -> dict:
    return yaml.safe_load((UPSTREAM / "guide-engine-patch.yaml").read_text())


def arg_json(args: list[str], flag: str) -> dict:
    return json.loads(args[args.index(flag) + 1])


def test_emitted_engine_patch_matches_the_guides() -> None:
    guide = guide_patch()
    fit = fit_with(transport="p2p-tier", model="openai/gpt-oss-120b", python_hash_seed=0)
    res = em.emit(fit, em.EmitOptions(format="vllm", cpu_bytes_to_use=88 * 2**30))
    ours = yaml.safe_load(res.stdout)
    assert arg_json(ours["args"], "--kv-transfer-config") == arg_json(guide["args"], "--kv-transfer-config")
    assert arg_json(ours["args"], "--kv-events-config") == arg_json(guide["args"], "--kv-events-config")
    assert ours["args"][ours["args"].index("--block-size") + 1] == "64"
    assert ours["env"] == guide["env"]
    assert ours["volumeMounts"] == guide["volumeMounts"]
    (ours_vol,), (guide_vol,) = ours["volumes"], guide["volumes"]
    assert ours_vol["emptyDir"]["medium"] == guide_vol["emptyDir"]["medium"] == "Memory"
    assert int(ours_vol["emptyDir"]["sizeLimit"].removesuffix("Gi")) >= 88


@pytest.mark.parametrize("source", [{}, {"transport": "p2p-tier"},
                                    {"kv_transfer_config": {"consumer": {"kv_connector_extra_config": {"secondary_tiers": [{"port": 50107}]}}}}])
def test_engine_patch_shape_for_any_fit(source: dict) -> None:
    """The contract: whatever the run recorded, the p2p-tier patch has the guide's keys and never a run-local port."""
    ours = yaml.safe_load(em.emit(fit_with(**source), em.EmitOptions(format="vllm", transport="p2p-tier")).stdout)
    guide = guide_patch()
    extra = arg_json(ours["args"], "--kv-transfer-config")["kv_connector_extra_config"]
    assert set(extra) == set(arg_json(guide["args"], "--kv-transfer-config")["kv_connector_extra_config"])
    assert extra["secondary_tiers"][0]["port"] == 7777
    assert set(arg_json(ours["args"], "--kv-events-config")) == set(arg_json(guide["args"], "--kv-events-config"))
    names = [e["name"] for e in ours["env"]]
    assert set(names) == {e["name"] for e in guide["env"]} and "VLLM_P2P_SIDE_CHANNEL_PORT" not in names


def test_the_sweeps_own_engines_come_from_the_same_transport_code(tmp_path, monkeypatch) -> None:
    """Launch mode on a (faked) GPU host renders the guide's config, placed on the sweep's host and ports."""
    monkeypatch.setattr(vllm_launch, "gpu_inventory", lambda: {"gpu": "H100", "devices": 2})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pair = VllmPair(VllmSettings(model="org/m", transport="p2p-tier", cache_dir=tmp_path, run_dir=tmp_path / "r"))
    for role in (Role.PRODUCER, Role.CONSUMER):
        guide = arg_json(guide_patch()["args"], "--kv-transfer-config")
        sweep = arg_json(pair.plan.argv(role), "--kv-transfer-config")
        tier = sweep["kv_connector_extra_config"]["secondary_tiers"][0]
        assert tier == {"type": "p2p", "host": "127.0.0.1", "port": pair.plan.ports()[f"{role.value}_side"]}
        for cfg in (sweep, guide):
            cfg["kv_connector_extra_config"].pop("secondary_tiers")
            cfg["kv_connector_extra_config"].pop("cpu_bytes_to_use")
        assert sweep == guide
        assert "VLLM_P2P_SIDE_CHANNEL_PORT" not in pair.plan.env(role)


# ------------------------------------------------------------------ Kubernetes Job


@pytest.mark.parametrize("kw", [{}, {"pvc": "kvcal-results", "service_account": "kvcal", "transport": "nixl-pd",
                                     "extra_args": ("--dp-ranks", "2")}])
def test_k8s_job_is_a_valid_v1job(kw: dict) -> None:
    from kubernetes.client import ApiClient

    from kvcal.k8s.job import JobSpec, render_job

    spec = JobSpec(image="ghcr.io/example/kvcal:0.1.0", producer_url="http://10.0.3.17:8200",
                   consumer_url="http://10.0.4.22:8200", model="openai/gpt-oss-120b", **kw)
    data = yaml.safe_load(render_job(spec))
    api = ApiClient()
    job = api._ApiClient__deserialize(data, "V1Job")  # the client's own model deserializer
    assert job.kind == "Job" and job.spec.template.spec.restart_policy == "Never"
    # Unknown or misplaced keys are dropped by the models and wrong types change: the round trip must be exact.
    assert api.sanitize_for_serialization(job) == data


def test_the_v1job_check_can_fail() -> None:
    from kubernetes.client import ApiClient

    api = ApiClient()
    bad = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {"containers": [{"name": "k", "imagee": "x"}]}}}}
    assert api.sanitize_for_serialization(api._ApiClient__deserialize(bad, "V1Job")) != bad
