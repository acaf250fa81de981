"""A real Prometheus (Debian's package) started on loopback for a test, scraping the targets given every second."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PROMETHEUS = shutil.which("prometheus")
SKIP_REASON = ("Debian's prometheus package is not installed (as root, scripts/prometheus_env.sh installs it; "
               "scripts/test.sh runs that)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


def _config(targets: list[tuple[str, str | None]]) -> str:
    lines = ["global: {scrape_interval: 1s, scrape_timeout: 900ms}", "scrape_configs:", "  - job_name: vllm",
             "    static_configs:"]
    for address, pod in targets:
        lines.append(f"      - targets: ['{address}']")
        if pod is not None:
            lines.append(f"        labels: {{pod: {pod}}}")
    return "\n".join(lines) + "\n"


@contextmanager
def prometheus(folder: Path, targets: list[tuple[str, str | None]], wait_s: float = 60.0) -> Iterator[str]:
    """Prometheus scraping ``targets`` (address, pod label or None); yields its URL once every target was scraped."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "prometheus.yml"
    config.write_text(_config(targets))
    port = free_port()
    server = subprocess.Popen([str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={folder / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        ends = time.monotonic() + wait_s
        while time.monotonic() < ends:
            try:
                up = get_json(f"{url}/api/v1/query?query=count(up%3D%3D1)")["data"]["result"]
                if up and up[0]["value"][1] == str(len(targets)):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail(f"Prometheus did not scrape the {len(targets)} targets within {wait_s:g} s")
        time.sleep(1.5)  # every series has a sample before a window opens
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
