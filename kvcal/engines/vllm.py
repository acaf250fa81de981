"""The real engine pair: two vLLM servers, launched by kvcal or attached to, joined by a transport.

Launch mode starts producer and consumer concurrently as planned by
:class:`~kvcal.engines.vllm_launch.LaunchPlan` (own cores or GPUs each, same
``PYTHONHASHSEED``, caches inside kvcal's cache folder), each owned by a
:class:`~kvcal.engines.process.ServerProcess`. Attach mode talks to two running
servers by URL and launches nothing; block size and max model length are then read
from the engines (``vllm:cache_config_info``, ``/v1/models``).

One leg (:meth:`VllmPair.measure`):

- recompute: the fresh prompt goes straight to the consumer, which prefills it;
- pull: the producer is sent the prompt first so it holds the prefix (its time is
  ``producer_ttft_ms``), then the consumer request that pulls it is timed.

``/metrics`` is read before and after (consumer always; producer on pull legs and
where the transport counts bytes there); ``bytes_moved`` is the delta of the
transport's byte counter and ``metrics_delta`` every counter that changed, keyed
``consumer/<sample>`` or ``producer/<sample>``. ``overhead_ms`` is the leg's wall
time minus the engine times it reports (consumer TTFT, plus producer time on pull
legs): kvcal's metric scrapes and settling, request building and the stream's tail.

Before each leg, launched CPU engines are paced: kvcal waits (poll, 5 s at most) until
both servers' process trees are idle, because vLLM keeps spinning for about a second
after every request and that tail would land on the next leg's cores. The wait is
not part of the leg's ``overhead_ms``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kvcal.engines.base import EnginePair, LegMeasurement
from kvcal.engines.http import EngineClient
from kvcal.engines.metrics import Snapshot, delta, first_exposed, info_labels, poll_until, total
from kvcal.engines.process import ServerProcess, sigterm_raises, wait_all_ready, wait_until_idle
from kvcal.engines.vllm_launch import ROLES, LaunchPlan, VllmSettings, default_cache_dir, looks_local, settings_from_config
from kvcal.engines.vllm_setup import vllm_setup
from kvcal.errors import EngineError, InputError
from kvcal.estimate.hfconfig import model_profile_from_config
from kvcal.estimate.profiles import ModelProfile, kv_bytes_per_token
from kvcal.records import Leg, RunSetup
from kvcal.engines.tinymodel import ensure_tiny_model
from kvcal.engines.transports import get_transport
from kvcal.engines.transports.base import MetricRef, Role
from kvcal.sweep.config import SweepConfig
from kvcal.sweep.recorder import RunFolder

log = logging.getLogger(__name__)

__all__ = ["VllmPair", "VllmSettings", "pair_from_config"]

_REQUESTS_DONE = "vllm:request_success_total"
# Two idle vLLM engines use ~0.05-0.15 cores; one spinning queue reader is a full core.
_CPU_IDLE_MAX_CORES = 0.3


class VllmPair(EnginePair):
    """A vLLM producer/consumer pair behind :class:`EnginePair` (``--engine vllm``)."""

    name = "vllm"

    def __init__(self, settings: VllmSettings | None = None) -> None:
        self.settings = s = settings or VllmSettings()
        if (s.producer_url is None) != (s.consumer_url is None):
            raise InputError("attach mode needs both --producer-url and --consumer-url")
        if s.block_size <= 0 or (s.max_model_len is not None and s.max_model_len <= 0):
            raise InputError("block size and max model length must be positive")
        self.transport = get_transport(s.transport, s.transport_options)
        self.cache_dir = Path(s.cache_dir or default_cache_dir()).expanduser()
        self.run_dir = Path(s.run_dir) if s.run_dir else self.cache_dir / "runs"
        self.plan = LaunchPlan(s, self.transport, self.cache_dir, self.run_dir)
        self._profile: ModelProfile | None = None
        self._profile_read = False
        self._engine_facts: dict[str, Any] = {}
        self._clients: dict[Role, EngineClient] = {}
        self._servers: list[ServerProcess] = []
        # The settled reading that ended the previous leg, per engine: on engines kvcal
        # launched nothing else runs between legs, so it is also the next leg's "before"
        # and saves one /metrics scrape (about 10 ms on a busy CPU engine) per engine per leg.
        self._last_reading: dict[Role, Snapshot] = {}
        self._stack: contextlib.ExitStack | None = None
        if s.model is not None and not s.attach and looks_local(s.model):
            folder = Path(s.model).expanduser()
            if not (folder / "config.json").is_file():
                raise InputError(f"model folder {folder} not found or has no config.json")

    # -- what the pair is -------------------------------------------------------------

    def _model_profile(self) -> ModelProfile | None:
        """The model's layout from its config.json (local folder, tiny model, or the local HF cache); None if unreadable."""
        if not self._profile_read:
            self._profile_read = True
            model = self._engine_facts.get("root") or self.plan.model_path()
            if self.settings.model is None and not self.settings.attach:
                ensure_tiny_model(self.cache_dir / "models")
            config: Path | None = Path(model) / "config.json"
            if not config.is_file():
                config = None
                with contextlib.suppress(Exception):  # hub id: only what is cached here, never a download
                    from huggingface_hub import try_to_load_from_cache

                    cached = try_to_load_from_cache(model, "config.json")
                    config = Path(cached) if isinstance(cached, str) else None
            if config is not None:
                try:
                    self._profile = model_profile_from_config(config)
                except InputError as err:
                    log.warning("cannot read the KV layout of %s: %s", model, err)
        return self._profile

    @property
    def block_size(self) -> int:
        return int(self._engine_facts.get("block_size") or self.settings.block_size)

    @property
    def max_model_len(self) -> int:
        value = self._engine_facts.get("max_model_len") or self.plan.max_model_len()
        if value is None and self._model_profile() is not None:
            value = self._model_profile().max_position_embeddings
        if value is None:
            raise EngineError("max model length unknown before the engines start; pass --max-model-len")
        return int(value)

    @property
    def vocab_size(self) -> int:
        if self.settings.vocab_size:
            return self.settings.vocab_size
        profile = self._model_profile()
        if profile is None:
            raise InputError(f"cannot read the vocabulary size of {self.plan.model_path()}: no readable config.json")
        return profile.vocab_size

    @property
    def kv_bytes_per_token(self) -> int | None:
        profile = self._model_profile()
        return kv_bytes_per_token(profile) if profile else None

    def dry_run_commands(self) -> list[str]:
        return [] if self.settings.attach else self.plan.commands()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        if self._stack is not None:
            return
        self._stack = contextlib.ExitStack()
        self._servers = []
        try:
            self._stack.enter_context(sigterm_raises())
            if self.settings.attach:
                self._attach()
            else:
                self._launch()
        except BaseException:
            self.stop()
            raise

    def _launch(self) -> None:
        plan = self.plan
        self.transport.check_host(plan.device == "cuda")  # before anything is launched
        if self.settings.model is None:
            ensure_tiny_model(self.cache_dir / "models")
        for folder in (self.cache_dir / "vllm", self.cache_dir / "inductor", self.cache_dir / "tmp", plan.rpc_dir):
            folder.mkdir(parents=True, exist_ok=True)
        assert self._stack is not None
        self._stack.callback(shutil.rmtree, plan.rpc_dir, ignore_errors=True)
        ports = plan.ports()
        for role in ROLES:
            server = ServerProcess(
                role.value,
                plan.argv(role),
                env={**os.environ, **plan.env(role)},
                log_path=self.run_dir / "logs" / f"{role.value}.log",
                ready_url=f"http://{self.settings.host}:{ports[f'{role.value}_http']}/health",
                ports=[ports[f"{role.value}_http"], ports[f"{role.value}_side"]],
            )
            self._stack.callback(server.stop)
            self._servers.append(server)
            server.start()  # both start before either is awaited: they compile concurrently
        wait_all_ready(self._servers, self.settings.startup_timeout_s)
        for role in ROLES:
            url = f"http://{self.settings.host}:{ports[f'{role.value}_http']}"
            self._clients[role] = EngineClient(url, name=role.value, request_timeout_s=self.settings.request_timeout_s)
            self._stack.callback(self._clients[role].close)
        self._read_engine_facts()

    def _attach(self) -> None:
        s = self.settings
        if self.transport.pull_names_producer and not (s.producer_p2p_host and s.producer_p2p_port):
            raise InputError(
                f"attaching over {self.transport.name} needs the producer's side channel: --producer-p2p-host/--producer-p2p-port"
            )
        assert self._stack is not None and s.producer_url and s.consumer_url
        for role, url in ((Role.PRODUCER, s.producer_url), (Role.CONSUMER, s.consumer_url)):
            self._clients[role] = EngineClient(url, name=role.value, request_timeout_s=s.request_timeout_s)
            self._stack.callback(self._clients[role].close)
        self._read_engine_facts()

    def _read_engine_facts(self) -> None:
        """Max model length and model root from ``/v1/models``, block size from ``vllm:cache_config_info``."""
        facts: dict[str, Any] = {}
        for role in ROLES:
            entry = (self._clients[role].models(timeout_s=10.0).get("data") or [{}])[0]
            self._clients[role].model = entry.get("id")
            labels = info_labels(self._clients[role].metrics_text(), "vllm:cache_config_info") or {}
            if role is Role.CONSUMER:
                facts = {"max_model_len": entry.get("max_model_len"), "root": entry.get("root")}
                if str(labels.get("block_size", "")).isdigit():
                    facts["block_size"] = int(labels["block_size"])
        self._engine_facts = facts
        self._profile_read = False  # the engines may name a different model folder than the settings

    def stop(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
        self._clients = {}

    # -- measuring ----------------------------------------------------------------------

    def _client(self, role: Role) -> EngineClient:
        if role not in self._clients:
            raise EngineError("the vLLM pair is not started")
        return self._clients[role]

    def _settled_after(self, role: Role, before: Snapshot, requests: int) -> Snapshot:
        """Read ``role``'s metrics until its finished-request counter shows ``requests`` more.

        vLLM publishes a request's stats, its KV-transfer stats included, with the
        request's final output, so once the request is counted its bytes are too.
        """
        def done(snap: Snapshot) -> bool:
            return total(snap, _REQUESTS_DONE) - total(before, _REQUESTS_DONE) >= requests

        snap, settled = poll_until(self._client(role).metrics, done, timeout_s=self.settings.settle_timeout_s)
        if not settled:
            log.warning("%s metrics did not count the request within %.1f s", role.value, self.settings.settle_timeout_s)
        return snap

    def _reading_before(self, role: Role) -> Snapshot:
        """The counters before a leg: the previous leg's settled reading on engines kvcal owns."""
        # Popped, not read: a leg that fails part-way leaves no reading, so the next leg scrapes afresh.
        reading = self._last_reading.pop(role, None)
        if self._servers and reading is not None:
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
        if not self._servers or max_cores <= 0:
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
            held = self._client(Role.PRODUCER).complete(token_ids, self.transport.hold_params(kv_request_id))
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
                lambda: {role: self._settled_after(role, before[role], int(role in served)) for role in scraped}
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

    def _bytes_moved(self, before: dict[Role, Snapshot], after: dict[Role, Snapshot]) -> int | None:
        """Sum over the transport's byte counters of their deltas; None if the engine exposes none."""
        moved: float | None = None
        for metric in self.transport.bytes_metrics:
            name = first_exposed(after[metric.role], tuple(r.name for r in metric.candidates))
            ref = next((r for r in metric.candidates if r.name == name), None)
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

    # -- provenance ---------------------------------------------------------------------

    def setup(self) -> RunSetup:
        """Launch: everything kvcal chose (seed, kv-transfer-config per role, versions); attach: what the engines report."""
        return vllm_setup(self.settings, self.transport, self.plan, block_size=self.block_size,
                          kv_bytes_per_token=self.kv_bytes_per_token)

    def describe(self) -> dict[str, Any]:
        """The pair's own provenance; versions, CPU, GPUs and UCX_* env are in :func:`kvcal.sweep.provenance.host_provenance`."""
        launch = not self.settings.attach
        roles = ROLES
        return {
            "engine": "vllm",
            "mode": "launch" if launch else "attach",
            "transport": self.transport.name,
            "model": self._engine_facts.get("root") or self.plan.model_path(),
            "random_weights": self.settings.model is None or self.settings.load_format == "dummy",
            "device": self.plan.device if launch else None,
            "block_size": self.block_size,
            "max_model_len": self._engine_facts.get("max_model_len") or self.plan.max_model_len(),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_transfer_config": {r.value: self.transport.kv_transfer_config(r, self.plan.device, self.plan.side(r)) for r in roles}
            if launch
            else None,
            "env": {r.value: self.plan.env(r) for r in roles} if launch else None,
            "commands": self.dry_run_commands(),
            "urls": {r.value: c.base_url for r, c in self._clients.items()},
            "startup_s": {srv.name: srv.ready_after_s for srv in self._servers},
        }


def pair_from_config(config: SweepConfig, run: RunFolder) -> VllmPair:
    """The pair ``kvcal sweep`` asks for: settings from the sweep config, server logs in the run folder."""
    return VllmPair(settings_from_config(config, run_dir=run.path))


def _ref_total(snapshot: Snapshot, ref: MetricRef) -> float:
    return total(snapshot, ref.name, **dict(ref.labels))
