"""Warm-up probes: the first request of each (length, leg) on engines that meet the shape new.

A GPU engine meeting a new prompt shape pays once for it (a CUDA graph or kernel
autotuning, an allocation): that first probe is slow and, left in, biases every length
upward by an amount the interval does not cover (x1.5 on the first of 3 reps moves the
break-even by ~13 %). With warm-up probes on, the sweep sends one extra, discarded
request before the first planned probe of each (length, leg), records it in
probes.jsonl with ``warmup: true`` and ``valid: false`` (so nothing fits or exports it),
and goes on. On by default on GPU engines (launched on CUDA, or attached: those run on
GPUs in practice); off by default on CPU and the simulated pair; ``--warmup-probes`` /
``--no-warmup-probes`` set it. The fit separately tests for a first-in-time effect
(:mod:`kvcal.fit.hygiene`) in data swept without them.
"""

from __future__ import annotations

from kvcal.engines.base import EnginePair
from kvcal.errors import EngineError
from kvcal.files.provenance import utc_now
from kvcal.records.probe_checks import checked_record
from kvcal.records.run import Leg, PairFacts, ProbeRecord
from kvcal.sweep.lengths.probe_plan import PlannedProbe

REASON = "warm-up probe: the first of its (length, leg), discarded by the sweep protocol"


def enabled(setting: bool | None, pair: PairFacts) -> bool:
    """The flag when given, else on for GPU engines (launched on CUDA, or attached)."""
    if setting is not None:
        return setting
    if pair.engine != "vllm":
        return False
    return pair.mode == "attach" or pair.device == "cuda"


class WarmupProbes:
    """Sends and records one discarded probe per new (length, leg) of this process's pair."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self._seen: set[tuple[str | None, int, Leg]] = set()  # a resumed run restarts the engines: shapes are new again

    def before(self, pair: EnginePair, planned: PlannedProbe, tokens: list[int]) -> ProbeRecord | None:
        key = (planned.pair, planned.prefix_tokens, planned.leg)
        if not self.on or key in self._seen:
            return None
        self._seen.add(key)
        started_at = utc_now()
        pair.select(planned.pair)
        try:
            m = pair.measure(planned.leg, tokens)
            ttft, moved = m.ttft_ms, m.bytes_moved
        except EngineError:
            ttft, moved = None, None  # the planned probe that follows meets the same failure and reports it
        return checked_record(
            probe_id=f"{planned.probe_id}-warmup",
            plan_index=planned.plan_index,
            attempt=0,
            prefix_tokens=planned.prefix_tokens,
            leg=planned.leg,
            rep=planned.rep,
            ttft_ms=ttft,
            bytes_moved=moved,
            valid=False,
            invalid_reason=REASON,
            started_at=started_at,
            warmup=True,
            pair=planned.pair,
            link_class=planned.link_class,
        )
