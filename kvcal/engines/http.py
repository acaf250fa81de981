"""The HTTP side of one engine: timed completions, models and metrics, on one httpx.Client.

TTFT is measured from just before the request is sent to the first server-sent
``data:`` event that carries a choice (the token). Not to the response headers:
vLLM sends those at once, before any prefill. Prompts go as lists of token ids
(exact lengths, no tokenizer guess) with ``max_tokens: 1``, so the request's time
is the prefill (or the pull) plus one decode step.

One client per engine keeps its connection alive between probes, so a probe pays no
TCP setup and kvcal's own cost stays small (see ``overhead_ms`` in docs/engines.md).
Times are taken with ``time.perf_counter_ns`` and reported in milliseconds.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from kvcal.engines.metrics import Snapshot, parse_metrics
from kvcal.errors import EngineError, InputError

_NS_PER_MS = 1e6


@dataclass(frozen=True)
class StreamTiming:
    """A streamed completion: time to the first token and to the end of the stream."""

    ttft_ms: float
    total_ms: float
    text: str | None


@dataclass(frozen=True)
class Completion:
    """A non-streamed completion and the ``kv_transfer_params`` the engine returned."""

    elapsed_ms: float
    kv_transfer_params: dict[str, Any] | None
    body: dict[str, Any]


def _event(payload: str) -> dict[str, Any] | None:
    """One SSE ``data:`` payload as a JSON object, or None when it is not one."""
    try:
        event = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    return event if isinstance(event, dict) else None


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


class EngineClient:
    """Talks to one OpenAI-compatible vLLM server at ``base_url``."""

    def __init__(
        self,
        base_url: str,
        *,
        name: str,
        request_timeout_s: float = 300.0,
        model: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = name
        self.model = model
        try:
            self._client = httpx.Client(
                base_url=self.base_url, timeout=httpx.Timeout(request_timeout_s, connect=5.0), transport=transport
            )
        except (httpx.InvalidURL, ValueError, TypeError) as err:
            raise InputError(f"{name} URL {base_url!r} is not usable: {err}") from None

    def close(self) -> None:
        self._client.close()

    def _fail(self, what: str, err: Exception | str) -> EngineError:
        return EngineError(f"{self.name} at {self.base_url}: {what}: {_one_line(str(err))}")

    def models(self, timeout_s: float | None = None) -> dict[str, Any]:
        """``GET /v1/models``; EngineError (one line) when unreachable."""
        try:
            response = self._client.get("/v1/models", timeout=timeout_s or httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as err:
            raise self._fail("unreachable", f"{type(err).__name__}: {err}") from None
        if response.status_code != 200:
            raise self._fail("not a vLLM OpenAI server", f"GET /v1/models answered HTTP {response.status_code}")
        try:
            data = response.json()
        except ValueError:
            raise self._fail("not a vLLM OpenAI server", "GET /v1/models did not answer JSON") from None
        if not isinstance(data, dict):
            raise self._fail("not a vLLM OpenAI server", "GET /v1/models did not answer a JSON object")
        return data

    def served_model(self) -> str:
        """The served model name (first of ``/v1/models``), cached after the first call."""
        if self.model is None:
            data = self.models().get("data") or []
            if not data:
                raise self._fail("cannot list models", "the server serves no model")
            if not isinstance(data, list) or not isinstance(data[0], dict) or "id" not in data[0]:
                raise self._fail("not a vLLM OpenAI server", "GET /v1/models answered no model id")
            self.model = str(data[0]["id"])
        return self.model

    def metrics_text(self) -> str:
        try:
            response = self._client.get("/metrics")
        except httpx.HTTPError as err:
            raise self._fail("cannot read /metrics", f"{type(err).__name__}: {err}") from None
        if response.status_code != 200:
            raise self._fail("cannot read /metrics", f"HTTP {response.status_code}")
        return response.text

    def metrics(self) -> Snapshot:
        """Parsed ``/metrics`` (monotonic samples only)."""
        return parse_metrics(self.metrics_text())

    def _body(self, token_ids: list[int], stream: bool, kv_transfer_params: dict[str, Any] | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.served_model(),
            "prompt": token_ids,
            "max_tokens": 1,
            "stream": stream,
        }
        if kv_transfer_params is not None:
            body["kv_transfer_params"] = kv_transfer_params
        return body

    def stream_completion(self, token_ids: list[int], kv_transfer_params: dict[str, Any] | None = None) -> StreamTiming:
        """Stream one completion and time its first token; EngineError if the engine reports an error."""
        body = self._body(token_ids, True, kv_transfer_params)
        first_ns: int | None = None
        text: str | None = None
        start_ns = time.perf_counter_ns()
        try:
            with self._client.stream("POST", "/v1/completions", json=body) as response:
                if response.status_code != 200:
                    response.read()
                    raise self._fail(f"completion failed with HTTP {response.status_code}", response.text)
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    event = _event(payload)
                    if event is None:
                        raise self._fail("completion failed", f"the engine sent a malformed stream event: {payload[:120]!r}")
                    if "error" in event:
                        error = event["error"]
                        raise self._fail("completion failed", error.get("message", error) if isinstance(error, dict) else error)
                    choices = event.get("choices")
                    if first_ns is None and choices:
                        first_ns = time.perf_counter_ns()
                        first = choices[0] if isinstance(choices, list) else None
                        text = first.get("text") if isinstance(first, dict) else None
        except httpx.HTTPError as err:
            raise self._fail("completion request failed", f"{type(err).__name__}: {err}") from None
        end_ns = time.perf_counter_ns()
        if first_ns is None:
            raise self._fail("completion failed", "the stream ended without a token")
        return StreamTiming(ttft_ms=(first_ns - start_ns) / _NS_PER_MS, total_ms=(end_ns - start_ns) / _NS_PER_MS, text=text)

    def complete(self, token_ids: list[int], kv_transfer_params: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> Completion:
        """One non-streamed completion (the producer leg, which needs the response's ``kv_transfer_params``).

        ``headers``: e.g. vLLM's ``X-data-parallel-rank`` to send it to one rank of a data-parallel engine.
        """
        body = self._body(token_ids, False, kv_transfer_params)
        start_ns = time.perf_counter_ns()
        try:
            response = self._client.post("/v1/completions", json=body, headers=headers)
        except httpx.HTTPError as err:
            raise self._fail("completion request failed", f"{type(err).__name__}: {err}") from None
        elapsed_ms = (time.perf_counter_ns() - start_ns) / _NS_PER_MS
        if response.status_code != 200:
            raise self._fail(f"completion failed with HTTP {response.status_code}", response.text)
        try:
            data = response.json()
        except ValueError:
            raise self._fail("completion failed", f"the engine answered no JSON: {response.text[:120]!r}") from None
        if not isinstance(data, dict):
            raise self._fail("completion failed", "the engine answered JSON that is not an object")
        return Completion(elapsed_ms=elapsed_ms, kv_transfer_params=data.get("kv_transfer_params"), body=data)
