"""The small interface every engine pair implements.

A pair is a producer (holds the prefix) and a consumer (serves the probe). The
runner asks the pair for one leg at a time with a fresh prompt; the pair returns
what it measured. Everything about processes, HTTP, transports and metrics stays
behind this interface, so a new engine is one new module.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

from kvcal.errors import InputError
from kvcal.records import MAX_BYTES_MOVED, Leg, PairFacts, ProbeEngineSide, RunSetup

MAX_KV_BYTES_PER_TOKEN = 16 * 2**20
"""More KV bytes than any model keeps per token, summed over its layers: OPT-175B's fp16
multi-head cache is 4.7 MB a token (96 layers x 12,288 x 2 x 2 B), the largest published;
this is 3.5x that. A pull counted above ``prefix_tokens`` x this is an engine's error."""
MAX_PULL_BYTES = MAX_BYTES_MOVED
"""No one pull moves a petabyte (an 8-GPU H200 node holds 1.1 TB of HBM): the bound for prefixes so long
that the per-token one is looser; the same bound a probe record holds (kvcal.records)."""


def max_plausible_bytes(prefix_tokens: int) -> int:
    """The most KV bytes one leg of ``prefix_tokens`` can move; a counter beyond it is not believed."""
    return min(prefix_tokens * MAX_KV_BYTES_PER_TOKEN, MAX_PULL_BYTES)


@dataclass(frozen=True)
class LegMeasurement:
    """What one leg measured. Unknown values are ``None``, never ``0``."""

    ttft_ms: float
    bytes_moved: int | None
    producer_ttft_ms: float | None = None
    overhead_ms: float | None = None
    metrics_delta: dict[str, float] = field(default_factory=dict)
    bytes_metric: str | None = None  # the counter bytes_moved was read from, 'consumer/<sample>'
    engine_side: ProbeEngineSide | None = None  # the engines' own transfer and prefill figures (engine_costs.py)


Role = Literal["producer", "consumer"]


class LoadTarget(ABC):
    """One engine of a pair as the target of background load (see kvcal.sweep.load).

    The sweep, not the engine, owns the streams; a target only serves one background
    request at a time per calling thread and reads its own waiting queue.
    """

    role: Role

    @abstractmethod
    def waiting_requests(self) -> int | None:
        """``vllm:num_requests_waiting`` now (None if the engine does not expose it)."""

    @abstractmethod
    def serve_background(self, token_ids: list[int], max_tokens: int, stop: threading.Event) -> None:
        """Serve one background request; return when it ends, or soon after ``stop`` is set."""

    def stream_started(self) -> None:
        """A background stream began sending to this engine."""

    def stream_stopped(self) -> None:
        """A background stream ended."""

    def abort(self) -> None:
        """End in-flight background requests now (their streams are stopping); the target stays usable."""

    def close(self) -> None:
        """Release what the target holds (HTTP clients); in-flight background requests end."""


class EnginePair(ABC):
    """A producer/consumer pair; used as a context manager that owns its processes."""

    name: str = "abstract"

    @property
    @abstractmethod
    def block_size(self) -> int: ...

    @property
    @abstractmethod
    def max_model_len(self) -> int: ...

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @property
    @abstractmethod
    def kv_bytes_per_token(self) -> int | None: ...

    def __enter__(self) -> EnginePair:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @abstractmethod
    def start(self) -> None:
        """Launch or attach, and return once both engines answer. Raise EngineError otherwise."""

    @abstractmethod
    def stop(self) -> None:
        """Release everything start() took; idempotent, safe after a failed start."""

    @abstractmethod
    def warm_up(self, token_ids: list[int]) -> None:
        """Pay one-time costs (handshakes, compilation) with a prompt whose result is discarded."""

    @abstractmethod
    def measure(self, leg: Leg, token_ids: list[int]) -> LegMeasurement:
        """Serve ``token_ids`` on the consumer by ``leg`` and measure it."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Provenance for run.json: versions, hardware, transport settings, commands."""

    def setup(self) -> RunSetup:
        """What the pair knows of the setup it runs on (unknown None); the sweep adds model and time."""
        return RunSetup(engine=self.name, block_size=self.block_size, kv_bytes_per_token=self.kv_bytes_per_token)

    def facts(self) -> PairFacts:
        """What the pair is (mode, device, each role's placement); what the sweep decides by and run.json keeps."""
        return PairFacts(engine=self.name)

    def members(self) -> dict[str | None, EnginePair]:
        """The pairs a campaign sweeps, by name: this one, unnamed (a multi-pair set names each)."""
        return {None: self}

    def select(self, name: str | None) -> None:
        """Serve the next :meth:`measure` on the named member (one pair serves everything itself)."""

    def restart_consumer(self) -> None:
        """Stop and start the consumer, so that its next pull opens a fresh session (``--cold-sessions``)."""
        raise InputError(f"the {self.name} pair cannot restart its consumer; use --cold-sessions 1")

    def load_target(self, role: Role) -> LoadTarget:
        """The producer or consumer as a target of background load (load states other than idle)."""
        raise InputError(f"the {self.name} engine pair cannot run background load; use --load-states idle")

    def on_load_change(self, loaded: bool) -> None:
        """Background load started (True) or stopped (False): a pair may adapt its pacing."""

    def dry_run_commands(self) -> list[str]:
        """The commands start() would run (for --dry-run); attach-mode pairs return none."""
        return []
