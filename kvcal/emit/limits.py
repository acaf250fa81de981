"""emit-config's output formats and the P2P port's default, read by the flag declarations.

Kept apart from :mod:`kvcal.emit.formats` so that the flag declarations (and ``kvcal --help``) do not build
the typed records that rendering needs. The rules' names and the checks on their numbers are
:mod:`kvcal.threshold.limits`'.
"""

from __future__ import annotations

from kvcal.transports.p2p_tier import P2P_PORT  # noqa: F401 - --p2p-port's default; the CLI reads it here

FORMATS = ("plugin", "helm", "affinity", "costmodel", "vllm", "env", "json", "work-range")
"""What emit-config writes (kvcal.emit.formats renders each)."""

WORK_RANGE_FORMATS = ("work-range", "json", "helm")
"""The formats that read --ttft-penalty-ms and --max-model-len (the remaining-work boundary, kvcal.emit.work_range)."""
