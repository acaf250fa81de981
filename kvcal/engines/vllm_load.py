"""A real vLLM engine as the target of background load (load states, kvcal.sweep.load).

Each stream thread gets its own HTTP client (one keep-alive connection each); a
background request streams ``max_tokens`` tokens with ``ignore_eos`` so its length is
fixed, and returns early when the stream's stop event is set. :meth:`close` closes
every client, which ends a request still in flight (the engine aborts a request
whose connection is gone), so stopping the streams never waits for a long prefill.
The waiting queue is the ``vllm:num_requests_waiting`` gauge of ``/metrics``, read like every
engine reply (kvcal.engines.http): under a total deadline, capped, its value bounded.
A background request has the probe timeout as its total deadline too.
"""

from __future__ import annotations

import threading

import httpx

from kvcal.engines.base import LoadTarget, Role
from kvcal.engines.deadline import Deadline
from kvcal.engines.http import CAPS, EngineClient
from kvcal.engines.metrics import gauge_total
from kvcal.errors import EngineError
from kvcal.records.run import MAX_QUEUE
from kvcal.transports.base import Role as TransportRole

WAITING = "vllm:num_requests_waiting"


class UnderLoad:
    """What a :class:`kvcal.engines.vllm.VllmPair` does under background load (mixed into it)."""

    _loaded: bool
    _last_reading: dict

    def load_target(self, role: Role) -> VllmLoadTarget:
        client = self._client(TransportRole(role))  # type: ignore[attr-defined]
        timeout_s = self.settings.probe_timeout_s  # type: ignore[attr-defined]
        return VllmLoadTarget(role, client.base_url, client.served_model(), timeout_s)

    def on_load_change(self, loaded: bool) -> None:
        # No pacing while loaded, and each leg's "before" is scraped afresh (others move the counters).
        self._loaded, self._last_reading = loaded, {}


class VllmLoadTarget(LoadTarget):
    def __init__(self, role: Role, base_url: str, model: str, request_timeout_s: float = 300.0) -> None:
        self.role = role
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.request_timeout_s = request_timeout_s
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        self._lock = threading.Lock()
        self._closed = False
        self._metrics = EngineClient(self.base_url, name=role, model=model)

    def _client(self) -> httpx.Client:
        client = getattr(self._local, "client", None)
        if client is None:
            with self._lock:
                if self._closed:
                    raise EngineError(f"{self.role} load target is closed")
                client = httpx.Client(base_url=self.base_url)
                self._clients.append(client)
            self._local.client = client
        return client

    def waiting_requests(self) -> int | None:
        value = gauge_total(self._metrics.metrics_text(), WAITING)
        if value is not None and not 0 <= value <= MAX_QUEUE:
            raise self._metrics.fail("GET /metrics sent an impossible queue", f"{WAITING} = {value:.4g}")
        return None if value is None else int(round(value))

    def serve_background(self, token_ids: list[int], max_tokens: int, stop: threading.Event) -> None:
        body = {"model": self.model, "prompt": token_ids, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
        client = self._client()
        read = 0
        try:
            with (
                Deadline(self.request_timeout_s, client) as deadline,
                deadline.stream(client, "POST", "/v1/completions", json=body) as response,
            ):
                if response.status_code != 200:
                    sent = next(response.iter_bytes(CAPS["error"]), b"")
                    raise self._metrics.fail(
                        f"background request failed with HTTP {response.status_code}",
                        sent[:200].decode("utf-8", "replace"),
                    )
                for chunk in response.iter_bytes():
                    read += len(chunk)
                    if stop.is_set():
                        return
                    if b'"error"' in chunk or read > CAPS["completion"]:
                        raise self._metrics.fail("background request failed", chunk[:200].decode("utf-8", "replace"))
        except httpx.HTTPError as err:
            if stop.is_set():
                return
            late = "ran past the probe timeout: " if deadline.expired else ""
            raise self._metrics.fail("background request failed", f"{late}{type(err).__name__}: {err}") from None

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
