"""What a KV transport tells the vLLM pair: engine config, env, the pull leg, the proof metric.

A transport is the way the consumer obtains the producer's KV for a pull leg. The pair
(:mod:`kvcal.engines.vllm`) owns processes, HTTP and timing; a transport only answers:

- ``kv_transfer_config(role, device, side)``: the ``--kv-transfer-config`` JSON per role;
- ``env(role, side)``: the environment variables per role (side-channel host/port);
- ``kv_events_config(model)``: the ``--kv-events-config`` a deployed engine needs so the
  router's prefix index sees its blocks (None when the transport needs none);
- ``shm_bytes()``: shared memory (``/dev/shm``) one engine's transport maps, if any;
- ``deployed_side_port``: the side-channel port every deployed engine listens on (the
  router or the peer names it; a run-local port must never reach a deployment).

The same two methods render the sweep's own engines and a deployment: only the
*placement* differs (``side``: a local host and a free port in a sweep,
``$(POD_IP)`` and ``deployed_side_port`` in a pod; ``Role.BOTH`` for a pool where every
engine is producer and consumer).
- ``hold_params()`` / ``pull_params(...)``: the ``kv_transfer_params`` of the producer
  request that makes it hold the prefix, and of the consumer request that pulls it;
- ``hold_settle_metrics``: producer counters that must rise before a pull may start
  (a transport whose producer stores asynchronously), empty if none;
- ``bytes_metrics``: where the bytes that crossed the wire are counted (which engine,
  which sample names in order of preference: names drift between vLLM versions). The
  first is the transport's own counter: where an engine has it, only it proves a pull;
  the others stand in on engines without it, and each probe records which one proved it;
- ``pull_time``: where the pulling engine counts its transfers' own time, bytes and
  tokens (the engine side of a pull, :class:`PullTime`), None where it does not;
- ``needs_gpu``: checked before anything is launched;
- ``pull_names_producer``: whether the pull request names the producer's side channel;
- ``aliases``, ``deployment``, ``cpu_tier``: the other names it goes by, the llm-d
  deployment shape that carries it, and whether it keeps a CPU tier per engine (emit
  and validation ask these instead of comparing names);
- ``recompute_threshold_key`` / ``recompute_threshold_applies``: the extra-config key under
  which the engine's connector reads its own pull-or-recompute threshold, and where that
  connector applies it (empty: the connector has no such knob); the ``recompute_threshold``
  option (tokens) puts a value there.

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
    BOTH = "both"  # a deployed pool engine: it serves pulls and pulls itself


@dataclass(frozen=True)
class SideChannel:
    """Where an engine's transport side channel listens (host reachable by the peer, port)."""

    host: str
    port: int


@dataclass(frozen=True)
class MetricRef:
    """A sample name and the labels a sample must carry to count (e.g. one transfer direction).

    A label value ``*:p2p`` matches a tier named by position and type, ``1:p2p``
    (kvcal.engines.metrics.label_matches).
    """

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    def shown(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.name}{{{inner}}}" if inner else self.name


@dataclass(frozen=True)
class BytesMetric:
    """Bytes moved on ``role``'s engine: the delta of ``candidates[0]``, the transport's own counter, when the
    engine has it; else of the first of the others (stand-ins) it exposes.

    The engine has its own counter when it exposes a sample of it with its labels, declares
    its family (a labelled counter has no sample before its first increment), or exposes
    any metric whose name starts with ``family_prefix`` (a page that leaves out
    sample-less families still shows the counter's siblings).
    """

    role: Role
    candidates: tuple[MetricRef, ...]
    family_prefix: str | None = None


@dataclass(frozen=True)
class PullTime:
    """Where the pulling engine counts what its pulls cost on the wire (not the TTFT): time, bytes, transfers, tokens.

    ``pooled_over_ranks``: the time sums every tensor-parallel rank's transfer of one pull
    (NIXL's histograms), so a pull's wall time is the sum over TP.
    """

    role: Role
    time: MetricRef
    bytes: MetricRef
    tokens: MetricRef
    transfers: MetricRef | None = None
    pooled_over_ranks: bool = False


class Transport(ABC):
    """One way to move KV from producer to consumer; see the module docstring."""

    name: ClassVar[str]
    needs_gpu: ClassVar[bool] = False
    bytes_metrics: ClassVar[tuple[BytesMetric, ...]]
    hold_settle_metrics: ClassVar[tuple[MetricRef, ...]] = ()
    # Tokens the consumer took from the transport (a second proof beside the bytes), if counted.
    tokens_metric: ClassVar[MetricRef | None] = None
    # Where the pulling engine counts its transfers' time (the engine side of a pull), if it does.
    pull_time: ClassVar[PullTime | None] = None
    # True when the pull request must name the producer's side channel itself (attach
    # mode then needs it from the user); False when the producer's answer carries it.
    pull_names_producer: ClassVar[bool] = False
    deployed_side_port: ClassVar[int]
    # Other names a recorded run, a Helm chart or a user may give it (the router's connector name, ...).
    aliases: ClassVar[tuple[str, ...]] = ()
    # The llm-d deployment shape that carries it: "p2p" (one pool, the P2P tier) or "pd" (prefill/decode).
    deployment: ClassVar[str] = "pd"
    # True when each engine keeps a CPU tier sized by the ``cpu_bytes_to_use`` option.
    cpu_tier: ClassVar[bool] = False
    # The connector's own pull-or-recompute threshold: its kv_connector_extra_config key, and
    # where the connector applies it (comment lines for a deployment); "" / (): no such knob.
    recompute_threshold_key: ClassVar[str] = ""
    recompute_threshold_applies: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    def check_host(self, has_gpu: bool) -> None:
        """Raise HardwareError before launch if this transport cannot run here."""
        if self.needs_gpu and not has_gpu:
            raise HardwareError(
                f"transport {self.name} needs a GPU engine and this host has none; use --transport nixl-pd on CPU"
            )

    @abstractmethod
    def kv_transfer_config(self, role: Role, device: str, side: SideChannel) -> dict[str, Any]:
        """The ``--kv-transfer-config`` object for ``role`` on ``device`` ('cpu' or 'cuda')."""

    @abstractmethod
    def env(self, role: Role, side: SideChannel) -> dict[str, str]:
        """Environment variables for ``role``'s server."""

    def kv_events_config(self, model: str) -> dict[str, Any] | None:
        """``--kv-events-config`` of a deployed engine (None: the transport needs no KV events)."""
        return None

    def kv_events_env(self) -> dict[str, str]:
        """Variables ``kv_events_config``'s ``$(...)`` references need in a pod."""
        return {}

    def shm_bytes(self) -> int | None:
        """Bytes of ``/dev/shm`` one engine's transport maps (None: it uses none)."""
        return None

    @abstractmethod
    def hold_params(self, kv_request_id: str) -> dict[str, Any] | None:
        """``kv_transfer_params`` of the producer request that makes it hold the prefix (None: a plain request)."""

    @abstractmethod
    def pull_params(
        self, held: dict[str, Any] | None, kv_request_id: str, producer_side: SideChannel
    ) -> dict[str, Any]:
        """``kv_transfer_params`` of the consumer request that pulls; ``held`` is what the producer returned."""
