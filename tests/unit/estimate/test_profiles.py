"""Profiles: KV bytes per token and FLOPs against hand-computed figures, from-config, and schema validation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from kvcal.cli.app import main
from kvcal.errors import InputError
from kvcal.estimate.hfconfig import model_profile_from_config
from kvcal.estimate.profiles import (
    PROFILES_ENV,
    kv_bytes_per_token,
    kv_layout,
    load_profiles,
    matmul_params_per_token,
    parse_hardware_profile,
    parse_model_profile,
    prefill_flops,
    profiles_dir,
    query_key_pairs,
    total_active_params,
)

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "hf_configs"


@pytest.fixture(scope="module")
def profiles():
    return load_profiles(REPO / "kvcal" / "estimate" / "profile_data")


# --- KV bytes per token, by family --------------------------------------------------------------

HAND_KV_BF16 = {
    # GQA / MHA: 2 (K and V) x layers x KV heads x head_dim x 2 B
    "llama-3.1-8b": 2 * 32 * 8 * 128 * 2,  # 131,072: the figure
    "qwen3-32b": 2 * 64 * 8 * 128 * 2,
    "qwen3-235b-a22b": 2 * 94 * 4 * 128 * 2,
    "glm-4.5": 2 * 92 * 8 * 128 * 2,
    "tiny-llama-cpu": 2 * 4 * 2 * 64 * 2,  # 2 KiB, as cpu-vllm.md measured
    # MLA: layers x (kv_lora_rank + qk_rope_head_dim) x 2 B
    "deepseek-v3": 61 * (512 + 64) * 2,  # 70,272: the figure
    # sliding window: only the 18 full-attention layers cost per token
    "gpt-oss-120b": 2 * 18 * 8 * 64 * 2,
    # MLA plus FP8 indexer keys (128 B + a 4 B scale per indexer layer)
    "deepseek-v3.2": 61 * 576 * 2 + 61 * 132,
    "glm-moe-dsa-753b": 78 * 576 * 2 + 21 * 132,
}


@pytest.mark.parametrize("name,expected", sorted(HAND_KV_BF16.items()))
def test_kv_bytes_per_token_matches_hand_computation(profiles, name, expected):
    assert kv_bytes_per_token(profiles.model(name), "bf16") == expected


def test_contract_figures_and_published_753b_layout(profiles):
    assert kv_bytes_per_token(profiles.model("llama-3.1-8b")) == 131_072
    assert kv_bytes_per_token(profiles.model("deepseek-v3")) == 70_272
    # the reference: "the 753B model moved about 92.6 KB/token (bf16 latent plus FP8 indexer keys)"
    assert round(kv_bytes_per_token(profiles.model("glm-moe-dsa-753b")) / 1000, 1) == 92.6


def test_kv_dtype_override_scales_kv_but_not_indexer_keys(profiles):
    assert kv_bytes_per_token(profiles.model("llama-3.1-8b"), "fp8") == 65_536
    assert kv_bytes_per_token(profiles.model("llama-3.1-8b"), "float32") == 262_144
    assert kv_bytes_per_token(profiles.model("deepseek-v3"), "fp8_e4m3") == 61 * 576
    # the indexer's keys are FP8 whatever the KV dtype
    assert kv_bytes_per_token(profiles.model("deepseek-v3.2"), "fp8") == 61 * 576 + 61 * 132
    assert kv_layout(profiles.model("deepseek-v3.2"), "fp8").breakdown["indexer_keys"] == 61 * 132


def test_unknown_kv_dtype_is_one_line_input_error(profiles):
    with pytest.raises(InputError, match="unknown KV dtype 'int3'"):
        kv_bytes_per_token(profiles.model("llama-3.1-8b"), "int3")


def test_sliding_window_layers_cost_a_fixed_window_not_per_token(profiles):
    layout = kv_layout(profiles.model("gpt-oss-120b"))
    per_layer = 2 * 8 * 64 * 2
    assert layout.window_tokens == 128
    assert layout.window_bytes == 18 * per_layer * 128
    assert layout.bytes_for_prefix(100) == 100 * 36 * per_layer  # inside the window every layer holds every token
    assert layout.bytes_for_prefix(1000) == 1000 * 18 * per_layer + 128 * 18 * per_layer
    full = kv_layout(profiles.model("gpt-oss-120b"), sliding_window_full=True)
    assert full.bytes_per_token == 36 * per_layer and full.window_bytes == 0


# --- FLOPs ---------------------------------------------------------------------------------------


def test_matmul_params_match_hand_computation(profiles):
    h, kv = 4096, 8 * 128
    llama_layer = 2 * h * h + 2 * h * kv + 3 * h * 14336
    assert matmul_params_per_token(profiles.model("llama-3.1-8b")) == 32 * llama_layer
    h = 2880
    oss_layer = 2 * h * 64 * 64 + 2 * h * 8 * 64 + 4 * 3 * h * 2880 + h * 128  # attention + 4 experts + router
    assert matmul_params_per_token(profiles.model("gpt-oss-120b")) == 36 * oss_layer
    h = 7168
    mla = h * 1536 + 1536 * 128 * 192 + h * 576 + 512 * 128 * (128 + 128) + 128 * 128 * h
    dense, moe = 3 * h * 18432, 9 * 3 * h * 2048 + h * 256
    assert matmul_params_per_token(profiles.model("deepseek-v3")) == 61 * mla + 3 * dense + 58 * moe


@pytest.mark.parametrize("name", sorted(set(HAND_KV_BF16) - {"tiny-llama-cpu"}))  # the tiny model has no published count
def test_active_params_close_to_published(profiles, name):
    model = profiles.model(name)
    # published counts differ in whether they include the embeddings: allow 15%
    assert total_active_params(model) == pytest.approx(model.active_params_published, rel=0.15)


def test_query_key_pairs_causal_and_windowed():
    assert query_key_pairs(4) == 10  # 1 + 2 + 3 + 4
    assert query_key_pairs(4, window=2) == 1 + 2 + 2 + 2
    assert query_key_pairs(3, window=8) == 6


def test_prefill_flops_dense_plus_quadratic_attention(profiles):
    model = profiles.model("llama-3.1-8b")
    dense = 2 * matmul_params_per_token(model)
    # attention: 32 layers x 2 x 32 heads x (128 + 128) per (query, key) pair, n(n+1)/2 pairs
    assert prefill_flops(model, 1000) == pytest.approx(dense * 1000 + 32 * 2 * 32 * 256 * 1000 * 1001 / 2)


# --- from-config ---------------------------------------------------------------------------------

FIXTURE_PROFILE = {
    "llama-3.1-8b.json": "llama-3.1-8b",
    "qwen3-235b-a22b.json": "qwen3-235b-a22b",
    "gpt-oss-120b.json": "gpt-oss-120b",
    "deepseek-v3.json": "deepseek-v3",
    "deepseek-v3.2-exp.json": "deepseek-v3.2",
    "glm-4.5.json": "glm-4.5",
}


@pytest.mark.parametrize("fixture,name", sorted(FIXTURE_PROFILE.items()))
def test_from_config_reproduces_the_shipped_profile(profiles, fixture, name):
    built = model_profile_from_config(FIXTURES / fixture)
    shipped = profiles.model(name)
    assert kv_bytes_per_token(built) == kv_bytes_per_token(shipped)
    assert matmul_params_per_token(built) == matmul_params_per_token(shipped)
    assert built.attention == shipped.attention
    assert built.mlp == shipped.mlp
    assert built.compute_dtype == shipped.compute_dtype


def test_from_config_cli_json_contract(capsys):
    assert main(["profiles", "from-config", str(FIXTURES / "deepseek-v3.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_per_token"] == 70_272 and isinstance(out["kv_bytes_per_token"], int)
    assert out["kv_dtype"] == "bfloat16"
    assert main(["profiles", "from-config", str(FIXTURES / "deepseek-v3.json"), "--json", "--kv-dtype", "fp8"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_token"] == 35_136


@pytest.mark.parametrize("config_dtype, kv_dtype", [
    ("bfloat16", "bfloat16"), ("float16", "float16"), ("float32", "bfloat16"), ("float", "bfloat16"), (None, "bfloat16")])
def test_a_configs_dtype_resolves_as_vllms_auto(tmp_path, config_dtype, kv_dtype):
    """vLLM's --dtype auto keeps a supported config dtype and downcasts float32 (vllm/config/model.py)."""
    cfg = {k: v for k, v in json.loads((FIXTURES / "llama-3.1-8b.json").read_text()).items()
           if k not in ("torch_dtype", "dtype")}
    (tmp_path / "config.json").write_text(json.dumps({**cfg, **({"torch_dtype": config_dtype} if config_dtype else {})}))
    built = model_profile_from_config(tmp_path / "config.json")
    assert built.kv_dtype == kv_dtype and kv_bytes_per_token(built) == 131_072


