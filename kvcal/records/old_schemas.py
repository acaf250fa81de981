"""Reading ``kvcal.run/1``-``/3`` and ``kvcal.fit/1`` files: their loose setup facts become a ``RunSetup``.

Version 1 kept a run's setup in three places: top-level keys of run.json (model,
engine, transport, block_size, kv_bytes_per_token), the host provenance (hardware,
versions) and the pair's own account (``provenance.engine``: env with PYTHONHASHSEED,
kv_transfer_config per role); fit.json copied all of it into a free-form ``source``.
These functions map such a dict onto the version 2 shape before validation, so every
reader sees one typed record. Facts version 1 never wrote stay ``None``.
"""

from __future__ import annotations

from typing import Any

from kvcal.records.run import RUN_SCHEMA
from kvcal.settings.engine_args import arg_value

RUN_V1 = "kvcal.run/1"
RUN_V2 = "kvcal.run/2"  # no pair facts: they are read from provenance.engine
RUN_V3 = "kvcal.run/3"  # no pairs or sessions: its plan and settings read as they are
RUN_CURRENT = RUN_SCHEMA
FIT_V1 = "kvcal.fit/1"
_SOURCE_KINDS = ("run-folder", "probe-csv", "llmd-table", "sim", "test")
_BOOTSTRAP_KEYS = (
    "n_resamples",
    "seed",
    "method",
    "methods",
    "no_crossover_share",
    "status_shares",
    "quadratic_share",
    "residual_df",
    "t_expansion",
    "break_even_ci_bounds",
    "break_even_samples",
    "recompute_samples",
    "pull_samples",
)


def upgrade_run(data: Any) -> Any:
    """A run.json dict in the current schema (other values pass through for validation to judge). Its settings
    stay as that version wrote them: :mod:`kvcal.records.manifest` puts flat settings in their groups."""
    if not isinstance(data, dict) or data.get("schema") not in (RUN_V1, RUN_V2, RUN_V3):
        return data
    if data.get("schema") == RUN_V3:
        return {**data, "schema": RUN_CURRENT}  # version 4 only adds optional fields (and groups the settings)
    old = dict(data)
    provenance = _dict(old.get("provenance"))
    if old.get("schema") == RUN_V1:
        old["setup"] = setup_v1(old, _dict(old.get("settings")), provenance, created_at=old.get("created_at"))
    return {
        "schema": RUN_CURRENT,
        "name": old.get("name"),
        "created_at": old.get("created_at"),
        "settings": old.get("settings"),
        "setup": old.get("setup"),
        "pair": pair_facts(_dict(provenance.get("engine"))),
        "provenance": provenance,
        "plan": old.get("plan"),
    }


def pair_facts(description: dict[str, Any]) -> dict[str, Any]:
    """The PairFacts fields an engine pair's own account (``provenance.engine`` before version 3) holds."""
    env = _dict(description.get("env"))
    roles = {}
    for role in ("producer", "consumer"):
        role_env = {str(k): str(v) for k, v in _dict(env.get(role)).items()}
        roles[role] = {
            "env": role_env,
            "cpus": role_env.get("VLLM_CPU_OMP_THREADS_BIND"),
            "gpus": role_env.get("CUDA_VISIBLE_DEVICES"),
        }
    mode = description.get("mode")
    return {
        "engine": description.get("engine"),
        "mode": mode if mode in ("launch", "attach") else None,
        "device": description.get("device"),
        **roles,
    }


def upgrade_fit(data: Any) -> Any:
    """A fit.json dict in the version 2 shape: ``source`` split into ``setup`` and the input reference."""
    if not isinstance(data, dict) or data.get("schema") != FIT_V1:
        return data
    new = dict(data)
    legacy = _dict(new.pop("source", None))
    new["schema"] = "kvcal.fit/2"
    new["setup"] = setup_v1(legacy, _dict(legacy.get("settings")), _dict(legacy.get("provenance")), created_at=None)
    kind = legacy.get("kind")
    new["source"] = {
        "path": legacy.get("path"),
        "kind": kind if kind in _SOURCE_KINDS else None,
        "run": legacy.get("run"),
    }
    boot = _dict(new.get("bootstrap"))
    new["bootstrap"] = {k: boot[k] for k in _BOOTSTRAP_KEYS if k in boot}
    return new


def setup_v1(
    facts: dict[str, Any], settings: dict[str, Any], provenance: dict[str, Any], *, created_at: Any
) -> dict[str, Any]:
    """The RunSetup fields version 1 recorded, from its top-level facts, settings and provenance."""
    engine = facts.get("engine")
    pair = _dict(provenance.get("engine"))
    hardware = _dict(facts.get("hardware") or provenance.get("hardware"))
    env = _dict(_dict(pair.get("env")).get("producer"))
    engine_args = _engine_args(settings)
    launched = pair.get("mode") == "launch"
    on_cpu = pair.get("device") == "cpu"
    seed = env.get("PYTHONHASHSEED")
    kv_config = pair.get("kv_transfer_config")
    tp = arg_value(engine_args, "--tensor-parallel-size", "-tp")
    return {
        "model": facts.get("model"),
        "engine": engine,
        "transport": facts.get("transport"),
        "block_size": facts.get("block_size"),
        "kv_bytes_per_token": facts.get("kv_bytes_per_token"),
        "kv_dtype": arg_value(engine_args, "--kv-cache-dtype"),
        "accelerator": (provenance.get("cpu_model") if on_cpu else hardware.get("gpu")) if launched else None,
        "device_count": (1 if on_cpu else hardware.get("devices") or None) if launched else None,
        "tensor_parallel_size": int(tp) if tp and tp.isdigit() else (1 if launched else None),
        "python_hash_seed": int(seed) if isinstance(seed, str) and seed.isdigit() else None,
        "kv_transfer_config": kv_config if isinstance(kv_config, dict) and kv_config else None,
        "engine_versions": {k: provenance.get(f"{k}_version") for k in ("vllm", "nixl", "torch")}
        if engine == "vllm"
        else None,
        "ucx_env": provenance.get("ucx_env") if launched and isinstance(provenance.get("ucx_env"), dict) else None,
        "created_at": created_at,
    }


def _engine_args(settings: dict[str, Any]) -> list[str]:
    """The stored settings' ``engine_args`` as they were written (the raw field: no settings model is built to read
    one list, so an old file's other settings need not satisfy today's bounds); [] where it is not a list of strings."""
    args = settings.get("engine_args")
    return list(args) if isinstance(args, list) and all(isinstance(arg, str) for arg in args) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
