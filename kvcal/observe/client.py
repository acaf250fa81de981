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
- a body over :data:`BODY_CAP` is refused before it lands in memory (exit 2: narrow the
  selector or the window);
- an answer that is not the API's JSON envelope (a web page, garbage, a 404) means the URL
  is not a Prometheus API: :class:`~kvcal.errors.InputError` (exit 2); so is a query the
  server refuses as bad data (HTTP 400/422 with ``errorType``); its other errors
  (timeouts, overload, HTTP 5xx) are the server's: exit 4.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvcal.engines.deadline import Deadline
from kvcal.errors import InputError, KvcalError, one_line
from kvcal.urls import parse_engine_url

QUERY_DEADLINE_S = 15.0
"""One query, connect to last byte. A range over a 15-minute window answers in milliseconds."""
TOTAL_DEADLINE_S = 60.0
"""Every query of one ``kvcal observe`` together; the run ends within it (plus start-up)."""
BODY_CAP = 64 << 20
"""Bytes read at most per answer: raw samples of a day at a 15 s scrape for a few hundred series."""
ERROR_CAP = 64 << 10


class PrometheusUnavailable(KvcalError, exit_code=4):
    """The server could not be reached, or did not answer within its deadline, or failed on its side."""


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    status: Literal["success", "error"]
    data: dict | None = None
    errorType: str | None = None
    error: str | None = None


class _MatrixData(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    resultType: Literal["matrix", "vector", "scalar", "string"]
    result: list | tuple = Field(max_length=1_000_000)


class _RawSeries(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    metric: dict[str, str]
    values: list[tuple[float, str]] = Field(default_factory=list)


@dataclass(frozen=True)
class Series:
    """One time series as Prometheus stored it: its labels and its raw samples (unix seconds, value), in time order."""

    labels: dict[str, str]
    samples: tuple[tuple[float, float], ...]


def _json(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except (RecursionError, UnicodeDecodeError, ValueError):
        raise ValueError("not JSON") from None


def _sample(pair: tuple[float, str]) -> tuple[float, float] | None:
    """A sample, or None for a stale marker or a value that is no number (Prometheus sends values as strings)."""
    try:
        value = float(pair[1])
    except ValueError:
        return None
    return (float(pair[0]), value) if math.isfinite(value) and math.isfinite(pair[0]) else None


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
        self.query_deadline_s = query_deadline_s
        self._ends_at = time.monotonic() + total_deadline_s
        self._total_s = total_deadline_s
        try:
            self._client = httpx.Client(base_url=self.base_url, transport=transport)
        except (httpx.InvalidURL, ValueError, TypeError) as err:
            raise InputError(f"--prometheus {base_url!r} is not usable: {err}") from None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unavailable(self, what: str) -> PrometheusUnavailable:
        return PrometheusUnavailable(f"Prometheus at {self.base_url}: {what}")

    def _not_prometheus(self, what: str) -> InputError:
        return InputError(
            f"--prometheus {self.base_url} is not a Prometheus API: {one_line(what, 200)} "
            "(give the server's base URL, e.g. http://prometheus:9090)"
        )

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
                            raise InputError(
                                f"Prometheus at {self.base_url} answered more than {cap:,} bytes for "
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
                raise self._unavailable(
                    f"the request failed ({type(err).__name__}: {one_line(str(err), 200)})"
                ) from None
            if deadline.expired:
                raise self._unavailable(f"no answer within {left:.3g} s (the server hangs or is overloaded)")
        return response.status_code, bytes(body)

    def _data(self, query: str, at: float) -> _MatrixData:
        status, body = self._fetch({"query": query, "time": f"{at:.3f}"})
        try:
            envelope = _Envelope.model_validate(_json(body))
        except ValueError:
            if status >= 500:
                raise self._unavailable(f"HTTP {status}: {one_line(body.decode('utf-8', 'replace'), 200)}") from None
            raise self._not_prometheus(
                f"GET /api/v1/query answered HTTP {status} with {body[:80].decode('utf-8', 'replace')!r}"
            ) from None
        if envelope.status == "error":
            message = f"{envelope.errorType}: {envelope.error}"
            if envelope.errorType == "bad_data" or status in (400, 422):
                raise InputError(f"Prometheus at {self.base_url} refused {one_line(query, 160)}: {one_line(message)}")
            raise self._unavailable(f"the query failed on the server ({one_line(message)})")
        try:
            return _MatrixData.model_validate(envelope.data)
        except ValidationError:
            raise self._not_prometheus("its answer has the envelope but no result data") from None

    def check(self, at: float) -> None:
        """One trivial query: a server that is not Prometheus, or does not answer, is told apart before any work."""
        data = self._data("vector(1)", at)
        if data.resultType != "vector":
            raise self._not_prometheus(f"vector(1) came back as {data.resultType}")

    def raw_samples(self, selector: str, start: float, end: float) -> list[Series]:
        """Every raw sample of the series ``selector`` names in (start, end]: ``selector[range]`` at ``end``."""
        seconds = max(1, math.ceil(end - start))
        data = self._data(f"{selector}[{seconds}s]", end)
        if data.resultType != "matrix":
            raise self._not_prometheus(f"a range selector came back as {data.resultType}, not a matrix")
        out = []
        for item in data.result:
            try:
                raw = _RawSeries.model_validate(item)
            except ValidationError as err:
                raise self._not_prometheus(f"a series it sent is malformed ({one_line(str(err), 120)})") from None
            samples = tuple(s for s in map(_sample, raw.values) if s is not None)
            out.append(Series(raw.metric, tuple(sorted(samples))))
        return out
