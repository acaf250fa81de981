"""What a fleet study will cost, said before it starts: runs, simulated requests, time and memory, and the cap.

The requests a run simulates are estimated from the workload: an open stream starts
``rate x duration`` sessions of ``turns`` turns on average; a closed loop of C sessions
serves about ``C x duration / (think time + decode)`` turns; a trace replays its records
inside the duration. Engine steps are at most every pod stepping all the time, or every
request's output decoded in steps of its own. Time and memory are rough figures per
simulated request and step, measured
with benchmarks/fleet_size.py (docs/method.md); memory is one run's (runs go one after
another, each freeing the last) or, on worker processes (``--jobs``), each worker's own
(benchmarks/fleet_workers.py) and one run's records per worker, all in flight at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvcal.errors import InputError
from kvcal.fleet.help_facts import WORKER_MIB
from kvcal.fleet.traffic import read_trace
from kvcal.fleet.workload import Workload

# benchmarks/fleet_size.py on the example workload, 4 and 64 pods, 1-20 sessions/s (2026-12-07, a shared 2-core
# machine): CPU time fits about 60 us a request plus 2 us an engine step (within 0.7-1.6x of the four cases measured),
# and memory grows 0.1-0.9 KB a request from a 146 MiB start; rounded up.
SECONDS_PER_REQUEST = 60e-6
SECONDS_PER_STEP = 2e-6
MIN_STEP_MS = 0.01  # a step of 0 ms (decode_step_ms: 0) still costs the simulator one event
BYTES_PER_REQUEST = 1000  # a run's records that live to its end (TTFT, the session's cache entries), and its queues
BASE_BYTES = 150 * 2**20  # the interpreter, numpy and the fit
# benchmarks/fleet_workers.py (2026-12-07, the shared 2-core machine): 16 and 48 forked workers added 4.4 and 3.0 MiB
# of PSS each over --jobs 1 (their pages are the parent's, copy-on-write, until written); rounded up to 10 MiB, above
# the ~9 MB a worker issue 55 reported.
BYTES_PER_WORKER = WORKER_MIB * 2**20
MIN_TURN_S = 1e-3  # a closed loop's turn takes at least this much in the estimate (zero think time and decode)


@dataclass(frozen=True)
class StudySize:
    runs: int
    requests: float  # simulated requests over every run
    largest_run: float  # requests of the largest single run
    steps: float  # engine steps over every run
    workers: int = 0  # worker processes (--jobs), each holding one run at a time; 0: the runs go in this process

    @property
    def seconds(self) -> float:
        return self.requests * SECONDS_PER_REQUEST + self.steps * SECONDS_PER_STEP

    @property
    def work(self) -> float:
        """The study's work counted in simulated requests (engine steps converted at their relative cost)."""
        return self.requests + self.steps * SECONDS_PER_STEP / SECONDS_PER_REQUEST

    @property
    def peak_bytes(self) -> float:
        """This process, and each worker with its own memory and the largest run in flight on every one."""
        in_flight = max(1, self.workers)
        return BASE_BYTES + self.workers * BYTES_PER_WORKER + in_flight * self.largest_run * BYTES_PER_REQUEST

    def line(self) -> str:
        workers = f" ({self.workers} worker processes, about {WORKER_MIB} MiB each)" if self.workers else ""
        return (
            f"kvcal: fleet study: {self.runs:,} runs, about {_count(self.requests)} simulated requests "
            f"(at most {_count(self.largest_run)} in one run); about {_duration(self.seconds)} on one core and "
            f"{self.peak_bytes / 2**20:,.0f} MiB of memory{workers}"
        )


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


def steps_per_run(workload: Workload, pods: int, decode_ms: float, requests: float) -> float:
    """Engine steps of one run, at most: every pod stepping all the time, or every request decoding alone."""
    if workload.trace is not None:
        trace = read_trace(Path(workload.trace.per_request))
        outputs = sum(out for _, _, out in trace) / len(trace)
    else:
        assert workload.sessions is not None
        outputs = workload.sessions.output_tokens.expected()
    always_busy = pods * workload.duration_s * 1e3 / max(decode_ms, MIN_STEP_MS)
    return min(always_busy, requests * max(1.0, outputs))


def study_size(
    workloads: list[Workload], runs_per_load: int, pods: int, decode_ms: float, workers: Callable[[int], int]
) -> StudySize:
    """``workers``: the worker processes a study of so many runs starts (kvcal.fleet.parallel.Executor.workers)."""
    per_run = [requests_per_run(w, decode_ms) for w in workloads]
    steps = [steps_per_run(w, pods, decode_ms, n) for w, n in zip(workloads, per_run)]
    runs = runs_per_load * len(workloads)
    return StudySize(
        runs=runs,
        requests=runs_per_load * sum(per_run),
        largest_run=max(per_run),
        steps=runs_per_load * sum(steps),
        workers=workers(runs),
    )


def check_completes(workload: Workload, recompute: tuple[float, float, float], decode_ms: float) -> None:
    """Refuse, before any run, a workload whose shortest possible first turn cannot finish inside the window.

    The shortest turn: the least prompt its distributions can draw, recomputed on an idle engine, then its least
    output decoded one step a token. Where a distribution reaches down to 0 this refuses nothing; the runs' own
    check (kvcal.fleet.study.run_one) catches what is left.
    """
    spec = workload.sessions
    if spec is None:
        return
    prompt = max(1.0, spec.system_prompt_tokens + spec.input_tokens.lowest())
    a, b, c = recompute
    shortest_ms = a + b * prompt / 1e3 + c * prompt * prompt / 1e6 + max(1.0, spec.output_tokens.lowest()) * decode_ms
    window_s = workload.duration_s - workload.warmup_s
    if shortest_ms / 1e3 > window_s:
        raise InputError(
            f"no request can complete: the shortest turn (a prompt of {prompt:,.0f} tokens, "
            f"{max(1.0, spec.output_tokens.lowest()):,.0f} output tokens) takes about "
            f"{shortest_ms / 1e3:,.3g} s on an idle engine, longer than the measured window of "
            f"{window_s:g} s; there would be nothing to recommend from (shorten sessions.input_tokens, "
            "sessions.output_tokens or engine.decode_step_ms, or lengthen duration_s)"
        )


def check_cap(size: StudySize, cap: int) -> None:
    """Refuse a study over ``cap`` simulated requests (its engine steps counted in), naming the flag that allows it."""
    if size.work > cap:
        steps = f" and {_count(size.steps)} engine steps" if size.work > 1.5 * size.requests else ""
        raise InputError(
            f"the study would simulate about {_count(size.requests)} requests{steps} ({size.runs:,} runs, "
            f"about {_duration(size.seconds)}), over the cap of {cap:,}: lower --seeds, --resamples, "
            f"--loads, --duration or the rate, or raise --max-simulated-requests to at least "
            f"{int(size.work) + 1:,}"
        )


def _count(n: float) -> str:
    return f"{n:,.0f}" if n < 1e6 else f"{n / 1e6:,.1f} million" if n < 1e12 else f"{n:.2g}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"
