"""A watchdog that kills kvcal's engine process groups if kvcal itself dies.

Context managers clean up on errors, Ctrl-C and SIGTERM, but nothing runs in a process
killed with SIGKILL (or by the OOM killer). So kvcal starts this small process with a
pipe on its stdin and tells it each process group it launches; when the pipe reaches
end-of-file (kvcal exited, however it died) the reaper terminates every group it was
told about, then exits. Protocol on stdin, one line each: ``watch <pgid>``,
``forget <pgid>``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


class Reaper:
    """The kvcal side: start the watchdog and tell it which process groups to guard."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None

    def _ensure(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "kvcal.engines.reaper"],
                stdin=subprocess.PIPE,
                text=True,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        return self._proc

    def _send(self, line: str) -> None:
        proc = self._ensure()
        assert proc.stdin is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()

    def watch(self, pgid: int) -> None:
        self._send(f"watch {pgid}")

    def forget(self, pgid: int) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._send(f"forget {pgid}")

    def close(self) -> None:
        """Stop the watchdog (after the groups were cleaned up normally)."""
        if self._proc is not None:
            if self._proc.stdin:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None


_shared: Reaper | None = None


def shared_reaper() -> Reaper:
    """One watchdog per kvcal process."""
    global _shared
    if _shared is None:
        _shared = Reaper()
    return _shared


def kill_group(pgid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the group, then SIGKILL whatever is left after ``grace_s``."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to kvcal's terminal must not kill the guard
    watched: set[int] = set()
    for line in sys.stdin:
        verb, _, value = line.strip().partition(" ")
        if verb == "watch" and value.isdigit():
            watched.add(int(value))
        elif verb == "forget" and value.isdigit():
            watched.discard(int(value))
    for pgid in watched:
        kill_group(pgid)


if __name__ == "__main__":
    _serve()
