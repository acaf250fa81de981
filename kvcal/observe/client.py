"""A thin, bounded client for the Prometheus HTTP API (``/api/v1/query``): every answer typed, timed and capped.

Why not ``prometheus-api-client``: it reads through ``requests`` with per-read timeouts
only (a server that sends a byte a second holds it for ever), reads bodies whole with no
cap, hands back untyped dicts, and brings pandas, matplotlib and dateparser with it.
kvcal already bounds every engine request with httpx and a total deadline
(:mod:`kvcal.engines.deadline`); the same few lines serve Prometheus' one endpoint here
(docs/architecture.md, "Libraries and why").

What a server sends is input:

- a request has a total deadline (connect to last byte, :data:`QUERY_DEADLINE_S`) and all
  of them share one budget (:data:`TOTAL_DEADLINE_S`); a server that hangs or is too slow
  is :class:`PrometheusUnavailable` (exit 4), as is one that cannot be reached;
- a long window is asked for in spans (one ``selector[span]`` query each, :func:`spans`),
  each span's length set from the bytes the last answer held, so that one answer stays near
  :data:`TARGET_BYTES`: the memory an answer takes to decode is bounded whatever the window,
  and a month of scrapes is no single answer of gigabytes; the run's budget grows with the
  window (:func:`query_budget`);
- a body over :data:`BODY_CAP` is never read whole: the span is cut to a quarter and asked
  again, down to :data:`MIN_SPAN_S`, where it is refused (exit 2: narrow the selector);
  so are more than :data:`~kvcal.observe.samples.MAX_SAMPLES` samples in all;
- every number in an answer is checked as it enters (:mod:`kvcal.observe.samples`);
- an answer that is not the API's JSON envelope (a web page, garbage, a 404) means the URL
  is not a Prometheus API: :class:`~kvcal.errors.InputError` (exit 2); so is a query the
  server refuses as bad data (HTTP 400/422 with ``errorType``); its other errors
  (timeouts, overload, HTTP 5xx) are the server's: exit 4;
- a server that answers with bytes that are not HTTP (no status line: another protocol on
  that port, an HTTP/0.9 body) is not a Prometheus API either: exit 2, as for a web page;
  retrying would not help, the URL is wrong. One that closes without a byte is exit 4.
  httpx says "disconnected without sending a response" for both, so a raw connection
  reads the first bytes again to tell them apart (:func:`_first_bytes`).

Answers are decoded with msgspec into typed records in one pass: about four times faster
than ``json`` plus validation, which is most of a long window's cost (docs/architecture.md,
"Libraries and why"). Messages show the URL redacted and the server's text escaped.
"""

from __future__ import annotations

import math
import socket
import time
from typing import Annotated, Literal
from urllib.parse import urlsplit

import httpx
import msgspec
import numpy as np

from kvcal.engines.deadline import Deadline
from kvcal.errors import InputError, KvcalError, one_line
from kvcal.observe.samples import MAX_SAMPLES, Series, checked, describe, merged
from kvcal.redact import redact_url
from kvcal.urls import parse_engine_url

__all__ = ["PrometheusClient", "PrometheusUnavailable", "Series", "query_budget", "spans"]

QUERY_DEADLINE_S = 15.0
"""One query, connect to last byte. A range over a 15-minute window answers in milliseconds."""
TOTAL_DEADLINE_S = 60.0
"""Every query of one ``kvcal observe`` over a window of up to a day together; the run ends within it."""
DEADLINE_PER_DAY_S = 20.0
"""What each further day of the window adds to the run's budget (benchmarks/observe_month.py: a pod-day of
raw samples is about 0.3 s of kvcal's time and of a fast server's)."""
BODY_CAP = 64 << 20
"""Bytes read at most per answer."""
TARGET_BYTES = 8 << 20
"""What a span's answer aims at: its decoding holds a few times this in memory."""
FIRST_SPAN_S = 6 * 3600.0
MIN_SPAN_S = 300.0
ERROR_CAP = 64 << 10


class PrometheusUnavailable(KvcalError, exit_code=4):
    """The server could not be reached, or did not answer within its deadline, or failed on its side."""


class _TooLarge(InputError):
    """An answer past :data:`BODY_CAP`: the span is cut and asked again, or refused."""


class _Item(msgspec.Struct, frozen=True):
    metric: dict[str, str]
    values: list[tuple[float, str]] = []
    value: tuple[float, str] | None = None


class _Data(msgspec.Struct, frozen=True):
    resultType: Literal["matrix", "vector", "scalar", "string"]
    result: Annotated[list[_Item], msgspec.Meta(max_length=1_000_000)] = []


