"""emit-config's router constants: plugin names, peakPrefillThroughput, costModel labelling, Helm edits of both."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcal.emit import formats as em
from kvcal.emit.affinity import DEFAULT_CHUNK
from kvcal.errors import InputError
from kvcal.fit import curve_ms, fit_table
from factories import sim_table
from kvcal.records.fit import BootstrapSummary, FitResult
from kvcal.records.run import RunSetup
from kvcal.records.fit import FitSettings

UPSTREAM = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
GUIDE = UPSTREAM / "guide-values.yaml"
PD = UPSTREAM / "pd-values.yaml"


@lru_cache
def base_fit() -> FitResult:
    from kvcal.engines.sim import SimCosts

    return fit_table(sim_table(SimCosts(), [256, 512, 1024, 2048, 4096, 8192], 3, seed=2), settings=FitSettings(n_resamples=400))


def fit_with(**source) -> FitResult:
    """The base fit with a run setup (``RunSetup`` fields)."""
    return base_fit().model_copy(update={"setup": RunSetup(**source)})


def params(out: str) -> dict:
    (entry,) = yaml.safe_load(out)
    return entry["parameters"]


# ------------------------------------------------------------------ plugin names


@pytest.mark.parametrize("source, opts, profile", [
    ({"transport": "p2p-tier"}, {}, "default"),          # the single-profile P2P guide
    ({"transport": "nixl-pd"}, {}, "prefill"),           # P/D: the plugin's own default
    ({}, {}, "prefill"),
    ({"transport": "p2p-tier"}, {"deployment": "pd"}, "prefill"),
    ({}, {"deployment": "p2p"}, "default"),
    ({"transport": "p2p-tier"}, {"prefill_profile": "pf"}, "pf"),
])
def test_prefill_profile_follows_flag_then_deployment_shape(source, opts, profile) -> None:
    res = em.emit(fit_with(**source), em.EmitOptions(format="plugin", **opts))
    assert params(res.stdout)["prefillProfileName"] == profile
    assert params(res.stdout)["prefixMatchInfoProducerName"] == "precise-prefix-cache-producer"
    if "prefill_profile" not in opts:
        assert any(n.startswith(f"prefillProfileName {profile}:") for n in res.notes)


@pytest.mark.parametrize("values, producer, profile", [(GUIDE, "precise-prefix-cache-producer", "default"),
                                                       (PD, "prefix-index", "prefill")])
def test_plugin_names_come_from_the_values_file(values, producer, profile) -> None:
    res = em.emit(fit_with(transport="nixl-pd"), em.EmitOptions(format="plugin", values=values))
    assert params(res.stdout)["prefixMatchInfoProducerName"] == producer
    assert params(res.stdout)["prefillProfileName"] == profile
    flagged = em.emit(fit_with(), em.EmitOptions(format="plugin", values=PD, prefill_profile="decode"))
    assert params(flagged.stdout)["prefillProfileName"] == "decode"


def test_add_plugin_takes_names_from_the_config(tmp_path) -> None:
    res = em.emit(fit_with(transport="p2p-tier"), em.EmitOptions(format="helm", values=PD, add_plugin=True))
    (config,) = [yaml.safe_load(t) for t in yaml.safe_load(res.stdout)["router"]["epp"]["pluginsCustomConfig"].values()]
    names = [p.get("name") or p["type"] for p in config["plugins"]]
    entry = next(p for p in config["plugins"] if p["type"] == "p2p-source-producer")
    assert names.index("p2p-source-producer") == names.index("prefix-index") + 1
    assert entry["parameters"] == {"prefixMatchInfoProducerName": "prefix-index", "prefillProfileName": "prefill",
                                   "minCachedTokenDelta": res.threshold.min_cached_token_delta}


def test_unknown_plugin_parameters_in_a_values_file_are_flagged(tmp_path) -> None:
    text = GUIDE.read_text().replace("prefillProfileName: default", "prefillProfileName: default\n              costModel: {transferFixedMs: 5}")
    values = tmp_path / "v.yaml"
    values.write_text(text)
    res = em.emit(base_fit(), em.EmitOptions(format="helm", values=values))
    assert any("costModel" in w and "rejects" in w for w in res.warnings)
    assert "costModel: {transferFixedMs: 5}" in res.stdout  # reported, not silently removed


# ------------------------------------------------------------------ peakPrefillThroughput


@settings(max_examples=25, deadline=None)
@given(chunk=st.integers(64, 65536))
def test_peak_prefill_is_chunk_over_recompute(chunk: int) -> None:
    fit = base_fit()
    out = em.emit(fit, em.EmitOptions(format="affinity", chunk_size=chunk)).stdout
    (entry,) = yaml.safe_load(out)
    assert entry["type"] == "prefix-cache-affinity-filter"
    value = entry["parameters"]["peakPrefillThroughput"]
    assert isinstance(value, int) and abs(value - chunk * 1e3 / float(curve_ms(fit.recompute, chunk))) <= 0.5
    assert ("EXTRAPOLATED" in out) == (not 256 <= chunk <= 8192)


def test_default_chunk_and_the_runs_max_num_batched_tokens() -> None:
    res = em.emit(fit_with(), em.EmitOptions(format="affinity"))
    assert DEFAULT_CHUNK == 8192 and "chunk size: default 8192" in res.stdout
    run = fit_with(max_num_batched_tokens=2048)
    res = em.emit(run, em.EmitOptions(format="affinity"))
    expected = round(2048e3 / float(curve_ms(run.recompute, 2048)))
    assert params(res.stdout.split("\n", 2)[2])["peakPrefillThroughput"] == expected
    assert "--max-num-batched-tokens 2048" in res.stdout


def test_interval_comes_from_the_bootstrap_and_brackets_the_value() -> None:
    res = em.emit(base_fit(), em.EmitOptions(format="affinity", chunk_size=4096))
    lo, hi = (float(x.replace(",", "")) for x in re.search(r"interval \[([\d,]+), ([\d,]+)\]", res.stdout).groups())
    value = params(res.stdout)["peakPrefillThroughput"]
    assert lo < value < hi and hi / lo < 1.5
    bare = base_fit().model_copy(update={"bootstrap": BootstrapSummary()})
    res = em.emit(bare, em.EmitOptions(format="affinity", chunk_size=4096))
    assert "no interval" in res.stdout and any("bootstrap" in w for w in res.warnings)


def test_extrapolated_chunk_says_so() -> None:
    res = em.emit(base_fit(), em.EmitOptions(format="affinity", chunk_size=32768))
    assert any("extrapolated" in w and "--prefix-lengths" in w for w in res.warnings)


def test_json_carries_peak_prefill_and_affinity_needs_no_threshold() -> None:
    data = json.loads(em.emit(base_fit(), em.EmitOptions(format="json", chunk_size=2048)).stdout)
    assert data["peakPrefillThroughput"] == round(2048e3 / float(curve_ms(base_fit().recompute, 2048)))
    assert data["peak_prefill_chunk_size"] == 2048 and len(data["peak_prefill_ci"]) == 2
    never = base_fit().model_copy(update={"status": "recompute-always-wins", "break_even_tokens": None, "break_even_ci": None})
    assert "peakPrefillThroughput" in em.emit(never, em.EmitOptions(format="affinity")).stdout


def test_helm_sets_peak_prefill_with_a_minimal_diff() -> None:
    res = em.emit(base_fit(), em.EmitOptions(format="helm", values=GUIDE, diff=True, chunk_size=8192))
    changed = [ln for ln in res.stdout.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert len(changed) == 6  # the threshold, the filter's value, and the EPP's alpha flag (added: the guide file has none)
    assert "+    flags:" in changed and "+      allow-experimental-plugins: true" in changed
    assert any(re.fullmatch(r"\+\s+peakPrefillThroughput: \d+   # the recipe's Qwen3-32B H100 TP2 figure", ln) for ln in changed)
    assert any("prefix-cache-affinity-filter peakPrefillThroughput ->" in n for n in res.notes)


# ------------------------------------------------------------------ costModel


def test_costmodel_is_labelled_on_its_first_line() -> None:
    res = em.emit(base_fit(), em.EmitOptions(format="costmodel"))
    first = res.stdout.splitlines()[0]
    assert first.startswith("#") and "costModel" in first and "ACCEPTS costModel" in first and "main" in first
    assert any("llm-d-router main" in w for w in res.warnings)


def test_costmodel_takes_an_optional_load_calibration() -> None:
    from kvcal.emit.costmodel_block import LoadCalibration, render_costmodel

    text, _, _ = render_costmodel(base_fit(), calibrated=LoadCalibration(source_wait_ms=120.0, requeue_ms=40.0, origin="runs/loaded"))
    block = yaml.safe_load(text)["costModel"]
    assert block["sourceWaitMs"] == 120.0 and block["requeueMs"] == 40.0
    assert "# busyQueueThreshold:" in text and "# sourceWaitMs:" not in text


def test_with_costmodel_writes_it_and_lowers_the_threshold_to_the_floor() -> None:
    res = em.emit(base_fit(), em.EmitOptions(format="helm", values=GUIDE, with_costmodel=True))
    (config,) = [yaml.safe_load(t) for t in yaml.safe_load(res.stdout)["router"]["epp"]["pluginsCustomConfig"].values()]
    entry = next(p for p in config["plugins"] if p["type"] == "p2p-source-producer")
    assert entry["parameters"]["minCachedTokenDelta"] == min(256, res.threshold.min_cached_token_delta)
    assert set(entry["parameters"]["costModel"]) >= {"prefillMicrosecondsPerToken", "transferMicrosecondsPerToken", "transferFixedMs"}
    assert any("floor" in w and "lowered" in w for w in res.warnings)


# ------------------------------------------------------------------ options and CLI


@pytest.mark.parametrize("kwargs, match", [
    ({"format": "plugin", "with_costmodel": True}, "--with-costmodel"),
    ({"format": "vllm", "values": GUIDE}, "--values"),
    ({"format": "affinity", "chunk_size": 0}, "--chunk-size"),
    ({"format": "vllm", "p2p_port": 70000}, "--p2p-port"),
    ({"deployment": "mesh"}, "--deployment"),
    ({"format": "vllm", "cpu_bytes_to_use": 0}, "--cpu-bytes-to-use"),
])
def test_bad_new_options_are_one_line_errors(kwargs, match) -> None:
    with pytest.raises(InputError, match=re.escape(match)) as err:
        em.EmitOptions(**kwargs)
    assert "\n" not in str(err.value)


def test_cli_affinity_vllm_and_help(tmp_path, kvcal) -> None:
    path = tmp_path / "fit.json"
    path.write_text(base_fit().model_dump_json(by_alias=True))
    res = kvcal("emit-config", path, "--format", "affinity", "--chunk-size", "1024")
    assert res.code == 0 and params(res.out)["peakPrefillThroughput"] == round(1024e3 / float(curve_ms(base_fit().recompute, 1024)))
    res = kvcal("emit-config", path, "--format", "vllm", "--transport", "p2p-tier", "--cpu-bytes-to-use", "88GiB")
    args = yaml.safe_load(res.out)["args"]
    assert res.code == 0 and json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]["cpu_bytes_to_use"] == 88 * 2**30
    bad = kvcal("emit-config", path, "--format", "vllm", "--cpu-bytes-to-use", "lots")
    assert bad.code == 2 and bad.err.count("\n") == 1
    helptext = kvcal("emit-config", "--help").out
    assert "accepts costModel" in " ".join(helptext.split()) and "--chunk-size" in helptext


@pytest.mark.parametrize("fmt", ["plugin", "helm", "affinity", "costmodel", "env", "json"])
def test_every_router_side_format_says_the_epp_needs_the_alpha_flag(fmt: str) -> None:
    """p2p-source-producer is alpha: one stderr line names --allow-experimental-plugins; the engine fragment does not."""
    opts = {"values": GUIDE} if fmt == "helm" else {}
    res = em.emit(base_fit(), em.EmitOptions(format=fmt, **opts))
    lines = [line for line in res.notes + res.warnings if "allow-experimental-plugins" in line]
    assert len(lines) == 1 and "\n" not in lines[0]
    vllm = em.emit(base_fit(), em.EmitOptions(format="vllm", transport="p2p-tier"))
    assert not any("allow-experimental-plugins" in line for line in vllm.notes + vllm.warnings)
