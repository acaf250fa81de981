"""The schemas of kvcal's profile files: what ``kvcal/estimate/profile_data/models/*.yaml``
and ``kvcal/estimate/profile_data/hardware/*.yaml`` may say.

Stage owned: the shape of a profile. Every schema forbids unknown keys (a renamed key
must fail loudly, not vanish) and describes every field; hardware figures must each
carry a citation in ``sources``. Loading, lookup and the derived quantities (KV bytes
per token, prefill FLOPs) live in :mod:`kvcal.estimate.profiles`, which re-exports these names.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from kvcal.errors import InputError

MODEL_SCHEMA: Final = "kvcal.model/1"
HARDWARE_SCHEMA: Final = "kvcal.hardware/1"

#: Bytes per KV element, by canonical dtype name.
DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
_DTYPE_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp8": "fp8_e4m3",
    "fp8_e4m3fn": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}


def normalize_kv_dtype(name: str) -> str:
    """Canonical KV dtype name (``bf16`` -> ``bfloat16``, ``fp8`` -> ``fp8_e4m3``); InputError if unknown."""
    key = name.strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise InputError(
            f"unknown KV dtype {name!r}; use one of {', '.join(sorted(DTYPE_BYTES))} (or bf16, fp16, fp8, auto)"
        )
    return key


class Spec(BaseModel):
    """Base for profile schemas: unknown keys fail loudly, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Notes = Annotated[str, Field(description="Assumptions and caveats, in prose.")]
Citations = Annotated[dict[str, str], Field(description="Citation per numeric field (field name -> source).")]


# ---------------------------------------------------------------- model profiles


class AttentionKind(str, Enum):
    """How a layer stores its KV: one K and V per KV head (MHA/GQA) or one latent (MLA)."""

    MHA = "mha"
    GQA = "gqa"
    MLA = "mla"


class SlidingWindow(Spec):
    """Layers whose attention sees only the last ``window_tokens`` keys."""

    window_tokens: int = Field(gt=0, description="Keys each query attends to in a sliding-window layer.")
    layers: int = Field(gt=0, description="How many decoder layers use the window (the rest attend fully).")


class Indexer(Spec):
    """A DeepSeek-style sparse-attention (DSA) indexer: scores all keys, keeps the top-k."""

    n_heads: int = Field(gt=0, description="Indexer query heads (index_n_heads).")
    head_dim: int = Field(gt=0, description="Indexer key/query width (index_head_dim).")
    topk: int = Field(gt=0, description="Keys the main attention keeps per query (index_topk).")
    layers: int = Field(gt=0, description="Layers that run their own indexer and store its keys (others share one).")
    key_bytes_per_token: int = Field(
        gt=0, description="Indexer key bytes per token per indexer layer (FP8 keys plus scales)."
    )