def test_from_config_reads_a_model_folder_and_a_multimodal_text_config(tmp_path, capsys):
    cfg = json.loads((FIXTURES / "llama-3.1-8b.json").read_text())
    folder = tmp_path / "My-Llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llava", "text_config": cfg}))
    assert main(["profiles", "from-config", str(folder), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_per_token"] == 131_072 and out["name"] == "My-Llama"


def test_from_config_errors_name_the_problem(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        model_profile_from_config(bad)
    cfg = json.loads((FIXTURES / "deepseek-v3.json").read_text())
    del cfg["kv_lora_rank"]
    cfg["model_type"] = "deepseek_v3"
    bad.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="kv_lora_rank"):
        model_profile_from_config(bad)


LLAMA_LIKE = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
              "vocab_size": 32000, "intermediate_size": 14336}


@pytest.mark.parametrize("key, value", [("num_attention_heads", 0), ("num_hidden_layers", float("inf")),
                                        ("num_hidden_layers", 32.5), ("num_hidden_layers", True),
                                        ("hidden_size", -4096), ("vocab_size", "32000")])
def test_from_config_sizes_must_be_whole_numbers_from_one(tmp_path, key, value):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**LLAMA_LIKE, key: value}))  # inf as Python's json writes it (1e400 reads the same)
    with pytest.raises(InputError, match=f"config {key} must be a whole number of 1 or more"):
        model_profile_from_config(bad)
    bad.write_text(json.dumps({**LLAMA_LIKE, "num_hidden_layers": 32.0}))
    assert model_profile_from_config(bad).layers == 32


