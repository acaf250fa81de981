"""Whether a recorded probe agrees with what was planned: a line of probes.jsonl is refused, with its reason,
when its length or leg contradicts its own id or the plan stored in run.json when it ran.

A probe id names its shape (``L1024-pull-r1``, ``source-busy-L1024-pull-r1``, a warm-up's
``...-warmup``); resume keys on the id, and the fit on the fields, so a record whose
fields and id disagree would be skipped by one and fitted by the other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from kvcal.records import PlannedProbe, ProbeRecord

WARMUP_SUFFIX = "-warmup"
# What a probe measured or read from the engines; the rest of a record comes from the plan.
MEASURED = (
    "ttft_ms",
    "bytes_moved",
    "bytes_metric",
    "producer_ttft_ms",
    "overhead_ms",
    "host_busy",
    "source_waiting",
    "computing_waiting",
    "engine_side",
)
_ID_SHAPE = re.compile(r"(?:^|-)L(?P<tokens>\d{1,10})-(?P<leg>recompute|pull)-r(?P<rep>\d{1,10})$")


def contradiction(record: ProbeRecord, plan: Mapping[str, PlannedProbe]) -> str | None:
    """Why ``record`` cannot be the probe its id names (``plan``: run.json's plan by id), or None."""
    base_id = record.probe_id.removesuffix(WARMUP_SUFFIX) if record.warmup else record.probe_id
    planned = plan.get(base_id)
    if planned is not None:
        if (planned.prefix_tokens, planned.leg) != (record.prefix_tokens, record.leg):
            return (
                f"probe {record.probe_id} records {record.prefix_tokens} tokens on the {record.leg.value} leg, "
                f"but run.json's plan ran it at {planned.prefix_tokens} tokens on the {planned.leg.value} leg"
            )
        return None
    shape = _ID_SHAPE.search(base_id)
    if shape is not None and (int(shape["tokens"]), shape["leg"]) != (record.prefix_tokens, record.leg.value):
        return (
            f"probe {record.probe_id} records {record.prefix_tokens} tokens on the {record.leg.value} leg, "
            f"which contradicts its id"
        )
    return None


def checked_record(**fields: Any) -> ProbeRecord:
    """The record of one attempt; a measured number beyond the record's bounds makes the attempt invalid.

    The bounds that a run folder is read with (:class:`ProbeRecord`) hold when it is
    written too: an engine that reports a 1e300-byte pull or an infinite TTFT costs one
    attempt, with the reason, and the run goes on (or ends on its retry limit).
    """
    try:
        return ProbeRecord(**fields)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "a value"
        reason = f"the engines reported an implausible {where} ({first.get('msg', 'invalid')})"
    cleared = {name: None for name in MEASURED if name in fields}
    return ProbeRecord(**{**fields, **cleared, "metrics_delta": {}, "valid": False, "invalid_reason": reason})
