"""A tiny Llama-architecture model folder for ``--load-format dummy`` (random weights).

No weights can be downloaded on the project's machines, and TTFT does not depend on
weight values, so kvcal serves random weights from a folder that holds only a
``config.json`` and a tokenizer. The tokenizer is a byte-level BPE trained offline in
well under a second with the ``tokenizers`` package on a fixed generated corpus, so
the folder is the same on every machine.

Model shape (per cpu-vllm.md, see docs/engines.md): hidden 256, 4 layers, 4 heads, 2 KV heads,
head_dim 64, max_position_embeddings 8192, bf16. Its KV cache is
2 x 4 x 2 x 64 x 2 B = 2,048 B per token (kvcal.estimate.profiles computes it from the
config like any other model's).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TINY_MODEL_DIRNAME = "tiny-llama-256h-4l"
_TOKENIZER_TARGET_VOCAB = 2048
_SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>"]
_REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


def _tiny_config(vocab_size: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 688,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "max_position_embeddings": 8192,
        "vocab_size": vocab_size,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
    }


def _corpus() -> list[str]:
    """A fixed, generated corpus: enough distinct byte pairs for a few thousand merges."""
    rng = random.Random(1234)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    lines = [
        "kvcal measures when pulling KV cache from a peer beats recomputing the prefix.",
        "The quick brown fox jumps over the lazy dog 0123456789.",
    ]
    for _ in range(400):
        lines.append(" ".join(rng.choice(words) for _ in range(24)))
    return lines


def _write_tokenizer(folder: Path) -> int:
    """Train and save the byte-level BPE tokenizer; return its vocabulary size."""
    # tokenizers comes with the engine extras ([cpu]/[gpu]); the sim and the fit need none of it.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_TOKENIZER_TARGET_VOCAB,
        min_frequency=1,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": _SPECIAL_TOKENS[0],
        "eos_token": _SPECIAL_TOKENS[0],
        "pad_token": _SPECIAL_TOKENS[1],
        "model_max_length": 8192,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    return tokenizer.get_vocab_size()


def _is_complete(folder: Path) -> bool:
    if not all((folder / name).is_file() for name in _REQUIRED_FILES):
        return False
    try:
        json.loads((folder / "config.json").read_text())
        json.loads((folder / "tokenizer.json").read_text())
    except (OSError, ValueError):
        return False
    return True


def ensure_tiny_model(cache_dir: Path | str) -> Path:
    """Return ``cache_dir/tiny-llama-256h-4l``, writing it first if absent or incomplete.

    Built in a temporary sibling folder and renamed into place, so a crash never leaves
    a half-written model that a later call would trust.
    """
    cache_dir = Path(cache_dir)
    folder = cache_dir / TINY_MODEL_DIRNAME
    if _is_complete(folder):
        return folder
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=cache_dir))
    staging.chmod(0o755)  # mkdtemp makes it private; the model folder is shared read-only data
    try:
        vocab_size = _write_tokenizer(staging)
        # The model's vocabulary matches the tokenizer's, so any id the pair draws decodes.
        (staging / "config.json").write_text(json.dumps(_tiny_config(vocab_size), indent=2) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    log.info("wrote tiny model to %s", folder)
    return folder
