"""Whether a recorded probe agrees with what was planned: a line of probes.jsonl is refused, with its reason,
when its length or leg contradicts its own id or the plan stored in run.json when it ran.

A probe id names its shape (``L1024-pull-r1``, ``source-busy-L1024-pull-r1``, a warm-up's
``...-warmup``); resume keys on the id, and the fit on the fields, so a record whose
fields and id disagree would be skipped by one and fitted by the other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kvcal.records import PlannedProbe, ProbeRecord

WARMUP_SUFFIX = "-warmup"
_ID_SHAPE = re.compile(r"(?:^|-)L(?P<tokens>\d{1,10})-(?P<leg>recompute|pull)-r(?P<rep>\d{1,10})$")


def contradiction(record: ProbeRecord, plan: Mapping[str, PlannedProbe]) -> str | None:
    """Why ``record`` cannot be the probe its id names (``plan``: run.json's plan by id), or None."""
    base_id = record.probe_id.removesuffix(WARMUP_SUFFIX) if record.warmup else record.probe_id
    planned = plan.get(base_id)
    if planned is not None:
        if (planned.prefix_tokens, planned.leg) != (record.prefix_tokens, record.leg):
            return (f"probe {record.probe_id} records {record.prefix_tokens} tokens on the {record.leg.value} leg, "
                    f"but run.json's plan ran it at {planned.prefix_tokens} tokens on the {planned.leg.value} leg")
        return None
    shape = _ID_SHAPE.search(base_id)
    if shape is not None and (int(shape["tokens"]), shape["leg"]) != (record.prefix_tokens, record.leg.value):
        return (f"probe {record.probe_id} records {record.prefix_tokens} tokens on the {record.leg.value} leg, "
                f"which contradicts its id")
    return None
