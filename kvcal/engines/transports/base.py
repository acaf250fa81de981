"""What a KV transport tells the vLLM pair: engine config, env, the pull leg, the proof metric.

A transport is the way the consumer obtains the producer's KV for a pull leg. The pair
(:mod:`kvcal.engines.vllm`) owns processes, HTTP and timing; a transport only answers:

- ``kv_transfer_config(role, device, side)``: the ``--kv-transfer-config`` JSON per role;
- ``env(role, side)``: the environment variables per role (side-channel host/port);
- ``hold_params()`` / ``pull_params(...)``: the ``kv_transfer_params`` of the producer
  request that makes it hold the prefix, and of the consumer request that pulls it;
- ``hold_settle_metrics``: producer counters that must rise before a pull may start
  (a transport whose producer stores asynchronously), empty if none;
- ``bytes_metrics``: where the bytes that crossed the wire are counted (which engine,
  which sample names in order of preference: names drift between vLLM versions);
- ``needs_gpu``: checked before anything is launched;
- ``pull_names_producer``: whether the pull request names the producer's side channel.

Adding a transport is one new module in this package that defines ``TRANSPORT``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from kvcal.errors import HardwareError


class Role(str, Enum):
    PRODUCER = "producer"
    CONSUMER = "consumer"


@dataclass(frozen=True)
class SideChannel:
    """Where an engine's transport side channel listens (host reachable by the peer, port)."""

    host: str
    port: int


@dataclass(frozen=True)
class MetricRef:
    """A sample name and the labels a sample must carry to count (e.g. one transfer direction)."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BytesMetric:
    """Bytes moved are the delta of the first of ``candidates`` that ``role``'s engine exposes."""

    role: Role
    candidates: tuple[MetricRef, ...]


class Transport(ABC):
    """One way to move KV from producer to consumer; see the module docstring."""

    name: ClassVar[str]
    needs_gpu: ClassVar[bool] = False
    bytes_metrics: ClassVar[tuple[BytesMetric, ...]]
    hold_settle_metrics: ClassVar[tuple[MetricRef, ...]] = ()
    # True when the pull request must name the producer's side channel itself (attach
    # mode then needs it from the user); False when the producer's answer carries it.
    pull_names_producer: ClassVar[bool] = False

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    def check_host(self, has_gpu: bool) -> None:
        """Raise HardwareError before launch if this transport cannot run here."""
        if self.needs_gpu and not has_gpu:
            raise HardwareError(f"transport {self.name} needs a GPU engine and this host has none; use --transport nixl-pd on CPU")

    @abstractmethod
    def kv_transfer_config(self, role: Role, device: str, side: SideChannel) -> dict[str, Any]:
        """The ``--kv-transfer-config`` object for ``role`` on ``device`` ('cpu' or 'cuda')."""

    @abstractmethod
    def env(self, role: Role, side: SideChannel) -> dict[str, str]:
        """Environment variables for ``role``'s server."""

    @abstractmethod
    def hold_params(self, kv_request_id: str) -> dict[str, Any] | None:
        """``kv_transfer_params`` of the producer request that makes it hold the prefix (None: a plain request)."""

    @abstractmethod
    def pull_params(
        self, held: dict[str, Any] | None, kv_request_id: str, producer_side: SideChannel
    ) -> dict[str, Any]:
        """``kv_transfer_params`` of the consumer request that pulls; ``held`` is what the producer returned."""