class _Envelope(msgspec.Struct, frozen=True):
    status: Literal["success", "error"]
    data: _Data | None = None
    errorType: str | None = None
    error: str | None = None


def query_budget(window_s: float) -> float:
    """The run's budget for every query over a window of ``window_s`` seconds (module docstring)."""
    return TOTAL_DEADLINE_S + DEADLINE_PER_DAY_S * max(0.0, math.ceil(window_s / 86_400.0) - 1)


def spans(start: float, end: float, span: float) -> tuple[float, float]:
    """The next span to ask for, from ``start``: (its start, its end), at most ``span`` long and ending by ``end``."""
    return start, min(end, start + max(span, MIN_SPAN_S))


def _first_bytes(url: str, path: str, timeout_s: float) -> bytes | None:
    """What a plain-HTTP server sends first for ``GET path`` on a raw connection (None: it could not be asked)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        return None
    host = parts.hostname
    request = f"GET {parts.path.rstrip('/')}{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    try:
        with socket.create_connection((host, parts.port or 80), timeout=timeout_s) as sock:
            sock.sendall(request.encode("ascii", "replace"))
            return sock.recv(256)
    except (OSError, UnicodeError):
        return None


class PrometheusClient:
    """Queries one Prometheus server at ``base_url`` (a path prefix such as ``/prometheus`` kept)."""

    def __init__(
        self,
        base_url: str,
        *,
        transport: httpx.BaseTransport | None = None,
        total_deadline_s: float = TOTAL_DEADLINE_S,
        query_deadline_s: float = QUERY_DEADLINE_S,
    ) -> None:
        parse_engine_url(base_url, "--prometheus")
        self.base_url = base_url.rstrip("/")
        self.shown_url = redact_url(self.base_url)
        self.query_deadline_s = query_deadline_s
        self._ends_at = time.monotonic() + total_deadline_s
        self._total_s = total_deadline_s
        self._held = 0
        try:
            self._client = httpx.Client(base_url=self.base_url, transport=transport)
        except (httpx.InvalidURL, ValueError, TypeError) as err:
            raise InputError(f"--prometheus {self.shown_url!r} is not usable: {one_line(str(err), 200)}") from None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unavailable(self, what: str) -> PrometheusUnavailable:
        return PrometheusUnavailable(f"Prometheus at {self.shown_url}: {what}")

    def _not_prometheus(self, what: str) -> InputError:
        return InputError(
            f"--prometheus {self.shown_url} is not a Prometheus API: {one_line(what, 200)} "
            "(give the server's base URL, e.g. http://prometheus:9090)"
        )

    def _protocol_error(self, err: httpx.RemoteProtocolError, left: float) -> KvcalError:
        """A server that broke HTTP: bytes that are no HTTP answer are exit 2, a closed connection exit 4."""
        text = str(err)
        if "without sending a response" in text:
            first = _first_bytes(self.base_url, "/api/v1/query?query=vector(1)", max(0.1, min(left, 5.0)))
            if not first:
                return self._unavailable(
                    "the request failed: the connection closed without a byte (the server reset it)"
                )
            if not first.startswith(b"HTTP/"):
                return self._not_prometheus(f"it answered {first[:40]!r}, which is no HTTP status line")
        elif "illegal status line" in text or "illegal request line" in text:
            return self._not_prometheus(f"its answer is not HTTP ({text})")
        return self._unavailable(f"the request failed (RemoteProtocolError: {one_line(text, 200)})")

    def _fetch(self, params: dict[str, str]) -> tuple[int, bytes]:
        """GET /api/v1/query under the deadline left; the status and the capped body."""
        left = min(self.query_deadline_s, self._ends_at - time.monotonic())
        if left <= 0:
            raise self._unavailable(f"the queries ran past their {self._total_s:g} s budget")
        with Deadline(left, self._client) as deadline:
            try:
                with deadline.stream(self._client, "GET", "/api/v1/query", params=params) as response:
                    cap = BODY_CAP if response.status_code == 200 else ERROR_CAP
                    body = bytearray()
                    for chunk in response.iter_bytes():
                        body += chunk
                        if len(body) > cap and response.status_code == 200:
                            raise _TooLarge(
                                f"Prometheus at {self.shown_url} answered more than {cap:,} bytes for "
                                f"{one_line(params['query'], 120)}: narrow --selector or the window"
                            )
                        if len(body) > cap or deadline.expired:
                            break
            except httpx.HTTPError as err:
                if isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout)):
                    raise self._unavailable(f"unreachable ({type(err).__name__}: {one_line(str(err), 200)})") from None
                if deadline.expired or isinstance(err, httpx.TimeoutException):
                    raise self._unavailable(
                        f"no answer within {left:.3g} s (the server hangs or is overloaded)"
                    ) from None
                if isinstance(err, httpx.RemoteProtocolError):
                    raise self._protocol_error(err, self._ends_at - time.monotonic()) from None
                raise self._unavailable(
                    f"the request failed ({type(err).__name__}: {one_line(str(err), 200)})"
                ) from None
            if deadline.expired:
                raise self._unavailable(f"no answer within {left:.3g} s (the server hangs or is overloaded)")
        return response.status_code, bytes(body)

    def _data(self, query: str, at: float) -> tuple[_Data, int]:
        """The answer's data and the bytes it took."""
        status, body = self._fetch({"query": query, "time": f"{at:.3f}"})
        try:
            envelope = msgspec.json.decode(body, type=_Envelope)
        except (msgspec.DecodeError, RecursionError) as err:
            if status >= 500:
                raise self._unavailable(f"HTTP {status}: {one_line(body.decode('utf-8', 'replace'), 200)}") from None
            shape = f" ({err})" if isinstance(err, msgspec.ValidationError) else ""
            raise self._not_prometheus(
                f"GET /api/v1/query answered HTTP {status} with {body[:80].decode('utf-8', 'replace')!r}{shape}"
            ) from None
        if envelope.status == "error":
            message = f"{envelope.errorType}: {envelope.error}"
            if envelope.errorType == "bad_data" or status in (400, 422):
                raise InputError(f"Prometheus at {self.shown_url} refused {one_line(query, 160)}: {one_line(message)}")
            raise self._unavailable(f"the query failed on the server ({one_line(message)})")
        if envelope.data is None:
            raise self._not_prometheus("its answer has the envelope but no result data")
        return envelope.data, len(body)

    def check(self, at: float) -> None:
        """One trivial query: a server that is not Prometheus, or does not answer, is told apart before any work."""
        data, _ = self._data("vector(1)", at)
        if data.resultType != "vector":
            raise self._not_prometheus(f"vector(1) came back as {data.resultType}")

    def _series(self, item: _Item) -> Series:
        """One series of an answer as checked arrays (kvcal/observe/samples.py)."""
        pairs = item.values
        times = np.fromiter((p[0] for p in pairs), np.float64, len(pairs))
        try:
            values = np.array([p[1] for p in pairs], dtype=np.float64) if pairs else np.empty(0)
        except ValueError:
            at, text = next(p for p in pairs if not _is_number(p[1]))
            raise InputError(
                f"Prometheus at {self.shown_url} sent {one_line(repr(text), 60)} at {at:.3f} for "
                f"{describe(item.metric)}: a sample's value must be a number"
            ) from None
        return checked(f"Prometheus at {self.shown_url}", item.metric, times, values)

    def _span(self, selector: str, start: float, end: float) -> tuple[list[Series], int]:
        """Every raw sample in (start, end] of the series ``selector`` names (``selector[range]`` at ``end``)."""
        data, size = self._data(f"{selector}[{max(1, math.ceil(end - start))}s]", end)
        if data.resultType != "matrix":
            raise self._not_prometheus(f"a range selector came back as {data.resultType}, not a matrix")
        return [self._series(item) for item in data.result], size

    def raw_samples(self, selector: str, start: float, end: float) -> list[Series]:
        """Every raw sample of the series ``selector`` names in (start, end], asked for span by span
        (module docstring), each series' pieces joined in time order."""
        pieces: dict[tuple, list[Series]] = {}
        span, at = FIRST_SPAN_S, start
        while at < end:
            low, high = spans(at, end, span)
            try:
                found, size = self._span(selector, low, high)
            except _TooLarge:
                if high - low <= MIN_SPAN_S:
                    raise
                span = (high - low) / 4
                continue
            for series in found:
                pieces.setdefault(tuple(sorted(series.labels.items())), []).append(series)
                self._held += len(series)
            if self._held > MAX_SAMPLES:
                raise InputError(
                    f"Prometheus at {self.shown_url} holds more than {MAX_SAMPLES:,} raw samples for the window: "
                    "narrow --selector or the window"
                )
            at = high
            span = (high - low) * min(4.0, max(0.25, TARGET_BYTES / max(size, 1)))
        return [merged(parts[0].labels, parts) for parts in pieces.values()]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
