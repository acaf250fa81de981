"""Load states: background request streams that make the source and/or the computing pod busy.

The router's ``costModel`` charges a pull extra when the source's queue is busy
(``sourceWaitMs``) or when the computing pod's queue is (``requeueMs``); an idle sweep
sees neither. A loaded sweep sets the load itself, in four states:

==============  =============================  ===========================
state           background streams against     what it exposes
==============  =============================  ===========================
idle            nothing                        the idle curves (P, T, F)
source-busy     the producer (KV source)       S
computing-busy  the consumer (computing pod)   q (every request) and Q (pulls)
both-busy       both                           S and Q together (additivity)
==============  =============================  ===========================

Each stream is a thread that sends one fresh random prompt after another
(``background_prompt_tokens`` long, generating ``background_max_tokens``, default 1:
a request that decodes holds a running slot and lets the scheduler admit the queue),
so a busy engine's waiting queue holds what the engine cannot admit in one step. The
starting concurrency is ``busy_queue_threshold + 2``; after a state is entered the
controller polls ``vllm:num_requests_waiting`` until every busy engine is at or above
the threshold and every idle one below it, and, unless ``--background-concurrency``
fixed the number, adds streams to a busy engine whose queue was at or above the threshold
in fewer than ``BUSY_SHARE`` of the reads over ``RAMP_AFTER_S``, or in the reads before
the state's probes (the engine admits more at once than the streams supply; a CPU vLLM
with 3 streams of 4096 tokens and 16 generated tokens kept its queue at 0). After
``load_settle_timeout_s`` it probes anyway, with a warning: the fit classifies each
probe by the queues measured just before it, not by the state that was asked for.

The plan (:func:`build_loaded_plan`) is a randomised block design: each rep is one
round that visits every state once, in a seeded shuffled order, and within a visit
every (length, leg) once, shuffled. Drift over the run therefore spreads over all
states instead of confounding one of them, and a pull and its recompute control are
always measured under the same load.

Streams are owned like engines: :class:`LoadController` is a context manager that
stops and joins every stream on success, error, Ctrl-C and SIGTERM (the runner's
``sigterm_raises`` turns SIGTERM into an exception that unwinds it); a stream whose
request fails ends the run with an EngineError at the next probe.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

import numpy as np

from kvcal.engines.base import EnginePair, LoadTarget, Role
from kvcal.errors import EngineError, InputError
from kvcal.records.run import Leg
from kvcal.settings.sweep import LoadState, SweepConfig
from kvcal.sweep.lengths.probe_plan import PlannedProbe, build_plan

log = logging.getLogger(__name__)

IDLE = "idle"
LOAD_STATES: tuple[str, ...] = get_args(LoadState)
BUSY_ROLES: dict[str, tuple[Role, ...]] = {
    "idle": (),
    "source-busy": ("producer",),
    "computing-busy": ("consumer",),
    "both-busy": ("producer", "consumer"),
}
SETTLE_POLL_S = 0.05
SETTLE_READS = 2  # consecutive readings in the wanted state before probing
JOIN_TIMEOUT_S = 10.0
DEFAULT_BACKGROUND_TOKENS = 4096
RAMP_AFTER_S = 2.0  # a busy engine whose queue was short too often this long gets more streams
BUSY_SHARE = 0.8  # share of reads at or above the threshold that counts as "stays busy"
MAX_STREAMS_PER_ENGINE = 64


def parse_load_states(text: str | None) -> list[str] | None:
    """``"idle,source-busy"`` -> ``["idle", "source-busy"]``; None stays None; unknown names are one-line errors."""
    if text is None:
        return None
    states = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [s for s in states if s not in LOAD_STATES]
    if unknown or not states:
        raise InputError(f"--load-states takes a comma-separated subset of {','.join(LOAD_STATES)}; got {text!r}")
    return states


def is_loaded(config: SweepConfig) -> bool:
    """True when the sweep sets load (any state other than idle alone)."""
    return config.load.loaded


def build_loaded_plan(lengths: list[int], reps: int, seed: int, states: list[str]) -> list[PlannedProbe]:
    """Rounds of states in a seeded shuffled order; within each visit, every (length, leg) shuffled."""
    if reps < 1:
        raise InputError(f"--reps must be at least 1, got {reps}")
    rng = np.random.default_rng([seed, 14])
    cells = [(n, leg) for n in lengths for leg in (Leg.RECOMPUTE, Leg.PULL)]
    plan: list[PlannedProbe] = []
    for rep in range(reps):
        for s in rng.permutation(len(states)):
            state = states[int(s)]
            for c in rng.permutation(len(cells)):
                n, leg = cells[int(c)]
                plan.append(
                    PlannedProbe(
                        plan_index=len(plan),
                        probe_id=f"{state}-L{n}-{leg.value}-r{rep}",
                        prefix_tokens=n,
                        leg=leg,
                        rep=rep,
                        load_state=state,
                    )
                )
    return plan


def plan_for(config: SweepConfig, lengths: list[int]) -> list[PlannedProbe]:
    """The idle plan of old when only idle is asked for, else the loaded block design."""
    if not is_loaded(config):
        pairs = [(p.name, p.link_class) for p in config.pairs or ()]
        return build_plan(lengths, config.probe.reps, config.probe.seed, pairs)
    return build_loaded_plan(lengths, config.probe.reps, config.probe.seed, list(config.load.load_states))


@dataclass(frozen=True)
class LoadReading:
    """The state a probe ran in and the queues measured just before it (None: not read)."""

    load_state: str
    source_waiting: int | None
    computing_waiting: int | None

    def record_fields(self) -> dict[str, object]:
        return {
            "load_state": self.load_state,
            "source_waiting": self.source_waiting,
            "computing_waiting": self.computing_waiting,
        }


class BackgroundStream:
    """One thread that keeps sending fresh prompts to one engine until stopped."""

    def __init__(self, target: LoadTarget, tokens: Callable[[], list[int]], max_tokens: int, name: str) -> None:
        self.target = target
        self.tokens = tokens
        self.max_tokens = max_tokens
        self.name = name
        self.requests = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._attached = False

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self.target.stream_started()
        self._attached = True
        # Daemon: a request stuck in the engine must never keep kvcal's process alive.
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.target.serve_background(self.tokens(), self.max_tokens, self._stop)
            except BaseException as err:
                if not self._stop.is_set():
                    self.error = err
                return
            self.requests += 1

    def signal_stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning(
                    "background stream %s did not end within %.0f s (its engine is stopped next)", self.name, timeout_s
                )
        if self._attached:
            self._attached = False
            self.target.stream_stopped()


class LoadController:
    """Owns the background streams of a loaded sweep; a no-op recorder of ``idle`` otherwise."""

    def __init__(
        self,
        pair: EnginePair,
        config: SweepConfig,
        prompt_maker: Callable[[int], Callable[[int], list[int]]],
        on_phase: Callable[[str], None] | None = None,
    ) -> None:
        self.pair = pair
        self.config = config
        self.loaded = is_loaded(config)
        self.threshold = config.load.busy_queue_threshold
        self.concurrency = config.load.background_concurrency or self.threshold + 2
        self._prompt_maker = prompt_maker
        self._on_phase = on_phase or (lambda message: None)
        self._targets: dict[Role, LoadTarget] = {}
        self.streams: list[BackgroundStream] = []
        self.state: str | None = None
        self._stream_count = 0
        self._per_role: dict[Role, int] = {}
        self._probe_reads: dict[Role, list[bool]] = {}

    def __enter__(self) -> LoadController:
        if self.loaded:
            self._targets = {role: self.pair.load_target(role) for role in ("producer", "consumer")}
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def background_tokens(self) -> int:
        if self.config.load.background_prompt_tokens:
            return self.config.load.background_prompt_tokens
        block = self.pair.block_size
        longest = ((self.pair.max_model_len - self.config.load.background_max_tokens - 1) // block) * block
        return max(block, min(DEFAULT_BACKGROUND_TOKENS, longest))

    def enter(self, state: str | None) -> None:
        """Switch to ``state`` (stop the old streams, start the new ones, let the queues settle)."""
        state = state or IDLE
        if state == self.state:
            return
        self._stop_streams()
        self.state = state
        self._probe_reads = {}
        if not self.loaded:
            return
        busy = BUSY_ROLES[state]
        for role in busy:
            self._add_streams(role, self._per_role.get(role, self.concurrency))
        self.pair.on_load_change(bool(busy))
        self._on_phase(
            f"load state {state}: {len(self.streams)} background stream(s), waiting for the queues to settle"
        )
        self._settle(busy)

    def _add_streams(self, role: Role, count: int) -> None:
        n_tokens = self.background_tokens()
        for _ in range(count):
            prompts = self._prompt_maker(self._stream_count)
            self._stream_count += 1
            stream = BackgroundStream(
                self._targets[role],
                functools.partial(prompts, n_tokens),
                self.config.load.background_max_tokens,
                f"kvcal-load-{role}-{self._stream_count}",
            )
            self.streams.append(stream)
            stream.start()
        self._per_role[role] = sum(1 for s in self.streams if s.target is self._targets[role])

    def _queues(self) -> dict[Role, int | None]:
        return {role: target.waiting_requests() for role, target in self._targets.items()}

    def _settle(self, busy: tuple[Role, ...]) -> None:
        deadline = time.monotonic() + self.config.load.load_settle_timeout_s
        ramp_at = time.monotonic() + RAMP_AFTER_S
        good = 0
        queues: dict[Role, int | None] = {}
        reads: dict[Role, list[bool]] = {
            role: [] for role in busy
        }  # per busy engine since the last ramp: at threshold?
        while True:
            self.check()
            queues = self._queues()
            for role in busy:
                reads[role].append((queues.get(role) or 0) >= self.threshold)
            if all(q is None or ((q >= self.threshold) == (role in busy)) for role, q in queues.items()):
                good += 1
                if good >= SETTLE_READS:
                    return
            else:
                good = 0
            if self.config.load.background_concurrency is None and time.monotonic() >= ramp_at:
                # Sized so the queue stays at or above the threshold: an engine that admits
                # more at once than the streams supply gets more streams (kept for later states).
                ramp_at = time.monotonic() + RAMP_AFTER_S
                for role in busy:
                    short = queues.get(role) is not None and sum(reads[role]) < BUSY_SHARE * len(reads[role])
                    if short and self._per_role.get(role, 0) < MAX_STREAMS_PER_ENGINE:
                        more = min(max(self._per_role[role] // 2, 1), MAX_STREAMS_PER_ENGINE - self._per_role[role])
                        log.info(
                            "load state %s: %s queue %s below %d; adding %d stream(s)",
                            self.state,
                            role,
                            queues[role],
                            self.threshold,
                            more,
                        )
                        self._add_streams(role, more)
                reads = {role: [] for role in busy}
            if time.monotonic() >= deadline:
                log.warning(
                    "load state %s: queues did not settle within %.0f s (waiting %s, threshold %d); "
                    "probing anyway: the fit classifies each probe by its measured queues; raise "
                    "--background-concurrency if a busy engine's queue stays short",
                    self.state,
                    self.config.load.load_settle_timeout_s,
                    queues,
                    self.threshold,
                )
                return
            time.sleep(SETTLE_POLL_S)

    def check(self) -> None:
        """Raise EngineError if a background stream failed (the run ends; every stream is then stopped)."""
        for stream in self.streams:
            if stream.error is not None:
                raise EngineError(
                    f"background stream {stream.name} failed: {stream.error}; "
                    "every finished probe is kept: fix the engine and rerun with --resume"
                )

    def reading(self) -> LoadReading:
        """The current state and both engines' waiting queues, read now (just before a probe)."""
        state = self.state or IDLE
        if not self.loaded:
            return LoadReading(state, None, None)
        self.check()
        queues = self._queues()
        self._keep_busy(queues)
        return LoadReading(state, queues["producer"], queues["consumer"])

    def _keep_busy(self, queues: dict[Role, int | None]) -> None:
        """Between probes too: a busy engine whose queue read short in too many probes gets more streams."""
        if self.config.load.background_concurrency is not None:
            return
        for role in BUSY_ROLES[self.state or IDLE]:
            seen = self._probe_reads.setdefault(role, [])
            seen.append((queues.get(role) or 0) >= self.threshold)
            if (
                len(seen) >= 3
                and sum(seen) < BUSY_SHARE * len(seen)
                and self._per_role.get(role, 0) < MAX_STREAMS_PER_ENGINE
            ):
                more = min(max(self._per_role[role] // 2, 1), MAX_STREAMS_PER_ENGINE - self._per_role[role])
                log.info(
                    "load state %s: %s queue short in %d of %d probes; adding %d stream(s)",
                    self.state,
                    role,
                    len(seen) - sum(seen),
                    len(seen),
                    more,
                )
                self._add_streams(role, more)
                seen.clear()

    def _stop_streams(self) -> None:
        streams, self.streams = self.streams, []
        for stream in streams:  # signal all first: they wind down together
            stream.signal_stop()
        for target in {id(s.target): s.target for s in streams}.values():
            target.abort()
        for stream in streams:
            stream.join()
        if streams:
            self.pair.on_load_change(False)

    def close(self) -> None:
        """Stop and join every stream and release the targets; idempotent."""
        try:
            self._stop_streams()
        finally:
            targets, self._targets = self._targets, {}
            for target in targets.values():
                target.close()
