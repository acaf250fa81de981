"""Loopback fake vLLM engines that misbehave on demand (the fault suite, tests/unit/engines/test_engine_faults.py).

A real engine cannot be made to stream for ever or count NaN bytes, so these stand in:
one small threaded HTTP server per engine, on a free loopback port, serving
``/v1/models``, ``/metrics`` and ``/v1/completions`` the way vLLM does, except for the
one fault it is told to show. :data:`FAULTS` lists them. :class:`SlowHead` is a raw
socket server for what ``http.server`` cannot do: a response head that never ends.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FAULTS = (
    "endless-stream",      # a completion stream whose events never end
    "byte-a-second",       # a completion stream that sends one byte a second
    "trickling-body",      # a non-streamed completion whose body comes a byte at a time
    "huge-metrics",        # a 100 MB /metrics page
    "models-wrong-types",  # /v1/models: max_model_len "lots"
    "models-root-list",    # /v1/models: root ["x"]
    "models-data-string",  # /v1/models: data "m"
    "models-deep-json",    # /v1/models: 100,000-deep JSON
    "completion-deep-json",  # a non-streamed completion of 100,000-deep JSON
    "garbage-metrics",     # /metrics that is not Prometheus text
    "nan-counter",         # the byte counter reads NaN
    "inf-counter",         # the byte counter reads +Inf
    "negative-counter",    # the byte counter reads below zero
    "huge-counter",        # the byte counter jumps by 2.6e295
    "long-label-counter",  # the byte counter's sample carries a 2,000-character label
)
DEEP = b"[" * 100_000 + b"]" * 100_000
KV_BYTES_PER_TOKEN = 64


class FakeEngine:
    """One engine: ``fault`` None behaves; otherwise that fault of :data:`FAULTS`."""

    def __init__(self, role: str, fault: str | None = None, *, root: Path | str | None = None, block_size: int = 16,
                 cache_dtype: str = "auto") -> None:
        self.role = role
        self.fault = fault
        self.root = str(root) if root else "fake-model"
        self.block_size, self.cache_dtype = block_size, cache_dtype  # what vllm:cache_config_info reports
        self.done = 0
        self.bytes_read = 0.0
        self.streams = 0  # completion streams begun
        self.stop = threading.Event()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                engine.get(self)

            def do_POST(self) -> None:
                engine.post(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeEngine":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()

    # -- replies ------------------------------------------------------------------------

    def _send(self, h: BaseHTTPRequestHandler, body: bytes, content_type: str = "application/json") -> None:
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _models(self) -> bytes:
        entry: dict = {"id": "fake", "root": self.root, "max_model_len": 4096}
        if self.fault == "models-wrong-types":
            entry["max_model_len"] = "lots"
        elif self.fault == "models-root-list":
            entry["root"] = ["x"]
        elif self.fault == "models-data-string":
            return json.dumps({"data": "m"}).encode()
        elif self.fault == "models-deep-json":
            return DEEP
        return json.dumps({"object": "list", "data": [entry]}).encode()

    def _metrics(self) -> bytes:
        if self.fault == "garbage-metrics":
            return b"vllm:request_success_total{engine=\"0\" 1 2 3\n\x00\x01{{{\n"
        read = {"nan-counter": "NaN", "inf-counter": "+Inf"}.get(self.fault or "", repr(self.bytes_read))
        if self.fault == "negative-counter":
            read = repr(self.bytes_read - 1e12)
        return ("# TYPE vllm:request_success_total counter\n"
                f'vllm:request_success_total{{engine="0"}} {self.done}\n'
                "# TYPE vllm:cache_config_info gauge\n"
                f'vllm:cache_config_info{{block_size="{self.block_size}",cache_dtype="{self.cache_dtype}",engine="0"}} 1.0\n'
                "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
                "# TYPE vllm:nixl_bytes_transferred histogram\n"
                f"vllm:nixl_bytes_transferred_sum{self._labels()} {read}\n"
                f"vllm:nixl_bytes_transferred_count {self.done}\n").encode()

    def _labels(self) -> str:
        return '{shard="' + "x" * 2000 + '"}' if self.fault == "long-label-counter" else ""

    def get(self, h: BaseHTTPRequestHandler) -> None:
        if h.path == "/v1/models":
            self._send(h, self._models())
        elif h.path == "/metrics" and self.fault == "huge-metrics":
            self._stream(h, (b"# " + b"x" * 1022 + b"\n" for _ in range(100 * 1024)), "text/plain")
        elif h.path == "/metrics":
            self._send(h, self._metrics(), "text/plain")
        else:
            h.send_response(404)
            h.send_header("Content-Length", "0")
            h.end_headers()

    def post(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        n = len(body["prompt"])
        if body.get("stream"):
            self._completion_stream(h, body, n)
            return
        if self.fault == "trickling-body":
            self._trickle(h, b'{"choices": [{"text": "x"}]}', delay_s=0.3)
            return
        if self.fault == "completion-deep-json":
            self._send(h, DEEP)
            return
        self.done += 1
        params = {"remote_block_ids": [1], "remote_engine_id": "p", "do_remote_prefill": True}
        self._send(h, json.dumps({"choices": [{"text": "x"}], "kv_transfer_params": params}).encode())

    def _completion_stream(self, h: BaseHTTPRequestHandler, body: dict, n: int) -> None:
        event = b'data: {"choices": [{"text": "x"}]}\n\n'
        self.streams += 1
        if self.fault == "endless-stream":
            self._stream(h, (event for _ in iter(int, 1)), "text/event-stream", delay_s=0.01)
            return
        if self.fault == "byte-a-second":
            self._trickle(h, event * 1000, delay_s=1.0, chunked=True)
            return
        self.done += 1
        if body.get("kv_transfer_params"):
            self.bytes_read += n * KV_BYTES_PER_TOKEN
            if self.fault == "huge-counter":
                self.bytes_read += 2.6e295
        self._stream(h, iter([event, b"data: [DONE]\n\n"]), "text/event-stream")

    def _stream(self, h: BaseHTTPRequestHandler, chunks, content_type: str, delay_s: float = 0.0) -> None:
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        try:
            for chunk in chunks:
                if self.stop.is_set():
                    return
                h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                if delay_s:
                    time.sleep(delay_s)
            h.wfile.write(b"0\r\n\r\n")
        except OSError:
            return  # the client hung up: what kvcal does at its deadline

    def _trickle(self, h: BaseHTTPRequestHandler, body: bytes, delay_s: float, chunked: bool = False) -> None:
        if chunked:
            self._stream(h, (body[i:i + 1] for i in range(len(body))), "text/event-stream", delay_s=delay_s)
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body) * 1000))
        h.end_headers()
        try:
            for i in range(len(body) * 1000):
                if self.stop.is_set():
                    return
                h.wfile.write(body[i % len(body):i % len(body) + 1])
                h.wfile.flush()
                time.sleep(delay_s)
        except OSError:
            return


class SlowHead:
    """A loopback HTTP/1.1 server: the first ``answered`` requests of a connection get a JSON answer at once
    (the connection kept alive), the next one a response head sent a byte every ``every_s`` (``head_bytes`` of
    it, a head that never ends, then the connection is closed), or with ``every_s`` None no answer at all.

    ``sent_all`` is set once a whole head went out: a client bounded by one deadline hangs up long before.
    ``connections`` counts the connections accepted.
    """

    ANSWER = b'{"choices": [{"text": "x"}]}'

    def __init__(self, answered: int = 0, every_s: float | None = 0.05, head_bytes: int = 400) -> None:
        self.answered = answered
        self.every_s = every_s
        self.head_bytes = head_bytes
        self.connections = 0
        self.sent_all = threading.Event()
        self.stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> "SlowHead":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_request(conn: socket.socket, pending: bytes) -> bytes | None:
        """The bytes after one whole request (head and Content-Length body), or None when the client left."""
        while b"\r\n\r\n" not in pending:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            pending += chunk
        head, _, rest = pending.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            rest += chunk
        return rest[length:]

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                pending: bytes | None = b""
                for _ in range(self.answered):
                    pending = self._read_request(conn, pending or b"")
                    if pending is None:
                        return
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(self.ANSWER), self.ANSWER))
                if self._read_request(conn, pending or b"") is None:
                    return
                if self.every_s is None:
                    self.stop.wait()
                    return
                head = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * self.head_bytes
                for i in range(self.head_bytes):
                    if self.stop.is_set():
                        return
                    conn.sendall(head[i:i + 1])
                    time.sleep(self.every_s)
                self.sent_all.set()
            except OSError:
                return  # the client hung up: what kvcal does at its deadline
