"""A fake Prometheus HTTP API on loopback for kvcal observe's tests: a small fleet, and servers that misbehave.

The first path segment of a request picks the behaviour (``http://127.0.0.1:PORT/<mode>``
as the base URL): none serves the fleet below; ``old`` the same fleet as an older vLLM
exposes it (no source split, no TTFT histogram); ``garbage``, ``html``, ``notfound``,
``huge``, ``hang``, ``trickle``, ``reset``, ``unavailable``, ``bad_data`` misbehave as named;
the hostile modes of tests/hostile_prometheus.py send hostile text, numbers or bytes.

The fleet, one scrape every :data:`STEP` seconds around the server's start (``anchor``),
each scrape adding (prompt tokens by source, per pod):

- ``pod-a`` (label ``pod``), P2P tier: 60 computed, 25 local hits, 15 external of which
  10 from a peer (``cached_by_source{source="p2p"}``), 10 x 2048 bytes read from the
  ``1:p2p`` tier; queue 2;
- ``pod-b`` (label ``pod``), NIXL P/D: 70 computed, 10 local, 20 pulled, 20 x 2048 NIXL
  bytes; it restarts :data:`RESTART_BEFORE_S` before the anchor (its counters begin again at 0); queue 4;
- ``127.0.0.1:9103`` (no ``pod`` label, so its instance), no P2P: 90 computed, 10 local,
  0 external, no bytes counters nor ``cached_by_source``; queue 0; its names spelt ``vllm_...``, as
  prometheus_client 0.26's OpenMetrics output has Prometheus store them.

Each scrape of each pod adds 4 TTFT observations (2 at most 0.1 s, one in (0.1, 0.25],
one in (0.25, 0.5]) and 4 successful requests.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from hostile_prometheus import RAW_MODES, SERIES_MODES, raw_answer, value_text, variant

STEP = 15.0
RESTART_BEFORE_S = 300.0
SPAN_S = 1800.0  # scrapes from this long before the anchor ...
AHEAD_S = 900.0  # ... to this long after it
BUCKETS = ((0.1, 2), (0.25, 3), (0.5, 4), (float("inf"), 4))

PODS = {
    "pod-a": {"labels": {"pod": "pod-a", "instance": "10.0.0.1:8200"}, "computed": 60, "local": 25, "external": 15,
              "p2p": 10, "tier_bytes": 10 * 2048, "queue": 2},
    "pod-b": {"labels": {"pod": "pod-b", "instance": "10.0.0.2:8200"}, "computed": 70, "local": 10, "external": 20,
              "p2p": 0, "nixl_bytes": 20 * 2048, "queue": 4, "restarts": True},
    "127.0.0.1:9103": {"labels": {"instance": "127.0.0.1:9103"}, "computed": 90, "local": 10, "external": 0,
                       "queue": 0, "underscored": True},
}


def _counter_value(pod: dict, per_scrape: float, k: int, k_restart: int) -> float:
    """The counter at scrape ``k``: ``per_scrape`` each scrape, from 0 again after the restart when the pod restarts."""
    if pod.get("restarts") and k >= k_restart:
        return per_scrape * (k - k_restart + 1)
    return per_scrape * (k + 1000)  # a long-running process: far from zero


def fleet_series(anchor: float, old: bool = False) -> list[tuple[dict, list[tuple[float, float]]]]:
    """Every series of the fleet: (labels with __name__, samples)."""
    first = int(-SPAN_S // STEP)
    ks = list(range(first, int(AHEAD_S // STEP) + 1))
    k_restart = int(-RESTART_BEFORE_S // STEP)
    out = []

    def add(name: str, pod: dict, extra: dict, per_scrape: float, gauge: bool = False) -> None:
        name = name.replace(":", "_") if pod.get("underscored") else name
        labels = {"__name__": name, "job": "vllm", "engine": "0", "model_name": "m", **pod["labels"], **extra}
        samples = [(anchor + k * STEP, per_scrape if gauge else _counter_value(pod, per_scrape, k, k_restart))
                   for k in ks]
        out.append((labels, samples))

    for pod in PODS.values():
        add("vllm:prompt_tokens_total", pod, {}, pod["computed"] + pod["local"] + pod["external"])
        add("vllm:num_requests_waiting", pod, {}, pod["queue"], gauge=True)
        add("vllm:request_success_total", pod, {"finished_reason": "length"}, 4)
        if old:
            continue
        for source, key in (("local_compute", "computed"), ("local_cache_hit", "local"),
                            ("external_kv_transfer", "external")):
            add("vllm:prompt_tokens_by_source_total", pod, {"source": source}, pod[key])
        if "p2p" in pod:
            add("vllm:prompt_tokens_cached_by_source_total", pod, {"source": "p2p"}, pod["p2p"])
        if "tier_bytes" in pod:
            add("vllm:kv_offload_tiering_read_bytes_total", pod, {"tier": "1:p2p"}, pod["tier_bytes"])
            add("vllm:kv_offload_tiering_read_bytes_total", pod, {"tier": "0:primary"}, 999)
        if "nixl_bytes" in pod:
            add("vllm:nixl_bytes_transferred_sum", pod, {}, pod["nixl_bytes"])
        for le, count in BUCKETS:
            add("vllm:time_to_first_token_seconds_bucket", pod, {"le": "+Inf" if le == float("inf") else str(le)},
                count)
    return out


_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_QUERY = re.compile(r"^(\{.*\})\[(\d+)s\]$")


def _matches(labels: dict, matchers: list[tuple[str, str, str]]) -> bool:
    for name, op, value in matchers:
        have = labels.get(name, "")
        ok = {"=": have == value, "!=": have != value, "=~": re.fullmatch(value, have) is not None,
              "!~": re.fullmatch(value, have) is None}[op]
        if not ok:
            return False
    return True


def answer(series: list, query: str, at: float) -> dict:
    """The API's answer to ``query`` at ``at``: ``vector(1)`` or ``{__name__=~"...",matchers}[Ns]``."""
    if query == "vector(1)":
        return {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [at, "1"]}]}}
    found = _QUERY.match(query)
    if not found:
        return {"status": "error", "errorType": "bad_data", "error": f"fake cannot parse {query}"}
    braces, seconds = found.group(1), float(found.group(2))
    matchers = _MATCHER.findall(braces)
    result = []
    for labels, samples in series:
        if _matches(labels, matchers):
            kept = [[t, value_text(v)] for t, v in samples if at - seconds < t <= at]
            if kept:
                result.append({"metric": labels, "values": kept})
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = urlsplit(self.path)
        mode = parts.path.split("/")[1] if parts.path.count("/") > 3 else ""
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        server: FakePrometheus = self.server.owner  # type: ignore[attr-defined]
        try:
            self._serve(mode, params, server)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _serve(self, mode: str, params: dict, server: "FakePrometheus") -> None:
        if mode == "garbage":
            return self._send(200, b"\x00\xffnot json at all{{{")
        if mode == "html":
            return self._send(200, b"<html><body>Grafana</body></html>", "text/html")
        if mode == "notfound" or not self.path.split("?")[0].endswith("/api/v1/query"):
            return self._send(404, b"404 page not found", "text/plain")
        if mode == "unavailable":
            body = {"status": "error", "errorType": "unavailable", "error": "overloaded"}
            return self._send(503, json.dumps(body).encode())
        if mode == "bad_data":
            body = {"status": "error", "errorType": "bad_data", "error": "parse error"}
            return self._send(400, json.dumps(body).encode())
        if mode == "reset":
            self.connection.shutdown(2)
            return None
        if mode in ("hang", "trickle", "huge"):
            return self._misbehave(mode, server)
        if mode in RAW_MODES:
            status, raw = raw_answer(mode)
            if status is None:  # bytes without an HTTP status line, then the connection closes
                self.wfile.write(raw)
                self.close_connection = True
                return None
            return self._send(status, raw)
        at = float(params.get("time", time.time()))
        series = server.old_series if mode == "old" else server.series
        if mode in SERIES_MODES:
            series = variant(series, mode)
        body = answer(series, params.get("query", ""), at)
        return self._send(200, json.dumps(body).encode())

    def _misbehave(self, mode: str, server: "FakePrometheus") -> None:
        if mode == "hang":
            server.stop_event.wait(120)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if mode == "trickle":  # a byte a second: each read is quick, the whole answer never ends
            for _ in range(120):
                if server.stop_event.wait(1.0):
                    return
                self.wfile.write(b" ")
                self.wfile.flush()
            return
        self.wfile.write(b'{"status":"success","data":{"resultType":"matrix","result":[')
        chunk = b'{"metric":{"__name__":"x"},"values":[[1,"1"]]},' * 2000
        for _ in range(100_000):  # far past the cap
            self.wfile.write(chunk)


class FakePrometheus:
    """The server on 127.0.0.1 (a free port), in a daemon thread; ``url(mode)`` is the base URL for a behaviour."""

    def __init__(self, fleet=None) -> None:
        """``fleet(anchor)``: the series to serve instead of :func:`fleet_series`' (tests/fake_costs_fleet.py)."""
        self.anchor = time.time()
        self.series = (fleet or fleet_series)(self.anchor)
        self.old_series = fleet_series(self.anchor, old=True)
        self.stop_event = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def url(self, mode: str = "") -> str:
        return f"http://127.0.0.1:{self.port}" + (f"/{mode}" if mode else "")

    def close(self) -> None:
        self.stop_event.set()
        self.httpd.shutdown()
        self.httpd.server_close()


_shared: FakePrometheus | None = None


def shared() -> FakePrometheus:
    """One server per test process (the CLI corpus' base invocation uses it)."""
    global _shared
    if _shared is None:
        _shared = FakePrometheus()
    return _shared
