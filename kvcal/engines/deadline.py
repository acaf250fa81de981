"""One total deadline per HTTP request to an engine: connect, request, headers, body.

httpx bounds each socket operation, not a request, so a stream that never ends, one byte
a second, or a response head that trickles would hold kvcal for ever. :class:`Deadline`
is a watchdog (a timer thread) that shuts the request's TCP socket down when the time is
up, which wakes a read or write blocked on it at once; the caller then sees ``expired``.

The watchdog must know the socket before the request is sent. A new connection's is
learnt from httpcore's ``trace`` event as it opens; a kept-alive connection is reused
without one, so every socket a client has opened is remembered (per ``httpx.Client``,
closed ones dropped) and each request's watchdog watches them all (shutting an idle one
down costs nothing: the pool discards it). Without that, the wait for the response head
on a reused connection was bounded only by httpx's per-read timeout: each read up to the
whole deadline, and a head sent a byte at a time not at all.

Each client is used by one thread at a time (kvcal's clients are per engine and purpose,
per thread for background load), so one request's watchdog never shuts a socket that
another request of the same client is using.

:data:`STOP` is the other way a request ends: kvcal's SIGINT/SIGTERM handler
(:func:`kvcal.engines.process.sigterm_raises`) sets it, and every watchdog then shuts its
request down at once (``interrupted``), and a new one ends before it starts. The
handler's KeyboardInterrupt alone is not enough: raised while the main thread runs a
finalizer (a response or generator collected mid-stream), Python prints it and drops it,
and the sweep went on waiting for an endless stream.
"""

from __future__ import annotations

import socket
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

CONNECT_TIMEOUT_S = 5.0
STOP_POLL_S = 0.1  # how soon a watchdog sees STOP (and how long it may outlive its request)
STOP = threading.Event()  # set by kvcal's signal handler: every request ends now (module docstring)

_kept: weakref.WeakKeyDictionary[httpx.Client, list[socket.socket]] = weakref.WeakKeyDictionary()
_kept_lock = threading.Lock()


def _client_sockets(client: httpx.Client) -> list[socket.socket]:
    """The open sockets ``client`` has used (its pool reuses them), closed ones dropped; shared, not a copy."""
    with _kept_lock:
        sockets = _kept.setdefault(client, [])
        sockets[:] = [sock for sock in sockets if sock.fileno() != -1]
        return sockets


class Deadline:
    """A total deadline for one request of ``client``: at ``seconds`` the request's sockets are shut down.

    Send the request with :meth:`stream`. The sockets of the client's kept-alive
    connections (any of them may carry the request) are watched from the start.
    """

    def __init__(self, seconds: float, client: httpx.Client) -> None:
        self.seconds = seconds
        self.expired = False
        self._kept = _client_sockets(client)
        self._sockets: list[socket.socket] = list(self._kept)
        self.interrupted = False  # ended by STOP (a signal), not by the time
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._timer = threading.Thread(target=self._watch, name="kvcal-deadline", daemon=True)
        self._ends_at = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(self._ends_at - time.monotonic(), 0.001)

    def timeout(self) -> httpx.Timeout:
        left = self.remaining()
        return httpx.Timeout(left, connect=min(CONNECT_TIMEOUT_S, left))

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            self.watch(info.get("return_value"))

    def watch(self, stream: Any) -> None:
        sock = stream.get_extra_info("socket") if stream is not None and hasattr(stream, "get_extra_info") else None
        if not isinstance(sock, socket.socket):
            return
        with _kept_lock:
            if sock not in self._kept:
                self._kept.append(sock)
        with self._lock:
            if sock not in self._sockets:
                self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def _watch(self) -> None:
        """Expire at the deadline or as soon as STOP is set, whichever comes first; nothing once the request ended."""
        while not self._done.is_set():
            left = self._ends_at - time.monotonic()
            if STOP.is_set() or left <= 0:
                self.interrupted = STOP.is_set()
                self._expire()
                return
            self._done.wait(min(left, STOP_POLL_S))

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    @contextmanager
    def stream(self, client: httpx.Client, method: str, url: str, **kwargs: Any) -> Iterator[httpx.Response]:
        """``client.stream(method, url)`` under this deadline; the caller maps httpx's errors (``expired`` tells)."""
        with client.stream(method, url, timeout=self.timeout(), extensions={"trace": self.trace}, **kwargs) as response:
            self.watch(response.extensions.get("network_stream"))
            yield response

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed
