"""How the vLLM pair measures one leg, and what proves that a pull moved KV.

The measurement half of :class:`~kvcal.engines.vllm.VllmPair` (which owns processes,
clients and provenance). One leg:

- recompute: the fresh prompt goes straight to the consumer, which prefills it;
- pull: the producer is sent the prompt first so it holds the prefix (its time is
  ``producer_ttft_ms``), then the consumer request that pulls it is timed. With
  ``dp_ranks`` N > 1 (a producer started with ``--data-parallel-size N``) the prompt is
  sent to every rank (vLLM's ``X-data-parallel-rank`` header), as the llm-d recipe
  seeds every rank, so rank 0, whose P2P listener the pull names, surely holds it;
  ``producer_ttft_ms`` is rank 0's time, the other seeds count in ``overhead_ms``.

``/metrics`` is read before and after (consumer always; producer on pull legs and where
the transport counts bytes there); ``bytes_moved`` is the delta of the transport's own
byte counter where the engine has it (vLLM 0.33's
``vllm:kv_offload_tiering_read_bytes_total{tier="1:p2p"}``: the P2P tier's reads,
whatever its position), else of the first stand-in it exposes (older counters), and
``bytes_metric`` names the one read (``consumer/<sample>``). ``metrics_delta`` holds every
counter that changed by a finite amount, keyed ``consumer/<sample>`` or
``producer/<sample>`` (so a transport's token counter, such as
``vllm:prompt_tokens_cached_by_source_total{source="p2p"}``, is kept as a second proof).

A byte counter is input: NaN or infinite, going down, or rising by more than
``prefix_tokens`` x the most KV bytes any model keeps per token
(:func:`kvcal.engines.base.max_plausible_bytes`), it fails the leg with an EngineError
naming the engine and what it sent; the sweep records the probe invalid with that reason.
``overhead_ms`` is the leg's wall time minus the engine times it reports: kvcal's metric
scrapes and settling, request building and the stream's tail. ``engine_side`` is the
engines' own transfer and prefill time over the leg (:mod:`kvcal.engines.engine_costs`),
None under background load.

Before each leg, launched CPU engines are paced: kvcal waits (poll, 5 s at most) until
both servers' process trees are idle, because vLLM keeps spinning for about a second
after every request and that tail would land on the next leg's cores. The wait is not
part of the leg's ``overhead_ms``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvcal.engines.base import LegMeasurement, max_plausible_bytes
from kvcal.engines.engine_costs import from_snapshots
from kvcal.engines.metrics import Snapshot, delta, matching_keys, poll_until, total
from kvcal.engines.process import wait_until_idle
from kvcal.errors import EngineError
from kvcal.records import Leg
from kvcal.transports.base import BytesMetric, MetricRef, Role

if TYPE_CHECKING:
    from pathlib import Path

    from kvcal.engines.http import EngineClient
    from kvcal.engines.process import ServerProcess
    from kvcal.engines.vllm_launch import LaunchPlan, VllmSettings
    from kvcal.transports.base import Transport

log = logging.getLogger(__name__)

_REQUESTS_DONE = "vllm:request_success_total"
# Two idle vLLM engines use ~0.05-0.15 cores; one spinning queue reader is a full core.
_CPU_IDLE_MAX_CORES = 0.3
DP_RANK_HEADER = "X-data-parallel-rank"


class PairMeasurement:
    """Leg measurement for a pair that provides ``settings``, ``transport``, ``plan``, ``_servers`` and ``_client``."""

    settings: VllmSettings
    transport: Transport
    plan: LaunchPlan
    run_dir: Path
    _servers: list[ServerProcess]
    _last_reading: dict[Role, Snapshot]
    _loaded: bool  # background load running (kvcal.engines.vllm_load.UnderLoad)
    _clients: dict[Role, EngineClient]

    def _client(self, role: Role) -> EngineClient:
        if role not in self._clients:
            raise EngineError("the vLLM pair is not started")
        return self._clients[role]

    def _settled_after(self, role: Role, before: Snapshot, requests: int, pulled: bool = False) -> Snapshot:
        """Read ``role``'s metrics until its finished-request counter shows ``requests`` more.

        vLLM publishes a request's stats, its KV-transfer stats included, with the
        request's final output, so once the request is counted its bytes are too.
        Under background load (load states) other requests finish too, so a pull also
        waits for the transport's byte counter to rise.
        """
        refs = (
            [r for m in self.transport.bytes_metrics if m.role is role for r in m.candidates]
            if pulled and self._loaded
            else []
        )

        def done(snap: Snapshot) -> bool:
            moved = not refs or any(_ref_total(snap, r) > _ref_total(before, r) for r in refs)
            return moved and total(snap, _REQUESTS_DONE) - total(before, _REQUESTS_DONE) >= requests

        snap, settled = poll_until(self._client(role).metrics, done, timeout_s=self.settings.settle_timeout_s)
        if not settled:
            log.warning(
                "%s metrics did not count the request within %.1f s", role.value, self.settings.settle_timeout_s
            )
        return snap

    def _reading_before(self, role: Role) -> Snapshot:
        """The counters before a leg: the previous leg's settled reading on engines kvcal owns."""
        # Popped, not read: a leg that fails part-way leaves no reading, so the next leg scrapes afresh.
        reading = self._last_reading.pop(role, None)
        if self._servers and reading is not None and not self._loaded:  # background requests move counters between legs
            return reading
        return self._client(role).metrics()

    def _wait_held(self, before: Snapshot) -> None:
        refs = self.transport.hold_settle_metrics
        if not refs:
            return

        def stored(snap: Snapshot) -> bool:
            return any(_ref_total(snap, r) > _ref_total(before, r) for r in refs)

        _, ok = poll_until(
            self._client(Role.PRODUCER).metrics, stored, timeout_s=self.settings.settle_timeout_s, interval_s=0.005
        )
        if not ok:
            log.warning("the producer's store counters did not rise; the pull may miss")

    def _wait_engines_idle(self) -> None:
        """Pacing before a leg (launched engines only): let the previous leg's CPU tail end."""
        max_cores = self.settings.idle_max_cores
        if max_cores is None:
            max_cores = _CPU_IDLE_MAX_CORES if self.plan.device == "cpu" else 0.0
        if not self._servers or max_cores <= 0 or self._loaded:  # background load keeps them busy on purpose
            return
        idle, waited_s = wait_until_idle(self._servers, max_cores=max_cores, timeout_s=self.settings.idle_timeout_s)
        if not idle:
            log.warning(
                "engines still busy after %.1f s; measuring anyway (is something else loading this host?)", waited_s
            )

    def measure(self, leg: Leg, token_ids: list[int]) -> LegMeasurement:
        self._wait_engines_idle()  # pacing, not part of the leg: outside overhead_ms
        start_ns = time.perf_counter_ns()
        scraped = {Role.CONSUMER} | {m.role for m in self.transport.bytes_metrics}
        if leg is Leg.PULL and self.transport.hold_settle_metrics:
            scraped.add(Role.PRODUCER)
        before = {role: self._reading_before(role) for role in scraped}
        params = None
        producer_ms = None
        if leg is Leg.PULL:
            kv_request_id = str(uuid.uuid4())
            held = self._hold(token_ids, kv_request_id)
            producer_ms = held.elapsed_ms
            if Role.PRODUCER in before:  # only transports with hold_settle_metrics scrape the producer
                self._wait_held(before[Role.PRODUCER])
            params = self.transport.pull_params(held.kv_transfer_params, kv_request_id, self.plan.side(Role.PRODUCER))
        timing = self._client(Role.CONSUMER).stream_completion(token_ids, params)
        # Each engine that served a request this leg must have counted it before we read it.
        # The scrape (about 10 ms on a CPU engine) runs beside the pacing wait for the
        # engines' busy tail, which the next leg needs anyway, so it adds no wall time there.
        served = {Role.CONSUMER} | ({Role.PRODUCER} if leg is Leg.PULL else set())
        scraping = _Background(
            lambda: {
                role: self._settled_after(role, before[role], int(role in served), leg is Leg.PULL) for role in scraped
            }
        )
        paced_ns = time.perf_counter_ns()
        self._wait_engines_idle()
        paced_ns = time.perf_counter_ns() - paced_ns
        after = scraping.result()
        moved, proof = self._bytes_moved(before, after, len(token_ids))
        if self._servers:
            self._last_reading.update(after)
        metrics_delta: dict[str, float] = {}
        for role in scraped:
            metrics_delta.update({f"{role.value}/{k}": v for k, v in delta(before[role], after[role]).items()})
        elapsed_ms = (time.perf_counter_ns() - start_ns - paced_ns) / 1e6
        return LegMeasurement(
            ttft_ms=timing.ttft_ms,
            bytes_moved=moved,
            producer_ttft_ms=producer_ms,
            overhead_ms=elapsed_ms - timing.ttft_ms - (producer_ms or 0.0),
            metrics_delta=metrics_delta,
            bytes_metric=proof,
            # Under background load other requests move the same counters: no engine-side reading then.
            engine_side=None if self._loaded else from_snapshots(before, after, self.transport),
        )

    def _hold(self, token_ids: list[int], kv_request_id: str):
        """The producer holds the prefix: one request, or one per data-parallel rank (rank 0's answer is returned)."""
        ranks = self.settings.dp_ranks
        producer = self._client(Role.PRODUCER)
        params = self.transport.hold_params(kv_request_id)
        if ranks <= 1:
            return producer.complete(token_ids, params)
        held = [producer.complete(token_ids, params, headers={DP_RANK_HEADER: str(rank)}) for rank in range(ranks)]
        return held[0]

    def _bytes_moved(
        self, before: dict[Role, Snapshot], after: dict[Role, Snapshot], prefix_tokens: int
    ) -> tuple[int | None, str | None]:
        """Bytes the transport's counters moved and the counter(s) read; (None, None) if the engine exposes none.

        EngineError when a counter is not a number, goes down, or rises beyond any model's KV for the prefix.
        """
        moved: int | None = None
        proofs: list[str] = []
        for metric in self.transport.bytes_metrics:
            ref = proving_ref(after[metric.role], metric)
            if ref is None:
                continue
            client = self._client(metric.role)
            was, now = _ref_total(before[metric.role], ref), _ref_total(after[metric.role], ref)
            shown = _proof_name(metric.role, after[metric.role], ref)
            if not (math.isfinite(was) and math.isfinite(now)) or min(was, now) < 0:
                raise client.fail(
                    "GET /metrics sent a byte counter that is not a number (or is negative)",
                    f"{shown} = {was} then {now}",
                )
            if now < was:
                raise client.fail(
                    "GET /metrics sent a byte counter that went down (did the engine restart?)",
                    f"{shown} from {was:.0f} to {now:.0f}",
                )
            bound = max_plausible_bytes(prefix_tokens)
            if now - was > bound:
                raise client.fail(
                    "GET /metrics sent an impossible byte count",
                    f"{shown} rose by {now - was:.4g} for {prefix_tokens} tokens, above {bound:.4g} "
                    f"(more KV than any model keeps per token)",
                )
            moved = (moved or 0) + int(round(now - was))
            proofs.append(shown)
        return moved, ("+".join(proofs) or None)

    def warm_up(self, token_ids: list[int]) -> None:
        """Pay the first pull's handshake and the first prefill; retry a pull that moved nothing.

        The first NIXL handshake has a fixed 5 s reply timeout inside vLLM; on a loaded
        host it can miss once. Each retry rotates the prompt so no cache answers it.
        """
        last = "no try made"
        ids = list(token_ids)
        for attempt in range(1, self.settings.warmup_tries + 1):
            try:
                result = self.measure(Leg.PULL, ids)
                if result.bytes_moved:
                    break
                last = f"the pull moved {result.bytes_moved} bytes"
            except EngineError as err:
                last = str(err)
            log.warning("warm-up pull %d/%d failed: %s", attempt, self.settings.warmup_tries, last)
            ids = ids[1:] + ids[:1]
        else:
            raise EngineError(
                f"warm-up pulls failed {self.settings.warmup_tries} times: {last} (logs: {self.run_dir / 'logs'})"
            )
        self.measure(Leg.RECOMPUTE, list(reversed(token_ids)))


