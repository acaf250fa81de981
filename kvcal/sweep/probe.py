"""One probe: a fresh prompt, one leg, the gates, retries, one fsynced record per attempt.

The probe protocol belongs to the sweep, not the engines: a fresh random prompt per probe
and attempt (the consumer caches what it just served) and the gates:

* a pull that moved no bytes (or less than ``min_pull_fraction`` of the expected KV)
  measured recompute against recompute;
* a recompute control that moved bytes was not a recompute.

Either marks the attempt invalid; it is retried with a new prompt up to
``max_attempts`` times, after which the run fails with the reason. Every attempt is
appended to probes.jsonl the moment it ends, so a run that dies loses nothing and
``--resume`` repeats no finished probe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvcal.engines.base import EnginePair, LegMeasurement
from kvcal.errors import EngineError, GateError
from kvcal.probe_checks import checked_record
from kvcal.provenance import utc_now
from kvcal.records import Leg, ProbeRecord
from kvcal.runfolder import RunFolder
from kvcal.settings import SweepConfig
from kvcal.sweep.host_monitors import HostMonitor
from kvcal.sweep.lengths.probe_plan import PlannedProbe
from kvcal.sweep.load import LoadReading
from kvcal.sweep.progress import SweepProgress

log = logging.getLogger(__name__)


class PromptSource:
    """Fresh random token ids: exact lengths, no text-to-token guess, no accidental cache hit."""

    def __init__(self, seed: int, vocab_size: int) -> None:
        # Fresh entropy on every run: a resumed run must not resend a prompt the
        # consumer may have cached before the crash.
        self._rng = np.random.default_rng([seed, int(time.time_ns() % (2**63))])
        margin = min(256, vocab_size // 4)
        self._low, self._high = min(100, vocab_size // 4), vocab_size - margin

    def tokens(self, n: int) -> list[int]:
        return self._rng.integers(self._low, self._high, size=n).tolist()


def gate(leg: Leg, measured: LegMeasurement, expected_bytes: int | None, min_pull_fraction: float) -> str | None:
    """Why an attempt cannot be trusted, or None when it passes."""
    if leg is Leg.RECOMPUTE:
        if measured.bytes_moved:
            return f"recompute control moved {measured.bytes_moved} bytes (a transfer fired on a leg that must prefill)"
        return None
    if measured.bytes_moved is None:
        return "the pull's bytes could not be counted (the engine exposes no transfer metric)"
    if measured.bytes_moved == 0:
        return (
            "pull moved no bytes: it measured recompute against recompute "
            "(check the kv-transfer-config and that PYTHONHASHSEED matches on both engines)"
        )
    if expected_bytes and measured.bytes_moved < min_pull_fraction * expected_bytes:
        return (
            f"pull moved {measured.bytes_moved} bytes, under {min_pull_fraction:.0%} of the expected {expected_bytes}"
        )
    return None


@dataclass
class ProbeContext:
    """What every probe of one session shares: the pair, prompts, run folder, settings, retry counts and watchers."""

    pair: EnginePair
    prompts: PromptSource
    run: RunFolder
    config: SweepConfig
    attempts: dict[str, int]
    progress: SweepProgress
    monitor: HostMonitor | None
    load_reading: Callable[[], LoadReading]


def expected_bytes(planned: PlannedProbe, kv_bytes_per_token: int | None) -> int | None:
    """The KV a pull should move (None when the layout is unknown); 0 for a recompute control."""
    if planned.leg is Leg.RECOMPUTE:
        return 0
    return planned.prefix_tokens * kv_bytes_per_token if kv_bytes_per_token else None


def probe_until_valid(ctx: ProbeContext, planned: PlannedProbe, done: int, total: int) -> ProbeRecord:
    """Measure ``planned`` until an attempt passes its gate; raise after ``max_attempts`` failures in a row."""
    ctx.pair.select(planned.pair)
    first_attempt = ctx.attempts.get(planned.probe_id, 0)
    reasons = []
    for attempt in range(first_attempt, first_attempt + ctx.config.probe.max_attempts):
        record = attempt_once(ctx, planned, attempt)
        ctx.run.append_probe(record)
        ctx.attempts[planned.probe_id] = attempt + 1
        ctx.progress.on_probe(record, done + (1 if record.valid else 0), total)
        if record.valid:
            return record
        log.warning("probe %s attempt %d invalid: %s", planned.probe_id, attempt, record.invalid_reason)
        reasons.append(record.invalid_reason or "")
    raise gave_up(ctx, planned.probe_id, reasons)


def gave_up(ctx: ProbeContext, probe_id: str, reasons: list[str]) -> EngineError | GateError:
    """The error that ends a run after ``max_attempts`` failed attempts of one probe, in a row."""
    what, fix = (
        ("failed", "fix the engine")
        if all(r.startswith("request failed") for r in reasons)
        else ("failed its gate", "fix the cause")
    )
    error = EngineError if what == "failed" else GateError
    return error(
        f"probe {probe_id} {what} {ctx.config.probe.max_attempts} times in a row ({reasons[-1]}); "
        f"every finished probe is kept in {ctx.run.probes_path}; {fix} and rerun with --resume"
    )


def attempt_once(ctx: ProbeContext, planned: PlannedProbe, attempt: int, *, session: str = "warm") -> ProbeRecord:
    """One attempt of ``planned`` on the selected pair; a pull is recorded with ``session`` (recompute: None)."""
    expected = expected_bytes(planned, ctx.pair.kv_bytes_per_token)
    loaded = ctx.load_reading().record_fields()  # the queues just before this attempt
    started_at = utc_now()
    if ctx.monitor is not None:
        ctx.monitor.before_probe()
    began = time.perf_counter()
    measured: LegMeasurement | None
    reason: str | None
    try:
        measured = ctx.pair.measure(planned.leg, ctx.prompts.tokens(planned.prefix_tokens))
    except EngineError as err:
        # A request the engine refused (e.g. a KV load that failed) is an invalid attempt;
        # an engine that is gone fails every retry quickly and ends the run.
        measured, reason = None, f"request failed: {err}"
    else:
        reason = gate(planned.leg, measured, expected, ctx.config.probe.min_pull_fraction)
    wall_ms = (time.perf_counter() - began) * 1e3
    host_busy = ctx.monitor.after_probe() if ctx.monitor is not None else None
    shared = dict(
        probe_id=planned.probe_id,
        plan_index=planned.plan_index,
        attempt=attempt,
        prefix_tokens=planned.prefix_tokens,
        leg=planned.leg,
        rep=planned.rep,
        expected_bytes=expected,
        invalid_reason=reason,
        started_at=started_at,
        host_busy=host_busy,
        **loaded,
        adaptive_round=planned.adaptive_round,
        adaptive_reason=planned.adaptive_reason,
        pair=planned.pair,
        link_class=planned.link_class,
        session=session if planned.leg is Leg.PULL else None,
    )
    if measured is None:
        return checked_record(ttft_ms=None, bytes_moved=None, valid=False, **shared)
    engine_ms = measured.ttft_ms + (measured.producer_ttft_ms or 0.0)
    return checked_record(  # numbers out of bounds make the attempt invalid (kvcal.probe_checks)
        ttft_ms=measured.ttft_ms,
        bytes_moved=measured.bytes_moved,
        bytes_metric=measured.bytes_metric,
        producer_ttft_ms=measured.producer_ttft_ms,
        overhead_ms=measured.overhead_ms if measured.overhead_ms is not None else max(wall_ms - engine_ms, 0.0),
        valid=reason is None,
        metrics_delta=measured.metrics_delta,
        engine_side=measured.engine_side,
        **shared,
    )
