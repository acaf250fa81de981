"""Own the server processes kvcal launches, so none can outlive the run.

:class:`ServerProcess` is a context manager around one server: it checks the port is
free, starts the command in a new session (its own process group) with output going
to a log file, registers the group with the reaper (:mod:`kvcal.engines.reaper`, for
a SIGKILLed kvcal), polls readiness over HTTP while failing fast if the child died,
and on exit, error, Ctrl-C or SIGTERM kills the whole tree (SIGTERM to the group and every
descendant psutil finds, then SIGKILL to whatever is left after a grace period).
Descendants are collected by psutil as well as by process group because vLLM's
engine core and workers are spawned children that a group kill alone would miss if
any of them ever moved to a session of its own.

:func:`sigterm_raises` turns SIGTERM into an exception in the main thread, so ``with``
blocks unwind and kill their servers when kvcal itself is terminated.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType

import httpx
import psutil

from kvcal.engines.deadline import STOP, Deadline
from kvcal.engines.reaper import shared_reaper
from kvcal.errors import EngineError

log = logging.getLogger(__name__)

_LOG_TAIL_LINES = 6
_LOG_TAIL_CHARS = 600
_POLL_INTERVAL_S = 0.5
HEALTH_PROBE_S = 2.0
"""One readiness probe at most: a ready server answers /health in milliseconds; the start deadline bounds them all."""
FATAL_LOG_SIGNS = ("address already in use",)
"""Log text (lower case) that means a starting server will never be ready although its process lives on.

vLLM binds its NIXL handshake listener in a thread: when that bind fails the thread
dies, the engine keeps running, and /health never answers.
"""


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While active, SIGTERM and SIGINT raise KeyboardInterrupt so context managers unwind, and set STOP.

    STOP (kvcal/engines/deadline.py) ends every engine request at once, the one blocked
    now and any later one: should the KeyboardInterrupt be lost (raised inside a
    finalizer, Python prints and drops it), the sweep still stops within a watchdog's
    poll instead of reading an endless stream until the probe deadline.
    Installed only where nobody handles the signal yet (a caller's handler is left in
    place; an ignored SIGINT, a background job's, stays ignored) and only in the main
    thread (Python lets no other thread set handlers).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: FrameType | None) -> None:
        STOP.set()  # first: the KeyboardInterrupt below may be dropped
        raise KeyboardInterrupt(f"signal {signum}")

    defaults = ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler))
    previous = {
        signum: signal.signal(signum, _raise) for signum, default in defaults if signal.getsignal(signum) == default
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if previous:
            STOP.clear()  # the run has unwound; a later one in this process starts afresh


def port_is_free(port: int, host: str = "0.0.0.0") -> bool:
    """True if a TCP socket can bind ``host:port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def check_port_free(port: int, what: str, host: str = "0.0.0.0") -> None:
    """Raise EngineError naming ``what`` if ``port`` is taken."""
    if not port_is_free(port, host):
        raise EngineError(f"port {port} for the {what} is already in use: stop what holds it or choose another port")


_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_FIXED_PORTS_FROM = 20000
"""Ports kvcal picks start here: above most services' registered ports, below Linux's ephemeral range."""
_PORT_TRIES = 200


