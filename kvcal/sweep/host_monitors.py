"""Measuring a busy host during a sweep: how much of the engines' compute other processes took, probe by probe.

What a reading means (the bounds, the run's summary) is :mod:`kvcal.records.disturbance_bounds`; simulated engines that
share a host in ``kvcal fleet`` are :mod:`kvcal.fleet.shared_host`, which measures nothing.

A calibration measured on a busy host is not a calibration of the engines: a README demo
run while other processes competed for the cores measured recompute 6-10x slower than
the committed baseline and concluded "pull-always-wins". So the sweep records, with every
probe, ``host_busy``: the share (0-1) of the engines' compute that processes other than
kvcal and its engines took.

* **CPU engines kvcal launched** (pinned with ``VLLM_CPU_OMP_THREADS_BIND`` and the whole
  server's affinity): over the time since the previous probe ended,

      host_busy = (busy time of the pinned cores - CPU time of kvcal's process tree on them)
                  / (wall time x number of pinned cores)

  from ``/proc/stat`` per-CPU times (psutil) and the tree's user + system time. The
  tree's time is all on the pinned cores (the servers are pinned); kvcal's own process
  counts in proportion to how many of its allowed cores are pinned ones. Clamped to [0, 1].
* **GPU engines**: before the probe (engines idle), the largest utilisation of a pair GPU
  that runs a compute process outside kvcal's tree, via NVML (``pynvml``) when importable,
  else ``nvidia-smi`` (sampled at most every 2 s). Not yet checked on GPU hardware.
* **Attached engines** run elsewhere: not measured (``None``).

A probe is disturbed when ``host_busy`` exceeds :data:`~kvcal.records.disturbance_bounds.PROBE_BOUND`; the run is
disturbed when more than :data:`~kvcal.records.disturbance_bounds.RUN_BOUND` of its measured probes are (one blip is
named in the fit
but does not condemn a run). ``fit.json`` records the summary (:func:`kvcal.records.disturbance_bounds.summarise`;
the bounds, what a pair's monitor watches and the summary are a base module, which the fit reads), the fit
warns with the figure and ``emit-config`` refuses a disturbed run unless ``--allow-disturbed``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from typing import Any, Protocol

import psutil

from kvcal.records.disturbance_bounds import parse_cpus, watched
from kvcal.records.run import PairFacts

log = logging.getLogger(__name__)

NVIDIA_SMI_EVERY_S = 2.0


class HostMonitor(Protocol):
    resource: str

    def before_probe(self) -> None: ...

    def after_probe(self) -> float | None: ...


def _tree_cpu_s(cores: set[int]) -> float:
    """User + system seconds of kvcal's process tree that ran on ``cores`` (children whole, self pro rata)."""
    me = psutil.Process()
    total = 0.0
    for proc in me.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            t = proc.cpu_times()
            total += t.user + t.system
    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
        allowed = set(me.cpu_affinity() or [])
        t = me.cpu_times()
        share = len(allowed & cores) / len(allowed) if allowed else 1.0
        total += (t.user + t.system) * share
    return total


class CpuMonitor:
    """Others' share of the pinned cores since the previous reading."""

    def __init__(self, cores: list[int]) -> None:
        self.cores = cores
        self.resource = "cpu cores " + ",".join(map(str, cores))
        self._last: tuple[float, float, float] | None = None
        self.reading()

    def _busy_s(self) -> float:
        per_cpu = psutil.cpu_times(percpu=True)
        busy = 0.0
        for c in self.cores:
            t = per_cpu[c]
            busy += (
                sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
            )
        return busy

    def reading(self) -> float | None:
        now = (time.monotonic(), self._busy_s(), _tree_cpu_s(set(self.cores)))
        last, self._last = self._last, now
        if last is None:
            return None
        wall = now[0] - last[0]
        if wall <= 0:
            return None
        others = (now[1] - last[1]) - (now[2] - last[2])
        return min(max(others / (wall * len(self.cores)), 0.0), 1.0)

    def before_probe(self) -> None:
        return None

    def after_probe(self) -> float | None:
        value = self.reading()
        return None if value is None else round(value, 4)


class GpuMonitor:
    """Largest utilisation of a pair GPU that runs a process outside kvcal's tree, read before the probe."""

    def __init__(self, gpus: list[int] | None) -> None:
        self.gpus = gpus
        self.resource = "gpu " + (",".join(map(str, gpus)) if gpus else "all visible")
        self._value: float | None = None
        self._at = -1e9
        self._nvml: Any = None
        with contextlib.suppress(Exception):
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml

    def _ours(self) -> set[int]:
        me = psutil.Process()
        return {me.pid, *(p.pid for p in me.children(recursive=True))}

    def _sample_nvml(self) -> float | None:
        nv, ours, worst = self._nvml, self._ours(), 0.0
        for i in range(nv.nvmlDeviceGetCount()):
            if self.gpus is not None and i not in self.gpus:
                continue
            handle = nv.nvmlDeviceGetHandleByIndex(i)
            procs = nv.nvmlDeviceGetComputeRunningProcesses(handle)
            if any(p.pid not in ours for p in procs):
                worst = max(worst, nv.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0)
        return worst

    def _sample_smi(self) -> float | None:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return None
        util = subprocess.run(
            [smi, "--query-gpu=index,uuid,utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        apps = subprocess.run(
            [smi, "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        ours = self._ours()
        foreign = {
            line.split(",")[0].strip()
            for line in apps.splitlines()
            if line.strip() and int(line.split(",")[1]) not in ours
        }
        worst = 0.0
        for line in util.splitlines():
            index, uuid, busy = (f.strip() for f in line.split(","))
            if (self.gpus is None or int(index) in self.gpus) and uuid in foreign:
                worst = max(worst, float(busy) / 100.0)
        return worst

    def before_probe(self) -> None:
        if self._nvml is None and time.monotonic() - self._at < NVIDIA_SMI_EVERY_S:
            return
        try:
            self._value = self._sample_nvml() if self._nvml is not None else self._sample_smi()
        except Exception as err:  # a monitoring hiccup must not fail a sweep; the probe records None
            log.debug("GPU monitor: %s", err)
            self._value = None
        self._at = time.monotonic()

    def after_probe(self) -> float | None:
        return self._value


def monitor_for(pair: PairFacts | Mapping[str, Any]) -> HostMonitor | None:
    """The monitor for a pair: CPU cores when kvcal launched CPU engines, GPUs when CUDA; else None."""
    device, units = watched(pair) or (None, None)
    if device is None:
        return None
    if device == "cpu":
        available = set(range(psutil.cpu_count() or 0))
        return CpuMonitor(units) if units and set(units) <= available else None
    if units is None and os.environ.get("CUDA_VISIBLE_DEVICES"):
        units = parse_cpus(os.environ["CUDA_VISIBLE_DEVICES"]) or None
    return GpuMonitor(units)