# --- schema validation of every shipped file ------------------------------------------------------


def _yaml(path: Path):
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", sorted((REPO / "kvcal" / "estimate" / "profile_data" / "models").glob("*.yaml")), ids=lambda p: p.name)
def test_every_model_profile_file_validates(path):
    model = parse_model_profile(_yaml(path), path)
    assert model.name == path.stem and model.sources


@pytest.mark.parametrize("path", sorted((REPO / "kvcal" / "estimate" / "profile_data" / "hardware").glob("*.yaml")), ids=lambda p: p.name)
def test_every_hardware_profile_file_validates_and_cites_its_figures(path):
    profile = parse_hardware_profile(_yaml(path), path)
    assert profile.name == path.stem
    figures = [k for k, v in profile.model_dump().items() if isinstance(v, float) and k != "schema"]
    assert all(profile.sources.get(f) for f in figures), figures


def test_required_profiles_are_present(profiles):
    for name in ("tiny-llama-cpu", "llama-3.1-8b", "qwen3-32b", "qwen3-235b-a22b", "gpt-oss-120b", "deepseek-v3", "glm-4.5"):
        assert name in profiles.models
    assert {"h100", "h200", "b200", "cpu-amx"} <= set(profiles.accelerators)
    assert {"rdma-200", "rdma-400", "tcp-100g", "pcie5-h2d"} <= set(profiles.links)
    aliases = [a.lower() for t in (profiles.models, profiles.accelerators, profiles.links) for p in t.values() for a in p.aliases]
    assert len(aliases) == len(set(aliases)), "an alias is claimed twice"


