"""Whether two attached engines can share KV: the same model, block size and cache dtype, each as it reports it.

A pull moves KV blocks from the producer into the consumer's cache: blocks of another
size, another KV dtype or another model's layers are not the consumer's KV, and a run
measured across them times a transfer the router would never make. Attach mode
launches nothing, so only the engines know what they run: ``/v1/models`` names the
model (its ``root``, else its id), ``vllm:cache_config_info`` the block size and the KV
cache dtype. :func:`refuse_mismatch` compares one producer with one consumer; a sweep
over several pairs calls it once per pair.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvcal.errors import InputError

MAX_BLOCK_SIZE = 2**20  # far above any engine's block size (vLLM's largest is 256)
COMPARED = (("model", "model"), ("block_size", "block size"), ("cache_dtype", "KV cache dtype"), ("dtype", "dtype"))


@dataclass(frozen=True)
class EngineIdentity:
    """What one engine reports about the KV it holds; None where it does not say."""

    url: str
    model: str | None = None
    block_size: int | None = None
    cache_dtype: str | None = None
    dtype: str | None = None


def identity(url: str, model: str | None, cache_info: Mapping[str, str] | None) -> EngineIdentity:
    """An engine's identity from its served model and its ``vllm:cache_config_info`` labels.

    ValueError when the page states an impossible block size (the caller names the engine).
    """
    labels = dict(cache_info or {})
    block = str(labels.get("block_size", "")).strip()
    size = None
    if block:
        if not (block.isdigit() and 0 < int(block) <= MAX_BLOCK_SIZE):
            raise ValueError(f"vllm:cache_config_info block_size={block[:40]!r}")
        size = int(block)
    return EngineIdentity(
        url=url,
        model=model or None,
        block_size=size,
        cache_dtype=_text(labels.get("cache_dtype")),
        dtype=_text(labels.get("dtype")),
    )


def _text(value: object) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text[:80] or None


def refuse_mismatch(producer: EngineIdentity, consumer: EngineIdentity) -> None:
    """InputError naming both URLs when the engines report different models, block sizes or KV dtypes.

    A fact that one engine does not report cannot be compared and is left alone.
    """
    differ = [
        f"{label} {getattr(producer, name)} against {getattr(consumer, name)}"
        for name, label in COMPARED
        if None not in (getattr(producer, name), getattr(consumer, name))
        and getattr(producer, name) != getattr(consumer, name)
    ]
    if differ:
        raise InputError(
            f"the producer at {producer.url} and the consumer at {consumer.url} disagree: "
            f"{'; '.join(differ)}; a pull between them moves KV the consumer cannot use. "
            "Attach two engines started alike"
        )


def refuse_setting(engines: EngineIdentity, block_size: int) -> None:
    """InputError when ``--block-size`` (given by the user) contradicts the block size the engines report."""
    if engines.block_size is not None and engines.block_size != block_size:
        raise InputError(
            f"--block-size {block_size} contradicts the engines at {engines.url}, which report "
            f"block size {engines.block_size}; leave --block-size out when attaching (it is read from "
            "the engines) or pass the engines' own"
        )
