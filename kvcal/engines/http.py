"""The HTTP side of one engine: timed completions, models and metrics, each bounded in time and size.

TTFT is measured from just before the request is sent to the first server-sent
``data:`` event that carries a choice (the token). Not to the response headers:
vLLM sends those at once, before any prefill. Prompts go as lists of token ids
(exact lengths, no tokenizer guess) with ``max_tokens: 1``, so the request's time
is the prefill (or the pull) plus one decode step.

One client per engine keeps its connection alive between probes, so a probe pays no
TCP setup and kvcal's own cost stays small (see ``overhead_ms`` in docs/engines.md).
``/metrics`` has a client of its own (it is read from a scrape thread while a
completion streams). Times are taken with ``time.perf_counter_ns`` and reported in ms.

What an engine sends is input (docs/engines.md, "When an engine misbehaves"):

- every request has a **total** deadline, connect to last byte, not a per-read one:
  httpx's timeouts apply to each read, so a stream that never ends, or one byte a
  second, would hold kvcal for ever. A watchdog (:mod:`kvcal.engines.deadline`) shuts the
  request's socket down when the deadline passes (a blocked read or write returns at once,
  on a new connection or a kept-alive one) and the request fails naming it;
- every body read is capped (:data:`CAPS`); a larger one fails, never lands in memory;
- JSON is parsed with its depth error caught and checked against typed models, and a
  ``/metrics`` page the Prometheus parser refuses is the engine's error.

Each failure is an :class:`~kvcal.errors.EngineError` of one line naming the engine, its
URL and what it sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvcal.engines.deadline import STOP, Deadline
from kvcal.engines.metrics import MetricsPageError, Snapshot, parse_metrics
from kvcal.errors import EngineError, InputError, one_line
from kvcal.records.run import MAX_TOKENS

_NS_PER_MS = 1e6
METRICS_DEADLINE_S = 10.0
"""A /metrics page is a few hundred kB served in milliseconds; ten seconds is a sick engine."""
MODELS_DEADLINE_S = 10.0
CAPS = {"models": 1 << 20, "metrics": 16 << 20, "completion": 16 << 20, "stream": 4 << 20, "error": 64 << 10}
"""Bytes kvcal reads at most per response: /v1/models, /metrics (vLLM's is ~0.3 MB), a
non-streamed completion (its ``kv_transfer_params`` name every block: ~0.6 MB at 1M
tokens), a one-token stream (~1 kB), and an error body."""


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


class ServedModel(BaseModel):
    """One entry of ``GET /v1/models`` as vLLM serves it (other keys ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    id: str = Field(min_length=1, max_length=4096)
    root: str | None = Field(None, max_length=4096)
    max_model_len: int | None = Field(None, gt=0, le=MAX_TOKENS)


class ModelList(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    data: list[ServedModel] = Field(max_length=10_000)


def _json(raw: bytes) -> Any:
    """Parsed JSON; ValueError for text that is not JSON or nests too deep to parse."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None
    except UnicodeDecodeError:
        raise ValueError("bytes that are not UTF-8") from None


def _event(payload: bytes) -> dict[str, Any] | None:
    """One SSE ``data:`` payload as a JSON object, or None when it is not one."""
    try:
        event = _json(payload)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


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
        self.request_timeout_s = request_timeout_s
        try:
            self._client = httpx.Client(base_url=self.base_url, transport=transport)
            self._metrics_client = httpx.Client(base_url=self.base_url, transport=transport)
        except (httpx.InvalidURL, ValueError, TypeError) as err:
            raise InputError(f"{name} URL {base_url!r} is not usable: {err}") from None

    def close(self) -> None:
        self._client.close()
        self._metrics_client.close()

    def fail(self, what: str, err: Exception | str) -> EngineError:
        """One-line EngineError naming this engine, its URL, what failed and what it sent."""
        return EngineError(f"{self.name} at {self.base_url}: {what}: {one_line(str(err))}")

    @contextmanager
    def _request(
        self, method: str, path: str, deadline_s: float, *, metrics: bool = False, **kwargs: Any
    ) -> Iterator[tuple[httpx.Response, Deadline]]:
        """One request under a total deadline; httpx and deadline failures become one-line EngineErrors."""
        client = self._metrics_client if metrics else self._client
        what = f"{method} {path}"
        with Deadline(deadline_s, client) as deadline:
            try:
                _stop_if_signalled()
                with deadline.stream(client, method, path, **kwargs) as response:
                    yield response, deadline
            except httpx.HTTPError as err:
                _stop_if_signalled()
                if isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout)):
                    raise self.fail(f"unreachable ({what})", f"{type(err).__name__}: {err}") from None
                if deadline.expired or isinstance(err, httpx.TimeoutException):  # a read's timeout is what was left
                    raise self.fail(
                        f"{what} ran past its {deadline_s:g} s deadline", "the engine did not finish its answer in time"
                    ) from None
                raise self.fail(f"{what} failed", f"{type(err).__name__}: {err}") from None
            _stop_if_signalled()
            if deadline.expired:  # the socket was shut while the body ended cleanly
                raise self.fail(
                    f"{what} ran past its {deadline_s:g} s deadline", "the engine did not finish its answer in time"
                )

    def _read(self, response: httpx.Response, deadline: Deadline, what: str, cap: int) -> bytes:
        """The body, at most ``cap`` bytes (more is the engine's error), within the deadline."""
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > cap:
                raise self.fail(f"{what} answered too much", f"more than {cap:,} bytes (kvcal reads at most that)")
            if deadline.expired:
                break
        return bytes(body)

    def _get(self, path: str, deadline_s: float, cap: int, *, metrics: bool = False) -> bytes:
        with self._request("GET", path, deadline_s, metrics=metrics) as (response, deadline):
            body = self._read(response, deadline, f"GET {path}", cap if response.status_code == 200 else CAPS["error"])
            if response.status_code != 200:
                raise self.fail(f"GET {path} answered HTTP {response.status_code}", body.decode("utf-8", "replace"))
        return body

    def models(self, timeout_s: float | None = None) -> ModelList:
        """``GET /v1/models``, typed; EngineError (one line) when unreachable or not a vLLM OpenAI server."""
        raw = self._get("/v1/models", min(timeout_s or MODELS_DEADLINE_S, MODELS_DEADLINE_S), CAPS["models"])
        try:
            return ModelList.model_validate(_json(raw))
        except ValueError as err:  # pydantic's ValidationError is a ValueError
            raise self.fail("not a vLLM OpenAI server: GET /v1/models sent", _shown(raw, err)) from None

    def served_model(self) -> str:
        """The served model name (first of ``/v1/models``), cached after the first call."""
        if self.model is None:
            data = self.models().data
            if not data:
                raise self.fail("cannot list models", "the server serves no model")
            self.model = data[0].id
        return self.model

    def metrics_text(self, timeout_s: float = METRICS_DEADLINE_S) -> str:
        """The ``/metrics`` page (capped, under its own short deadline)."""
        raw = self._get("/metrics", min(timeout_s, METRICS_DEADLINE_S), CAPS["metrics"], metrics=True)
        return raw.decode("utf-8", "replace")

    def metrics(self) -> Snapshot:
        """Parsed ``/metrics`` (monotonic samples only)."""
        try:
            return parse_metrics(self.metrics_text())
        except MetricsPageError as err:
            raise self.fail("GET /metrics sent a page that is not Prometheus text", err) from None

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
        """Stream one completion and time its first token; EngineError if the engine reports an error or overruns."""
        body = self._body(token_ids, True, kv_transfer_params)
        first_ns: int | None = None
        text: str | None = None
        start_ns = time.perf_counter_ns()
        with self._request("POST", "/v1/completions", self.request_timeout_s, json=body) as (response, deadline):
            if response.status_code != 200:
                sent = self._read(response, deadline, "POST /v1/completions", CAPS["error"])
                raise self.fail(f"completion failed with HTTP {response.status_code}", sent.decode("utf-8", "replace"))
            for payload in self._events(response, deadline):
                if payload == b"[DONE]":
                    break
                event = _event(payload)
                if event is None:
                    raise self.fail("completion failed", f"the engine sent a malformed stream event: {payload[:120]!r}")
                if "error" in event:
                    error = event["error"]
                    raise self.fail(
                        "completion failed", error.get("message", error) if isinstance(error, dict) else error
                    )
                choices = event.get("choices")
                if first_ns is None and choices:
                    first_ns = time.perf_counter_ns()
                    first = choices[0] if isinstance(choices, list) else None
                    text = first.get("text") if isinstance(first, dict) else None
                    text = text if isinstance(text, str) else None
        end_ns = time.perf_counter_ns()
        if first_ns is None:
            raise self.fail("completion failed", "the stream ended without a token")
        return StreamTiming(
            ttft_ms=(first_ns - start_ns) / _NS_PER_MS, total_ms=(end_ns - start_ns) / _NS_PER_MS, text=text
        )

    def _events(self, response: httpx.Response, deadline: Deadline) -> Iterator[bytes]:
        """The ``data:`` payloads of an SSE stream, split here so that no line or stream outgrows its cap."""
        cap = CAPS["stream"]
        read = 0
        pending = b""
        for chunk in response.iter_bytes():
            read += len(chunk)
            if read > cap:
                raise self.fail(
                    "the completion stream ran on",
                    f"more than {cap:,} bytes for one token (kvcal reads at most that); last: {chunk[-120:]!r}",
                )
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                if line.startswith(b"data:"):
                    yield line[5:].strip()
            if deadline.expired:
                return
        if pending.startswith(b"data:"):
            yield pending[5:].strip()

    def complete(
        self,
        token_ids: list[int],
        kv_transfer_params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Completion:
        """One non-streamed completion (the producer leg, which needs the response's ``kv_transfer_params``).

        ``headers``: e.g. vLLM's ``X-data-parallel-rank`` to send it to one rank of a data-parallel engine.
        """
        body = self._body(token_ids, False, kv_transfer_params)
        start_ns = time.perf_counter_ns()
        with self._request("POST", "/v1/completions", self.request_timeout_s, json=body, headers=headers) as (
            response,
            deadline,
        ):
            ok = response.status_code == 200
            raw = self._read(response, deadline, "POST /v1/completions", CAPS["completion"] if ok else CAPS["error"])
        elapsed_ms = (time.perf_counter_ns() - start_ns) / _NS_PER_MS
        if not ok:
            raise self.fail(f"completion failed with HTTP {response.status_code}", raw.decode("utf-8", "replace"))
        try:
            data = _json(raw)
        except ValueError as err:
            raise self.fail("completion failed", f"the engine answered no JSON ({err}): {raw[:120]!r}") from None
        if not isinstance(data, dict):
            raise self.fail("completion failed", "the engine answered JSON that is not an object")
        params = data.get("kv_transfer_params")
        if params is not None and not isinstance(params, dict):
            raise self.fail("completion failed", f"kv_transfer_params is not an object: {str(params)[:120]!r}")
        return Completion(elapsed_ms=elapsed_ms, kv_transfer_params=params, body=data)


def _shown(raw: bytes, err: Exception) -> str:
    """What an engine sent and why kvcal refuses it, short enough for one line."""
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "the answer"
        return f"{where}: {first.get('msg', 'invalid')} ({raw[:120]!r})"
    return f"{err} ({raw[:120]!r})"


def _stop_if_signalled() -> None:
    """KeyboardInterrupt once kvcal's signal handler set STOP (kvcal/engines/deadline.py): a request it cut short
    is the signal's doing, not the engine's error to retry."""
    if STOP.is_set():
        raise KeyboardInterrupt("stopped by a signal")