@pytest.fixture()
def profile_copy(tmp_path):
    root = tmp_path / "profiles"
    shutil.copytree(REPO / "kvcal" / "estimate" / "profile_data", root)
    return root


def _edit(path: Path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def test_a_renamed_key_fails_loudly_with_file_and_field(profile_copy):
    path = profile_copy / "models" / "llama-3.1-8b.yaml"
    _edit(path, lambda d: d.__setitem__("num_layers", d.pop("layers")))
    with pytest.raises(InputError) as err:
        load_profiles(profile_copy)
    message = str(err.value)
    assert "llama-3.1-8b.yaml" in message and "num_layers" in message and "unknown key" in message
    assert "\n" not in message


def test_bad_values_name_the_nested_field(profile_copy):
    path = profile_copy / "models" / "deepseek-v3.yaml"
    _edit(path, lambda d: d["attention"].pop("kv_lora_rank"))
    with pytest.raises(InputError, match=r"deepseek-v3.yaml: attention: .*needs kv_lora_rank"):
        load_profiles(profile_copy)


def test_uncited_hardware_figure_is_rejected(profile_copy):
    path = profile_copy / "hardware" / "h200.yaml"
    _edit(path, lambda d: d["sources"].pop("memory_bandwidth_gb_s"))
    with pytest.raises(InputError, match="h200.yaml: .*sources must cite memory_bandwidth_gb_s"):
        load_profiles(profile_copy)


def test_wrong_type_and_unknown_default_link(profile_copy):
    path = profile_copy / "hardware" / "b200.yaml"
    _edit(path, lambda d: d.__setitem__("default_mfu", "high"))
    with pytest.raises(InputError, match="b200.yaml: default_mfu"):
        load_profiles(profile_copy)
    _edit(path, lambda d: d.update(default_mfu=0.4, default_link="carrier-pigeon"))
    with pytest.raises(InputError, match="b200.yaml: default_link: no link profile named 'carrier-pigeon'"):
        load_profiles(profile_copy)


def test_broken_yaml_is_one_line(profile_copy):
    (profile_copy / "models" / "qwen3-32b.yaml").write_text("name: [unclosed\n")
    with pytest.raises(InputError, match="qwen3-32b.yaml: not valid YAML") as err:
        load_profiles(profile_copy)
    assert "\n" not in str(err.value)


def test_profiles_dir_env_override(monkeypatch, profile_copy, tmp_path):
    monkeypatch.setenv(PROFILES_ENV, str(profile_copy))
    assert profiles_dir() == profile_copy
    monkeypatch.setenv(PROFILES_ENV, str(tmp_path / "missing"))
    with pytest.raises(InputError, match=PROFILES_ENV):
        profiles_dir()
    monkeypatch.delenv(PROFILES_ENV)
    assert profiles_dir() == REPO / "kvcal" / "estimate" / "profile_data"


# --- CLI -----------------------------------------------------------------------------------------


def test_profiles_list_and_show(capsys):
    assert main(["profiles", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    by_name = {m["name"]: m for m in listed["models"]}
    assert by_name["llama-3.1-8b"]["kv_bytes_per_token"] == 131_072
    assert {a["name"] for a in listed["accelerators"]} >= {"h100", "h200", "b200", "cpu-amx"}
    assert main(["profiles", "list"]) == 0
    assert "gpt-oss-120b" in capsys.readouterr().out
    assert main(["profiles", "show", "NVIDIA H200", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["kind"] == "accelerator" and shown["profile"]["name"] == "h200"
    assert main(["profiles", "show", "gpt-oss-120b"]) == 0
    assert "4,718,592" in capsys.readouterr().out  # the window state is explained
    assert main(["profiles", "show", "no-such-thing"]) == 2
    assert "no profile named 'no-such-thing'" in capsys.readouterr().err
