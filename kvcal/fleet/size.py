"""What a fleet study will cost, said before it starts: runs, simulated requests, time and memory, and the cap.

The requests a run simulates are estimated from the workload: an open stream starts
``rate x duration`` sessions of ``turns`` turns on average; a closed loop of C sessions
serves about ``C x duration / (think time + decode)`` turns; a trace replays its records
inside the duration. Time and memory are rough figures per simulated request, measured
with benchmarks/fleet_size.py (docs/method.md); memory is one run's (runs go one after
another, each freeing the last).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvcal.errors import InputError
from kvcal.fleet.traffic import read_trace
from kvcal.fleet.workload import Workload

# benchmarks/fleet_size.py on the example workload, 4 pods, 1-20 sessions/s (2026-12-07, a shared 2-core machine):
# 80-111 us of CPU and 0.4-0.9 KB of memory per simulated request, from a 146 MiB start; rounded up.
SECONDS_PER_REQUEST = 120e-6
BYTES_PER_REQUEST = 1000  # a run's records that live to its end (TTFT, the session's cache entries), and its queues
BASE_BYTES = 150 * 2**20  # the interpreter, numpy and the fit
MIN_TURN_S = 1e-3  # a closed loop's turn takes at least this much in the estimate (zero think time and decode)


@dataclass(frozen=True)
class StudySize:
    runs: int
    requests: float  # simulated requests over every run
    largest_run: float  # requests of the largest single run

    @property
    def seconds(self) -> float:
        return self.requests * SECONDS_PER_REQUEST

    @property
    def peak_bytes(self) -> float:
        return BASE_BYTES + self.largest_run * BYTES_PER_REQUEST

    def line(self) -> str:
        return (f"kvcal: fleet study: {self.runs:,} runs, about {_count(self.requests)} simulated requests "
                f"(at most {_count(self.largest_run)} in one run); about {_duration(self.seconds)} on one core and "
                f"{self.peak_bytes / 2**20:,.0f} MiB of memory")


def requests_per_run(workload: Workload, decode_ms: float) -> float:
    """The requests one run of ``workload`` simulates, estimated before it runs (see the module docstring)."""
    if workload.trace is not None:
        trace = read_trace(Path(workload.trace.per_request))
        start = trace[0][0]
        return float(sum(1 for begin, _, _ in trace if begin - start < workload.duration_s))
    spec, arrival = workload.sessions, workload.arrival
    assert spec is not None and arrival is not None
    turns = max(1.0, spec.turns.expected())
    if arrival.rate is not None:
        return arrival.rate * workload.duration_s * turns
    turn_s = spec.think_time_s.expected() + spec.output_tokens.expected() * decode_ms / 1e3
    return arrival.concurrency * workload.duration_s / max(turn_s, MIN_TURN_S)  # type: ignore[operator]


def study_size(workloads: list[Workload], runs_per_load: int, decode_ms: float) -> StudySize:
    per_run = [requests_per_run(w, decode_ms) for w in workloads]
    return StudySize(runs=runs_per_load * len(workloads), requests=runs_per_load * sum(per_run),
                     largest_run=max(per_run))


def check_cap(size: StudySize, cap: int) -> None:
    """Refuse a study over ``cap`` simulated requests, naming the flag that allows it."""
    if size.requests > cap:
        raise InputError(f"the study would simulate about {_count(size.requests)} requests ({size.runs:,} runs, about "
                         f"{_duration(size.seconds)}), over the cap of {cap:,}: lower --seeds, --resamples, --loads, "
                         f"--duration or the rate, or raise --max-simulated-requests to at least "
                         f"{int(size.requests) + 1:,}")


def _count(n: float) -> str:
    return f"{n:,.0f}" if n < 1e6 else f"{n / 1e6:,.1f} million" if n < 1e12 else f"{n:.2g}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"
