"""Model and hardware profiles: the KV layout and compute facts that predictions start from.

Stage owned: loading and validating ``kvcal/estimate/profile_data/models/*.yaml`` and
``kvcal/estimate/profile_data/hardware/*.yaml`` (a bad file is one ``InputError`` naming the
file and the field; the schemas themselves are in :mod:`kvcal.estimate.profile_schema` and
re-exported here), looking profiles up by name, and the two derived quantities every
prediction needs.

KV bytes per token (what one pulled token costs on the wire), ``b`` bytes per element:

    MHA/GQA layer:  2 x kv_heads x head_dim x b            (K and V)
    MLA layer:      (kv_lora_rank + qk_rope_head_dim) x b  (one latent plus the rope key)
    per token:      full_layers x per_layer + sum(extra state per token)

Sliding-window layers hold at most ``window`` tokens, so past the window they add a
fixed ``window_bytes`` (= swa_layers x per_layer x window), not a per-token cost
("window view", the default); ``sliding_window_full=True`` counts them on every token
(an engine that stores every layer's KV for every token). Extra state, such as a
sparse-attention indexer's FP8 keys, has its own dtype and ignores ``--kv-dtype``.

Prefill FLOPs for ``n`` new tokens from an empty cache (FLOP, multiply-add = 2):

    F(n) = 2 x matmul_params x n + sum_layers 2 x heads x (d_qk + d_v) x P(n)
    P(n) = n(n+1)/2 query-key pairs (causal); with a window or top-k of w keys,
           P_w(n) = sum_i min(i, w) = n(n+1)/2 for n <= w, else w(w+1)/2 + (n - w) w

``matmul_params`` counts the weights each token multiplies in the decoder layers (the
active experts only); the embedding lookup costs no FLOPs and the output head runs for
the last token only, so both are left out. A DSA indexer adds 2 x idx_heads x idx_dim x P(n)
on each indexer layer. See docs/profiles.md and docs/predict.md.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kvcal.errors import InputError
from kvcal.estimate.profile_schema import (  # re-exported: kvcal.estimate.profiles is the public face of profiles
    DTYPE_BYTES,
    HARDWARE_SCHEMA,
    MODEL_SCHEMA,
    Accelerator,
    Attention,
    AttentionKind,
    Indexer,
    Link,
    Mlp,
    ModelProfile,
    Moe,
    SlidingWindow,
    Spec,
    hardware_adapter,
    normalize_kv_dtype,
)
from kvcal.files.reading import read_text
from kvcal.files.yaml_guard import describe, load_pyyaml

__all__ = [
    "DTYPE_BYTES",
    "HARDWARE_SCHEMA",
    "MODEL_SCHEMA",
    "PROFILES_ENV",
    "Accelerator",
    "Attention",
    "AttentionKind",
    "Indexer",
    "KvLayout",
    "Link",
    "Mlp",
    "ModelProfile",
    "Moe",
    "ProfileSet",
    "SlidingWindow",
    "Spec",
    "attention_flops",
    "attention_terms",
    "kv_bytes_per_token",
    "kv_layout",
    "load_profiles",
    "match_profile",
    "matmul_params_per_token",
    "model_summary",
    "normalize_kv_dtype",
    "parse_hardware_profile",
    "parse_model_profile",
    "prefill_flops",
    "profiles_dir",
    "query_key_pairs",
    "total_active_params",
    "validation_message",
]

log = logging.getLogger(__name__)

PROFILES_ENV = "KVCAL_PROFILES_DIR"

# ---------------------------------------------------------------- derived quantities


@dataclass(frozen=True)
class KvLayout:
    """What a prefix of ``n`` tokens costs on the wire: ``bytes_per_token x n + window part``."""

    kv_dtype: str
    bytes_per_token: int
    window_bytes_per_token: int = 0
    window_tokens: int | None = None
    breakdown: dict[str, int] = field(default_factory=dict)

    @property
    def window_bytes(self) -> int:
        """Bytes the sliding-window layers hold once the prefix reaches the window."""
        return self.window_bytes_per_token * (self.window_tokens or 0)

    def bytes_for_prefix(self, n_tokens: int | float) -> float:
        """KV bytes a pull of an ``n``-token prefix moves."""
        windowed = min(n_tokens, self.window_tokens) if self.window_tokens else 0
        return self.bytes_per_token * n_tokens + self.window_bytes_per_token * windowed


def kv_layout(model: ModelProfile, kv_dtype: str | None = None, *, sliding_window_full: bool = False) -> KvLayout:
    """KV bytes per token for ``model`` stored as ``kv_dtype`` (None or 'auto': the profile's dtype)."""
    dtype = normalize_kv_dtype(model.kv_dtype if kv_dtype in (None, "auto") else str(kv_dtype))
    per_layer = model.attention.kv_elements_per_layer * DTYPE_BYTES[dtype]
    swa = model.attention.sliding_window
    swa_layers = swa.layers if swa else 0
    per_token_layers = model.layers if sliding_window_full else model.layers - swa_layers
    breakdown = {f"{model.attention.kind.value}_layers": per_token_layers * per_layer}
    window_per_token = 0 if (sliding_window_full or not swa) else swa_layers * per_layer
    if model.attention.indexer is not None:
        idx = model.attention.indexer
        breakdown["indexer_keys"] = idx.layers * idx.key_bytes_per_token
    return KvLayout(
        kv_dtype=dtype,
        bytes_per_token=sum(breakdown.values()),
        window_bytes_per_token=window_per_token,
        window_tokens=swa.window_tokens if (swa and not sliding_window_full) else None,
        breakdown=breakdown,
    )


def kv_bytes_per_token(model: ModelProfile, kv_dtype: str | None = None) -> int:
    """Per-token KV bytes of a long prefix (window view); the contract figure."""
    return kv_layout(model, kv_dtype).bytes_per_token


def matmul_params_per_token(model: ModelProfile) -> int:
    """Weights one token multiplies in the decoder layers (active experts only; no embedding or head)."""
    h, a, mlp = model.hidden_size, model.attention, model.mlp
    if mlp is None:
        raise InputError(
            f"model {model.name} has no MLP sizes (intermediate_size, or the experts' widths): its KV layout "
            "is known but not its prefill compute; give a config.json with them, or a profile with mlp set"
        )
    if a.kind is AttentionKind.MLA:
        q_in = a.q_lora_rank or h
        q = (h * a.q_lora_rank if a.q_lora_rank else 0) + q_in * a.num_heads * a.qk_dim
        kv = h * a.kv_elements_per_layer + (a.kv_lora_rank or 0) * a.num_heads * ((a.qk_nope_head_dim or 0) + a.v_dim)
        attn = q + kv + a.num_heads * a.v_dim * h
    else:
        attn = 2 * h * a.num_heads * a.qk_dim + 2 * h * (a.num_kv_heads or a.num_heads) * a.qk_dim
    total = model.layers * attn
    if a.indexer is not None:
        idx = a.indexer
        total += idx.layers * ((a.q_lora_rank or h) * idx.n_heads * idx.head_dim + h * idx.head_dim + h * idx.n_heads)
    dense_layers = model.layers if mlp.moe is None else mlp.first_dense_layers
    if dense_layers:
        total += dense_layers * 3 * h * (mlp.intermediate_size or 0)
    if mlp.moe is not None:
        moe = mlp.moe
        per_layer = (
            moe.experts_per_token + moe.shared_experts
        ) * 3 * h * moe.expert_intermediate_size + h * moe.experts
        total += (model.layers - dense_layers) * per_layer
    return int(total)


def total_active_params(model: ModelProfile) -> int:
    """matmul params plus the embedding and output head (comparable to published 'active' counts)."""
    heads = 1 if model.tie_word_embeddings else 2
    return matmul_params_per_token(model) + heads * model.vocab_size * model.hidden_size


def query_key_pairs(n: float, window: int | None = None) -> float:
    """P_w(n): causal (query, key) pairs for ``n`` tokens when each query sees at most ``window`` keys."""
    if window is None or n <= window:
        return n * (n + 1) / 2
    return window * (window + 1) / 2 + (n - window) * window


def attention_terms(model: ModelProfile) -> list[tuple[float, int | None]]:
    """The attention term as ``[(flops_per_pair, window)]``: attention_flops(n) = sum(w x P_window(n))."""
    a = model.attention
    per_pair = 2.0 * a.num_heads * (a.qk_dim + a.v_dim)
    swa = a.sliding_window
    swa_layers = swa.layers if swa else 0
    topk = a.indexer.topk if a.indexer else None
    terms: list[tuple[float, int | None]] = [((model.layers - swa_layers) * per_pair, topk)]
    if swa:
        terms.append((swa_layers * per_pair, min(swa.window_tokens, topk or swa.window_tokens)))
    if a.indexer is not None:
        terms.append((2.0 * a.indexer.layers * a.indexer.n_heads * a.indexer.head_dim, None))
    return [(w, win) for w, win in terms if w > 0]


def attention_flops(model: ModelProfile, n: float) -> float:
    """Score and value FLOPs of a causal prefill of ``n`` tokens over all layers (see module doc)."""
    return float(sum(w * query_key_pairs(n, win) for w, win in attention_terms(model)))


def prefill_flops(model: ModelProfile, n: float) -> float:
    """F(n): total prefill FLOPs for ``n`` tokens = dense part + attention term."""
    return 2.0 * matmul_params_per_token(model) * n + attention_flops(model, n)


def model_summary(model: ModelProfile, kv_dtype: str | None = None) -> dict[str, Any]:
    """The derived figures ``profiles show``/``from-config`` print (``kv_bytes_per_token`` is the contract key)."""
    layout = kv_layout(model, kv_dtype)
    swa = model.attention.sliding_window
    compute_known = model.mlp is not None
    matmul = matmul_params_per_token(model) if compute_known else None
    return {
        "name": model.name,
        "kv_bytes_per_token": layout.bytes_per_token,
        "kv_dtype": layout.kv_dtype,
        "kv_bytes_breakdown": dict(layout.breakdown),
        "kv_bytes_window": layout.window_bytes,
        "window_tokens": layout.window_tokens,
        "kv_bytes_per_token_all_layers": kv_layout(model, kv_dtype, sliding_window_full=True).bytes_per_token
        if swa
        else layout.bytes_per_token,
        "attention_kind": model.attention.kind.value,
        "layers": model.layers,
        "matmul_params_per_token": matmul,
        "dense_flops_per_token": 2 * matmul if matmul is not None else None,
        "active_params_with_embeddings": total_active_params(model) if compute_known else None,
        "compute_estimate": "complete" if compute_known else "incomplete: the MLP sizes are unknown",
        "active_params_published": model.active_params_published,
        "compute_dtype": model.compute_dtype,
        "max_position_embeddings": model.max_position_embeddings,
    }


# ---------------------------------------------------------------- loading and lookup


def profiles_dir() -> Path:
    """Where the profiles live: $KVCAL_PROFILES_DIR, else ``profile_data/`` inside this package.

    The package's own are shipped in the wheel.
    """
    env = os.environ.get(PROFILES_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise InputError(f"{PROFILES_ENV}={env} is not a folder")
        return path
    candidates = [Path(__file__).resolve().parent / "profile_data"]
    for path in candidates:
        if (path / "models").is_dir():
            return path
    raise InputError(f"no profiles folder found (looked in {', '.join(map(str, candidates))}); set {PROFILES_ENV}")


def _read_yaml(path: Path) -> Any:
    try:
        return load_pyyaml(read_text(path), str(path))
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror or err}") from err
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML: {describe(err)}") from err


def validation_message(path: Path | str, err: ValidationError) -> str:
    """One line naming the file, the field(s) and what is wrong; an unknown key (a renamed one) comes first."""
    errors = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
    parts = []
    for item in errors[:2]:
        loc = [str(p) for p in item["loc"] if not str(p).startswith("function-")]
        if loc and loc[0] in ("accelerator", "link") and len(item["loc"]) > 1:  # the union's tag, not a key
            loc = loc[1:]
        msg = "unknown key (renamed or misspelt?)" if item["type"] == "extra_forbidden" else item["msg"]
        parts.append(f"{'.'.join(loc) or '(top level)'}: {msg}")
    more = f" (and {err.error_count() - 2} more)" if err.error_count() > 2 else ""
    return f"{path}: {'; '.join(parts)}{more}"


def parse_model_profile(data: Any, path: Path | str = "<model profile>") -> ModelProfile:
    """Validate one model profile mapping; InputError (file, field) when it does not fit the schema."""
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of keys, got {type(data).__name__}")
    try:
        return ModelProfile.model_validate(data)
    except ValidationError as err:
        raise InputError(validation_message(path, err)) from err


def parse_hardware_profile(data: Any, path: Path | str = "<hardware profile>") -> Accelerator | Link:
    """Validate one accelerator or link mapping (``kind`` picks the schema)."""
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of keys, got {type(data).__name__}")
    try:
        return hardware_adapter().validate_python(data)
    except ValidationError as err:
        raise InputError(validation_message(path, err)) from err


@dataclass(frozen=True)
class ProfileSet:
    """Every profile in one folder, by name, with the file each came from."""

    root: Path
    models: dict[str, ModelProfile]
    accelerators: dict[str, Accelerator]
    links: dict[str, Link]
    files: dict[str, Path]

    def model(self, name: str) -> ModelProfile:
        return _pick(self.models, name, "model")

    def accelerator(self, name: str) -> Accelerator:
        return _pick(self.accelerators, name, "hardware")

    def link(self, name: str) -> Link:
        return _pick(self.links, name, "link")


def _pick(table: dict[str, Any], name: str, what: str) -> Any:
    found = match_profile(table, name)
    if found is None:
        raise InputError(f"unknown {what} profile {name!r}; known: {', '.join(sorted(table))}")
    return found


def match_profile(table: dict[str, Any], name: str) -> Any:
    """The profile in ``table`` whose name, display name, alias or HF id equals ``name`` (any case), or None."""
    key = name.strip().lower()
    for profile in table.values():
        names = [profile.name, profile.display_name, *profile.aliases, getattr(profile, "hf_id", None) or ""]
        if key in (n.lower() for n in names if n):
            return profile
    return None


@lru_cache(maxsize=8)
def _load(root: str) -> ProfileSet:
    base = Path(root)
    models: dict[str, ModelProfile] = {}
    accelerators: dict[str, Accelerator] = {}
    links: dict[str, Link] = {}
    files: dict[str, Path] = {}
    for path in sorted((base / "models").glob("*.yaml")):
        _register(parse_model_profile(_read_yaml(path), path), path, models, files)
    for path in sorted((base / "hardware").glob("*.yaml")):
        profile = parse_hardware_profile(_read_yaml(path), path)
        _register(profile, path, accelerators if isinstance(profile, Accelerator) else links, files)
    for acc in accelerators.values():
        if acc.default_link not in links:
            raise InputError(f"{files[acc.name]}: default_link: no link profile named {acc.default_link!r}")
    log.debug("loaded %d models, %d accelerators, %d links from %s", len(models), len(accelerators), len(links), base)
    return ProfileSet(base, models, accelerators, links, files)


def _register(profile: Any, path: Path, table: dict[str, Any], files: dict[str, Path]) -> None:
    if profile.name in files:
        raise InputError(f"{path}: name: {profile.name!r} is already used by {files[profile.name]}")
    if path.stem != profile.name:
        raise InputError(f"{path}: name: {profile.name!r} must match the file name {path.stem!r}")
    table[profile.name] = profile
    files[profile.name] = path


def load_profiles(root: Path | str | None = None) -> ProfileSet:
    """Load and validate every profile under ``root`` (default :func:`profiles_dir`); cached per folder."""
    return _load(str(Path(root) if root is not None else profiles_dir()))
