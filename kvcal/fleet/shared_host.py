"""Simulating engines that share one host in ``kvcal fleet``: a step stretches while other engines are in steps too.

Not a measurement of a busy host (that is :mod:`kvcal.sweep.host_monitors`, judged by
:mod:`kvcal.records.disturbance_bounds`).

Processor sharing: a step needs its cost in milliseconds of an engine alone on the host
(``alone_ms``); with k of the N engines in a step, each progresses at 1 / f(k), where
f(k) = 1 + (s - 1)(k - 1)/(N - 1) and s is ``engine.shared_host_slowdown`` (f(N) = s, as
measured with every engine computing at once). When k changes, every running step's
remaining work is carried over at the old rate and its end is scheduled again; the
event loop drops the stale ends (an end is valid only at the pod's ``step_due``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Stepping(Protocol):
    step_due: float
    step_version: int
    work_left_ms: float


class SharedHost:
    def __init__(self, engines: int, slowdown: float, schedule_end: Callable[[float, Stepping, int], None]) -> None:
        self.engines, self.slowdown, self.schedule_end = engines, slowdown, schedule_end
        self.running: list[Stepping] = []
        self.since = 0.0

    def stretch(self, busy: int) -> float:
        return 1.0 + (self.slowdown - 1.0) * (busy - 1) / max(1, self.engines - 1)

    def start(self, pod: Stepping, now: float, alone_ms: float) -> None:
        self._carry(now)
        pod.work_left_ms = alone_ms
        self.running.append(pod)
        self._reschedule(now)

    def finish(self, pod: Stepping, now: float) -> None:
        self._carry(now)
        self.running.remove(pod)
        self._reschedule(now)

    def _carry(self, now: float) -> None:
        if self.running:
            done = (now - self.since) / self.stretch(len(self.running))
            for pod in self.running:
                pod.work_left_ms = max(0.0, pod.work_left_ms - done)
        self.since = now

    def _reschedule(self, now: float) -> None:
        stretch = self.stretch(len(self.running))
        for pod in self.running:
            due = now + pod.work_left_ms * stretch
            if due != pod.step_due:
                pod.step_due = due
                pod.step_version += 1
                self.schedule_end(due, pod, pod.step_version)
