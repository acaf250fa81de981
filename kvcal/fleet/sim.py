"""The discrete-event model of N engines behind the router's P2P rule (one run: one policy, seed and cost set).

A heap of timed events drives it (why not a simulation library: docs/fleet.md). Events:
a session's turn arrives and is routed; a pull (or a CPU-tier load) finishes and the
request joins its pod's queue; an engine step ends. An engine runs continuous batching:
each step carries every decoding request one token and prefill chunks from the head of
its queue up to ``max_num_batched_tokens``; a request's first token comes at the end of
the step that finishes its prefill. Costs: :mod:`kvcal.fleet.costs`; caches:
:mod:`kvcal.fleet.cache`; the router: :mod:`kvcal.fleet.router`; engines that share a host:
:mod:`kvcal.fleet.shared_host`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import numpy as np

from kvcal.fleet.cache import FleetIndex, PodCache
from kvcal.fleet.costs import FleetCosts
from kvcal.fleet.links import PairLinks
from kvcal.fleet.policies.base import Policy
from kvcal.fleet.router import Route, route
from kvcal.fleet.run_state import Pod, RunStats
from kvcal.fleet.shared_host import SharedHost
from kvcal.fleet.traffic import Session, Traffic, TurnRequest
from kvcal.fleet.workload import Workload

ARRIVE, READY, STEP_END, SAMPLE, NEW_SESSION, LANDED, SHARED_STEP_END = range(7)
SAMPLE_EVERY_S = 1.0
TICK_EVERY_EVENTS = 1 << 16  # on_tick's period: rare enough to cost nothing, often enough for a live progress line


class FleetSim:
    """One run of the fleet: its pods, the router, the traffic and the heap of events.

    ``drain``: sessions start only before ``duration_s``, but every turn of them is served to its first token
    (no TTFT is cut off at the end); the CPU pair's harness measures so (benchmarks/fleet_cpu_pair.py).
    """

    def __init__(
        self,
        workload: Workload,
        pods: int,
        costs: FleetCosts,
        policy: Policy,
        block: int,
        seed: int,
        drain: bool = False,
        on_tick: Callable[[float], None] | None = None,
    ) -> None:
        self.w, self.costs, self.policy, self.block, self.drain = workload, costs, policy, block, drain
        self.on_tick = on_tick  # called with the simulated seconds every TICK_EVERY_EVENTS events
        engine = workload.engine
        self.budget, self.max_seqs = engine.max_num_batched_tokens, engine.max_num_seqs
        self.kv_capacity = engine.kv_capacity_tokens
        self.decode_ms = engine.decode_step_ms if engine.decode_step_ms is not None else max(0.0, costs.recompute[0])
        load_us = engine.cpu_tier_load_us_per_token
        self.cpu_load_us = load_us if load_us is not None else max(0.0, costs.pull[1])
        self.index = FleetIndex()
        self.pods = [
            Pod(i, PodCache(i, self.index, engine.kv_capacity_tokens, engine.cpu_tier_tokens)) for i in range(pods)
        ]
        self.host = (
            SharedHost(
                pods,
                engine.shared_host_slowdown,
                lambda at, pod, version: self.push(at, SHARED_STEP_END, (pod, version)),
            )
            if engine.shared_host_slowdown > 1 and pods > 1
            else None
        )
        self.queues = np.zeros(pods)
        self.queue_list = [0] * pods  # the same, as Python ints: cheaper to compare on every step
        self.kv_use = np.zeros(pods)  # prompt tokens in flight over the KV capacity, at most 1
        self.inflight = [0] * pods
        self.traffic = Traffic(workload, seed)
        self.route_rng = np.random.default_rng([seed, 7])
        self.start_ms, self.end_ms = workload.warmup_s * 1e3, workload.duration_s * 1e3
        self.slo_ms = workload.slo.ttft_ms
        self.stats = RunStats(window_s=workload.duration_s - workload.warmup_s)
        self.events: list = []
        self.seq = 0
        self.open: dict[
            int, float
        ] = {}  # request id -> arrival, for requests in the window still without a first token
        self.links = PairLinks(costs.links, workload.link_classes, pods, seed) if costs.links else None
        self.link_costs = {name: costs.for_link(link) for name, link in (costs.links or {}).items()}

    def push(self, at_ms: float, kind: int, item: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at_ms, self.seq, kind, item))

    def run(self) -> RunStats:
        for at_ms, kind, item in self.traffic.initial_events():
            self.push(at_ms, kind, item)
        self.push(self.start_ms, SAMPLE)
        handlers: dict[int, Callable[[float, Any], None]] = {
            ARRIVE: self._arrive,
            READY: self._ready,
            STEP_END: self._step_end,
            SAMPLE: self._sample,
            NEW_SESSION: self._new_session,
            LANDED: self._landed,
            SHARED_STEP_END: self._shared_step_end,
        }
        events, end, tick, count = self.events, self.end_ms, self.on_tick, 0
        while events:
            at_ms, _, kind, item = heapq.heappop(events)
            count += 1
            if tick is not None and not count % TICK_EVERY_EVENTS:
                tick(at_ms / 1e3)
            if at_ms >= end:
                if not self.drain:
                    break
                if kind in (NEW_SESSION, SAMPLE):  # draining: no new session, no sample past the window
                    continue
            handlers[kind](at_ms, item)
        return self._close()

    # ------------------------------------------------------------ traffic
    def _new_session(self, now: float, session: Session | None) -> None:
        for at_ms, kind, item in self.traffic.start_session(now, session):
            self.push(at_ms, kind, item)

    def _arrive(self, now: float, req: TurnRequest) -> None:
        r: Route = route(self, req, now)
        pod = self.pods[r.pod]
        req.pod = r.pod
        self._inflight(r.pod, req.prompt)
        in_window = now >= self.start_ms
        if in_window:
            self.stats.routed += 1
            self.stats.routed_prompt_tokens += req.prompt
            self.open[req.rid] = now
        req.done = r.cached
        pod.cache.touch(req.session.sys_key)
        pod.cache.touch(req.session.key)
        delay_ms = 0.0
        if r.source is not None and self.w.engine.pull_computes_on_source:
            self._hand_off(req, r, now, in_window)
            return
        if r.source is not None:
            source = self.pods[r.source]
            source.cache.touch(req.session.key)
            begin = max(now, source.link_free_ms)
            costs, session_ms = self._pull_costs(r.source, r.pod)
            source.link_free_ms = begin + costs.link_ms(r.delta)
            busy = self.costs.busy_queue
            delay_ms = (
                (begin - now)
                + costs.transfer_ms(r.delta)
                + session_ms
                + (self.queues[r.source] >= busy) * self.costs.source_wait_ms
                + (pod.queue() >= busy) * self.costs.requeue_ms
            )
            req.done = r.cached + r.delta
            if in_window:
                self.stats.pulled += 1
                self.stats.tokens_moved += r.delta
        elif r.cached and not pod.cache.on_gpu(r.cached_key):
            delay_ms = r.cached * self.cpu_load_us / 1e3
        if delay_ms > 0:
            pod.pending += 1
            self._queue_changed(pod)
            self.push(now + delay_ms, READY, req)
        else:
            self._join(pod, req, now)

    def _hand_off(self, req: TurnRequest, r: Route, now: float, in_window: bool) -> None:
        """nixl-pd: the source prefills the prompt from its cache (a hold), then the computing pod pulls all of it."""
        if in_window:
            self.stats.pulled += 1
            self.stats.tokens_moved += req.prompt - r.cached
            self.stats.routed_prompt_tokens += req.prompt  # the source prefills it (its hold) and counts it
        req.done = r.cached + r.delta
        # vLLM's NixlConnector reads only the blocks the consumer lacks (a local prefix hit, e.g. the system prompt,
        # stays).
        req.hand_to = (r.pod, req.prompt - r.cached)
        self.pods[r.pod].pending += 1
        self._queue_changed(self.pods[r.pod])
        req.pod = r.source  # type: ignore[assignment]
        self._inflight(r.pod, -req.prompt)
        self._inflight(r.source, req.prompt)  # type: ignore[arg-type]
        self._join(self.pods[r.source], req, now)  # type: ignore[index]

    def _held(self, pod: Pod, req: TurnRequest, now: float) -> None:
        consumer, tokens = req.hand_to  # type: ignore[misc]
        req.hand_to = None
        pod.kv_held -= req.prompt + req.output
        self._inflight(pod.id, -req.prompt)
        self._inflight(consumer, req.prompt)
        req.pod, req.admitted = consumer, False
        req.done = req.prompt - 1  # the consumer computes the last token, as vLLM does after a P/D pull
        target = self.pods[consumer]
        if target.busy:  # vLLM's worker posts the read when the consumer's next step starts (start_load_kv)
            target.to_post.append((req, pod.id, tokens))
        else:
            self._post_read(req, pod.id, tokens, now)

    def _post_read(self, req: TurnRequest, source_id: int, tokens: int, now: float) -> None:
        source = self.pods[source_id]
        begin = max(now, source.link_free_ms)
        costs, session_ms = self._pull_costs(source_id, req.pod)
        source.link_free_ms = begin + costs.link_ms(tokens)
        self.push(begin + costs.transfer_ms(tokens) + session_ms, LANDED, req)

    def _pull_costs(self, source: int, dest: int) -> tuple[FleetCosts, float]:
        """The pull's curve (its pair's link class, else the fit's one) and the session cost of a pair's first pull."""
        if self.links is None:
            return self.costs, 0.0
        return self.link_costs[self.links.class_of[(source, dest)]], self.links.session_ms(source, dest)

    def _landed(self, now: float, req: TurnRequest) -> None:
        """A hand-off's read is done: vLLM learns it at the end of the step in progress and schedules it in the next."""
        pod = self.pods[req.pod]
        if pod.busy:
            pod.landed.append(req)
        else:
            self._ready(now, req)

    def _ready(self, now: float, req: TurnRequest) -> None:
        pod = self.pods[req.pod]
        pod.pending -= 1
        self._join(pod, req, now)

    def _join(self, pod: Pod, req: TurnRequest, now: float) -> None:
        pod.waiting.append(req)
        self._queue_changed(pod)
        if not pod.busy:
            self._start_step(pod, now)

    def _inflight(self, pod: int, tokens: int) -> None:
        self.inflight[pod] += tokens
        self.kv_use[pod] = min(1.0, self.inflight[pod] / self.w.engine.kv_capacity_tokens)

    def _queue_changed(self, pod: Pod) -> None:
        waiting = pod.queue()
        if self.queue_list[pod.id] != waiting:
            self.queue_list[pod.id] = waiting
            self.queues[pod.id] = waiting

    # ------------------------------------------------------------ engines
    def _start_step(self, pod: Pod, now: float) -> None:
        if not pod.waiting:  # decode only: the common step, kept short
            if not pod.decoding:
                pod.busy = False
                return
            pod.busy, pod.finishing = True, []
            if self.start_ms <= now < self.end_ms:
                pod.busy_ms += min(self.decode_ms, self.end_ms - now)
            if self.host is not None:
                self.host.start(pod, now, self.decode_ms)
                return
            self.seq += 1
            heapq.heappush(self.events, (now + self.decode_ms, self.seq, STEP_END, pod))
            return
        budget, seats = self.budget, self.max_seqs - len(pod.decoding)
        work_ms, finishing, prefilling = 0.0, [], 0
        for req in pod.waiting:
            if budget <= 0 or seats <= 0:
                break
            if not req.admitted:  # vLLM admits a request only when its blocks fit; later ones wait behind it
                if pod.kv_held and pod.kv_held + req.prompt + req.output > self.kv_capacity:
                    break
                req.admitted = True
                pod.kv_held += req.prompt + req.output
            take = min(budget, req.prompt - req.done)
            work_ms += self.costs.prefill_ms(req.done, take)
            req.done += take
            budget -= take
            seats -= 1
            if req.done >= req.prompt:
                finishing.append(req)
            else:
                prefilling = 1
                break
        for _ in finishing:
            pod.waiting.popleft()
        pod.prefilling = prefilling
        self._queue_changed(pod)
        if not finishing and not prefilling and not pod.decoding:
            pod.busy = False
            return
        step_ms = self.decode_ms + work_ms
        pod.busy, pod.finishing = True, finishing
        if self.start_ms <= now < self.end_ms:
            pod.busy_ms += min(step_ms, self.end_ms - now)
        if self.host is not None:
            self.host.start(pod, now, step_ms)
        else:
            self.push(now + step_ms, STEP_END, pod)

    def _shared_step_end(self, now: float, item: tuple[Pod, int]) -> None:
        pod, version = item
        if version == pod.step_version:  # else rescheduled since, when another engine started or ended a step
            self.host.finish(pod, now)  # type: ignore[union-attr]
            self._step_end(now, pod)

    def _step_end(self, now: float, pod: Pod) -> None:
        pod.step_no += 1
        for req in pod.finishing:
            self._first_token(pod, req, now)
        pod.finishing = []
        while pod.decoding and pod.decoding[0][0] <= pod.step_no:
            _, _, req = heapq.heappop(pod.decoding)
            self._complete(pod, req, now)
        if pod.to_post:
            posting, pod.to_post = pod.to_post, []
            for req, source, tokens in posting:
                self._post_read(req, source, tokens, now)
        if pod.landed:
            landed, pod.landed = pod.landed, []
            for req in landed:
                pod.pending -= 1
                pod.waiting.append(req)
            self._queue_changed(pod)
        self._start_step(pod, now)

    def _first_token(self, pod: Pod, req: TurnRequest, now: float) -> None:
        session = req.session
        if session.sys_tokens:
            pod.cache.store(session.sys_key, session.sys_tokens, session.sys_tokens)
        pod.cache.store(session.key, req.prompt, max(0, req.prompt - session.sys_tokens))
        if req.hand_to is not None:
            self._held(pod, req, now)
            return
        if req.rid in self.open:
            ttft = now - req.arrival_ms
            self.stats.ttft_ms.append(ttft)
            req.met_slo = self.slo_ms is None or ttft <= self.slo_ms
            del self.open[req.rid]
            req.counted = True
        if req.output <= 1:
            self._complete(pod, req, now)
        else:
            self.seq += 1
            heapq.heappush(pod.decoding, (pod.step_no + req.output - 1, self.seq, req))

    def _complete(self, pod: Pod, req: TurnRequest, now: float) -> None:
        session = req.session
        pod.cache.store(session.key, req.prompt + req.output, max(0, req.prompt + req.output - session.sys_tokens))
        self._inflight(pod.id, -req.prompt)
        pod.kv_held -= req.prompt + req.output
        if req.counted and now >= self.start_ms:
            self.stats.completed += 1
            self.stats.completed_prompt_tokens += req.prompt
            self.stats.met_slo += bool(req.met_slo)
        for at_ms, kind, item in self.traffic.turn_done(now, req):
            self.push(at_ms, kind, item)

    # ------------------------------------------------------------ figures
    def _sample(self, now: float, _: object) -> None:
        self.stats.queue_samples.extend(int(q) for q in self.queues)
        self.push(now + SAMPLE_EVERY_S * 1e3, SAMPLE)

    def _close(self) -> RunStats:
        # A request still waiting for its first token at the end: its TTFT is at least the time it waited.
        self.stats.ttft_ms.extend(self.end_ms - arrival for arrival in self.open.values())
        window_ms = self.end_ms - self.start_ms
        self.stats.busy_share = sum(p.busy_ms for p in self.pods) / (window_ms * len(self.pods))
        return self.stats
