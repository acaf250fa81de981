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
the transport counts bytes there); ``bytes_moved`` is the delta of the first of the
transport's byte counters the engine exposes *with the wanted labels* (e.g. vLLM 0.33's
``vllm:kv_offload_tiering_read_bytes_total{tier="p2p"}``, then the older counters), and
``metrics_delta`` every counter that changed, keyed ``consumer/<sample>`` or
``producer/<sample>`` (so a transport's token counter, such as
``vllm:prompt_tokens_cached_by_source_total{source="p2p"}``, is kept as a second proof).
``overhead_ms`` is the leg's wall time minus the engine times it reports: kvcal's metric
scrapes and settling, request building and the stream's tail.

Before each leg, launched CPU engines are paced: kvcal waits (poll, 5 s at most) until
both servers' process trees are idle, because vLLM keeps spinning for about a second
after every request and that tail would land on the next leg's cores. The wait is not
part of the leg's ``overhead_ms``.
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from kvcal.engines.base import LegMeasurement
from kvcal.engines.metrics import Snapshot, delta, poll_until, sample_key, total
from kvcal.engines.process import wait_until_idle
from kvcal.engines.transports.base import MetricRef, Role
from kvcal.errors import EngineError
from kvcal.records import Leg

if TYPE_CHECKING:
    from kvcal.engines.http import EngineClient
    from kvcal.engines.process import ServerProcess
    from kvcal.engines.transports.base import Transport
    from kvcal.engines.vllm_launch import LaunchPlan, VllmSettings

log = logging.getLogger(__name__)

_REQUESTS_DONE = "vllm:request_success_total"
# Two idle vLLM engines use ~0.05-0.15 cores; one spinning queue reader is a full core.
_CPU_IDLE_MAX_CORES = 0.3
DP_RANK_HEADER = "X-data-parallel-rank"


class PairMeasurement:
    """Leg measurement for a pair that provides ``settings``, ``transport``, ``plan``, ``_servers`` and ``_client``."""

    settings: "VllmSettings"
    transport: "Transport"
    plan: "LaunchPlan"
    _servers: "list[ServerProcess]"
    _last_reading: dict[Role, Snapshot]
    _loaded: bool  # background load running (kvcal.engines.vllm_load.UnderLoad)
    _clients: "dict[Role, EngineClient]"

    def _client(self, role: Role) -> "EngineClient":
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
        refs = [r for m in self.transport.bytes_metrics if m.role is role for r in m.candidates] if pulled and self._loaded else []

        def done(snap: Snapshot) -> bool:
            moved = not refs or any(_ref_total(snap, r) > _ref_total(before, r) for r in refs)
            return moved and total(snap, _REQUESTS_DONE) - total(before, _REQUESTS_DONE) >= requests

        snap, settled = poll_until(self._client(role).metrics, done, timeout_s=self.settings.settle_timeout_s)
        if not settled:
            log.warning("%s metrics did not count the request within %.1f s", role.value, self.settings.settle_timeout_s)
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

        _, ok = poll_until(self._client(Role.PRODUCER).metrics, stored, timeout_s=self.settings.settle_timeout_s, interval_s=0.005)
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
            log.warning("engines still busy after %.1f s; measuring anyway (is something else loading this host?)", waited_s)

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
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvcal-scrape") as scraper:
            scraping = scraper.submit(
                lambda: {role: self._settled_after(role, before[role], int(role in served), leg is Leg.PULL) for role in scraped}
            )
            paced_ns = time.perf_counter_ns()
            self._wait_engines_idle()
            paced_ns = time.perf_counter_ns() - paced_ns
            after = scraping.result()
        if self._servers:
            self._last_reading.update(after)
        metrics_delta: dict[str, float] = {}
        for role in scraped:
            metrics_delta.update({f"{role.value}/{k}": v for k, v in delta(before[role], after[role]).items()})
        elapsed_ms = (time.perf_counter_ns() - start_ns - paced_ns) / 1e6
        return LegMeasurement(
            ttft_ms=timing.ttft_ms,
            bytes_moved=self._bytes_moved(before, after),
            producer_ttft_ms=producer_ms,
            overhead_ms=elapsed_ms - timing.ttft_ms - (producer_ms or 0.0),
            metrics_delta=metrics_delta,
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

    def _bytes_moved(self, before: dict[Role, Snapshot], after: dict[Role, Snapshot]) -> int | None:
        """Sum over the transport's byte counters of their deltas; None if the engine exposes none."""
        moved: float | None = None
        for metric in self.transport.bytes_metrics:
            ref = first_exposed_ref(after[metric.role], metric.candidates)
            if ref is not None:
                moved = (moved or 0.0) + _ref_total(after[metric.role], ref) - _ref_total(before[metric.role], ref)
        return None if moved is None else int(round(moved))

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
            raise EngineError(f"warm-up pulls failed {self.settings.warmup_tries} times: {last} (logs: {self.run_dir / 'logs'})")
        self.measure(Leg.RECOMPUTE, list(reversed(token_ids)))


def _ref_total(snapshot: Snapshot, ref: MetricRef) -> float:
    return total(snapshot, ref.name, **dict(ref.labels))


def exposes_ref(snapshot: Snapshot, ref: MetricRef) -> bool:
    """True if the engine exposes ``ref.name`` with every one of ``ref.labels`` on some sample."""
    wanted = [sample_key("x", {k: v}).split("{", 1)[1].rstrip("}") for k, v in ref.labels]
    return any(key.split("{", 1)[0] == ref.name and all(w in key for w in wanted) for key in snapshot)


def first_exposed_ref(snapshot: Snapshot, refs: tuple[MetricRef, ...]) -> MetricRef | None:
    """The first of ``refs`` the engine exposes with its labels (names and labels drift between vLLM versions)."""
    return next((ref for ref in refs if exposes_ref(snapshot, ref)), None)
