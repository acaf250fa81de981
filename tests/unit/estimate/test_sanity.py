"""Sanity findings: a run that matches its profiles is ok; TCP fallback, wrong KV dtype and CPU misconfiguration are named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvcal.estimate.predict import PredictSettings, build_cost_model
from kvcal.estimate.profiles import load_profiles
from kvcal.records.fit import FitResult
from kvcal.estimate.run_profiles import context_from_fit, resolve_hardware, resolve_link, resolve_model_profile
from kvcal.estimate.sanity import SanityFinding, sanity_findings, sanity_for_fit

import factories

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def profiles():
    return load_profiles(REPO / "kvcal" / "estimate" / "profile_data")


def _fit(recompute: tuple[float, float, float], pull: tuple[float, float, float], *, lo=1024, hi=16384,
         setup=None, bandwidth=None) -> FitResult:
    """A FitResult with the given (intercept_ms, per_token_us, per_token2_ns) curves."""
    return factories.make_fit(break_even_tokens=1000.0, break_even_ci=None, confidence=0.9, measured_range=[lo, hi],
                              recompute=factories.make_curve(*recompute), pull=factories.make_curve(*pull),
                              pull_bandwidth_gbps=bandwidth, setup=setup or {})


def _predicted_fit(profiles, model, hw, link, *, lo=1024, hi=16384, recompute_scale=1.0, pull_slope_scale=1.0, **kw):
    """The fit a run would produce if it behaved exactly as predicted (then scaled to inject a fault)."""
    cost = build_cost_model(profiles.model(model), profiles.accelerator(hw), profiles.link(link), PredictSettings())
    n = np.linspace(lo, hi, 12)
    c2, c1, c0 = np.polyfit(n, [cost.recompute_ms(x) * recompute_scale for x in n], 2)
    slope_ms = (cost.pull_ms(hi) - cost.pull_ms(lo)) / (hi - lo) * pull_slope_scale
    return _fit((c0, c1 * 1e3, c2 * 1e6), (cost.pull_floor_ms, slope_ms * 1e3, 0.0), lo=lo, hi=hi, **kw)


def _by_check(findings: list[SanityFinding]) -> dict[str, SanityFinding]:
    return {f.check: f for f in findings}


def _run(profiles, fit, model, hw, link, **kw):
    return _by_check(sanity_findings(fit, model=profiles.model(model), hardware=profiles.accelerator(hw),
                                     link=profiles.link(link), root=REPO / "kvcal" / "estimate" / "profile_data", **kw))


@pytest.mark.parametrize("setup", [("gpt-oss-120b", "h200", "rdma-400"), ("llama-3.1-8b", "h100", "tcp-100g"),
                                   ("tiny-llama-cpu", "cpu-amx", "cpu-ucx-cma")], ids=lambda s: "-".join(s))
def test_a_run_that_behaves_as_predicted_is_ok(profiles, setup):
    found = _run(profiles, _predicted_fit(profiles, *setup), *setup)
    assert set(found) == {"pull_bandwidth", "prefill_flops"}
    for finding in found.values():
        assert finding.severity == "ok", finding.advice
        assert finding.ratio == pytest.approx(1.0, rel=0.1)


def test_published_rdma_ladder_is_sane_but_a_tenth_of_its_pull_rate_is_tcp_fallback(profiles):
    # the published gpt-oss-120b RDMA pull column: 10.6 us/token for 36,864 B/token, 3.5 GB/s
    fit = _fit((30.4, 9.5, 0.14), (28.0, 10.6, 0.0), lo=2048, hi=49152)
    assert _run(profiles, fit, "gpt-oss-120b", "h200", "rdma-400")["pull_bandwidth"].severity == "ok"
    slow = _fit((30.4, 9.5, 0.14), (28.0, 106.0, 0.0), lo=2048, hi=49152)
    finding = _run(profiles, slow, "gpt-oss-120b", "h200", "rdma-400")["pull_bandwidth"]
    assert finding.severity == "warning" and finding.measured == pytest.approx(0.348, rel=0.01)
    assert "fell back to TCP" in finding.advice and "UCX_TLS" in finding.advice


def test_slow_but_faster_than_tcp_rdma_names_other_causes(profiles):
    # a link profile that expects 25 GB/s; the run pulls at the usual 3.5 GB/s: slow, yet faster than TCP
    fast_link = profiles.link("rdma-400").model_copy(update={"efficiency": 0.5})
    fit = _predicted_fit(profiles, "llama-3.1-8b", "h100", "rdma-400")
    finding = _by_check(sanity_findings(fit, model=profiles.model("llama-3.1-8b"), hardware=profiles.accelerator("h100"),
                                        link=fast_link, root=REPO / "kvcal" / "estimate" / "profile_data"))["pull_bandwidth"]
    assert finding.severity == "warning" and "TCP" not in finding.advice and "NUMA" in finding.advice


def test_wrong_kv_dtype_shows_in_kv_bytes_and_as_an_impossible_pull(profiles):
    # the engine ran an fp8 cache (65,536 B/token) on a loopback-TCP CPU pair, the profile assumes bf16
    fit = _fit((3.0, 2.2, 0.7), (28.0, 2.2 * 0.05, 0.0), lo=512, hi=8192,
               setup={"kv_bytes_per_token": 65_536})
    found = _run(profiles, fit, "llama-3.1-8b", "h100", "cpu-ucx-tcp")
    assert found["kv_bytes"].severity == "warning" and "KV dtype" in found["kv_bytes"].advice
    assert found["kv_bytes"].ratio == pytest.approx(0.5)
    no_run_bytes = _fit((3.0, 2.2, 0.7), (28.0, 0.1, 0.0), lo=512, hi=8192)
    pull = _run(profiles, no_run_bytes, "llama-3.1-8b", "h100", "cpu-ucx-tcp")["pull_bandwidth"]
    assert pull.severity == "warning" and "faster than the link can carry" in pull.advice and "fp8" in pull.advice


def test_matching_kv_bytes_and_the_all_layers_count_of_a_window_model(profiles):
    fit = _predicted_fit(profiles, "gpt-oss-120b", "h200", "rdma-400", setup={"kv_bytes_per_token": 73_728})
    assert _run(profiles, fit, "gpt-oss-120b", "h200", "rdma-400")["kv_bytes"].severity == "info"
    fit = _predicted_fit(profiles, "gpt-oss-120b", "h200", "rdma-400", setup={"kv_bytes_per_token": 36_864})
    assert _run(profiles, fit, "gpt-oss-120b", "h200", "rdma-400")["kv_bytes"].severity == "ok"


def test_cpu_prefill_eight_times_slow_points_at_core_binding(profiles):
    fit = _predicted_fit(profiles, "tiny-llama-cpu", "cpu-amx", "cpu-ucx-cma", recompute_scale=8)
    finding = _run(profiles, fit, "tiny-llama-cpu", "cpu-amx", "cpu-ucx-cma")["prefill_flops"]
    assert finding.severity == "warning" and "VLLM_CPU_OMP_THREADS_BIND" in finding.advice
    assert finding.ratio == pytest.approx(1 / 8, rel=0.1)


def test_prefill_faster_than_peak_means_it_did_not_recompute(profiles):
    fit = _predicted_fit(profiles, "llama-3.1-8b", "h100", "rdma-400", recompute_scale=0.3)
    finding = _run(profiles, fit, "llama-3.1-8b", "h100", "rdma-400")["prefill_flops"]
    assert finding.severity == "warning" and "did not recompute" in finding.advice


def test_multi_device_low_mfu_is_only_info(profiles):
    fit = _predicted_fit(profiles, "deepseek-v3", "h200", "rdma-400", recompute_scale=20)
    finding = _run(profiles, fit, "deepseek-v3", "h200", "rdma-400", devices=8)["prefill_flops"]
    assert finding.severity == "info" and "multi-device" in finding.advice


def test_flat_pull_cannot_be_rated_and_nothing_known_gives_nothing(profiles):
    flat = _fit((30.0, 130.0, 0.0), (1500.0, 0.0, 0.0), lo=4096, hi=16384)
    found = _run(profiles, flat, "glm-moe-dsa-753b", "h200", "rdma-400", devices=32)
    assert found["pull_bandwidth"].severity == "info" and found["pull_bandwidth"].measured is None
    assert sanity_findings(flat, model=None, hardware=None, link=None) == []


def test_bandwidth_from_the_fit_when_kv_bytes_are_unknown(profiles):
    fit = _fit((3.0, 2.0, 0.5), (28.0, 2.2, 0.0), lo=512, hi=8192, bandwidth=0.9)
    found = _by_check(sanity_findings(fit, model=None, hardware=None, link=profiles.link("cpu-ucx-cma"), root=REPO / "kvcal" / "estimate" / "profile_data"))
    assert found["pull_bandwidth"].measured == 0.9 and found["pull_bandwidth"].severity == "ok"
    assert json.loads(json.dumps(found["pull_bandwidth"].to_dict()))["check"] == "pull_bandwidth"
    # averaged over the whole pull it is only a lower bound: a low value is not a verdict
    low = _fit((3.0, 2.0, 0.5), (28.0, 2.2, 0.0), lo=512, hi=8192, bandwidth=0.1)
    found = _by_check(sanity_findings(low, model=None, hardware=None, link=profiles.link("cpu-ucx-cma"), root=REPO / "kvcal" / "estimate" / "profile_data"))
    assert found["pull_bandwidth"].severity == "info" and "lower bound" in found["pull_bandwidth"].advice


# --- resolvers and the fit.source route ---------------------------------------------------------


@pytest.mark.parametrize("name,expected", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("/models/meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("/mnt/models/Qwen3-235B-A22B/", "qwen3-235b-a22b"),
    ("openai/gpt-oss-120b", "gpt-oss-120b"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
    ("tiny-llama", "tiny-llama-cpu"),
    ("mistralai/Mistral-Large", None),
    (None, None),
])
def test_resolve_model_profile(name, expected):
    found = resolve_model_profile(name, REPO / "kvcal" / "estimate" / "profile_data")
    assert (found.name if found else None) == expected


def test_resolve_model_profile_from_a_model_folder(tmp_path):
    (tmp_path / "config.json").write_text((REPO / "tests/fixtures/hf_configs/glm-4.5.json").read_text())
    found = resolve_model_profile(str(tmp_path), REPO / "kvcal" / "estimate" / "profile_data")
    assert found is not None and found.attention.num_heads == 96


@pytest.mark.parametrize("name,expected", [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("b200", "b200"),
                                           ("Intel(R) Xeon(R) Processor", "cpu-amx"), ("AMD Instinct MI300X", None)])
def test_resolve_hardware(name, expected):
    found = resolve_hardware(name, REPO / "kvcal" / "estimate" / "profile_data")
    assert (found.name if found else None) == expected


def test_resolve_link(profiles):
    h200, cpu = profiles.accelerator("h200"), profiles.accelerator("cpu-amx")
    root = REPO / "kvcal" / "estimate" / "profile_data"
    assert resolve_link("p2p-tier", h200, root).name == "rdma-400"  # no kind word: the accelerator's default
    assert resolve_link("nixl tcp", h200, root).name == "tcp-100g"
    assert resolve_link("nixl-pd", cpu, root).name == "cpu-ucx-cma"
    assert resolve_link("tcp", cpu, root).name == "cpu-ucx-tcp"
    assert resolve_link("rdma-200", None, root).name == "rdma-200"
    assert resolve_link(None, None, root) is None


def test_sanity_for_fit_reads_a_run_folder_setup(profiles, monkeypatch):
    monkeypatch.setenv("KVCAL_PROFILES_DIR", str(REPO / "kvcal" / "estimate" / "profile_data"))
    setup = {"engine": "vllm", "model": "tiny-llama", "transport": "nixl-pd", "accelerator": "Intel(R) Xeon(R) Processor",
             "device_count": 1, "kv_bytes_per_token": 2048, "engine_versions": {"torch": "2.13.0+cpu"},
             "ucx_env": {"UCX_TLS": "tcp"}}
    fit = _predicted_fit(profiles, "tiny-llama-cpu", "cpu-amx", "cpu-ucx-tcp", lo=512, hi=8192, setup=setup)
    ctx, findings = sanity_for_fit(fit)
    assert (ctx.model.name, ctx.hardware.name, ctx.link.name) == ("tiny-llama-cpu", "cpu-amx", "cpu-ucx-tcp")
    assert {f.check: f.severity for f in findings} == {"kv_bytes": "ok", "pull_bandwidth": "ok", "prefill_flops": "ok"}
    sim = _fit((5.0, 25.0, 0.012), (20.0, 3.0, 0.0), setup={"engine": "sim"})
    assert context_from_fit(sim).model is None and sanity_for_fit(sim)[1] == []


@pytest.mark.parametrize("setup,devices,kv_dtype", [
    ({"device_count": 8, "tensor_parallel_size": 8, "kv_dtype": "fp8"}, 8, "fp8"),
    ({"tensor_parallel_size": 4, "kv_dtype": "auto"}, 4, None),
    ({}, 1, None),
])
def test_sanity_context_takes_devices_and_kv_dtype_from_the_setup(setup, devices, kv_dtype):
    fit = _fit((5.0, 25.0, 0.012), (20.0, 3.0, 0.0), setup={"engine": "vllm", "model": "llama-3.1-8b", **setup})
    ctx = context_from_fit(fit, REPO / "kvcal" / "estimate" / "profile_data")
    assert (ctx.devices, ctx.kv_dtype) == (devices, kv_dtype)
