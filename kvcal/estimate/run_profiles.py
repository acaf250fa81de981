"""Which profiles a run resolves to: its model, its accelerator and its link.

The resolvers map a run's model name or path, GPU/CPU name and transport name to
profiles; they return None (never raise) when nothing matches. :func:`context_from_fit`
resolves all three from a fit's ``setup`` for :mod:`kvcal.estimate.sanity`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvcal.errors import InputError
from kvcal.estimate.hfconfig import load_model
from kvcal.estimate.profiles import Accelerator, Link, ModelProfile, load_profiles, match_profile
from kvcal.records.fit import FitResult
from kvcal.records.run import RunSetup

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SanityContext:
    """The profiles a run resolved to (None where unknown) and the run's own facts."""

    model: ModelProfile | None
    hardware: Accelerator | None
    link: Link | None
    devices: int = 1
    kv_dtype: str | None = None
    run_kv_bytes_per_token: int | None = None


def profiles_or_none(root: Path | str | None) -> Any:
    try:
        return load_profiles(root)
    except InputError as err:
        log.warning("profiles unavailable, sanity checks skipped: %s", err)
        return None


def resolve_model_profile(name_or_path: str | None, root: Path | str | None = None) -> ModelProfile | None:
    """The profile a run's model name, HF id or path refers to, or None when nothing matches."""
    if not name_or_path:
        return None
    try:
        return load_model(str(name_or_path), root)
    except InputError:
        pass
    profiles = profiles_or_none(root)
    if profiles is None:
        return None
    text = str(name_or_path).rstrip("/")
    for candidate in (text, text.rsplit("/", 1)[-1], "/".join(text.split("/")[-2:])):
        found = match_profile(profiles.models, candidate)
        if found is not None:
            return found
    return None


def resolve_hardware(name: str | None, root: Path | str | None = None) -> Accelerator | None:
    """The accelerator a GPU/CPU name refers to ('NVIDIA H200', 'h100', 'Intel(R) Xeon(R) Processor'), or None."""
    profiles = profiles_or_none(root) if name else None
    if profiles is None:
        return None
    found = match_profile(profiles.accelerators, str(name))
    if found is not None:
        return found
    text = f" {_words(str(name))} "
    for acc in profiles.accelerators.values():
        if any(f" {_words(t)} " in text for t in (acc.name, *acc.aliases)):
            return acc
    return None


def _words(text: str) -> str:
    return " ".join(text.lower().replace("-", " ").replace("_", " ").split())


_TRANSPORT_WORDS = {
    "tcp": ("tcp", "sockets"),
    "shm": ("cma", "shm", "posix", "knem", "xpmem"),
    "rdma": ("rdma", "roce", "verbs", "infiniband", "rc_", "dc_", "ib"),
    "pcie": ("pcie", "cuda_copy", "h2d"),
}


def resolve_link(
    transport: str | None, accelerator: Accelerator | None = None, root: Path | str | None = None
) -> Link | None:
    """The link a run's transport name refers to.

    A profile name; else a kind word ('tcp', 'rdma', 'cma') picks that kind, preferring the
    accelerator's default and links of its device (cpu-*); else an alias; else the default.
    """
    profiles = profiles_or_none(root)
    if profiles is None:
        return None
    text = (transport or "").strip().lower()
    if text in profiles.links:
        return profiles.links[text]
    default = profiles.links.get(accelerator.default_link) if accelerator else None
    wanted = next((k for k, words in _TRANSPORT_WORDS.items() if any(w in text for w in words)), None) if text else None
    if wanted is not None:
        if default is not None and default.transport == wanted:
            return default
        candidates = [lk for lk in profiles.links.values() if lk.transport == wanted]
        if accelerator is not None:
            same_device = [lk for lk in candidates if lk.name.startswith("cpu-") == (accelerator.device == "cpu")]
            candidates = same_device or candidates
        if candidates:
            return candidates[0]
    found = match_profile(profiles.links, text) if text else None
    return found if found is not None else default


def _transport_hint(setup: RunSetup) -> str | None:
    """The run's transport name, sharpened by UCX_TLS.

    A UCX limited to tcp is a TCP link whatever the transport says.
    """
    tls = str((setup.ucx_env or {}).get("UCX_TLS", "")).lower()
    if tls and "tcp" in tls and not any(w in tls for w in (*_TRANSPORT_WORDS["rdma"], *_TRANSPORT_WORDS["shm"])):
        return f"{setup.transport or 'ucx'} tcp"
    return setup.transport


def _cpu_only(setup: RunSetup) -> bool:
    """True when the run says it had no GPU: a '+cpu' torch build."""
    return str((setup.engine_versions or {}).get("torch") or "").endswith("+cpu")


def context_from_fit(fit: FitResult, root: Path | str | None = None) -> SanityContext:
    """Resolve the run's model, hardware and transport (``fit.setup``) to profiles; a sim run resolves to nothing."""
    setup = fit.setup
    if setup.engine == "sim" or fit.source.kind == "sim":
        return SanityContext(model=None, hardware=None, link=None)
    hardware_name = setup.accelerator or ("cpu" if _cpu_only(setup) else None)
    hardware = resolve_hardware(hardware_name, root)
    transport = _transport_hint(setup)
    link = resolve_link(transport, hardware, root) if (hardware or transport) else None
    devices = setup.device_count or setup.tensor_parallel_size or 1
    return SanityContext(
        model=resolve_model_profile(setup.model, root),
        hardware=hardware,
        link=link,
        devices=max(1, devices),
        kv_dtype=setup.kv_dtype if setup.kv_dtype and setup.kv_dtype != "auto" else None,
        run_kv_bytes_per_token=setup.kv_bytes_per_token,
    )