class Attention(Spec):
    """The attention layout: what it stores per token (KV bytes) and what it computes (FLOPs)."""

    kind: AttentionKind = Field(
        description="mha or gqa (K and V per KV head) or mla (one compressed latent per token)."
    )
    num_heads: int = Field(gt=0, description="Query heads.")
    num_kv_heads: int | None = Field(None, gt=0, description="KV heads (MHA/GQA only).")
    head_dim: int | None = Field(None, gt=0, description="Width of one K or V head (MHA/GQA only).")
    q_lora_rank: int | None = Field(
        None, gt=0, description="MLA query compression rank; null when queries are not compressed."
    )
    kv_lora_rank: int | None = Field(None, gt=0, description="MLA latent width stored per token (MLA only).")
    qk_rope_head_dim: int | None = Field(
        None, gt=0, description="MLA decoupled rope key width stored per token (MLA only)."
    )
    qk_nope_head_dim: int | None = Field(None, gt=0, description="MLA per-head non-rope query/key width (MLA only).")
    v_head_dim: int | None = Field(None, gt=0, description="MLA per-head value width (MLA only).")
    sliding_window: SlidingWindow | None = Field(None, description="Sliding-window layers, if any.")
    indexer: Indexer | None = Field(
        None, description="Sparse-attention indexer, if any (its keys are extra per-token state)."
    )

    @model_validator(mode="after")
    def _fields_match_kind(self) -> Attention:
        if self.kind is AttentionKind.MLA:
            need = {
                "kv_lora_rank": self.kv_lora_rank,
                "qk_rope_head_dim": self.qk_rope_head_dim,
                "qk_nope_head_dim": self.qk_nope_head_dim,
                "v_head_dim": self.v_head_dim,
            }
        else:
            need = {"num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim}
        missing = [k for k, v in need.items() if v is None]
        if missing:
            raise ValueError(f"attention kind {self.kind.value} needs {', '.join(missing)}")
        if self.kind is AttentionKind.MHA and self.num_kv_heads != self.num_heads:
            raise ValueError("mha needs num_kv_heads == num_heads (use gqa otherwise)")
        return self

    @property
    def qk_dim(self) -> int:
        """Per-head query/key width used in the score product (MLA prefill runs un-absorbed)."""
        if self.kind is AttentionKind.MLA:
            return int(self.qk_nope_head_dim) + int(self.qk_rope_head_dim)  # type: ignore[arg-type]
        return int(self.head_dim)  # type: ignore[arg-type]

    @property
    def v_dim(self) -> int:
        return int(self.v_head_dim if self.kind is AttentionKind.MLA else self.head_dim)  # type: ignore[arg-type]

    @property
    def kv_elements_per_layer(self) -> int:
        """KV elements one token stores in one layer."""
        if self.kind is AttentionKind.MLA:
            return int(self.kv_lora_rank) + int(self.qk_rope_head_dim)  # type: ignore[arg-type]
        return 2 * int(self.num_kv_heads) * int(self.head_dim)  # type: ignore[arg-type]


class Moe(Spec):
    """Mixture-of-experts MLP: only the routed experts a token picks (plus shared ones) compute."""

    experts: int = Field(gt=0, description="Routed experts per MoE layer.")
    experts_per_token: int = Field(gt=0, description="Routed experts each token uses (top-k).")
    shared_experts: int = Field(0, ge=0, description="Always-on shared experts per MoE layer.")
    expert_intermediate_size: int = Field(gt=0, description="Intermediate width of one expert (gated: 3 matrices).")


class Mlp(Spec):
    """The feed-forward part; gated (SwiGLU-style) MLPs with three matrices are assumed."""

    intermediate_size: int | None = Field(None, gt=0, description="Dense MLP intermediate width (dense layers).")
    first_dense_layers: int = Field(0, ge=0, description="Leading layers that use the dense MLP when moe is set.")
    moe: Moe | None = Field(None, description="Mixture-of-experts block; null for a dense model.")

    @model_validator(mode="after")
    def _dense_width_given(self) -> Mlp:
        if (self.moe is None or self.first_dense_layers) and self.intermediate_size is None:
            raise ValueError("intermediate_size is required for dense layers")
        return self


class ModelProfile(Spec):
    """One model's KV layout and compute facts (``kvcal/estimate/profile_data/models/NAME.yaml``)."""

    schema_: Literal["kvcal.model/1"] = Field(
        MODEL_SCHEMA, alias="schema", description="Schema id; always kvcal.model/1."
    )
    name: str = Field(min_length=1, description="Profile name used on the command line, e.g. llama-3.1-8b.")
    display_name: str = Field(description="Human name, e.g. Llama-3.1-8B.")
    hf_id: str | None = Field(None, description="Hugging Face repo id the facts come from.")
    aliases: list[str] = Field(
        default_factory=list, description="Other names a run may carry (repo ids, served names)."
    )
    architecture: str = Field(description="HF architectures[0], e.g. LlamaForCausalLM.")
    layers: int = Field(gt=0, description="Decoder layers run in prefill (MTP/next-n layers excluded).")
    hidden_size: int = Field(gt=0, description="Residual stream width.")
    vocab_size: int = Field(gt=0, description="Vocabulary size (embedding and output head rows).")
    tie_word_embeddings: bool = Field(False, description="Whether the output head shares the embedding matrix.")
    max_position_embeddings: int = Field(gt=0, description="Longest context the config allows; predictions stop there.")
    attention: Attention = Field(description="Attention layout.")
    mlp: Mlp | None = Field(
        None,
        description="Feed-forward layout (dense or MoE); null when unknown (a config without "
        "MLP sizes): the KV layout stands, the compute estimate is incomplete.",
    )
    kv_dtype: str = Field("bfloat16", description="KV cache dtype the engine uses by default ('auto' = model dtype).")
    compute_dtype: Literal["bf16", "fp8"] = Field(
        "bf16", description="Dtype of the dominant prefill GEMMs: picks the peak rate."
    )
    active_params_published: float | None = Field(
        None, gt=0, description="Published active parameters per token, for reference only."
    )
    sources: list[str] = Field(min_length=1, description="Where each figure comes from (URLs or documents).")
    notes: Notes = ""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _consistent(self) -> ModelProfile:
        normalize_kv_dtype(self.kv_dtype)
        for part in (self.attention.sliding_window, self.attention.indexer):
            if part is not None and part.layers > self.layers:
                raise ValueError(f"{type(part).__name__} layers ({part.layers}) exceed model layers ({self.layers})")
        if self.mlp is not None and self.mlp.first_dense_layers > self.layers:
            raise ValueError("mlp.first_dense_layers exceeds layers")
        return self


# ---------------------------------------------------------------- hardware profiles


class HardwareSpec(Spec):
    """What every hardware profile states first (schema, kind, names); each figure a kind lists in ``cited``
    must carry a citation in its ``sources``."""

    schema_: Literal["kvcal.hardware/1"] = Field(
        HARDWARE_SCHEMA, alias="schema", description="Schema id; always kvcal.hardware/1."
    )
    kind: str = Field(description="Discriminator: accelerator or link.")
    name: str = Field(
        min_length=1, description="Profile name used on the command line (--hardware h200, --link rdma-400)."
    )
    display_name: str = Field(description="Human name, e.g. NVIDIA H200 SXM 141GB.")
    aliases: list[str] = Field(
        default_factory=list,
        description="Other names a run may carry (nvidia-smi and short names; a link's transport names).",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    cited: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _every_figure_cited(self) -> HardwareSpec:
        # Each kind declares sources after its own figures: a field of this base would dump before them.
        sources: dict[str, Any] = getattr(self, "sources", {})  # each kind declares it (see above)
        missing = [f for f in self.cited if getattr(self, f) is not None and not str(sources.get(f, "")).strip()]
        if missing:
            raise ValueError(f"sources must cite {', '.join(missing)}")
        return self


class Accelerator(HardwareSpec):
    """One compute device kind: peak rates, memory bandwidth, and the prediction defaults."""

    cited = (
        "bf16_dense_tflops",
        "fp8_dense_tflops",
        "memory_bandwidth_gb_s",
        "memory_gib",
        "default_mfu",
        "fixed_overhead_ms",
    )

    kind: Literal["accelerator"] = Field(description="Discriminator: accelerator.")
    device: Literal["gpu", "cpu"] = Field(description="gpu or cpu.")
    unit: str = Field(description="What one device is (one GPU; one CPU core).")
    bf16_dense_tflops: float = Field(gt=0, description="Peak dense BF16 rate per device, TFLOP/s (no sparsity).")
    fp8_dense_tflops: float | None = Field(
        None, gt=0, description="Peak dense FP8 rate per device, TFLOP/s; null without FP8 units."
    )
    memory_bandwidth_gb_s: float | None = Field(None, gt=0, description="Memory bandwidth per device, GB/s (1e9 B/s).")
    memory_gib: float | None = Field(None, gt=0, description="Device memory, GiB (GB for GPUs as marketed).")
    default_mfu: float = Field(
        gt=0, le=1, description="Share of peak a single long prefill reaches (calibrated or assumed)."
    )
    fixed_overhead_ms: float = Field(
        ge=0, description="Length-independent part of TTFT (request, scheduling, first token)."
    )
    default_link: str = Field(description="Link profile used when --link is not given.")
    sources: Citations
    notes: Notes = ""

    def peak_tflops(self, compute_dtype: str) -> float:
        """Peak dense rate for ``compute_dtype`` (bf16 or fp8); fp8 falls back to bf16 without FP8 units."""
        if compute_dtype == "fp8" and self.fp8_dense_tflops is not None:
            return self.fp8_dense_tflops
        return self.bf16_dense_tflops


class Link(HardwareSpec):
    """One way KV moves between engines, with its nominal rate and pull-path efficiency."""

    cited = ("nominal_gbit_s", "efficiency", "setup_ms")

    kind: Literal["link"] = Field(description="Discriminator: link.")
    transport: Literal["rdma", "tcp", "pcie", "shm"] = Field(
        description="rdma, tcp, pcie (host to device) or shm (same host)."
    )
    nominal_gbit_s: float = Field(gt=0, description="Nominal rate, Gb/s (1e9 bit/s), one direction.")
    efficiency: float = Field(
        gt=0, le=1, description="Share of nominal a KV pull achieves end to end (calibrated or assumed)."
    )
    setup_ms: float = Field(
        ge=0, description="Per-pull cost beyond the engine's fixed TTFT (lookup, handshake, completion)."
    )
    sources: Citations
    notes: Notes = ""

    @property
    def nominal_bytes_per_s(self) -> float:
        return self.nominal_gbit_s * 1e9 / 8


HardwareProfile = Annotated[Accelerator | Link, Field(discriminator="kind")]
_HARDWARE_ADAPTER: TypeAdapter[Any] = TypeAdapter(HardwareProfile)


def hardware_adapter() -> TypeAdapter[Any]:
    """Validator for one hardware file: ``kind`` picks Accelerator or Link."""
    return _HARDWARE_ADAPTER