def _ephemeral_floor() -> int | None:
    """The lowest port the kernel hands to outgoing connections, or None where that is not readable (not Linux)."""
    try:
        return int(_EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free now, outside the kernel's ephemeral range where it can tell.

    Why outside it: a vLLM engine binds its NIXL side channel minutes after kvcal picked
    the port, and in between any outgoing connection on the host may be handed that very
    port as its source (seen in CI: the handshake listener died on "Address already in
    use" and the engine hung). A port below the ephemeral range is never handed out that
    way. Where the range is unknown or too narrow, the OS picks (port 0), as before.
    """
    floor = _ephemeral_floor()
    if floor is not None and floor - _FIXED_PORTS_FROM >= 4 * count + 64:
        chosen: list[int] = []
        rng = random.SystemRandom()
        for _ in range(_PORT_TRIES):
            port = rng.randrange(_FIXED_PORTS_FROM, floor)
            if port not in chosen and port_is_free(port, host):
                chosen.append(port)
                if len(chosen) == count:
                    return chosen
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES, limit: int = _LOG_TAIL_CHARS) -> str:
    """The last non-empty lines of a log, joined by ' | ' and truncated: fits one error line."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    joined = " | ".join(tail)
    return joined if len(joined) <= limit else "..." + joined[-limit:]


def kill_tree(pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the process group led by ``pid`` and all descendants; SIGKILL survivors after ``grace_s``."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=5.0)


class ServerProcess:
    """One launched HTTP server, owned from start to kill.

    ``ready_url`` is polled until it answers 200; ``ports`` are checked free before launch.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
        ready_url: str,
        ports: Sequence[int] = (),
        cwd: Path | None = None,
        kill_grace_s: float = 10.0,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.ready_url = ready_url
        self.ports = list(ports)
        self.cwd = cwd
        self.kill_grace_s = kill_grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.ready_after_s: float | None = None
        self._tree: list[psutil.Process] | None = None
        self._log_read_to = 0

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Check ports, then launch in a new session with output to ``log_path``."""
        for port in self.ports:
            check_port_free(port, self.name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            log.info("starting %s: %s (log %s)", self.name, " ".join(self.argv), self.log_path)
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    env=self.env,
                    cwd=self.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as err:
                raise EngineError(f"cannot start {self.name}: {err}") from None
        self.started_at = time.monotonic()
        # The reaper kills the group even if kvcal dies by SIGKILL, where no context manager runs.
        shared_reaper().watch(self.proc.pid)

    def check_alive(self) -> None:
        """Raise EngineError with the log's last lines if the process has exited."""
        if self.proc is None:
            raise EngineError(f"{self.name} was never started")
        code = self.proc.poll()
        if code is not None:
            raise EngineError(
                f"{self.name} exited with status {code}: {log_tail(self.log_path)} (log: {self.log_path})"
            )

    def check_log(self) -> None:
        """Raise EngineError if the log written since the last call holds one of :data:`FATAL_LOG_SIGNS`."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self._log_read_to)
                fresh = handle.read()
        except OSError:
            return
        # Keep a line's worth of overlap so a sign split across two reads is still seen.
        self._log_read_to += max(0, len(fresh) - 256)
        text = fresh.decode("utf-8", "replace")
        for line in text.splitlines():
            if any(sign in line.lower() for sign in FATAL_LOG_SIGNS):
                raise EngineError(f"{self.name} cannot start: {line.strip()[:300]} (log: {self.log_path})")

    def is_ready(self, client: httpx.Client, timeout_s: float = HEALTH_PROBE_S) -> bool:
        """One readiness probe: alive (else EngineError) and ``ready_url`` answers 200 within ``timeout_s`` in all."""
        self.check_alive()
        try:
            with Deadline(timeout_s, client) as deadline, deadline.stream(client, "GET", self.ready_url) as response:
                return response.status_code == 200 and not deadline.expired
        except httpx.HTTPError:
            return False

    def cpu_seconds(self) -> float:
        """CPU time (user + system, s) used so far by the server and its descendants."""
        if self.proc is None:
            return 0.0
        if self._tree is None:  # vLLM's process tree is fixed once the server is ready
            with contextlib.suppress(psutil.NoSuchProcess):
                root = psutil.Process(self.proc.pid)
                self._tree = [root, *root.children(recursive=True)]
        used = 0.0
        for proc in self._tree or []:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                times = proc.cpu_times()
                used += times.user + times.system
        return used

    def stop(self) -> None:
        """Kill the whole tree; idempotent."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        self._tree = None
        if proc.poll() is None:
            log.info("stopping %s (pid %d)", self.name, proc.pid)
        kill_tree(proc.pid, self.kill_grace_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
        shared_reaper().forget(proc.pid)


def wait_all_ready(servers: Sequence[ServerProcess], timeout_s: float) -> None:
    """Poll every server until all are ready; fail fast on the first that dies, or when ``timeout_s`` has passed.

    ``timeout_s`` bounds the whole wait: each probe gets at most what is left of it (and
    :data:`HEALTH_PROBE_S`), connect to last byte, so a server that accepts and never
    answers, or answers a byte at a time, cannot stretch it.
    """
    ends_at = time.monotonic() + timeout_s
    pending = list(servers)
    with httpx.Client() as client:
        while pending:
            for server in list(pending):
                server.check_alive()  # a dead server fails fast, deadline or not
                server.check_log()  # so does one whose log says it never will be ready
                left = ends_at - time.monotonic()
                if left > 0 and server.is_ready(client, min(HEALTH_PROBE_S, left)):
                    assert server.started_at is not None
                    server.ready_after_s = time.monotonic() - server.started_at
                    log.info("%s ready after %.1f s", server.name, server.ready_after_s)
                    pending.remove(server)
            if not pending:
                return
            left = ends_at - time.monotonic()
            if left <= 0:
                names = ", ".join(s.name for s in pending)
                tail = log_tail(pending[0].log_path)
                raise EngineError(f"{names} not ready after {timeout_s:.0f} s: {tail} (log: {pending[0].log_path})")
            time.sleep(min(_POLL_INTERVAL_S, left))


def wait_until_idle(
    servers: Sequence[ServerProcess], *, max_cores: float, window_s: float = 0.1, timeout_s: float = 5.0
) -> tuple[bool, float]:
    """Wait until the servers together use under ``max_cores`` cores over one ``window_s``; return (idle, waited s).

    Why: after each request vLLM's engine core and workers keep spinning on their
    shared-memory queues for about a second (``busy_loop_s`` in vLLM's shm_broadcast),
    and after a NIXL transfer both engines step until the notification is handled. On
    a host with few cores that tail slows the next leg (measured on 2 cores: a 2,048-
    token recompute right after a pull took 200-450 ms instead of 80). Waiting for the
    tail to end is a poll with a timeout, not a fixed sleep.
    """
    began = time.monotonic()
    previous = sum(server.cpu_seconds() for server in servers)
    while True:
        time.sleep(window_s)
        current = sum(server.cpu_seconds() for server in servers)
        if (current - previous) / window_s < max_cores:
            return True, time.monotonic() - began
        if time.monotonic() - began >= timeout_s:
            return False, time.monotonic() - began
        previous = current
