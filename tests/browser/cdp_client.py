"""A small client of Chromium's DevTools protocol: one headless browser, pages opened one after another.

Just what the report tests need: open a file, record console errors, exceptions and
every request the page makes, evaluate JavaScript, take a screenshot. It speaks the
protocol over the ``websockets`` package's synchronous client (the ``test`` extra).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
START_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 60.0


def find_browser() -> str | None:
    """The browser to drive: $KVCAL_CHROMIUM, else the first of BROWSERS on the PATH."""
    named = os.environ.get("KVCAL_CHROMIUM")
    return named if named and shutil.which(named) else next((b for b in BROWSERS if shutil.which(b)), None)


@dataclass
class Visit:
    """What one page did while it loaded."""

    url: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class Browser:
    """One headless Chromium process and one tab, driven over the DevTools websocket."""

    def __init__(self, executable: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="kvcal-chromium-")
        self.process = subprocess.Popen(
            [
                executable,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-dev-shm-usage",  # a container's small /dev/shm crashes the renderer
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        port = self._port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            tab = next(t for t in json.load(answer) if t.get("type") == "page")
        self.stack = ExitStack()  # websockets wants its connection closed as a context manager
        self.socket = self.stack.enter_context(
            connect(tab["webSocketDebuggerUrl"], max_size=64 * 2**20, open_timeout=10)
        )
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def _port(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        assert self.process.stderr is not None
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if found:
                return int(found.group(1))
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError("chromium did not start its DevTools endpoint")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        mine = self.next_id
        self.socket.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=CALL_TIMEOUT_S))
            if message.get("id") == mine:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def open(self, path: Path, *, width: int = 1000, height: int = 1400) -> Visit:
        """Load ``path`` at the given window size; what it logged and requested is in the visit."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.events.clear()
        url = path.resolve().as_uri()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not finish loading")
            self.events.append(json.loads(self.socket.recv(timeout=CALL_TIMEOUT_S)))
        self.evaluate("1")  # drains what the page logged while its load event was dispatched
        return self._visit(url)

    def _visit(self, url: str) -> Visit:
        visit = Visit(url)
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                visit.errors.append(str(params["exceptionDetails"].get("text")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                visit.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                visit.errors.append(str(params["entry"].get("text")))
            elif method == "Network.requestWillBeSent" and params["request"]["url"] != url:
                visit.requests.append(params["request"]["url"])
        return visit

    def evaluate(self, expression: str) -> Any:
        answer = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression[:60]}: {answer['exceptionDetails'].get('text')}")
        return answer["result"].get("value")

    def screenshot(self, target: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        target.write_bytes(base64.b64decode(data))
        return target

    def print_pdf(self, target: Path) -> Path:
        """The page as the browser prints it (A4, the page's print style)."""
        data = self.call("Page.printToPDF", paperWidth=8.27, paperHeight=11.69, printBackground=False)["data"]
        target.write_bytes(base64.b64decode(data))
        return target

    def close(self) -> None:
        try:
            self.stack.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            shutil.rmtree(self.profile, ignore_errors=True)
