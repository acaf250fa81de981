"""A real vLLM engine as the target of background load (load states, kvcal.sweep.load).

Each stream thread gets its own HTTP client (one keep-alive connection each); a
background request streams ``max_tokens`` tokens with ``ignore_eos`` so its length is
fixed, and returns early when the stream's stop event is set. :meth:`close` closes
every client, which ends a request still in flight (the engine aborts a request
whose connection is gone), so stopping the streams never waits for a long prefill.
The waiting queue is the ``vllm:num_requests_waiting`` gauge of ``/metrics``.
"""

from __future__ import annotations

import json
import threading

import httpx

from kvcal.engines.base import LoadTarget, Role
from kvcal.engines.metrics import gauge_total
from kvcal.engines.transports.base import Role as TransportRole
from kvcal.errors import EngineError

WAITING = "vllm:num_requests_waiting"


class UnderLoad:
    """What a :class:`kvcal.engines.vllm.VllmPair` does under background load (mixed into it)."""

    _loaded: bool
    _last_reading: dict

    def load_target(self, role: Role) -> "VllmLoadTarget":
        client = self._client(TransportRole(role))  # type: ignore[attr-defined]
        return VllmLoadTarget(role, client.base_url, client.served_model(), self.settings.request_timeout_s)  # type: ignore[attr-defined]

    def on_load_change(self, loaded: bool) -> None:
        # No pacing while loaded, and each leg's "before" is scraped afresh (others move the counters).
        self._loaded, self._last_reading = loaded, {}


class VllmLoadTarget(LoadTarget):
    def __init__(self, role: Role, base_url: str, model: str, request_timeout_s: float = 300.0) -> None:
        self.role = role
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = httpx.Timeout(request_timeout_s, connect=5.0)
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        self._lock = threading.Lock()
        self._closed = False
        self._metrics = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(10.0, connect=5.0))

    def _client(self) -> httpx.Client:
        client = getattr(self._local, "client", None)
        if client is None:
            with self._lock:
                if self._closed:
                    raise EngineError(f"{self.role} load target is closed")
                client = httpx.Client(base_url=self.base_url, timeout=self.timeout)
                self._clients.append(client)
            self._local.client = client
        return client

    def waiting_requests(self) -> int | None:
        try:
            response = self._metrics.get("/metrics")
        except httpx.HTTPError as err:
            raise EngineError(f"{self.role} at {self.base_url}: cannot read /metrics: {type(err).__name__}: {err}") from None
        value = gauge_total(response.text, WAITING) if response.status_code == 200 else None
        return None if value is None else int(round(value))

    def serve_background(self, token_ids: list[int], max_tokens: int, stop: threading.Event) -> None:
        body = {"model": self.model, "prompt": token_ids, "max_tokens": max_tokens, "stream": True,
                "ignore_eos": True}
        try:
            with self._client().stream("POST", "/v1/completions", json=body) as response:
                if response.status_code != 200:
                    response.read()
                    raise EngineError(f"{self.role} at {self.base_url}: background request failed with HTTP "
                                      f"{response.status_code}: {response.text[:200]}")
                for line in response.iter_lines():
                    if stop.is_set():
                        return
                    if line.startswith("data:") and "error" in line and line[5:].strip() != "[DONE]":
                        event = json.loads(line[5:])
                        if "error" in event:
                            raise EngineError(f"{self.role}: background request failed: {event['error']}")
        except httpx.HTTPError as err:
            if stop.is_set():
                return
            raise EngineError(f"{self.role} at {self.base_url}: background request failed: {type(err).__name__}: {err}") from None

    def abort(self) -> None:
        # A request still queued behind others streams nothing for seconds; closing its
        # connection ends it at once (and vLLM aborts it). Threads open a new client next time.
        with self._lock:
            clients, self._clients = self._clients, []
            self._local = threading.local()
        for client in clients:
            client.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.abort()
        self._metrics.close()