class _Background:
    """A call run on a daemon thread: an interrupt (Ctrl-C, SIGTERM) of the waiting caller never waits for it."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._call = call
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kvcal-scrape", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as err:
            self._error = err

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _ref_total(snapshot: Snapshot, ref: MetricRef) -> float:
    return total(snapshot, ref.name, **dict(ref.labels))


def _proof_name(role: Role, snapshot: Snapshot, ref: MetricRef) -> str:
    """``consumer/<sample>``: the sample as the engine labelled it (``tier="1:p2p"``).

    Before the engine has one: the wanted form.
    """
    keys = matching_keys(snapshot, ref.name, **dict(ref.labels))
    return f"{role.value}/{keys[0] if len(keys) == 1 else ref.shown()}"


def exposes_ref(snapshot: Snapshot, ref: MetricRef) -> bool:
    """True if the engine exposes ``ref.name`` with every one of ``ref.labels`` on some sample."""
    return bool(matching_keys(snapshot, ref.name, **dict(ref.labels)))


def has_own_counter(snapshot: Snapshot, metric: BytesMetric) -> bool:
    """Whether the engine has the transport's own counter (``candidates[0]``), sampled yet or not (see BytesMetric)."""
    own = metric.candidates[0]
    declared: frozenset[str] = getattr(snapshot, "declared", frozenset())
    prefix = metric.family_prefix
    return (
        exposes_ref(snapshot, own)
        or own.name in declared
        or (prefix is not None and any(name.startswith(prefix) for name in (*snapshot, *declared)))
    )


def proving_ref(snapshot: Snapshot, metric: BytesMetric) -> MetricRef | None:
    """The counter that proves a leg's bytes.

    The transport's own where the engine has it, else the first stand-in exposed.
    """
    if has_own_counter(snapshot, metric):
        return metric.candidates[0]
    return next((ref for ref in metric.candidates[1:] if exposes_ref(snapshot, ref)), None)
