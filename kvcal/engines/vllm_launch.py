"""How kvcal launches a vLLM pair: settings, ports, core/GPU binding, the two commands.

Pure planning, no processes: :class:`LaunchPlan` turns :class:`VllmSettings` into the
``python -m kvcal.engines.serve ...`` argv and environment of each role, so ``--dry-run``
prints exactly what :class:`~kvcal.engines.vllm.VllmPair` will run. Choices it makes:

- ports: free ones picked once (HTTP and the transport's side channel, per role);
- CPU: each engine gets its own half of the cores, for its compute threads
  (``VLLM_CPU_OMP_THREADS_BIND``; with a KV connector, two unbound engines on 2 cores
  prefill about 8x slower) and for all its processes (``KVCAL_CPU_AFFINITY``, applied
  by kvcal.engines.serve: vLLM's engine core and API server busy-wait and would otherwise
  land on the other engine's cores);
  ``VLLM_CPU_KVCACHE_SPACE``; NIXL's progress-thread poll timeout (see kvcal.engines.serve);
- GPU: ``CUDA_VISIBLE_DEVICES`` per role: as given, else the visible GPUs split in
  halves (two engines on one GPU fail vLLM's free-memory check at start); one visible
  GPU is refused unless ``share_gpu`` gives each engine its ``--gpu-memory-utilization``;
  each engine's parallel sizes fill exactly the GPUs its role sees
  (:mod:`kvcal.engines.gpu_placement`: ``--tensor-parallel-size`` = that count unless
  the engine arguments set sizes, which must multiply to it);
- dtype: kvcal's tiny model on CPU runs in bf16 only where the CPU has native bf16, else in float32,
  unless the engine arguments name a ``--dtype`` (:mod:`kvcal.engines.dtype`);
- ``/dev/shm``: a transport whose CPU tier is an mmap there (p2p-tier) needs room for
  both engines' tiers, checked before launch (:func:`check_shm`);
- both: the same ``PYTHONHASHSEED``; vLLM's compile caches, IPC sockets and temporary
  files inside kvcal's cache folder (``VLLM_CACHE_ROOT``, ``TORCHINDUCTOR_CACHE_DIR``,
  ``VLLM_RPC_BASE_PATH``, ``TMPDIR``); ``HF_HUB_OFFLINE=1`` for local models;
  ``PYTHONPATH`` led by :mod:`kvcal.engines.boot`, so every interpreter the engine starts
  (vLLM's model inspection in a fresh ``python -m``, the spawned engine core) is shielded
  from what a plain pip install gets wrong (kvcal.engines.shields), not only the server.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from kvcal.engines.boot import BOOT_DIR
from kvcal.engines.dtype import DtypeChoice, choose_dtype, cpu_flags
from kvcal.engines.gpu_placement import ParallelSizes, place
from kvcal.engines.process import free_ports
from kvcal.engines.tinymodel import TINY_MODEL_DIRNAME
from kvcal.errors import HardwareError, InputError
from kvcal.files.provenance import gpu_inventory
from kvcal.settings.sweep import EngineSettings
from kvcal.transports.base import Role, SideChannel, Transport
from kvcal.transports.p2p_tier import P2P_PORT

log = logging.getLogger(__name__)

SERVED_MODEL_NAME = "kvcal-model"
TINY_MAX_MODEL_LEN = 8192
ROLES = (Role.PRODUCER, Role.CONSUMER)


def default_cache_dir() -> Path:
    """``$KVCAL_CACHE_DIR`` or ``~/.cache/kvcal``: tiny model and vLLM/inductor caches."""
    return Path(os.environ.get("KVCAL_CACHE_DIR") or Path.home() / ".cache" / "kvcal").expanduser()


class VllmSettings(EngineSettings):
    """Everything the vLLM pair needs: the sweep's engine group (each setting declared there once) plus what only
    kvcal's own launch decides; defaults launch kvcal's tiny model over nixl-pd on this host."""

    host: str = "127.0.0.1"
    producer_port: int | None = None  # None: a free port
    consumer_port: int | None = None
    producer_side_port: int | None = None  # the transport's side channel (NIXL / P2P)
    consumer_side_port: int | None = None
    load_format: str | None = None  # None: 'dummy' for the tiny model, vLLM's default otherwise
    device: Literal["auto", "cpu", "cuda"] = "auto"
    cpu_kvcache_space_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE (CPU only)
    nixl_progress_delay_us: int | None = 1000  # CPU only; see kvcal.engines.serve. None: NIXL's spinning default
    settle_timeout_s: float = 5.0
    idle_max_cores: float | None = None  # pace legs until launched engines idle; None: 0.3 on CPU, off on GPU
    idle_timeout_s: float = 5.0
    warmup_tries: int = 3
    vocab_size: int | None = None  # override when the model's config.json cannot be read
    run_dir: Path | None = None  # server logs go to run_dir/logs; None: the cache folder
    cache_dir: Path | None = None  # None: default_cache_dir()

    @classmethod
    def from_engine(cls, engine: EngineSettings, **more: Any) -> VllmSettings:
        """The launch settings of the sweep's engine group, plus ``more``; what the group's user set stays set
        (``block_size_given``)."""
        given = {name: getattr(engine, name) for name in engine.model_fields_set}
        return cls.model_validate({**given, **more})

    @property
    def block_size_given(self) -> bool:
        """The block size was set: attached engines that report another are refused."""
        return "block_size" in self.model_fields_set

    @property
    def side_port(self) -> int:
        """The producer's P2P listener (attach mode); None, as a run.json from before its default holds: the port."""
        return self.producer_p2p_port or P2P_PORT

    @property
    def transport_options(self) -> dict[str, Any]:
        """What the transport is built with: the CPU tier's size when one is set."""
        return {"cpu_bytes_to_use": self.cpu_bytes_to_use} if self.cpu_bytes_to_use else {}


def _cpu_ranges(cpus: list[int]) -> str:
    """[0,1,2,5] -> '0-2,5' (the syntax VLLM_CPU_OMP_THREADS_BIND parses)."""
    parts: list[str] = []
    start = prev = cpus[0]
    for cpu in [*cpus[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(parts)


def split_cpus() -> tuple[str, str]:
    """Producer and consumer core lists: the first and second half of the cores this process may use."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        log.warning("one core only: producer and consumer share it, and prefill with a KV connector is slow")
        return str(cpus[0]), str(cpus[0])
    half = len(cpus) // 2
    return _cpu_ranges(cpus[:half]), _cpu_ranges(cpus[half:])


def visible_gpus(count: int) -> list[str]:
    """Device ids the engines may use: ``CUDA_VISIBLE_DEVICES`` when set, else 0..count-1."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        return [g.strip() for g in env.split(",") if g.strip()]
    return [str(i) for i in range(count)]


def split_gpus(visible: list[str], share: Sequence[float] | None) -> tuple[str, str]:
    """Producer and consumer ``CUDA_VISIBLE_DEVICES``: halves of ``visible``, or all of them for both when shared."""
    if share is not None:
        if len(share) != 2 or not all(0 < f < 1 for f in share) or sum(share) >= 1:
            raise InputError(
                f"--share-gpu needs two memory fractions, producer,consumer, each in (0, 1) and summing "
                f"under 1, e.g. 0.45,0.45 (got {','.join(map(str, share))})"
            )
        return ",".join(visible), ",".join(visible)
    if len(visible) < 2:
        raise InputError(
            f"one GPU visible ({','.join(visible) or 'none'}): both engines on it would fail vLLM's free-memory "
            "check; give each its own (--producer-gpus/--consumer-gpus) or share it with --share-gpu 0.45,0.45"
        )
    half = len(visible) // 2
    return ",".join(visible[:half]), ",".join(visible[half : 2 * half])


def check_shm(transport: Transport, *, engines: int = 2, path: str = "/dev/shm") -> None:
    """HardwareError unless ``path`` has room for every engine's CPU tier (transports that map one there)."""
    need = transport.shm_bytes()
    if not need:
        return
    gib = 2**30
    fix = (
        f"enlarge it (docker run --shm-size={-(-need * engines // gib) + 1}g; "
        "in Kubernetes a memory emptyDir at /dev/shm) "
        "or lower --cpu-bytes-to-use"
    )
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        raise HardwareError(f"{path} is missing but {transport.name}'s CPU tier is an mmap there: {fix}") from None
    if free < need * engines:
        raise HardwareError(
            f"{path} has {free / gib:.1f} GiB free but the {engines} engines' {transport.name} CPU tiers need "
            f"{engines} x {need / gib:g} GiB (cpu_bytes_to_use): {fix}"
        )


def looks_local(model: str) -> bool:
    """A local folder (absolute, ./relative, ~ or existing) rather than a hub id."""
    return model.startswith(("/", "./", "../", "~")) or Path(model).expanduser().exists()


class LaunchPlan:
    """The argv and environment of each role for ``settings`` (ports resolved once, lazily)."""

    def __init__(self, settings: VllmSettings, transport: Transport, cache_dir: Path, run_dir: Path) -> None:
        self.settings = settings
        self.transport = transport
        self.cache_dir = cache_dir
        self.run_dir = run_dir
        # vLLM leaves its IPC socket files behind: one folder per pair, removed on stop.
        self.rpc_dir = cache_dir / "rpc" / uuid.uuid4().hex[:8]
        self._gpus: dict[str, Any] | None = None
        self._ports: dict[str, int] | None = None
        self._dtype: DtypeChoice | None = None

    @property
    def device(self) -> str:
        if self.settings.device != "auto":
            return self.settings.device
        if self._gpus is None:
            self._gpus = gpu_inventory() or {}
        return "cuda" if self._gpus else "cpu"

    def gpu_assignment(self) -> dict[Role, str] | None:
        """``CUDA_VISIBLE_DEVICES`` per role on a GPU host (None on CPU); InputError for one unshared GPU."""
        if self.device != "cuda":
            if self.settings.share_gpu is not None:
                log.warning("--share-gpu has no effect: this host has no GPU (the engines split its cores instead)")
            return None
        s = self.settings
        if s.producer_gpus is not None and s.consumer_gpus is not None:
            return {Role.PRODUCER: s.producer_gpus, Role.CONSUMER: s.consumer_gpus}
        if self._gpus is None:
            self._gpus = gpu_inventory() or {}
        count = int(self._gpus.get("devices") or 0)
        producer, consumer = split_gpus(visible_gpus(count), s.share_gpu)
        return {Role.PRODUCER: s.producer_gpus or producer, Role.CONSUMER: s.consumer_gpus or consumer}

    def parallel_sizes(self) -> dict[Role, ParallelSizes] | None:
        """Each role's parallel sizes on a GPU host (None on CPU); InputError when given sizes miss its GPUs."""
        assignment = self.gpu_assignment()
        if assignment is None:
            return None
        return {role: place(role.value, assignment[role], self.settings.engine_args)[0] for role in ROLES}

    def model_path(self) -> str:
        model = self.settings.model
        if model is None:
            return str(self.cache_dir / "models" / TINY_MODEL_DIRNAME)
        return str(Path(model).expanduser()) if looks_local(model) else model

    def max_model_len(self) -> int | None:
        """What the engines are started with: the setting, the tiny model's limit, or vLLM's default (None)."""
        if self.settings.max_model_len is not None:
            return self.settings.max_model_len
        return TINY_MAX_MODEL_LEN if self.settings.model is None else None

    def dtype_choice(self) -> DtypeChoice:
        """The engines' dtype and why (decided once; kvcal's own choice is said once on stderr)."""
        if self._dtype is None:
            s = self.settings
            self._dtype = choose_dtype(s.engine_args, tiny_model=s.model is None, device=self.device, flags=cpu_flags())
            if self._dtype.passed and self._dtype.dtype == "float32":
                log.warning("%s (--engine-arg=--dtype=bfloat16 keeps bf16)", self._dtype.reason)
        return self._dtype

    def engine_args(self) -> list[str]:
        """The vLLM arguments both engines get beyond kvcal's fixed ones: kvcal's dtype choice, then the user's."""
        return [*self.dtype_choice().args(), *self.settings.engine_args]

    def ports(self) -> dict[str, int]:
        if self._ports is None:
            s = self.settings
            wanted = {
                "producer_http": s.producer_port,
                "consumer_http": s.consumer_port,
                "producer_side": s.producer_side_port,
                "consumer_side": s.consumer_side_port,
            }
            auto = iter(free_ports(sum(v is None for v in wanted.values()), s.host))
            self._ports = {k: v if v is not None else next(auto) for k, v in wanted.items()}
        return self._ports

    def side(self, role: Role) -> SideChannel:
        if self.settings.attach:
            return SideChannel(self.settings.producer_p2p_host or "", self.settings.side_port)
        return SideChannel(self.settings.host, self.ports()[f"{role.value}_side"])

    def argv(self, role: Role) -> list[str]:
        s = self.settings
        argv = [sys.executable, "-m", "kvcal.engines.serve", self.model_path()]
        argv += ["--host", s.host, "--port", str(self.ports()[f"{role.value}_http"])]
        argv += ["--served-model-name", SERVED_MODEL_NAME, "--block-size", str(s.block_size)]
        max_len = self.max_model_len()
        if max_len is not None:
            argv += ["--max-model-len", str(max_len)]
        load_format = s.load_format or ("dummy" if s.model is None else None)
        if load_format:
            argv += ["--load-format", load_format]
        config = self.transport.kv_transfer_config(role, self.device, self.side(role))
        argv += ["--kv-transfer-config", json.dumps(config, separators=(",", ":"))]
        if self.device == "cuda":
            argv += place(role.value, (self.gpu_assignment() or {})[role], s.engine_args)[1]
            if s.share_gpu is not None:
                argv += ["--gpu-memory-utilization", str(s.share_gpu[0] if role is Role.PRODUCER else s.share_gpu[1])]
        return argv + self.engine_args()

    def env(self, role: Role) -> dict[str, str]:
        """The variables kvcal sets for ``role`` (the server gets them over kvcal's own environment)."""
        s = self.settings
        env = {
            "PYTHONHASHSEED": str(s.python_hash_seed),
            "VLLM_CACHE_ROOT": str(self.cache_dir / "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": str(self.cache_dir / "inductor"),
            "VLLM_RPC_BASE_PATH": str(self.rpc_dir),
            "TMPDIR": str(self.cache_dir / "tmp"),  # vLLM's dist-init files would land in /tmp
            "KVCAL_RUN": str(self.run_dir.resolve()),  # marks the run's processes (tests find them by it)
            "PYTHONPATH": os.pathsep.join([str(BOOT_DIR), *filter(None, [os.environ.get("PYTHONPATH")])]),
        }
        if s.model is None or looks_local(s.model):
            env["HF_HUB_OFFLINE"] = "1"
        if self.device == "cpu":
            cpus = dict(zip(ROLES, split_cpus()))
            chosen = (s.producer_cpus if role is Role.PRODUCER else s.consumer_cpus) or cpus[role]
            env["VLLM_CPU_OMP_THREADS_BIND"] = chosen
            env["KVCAL_CPU_AFFINITY"] = chosen  # the whole server, not only its compute threads (kvcal.engines.serve)
            env["VLLM_CPU_KVCACHE_SPACE"] = str(s.cpu_kvcache_space_gib)
            if s.nixl_progress_delay_us:
                env["KVCAL_NIXL_PROGRESS_DELAY_US"] = str(s.nixl_progress_delay_us)
        else:
            env["CUDA_VISIBLE_DEVICES"] = (self.gpu_assignment() or {})[role]
        env.update(self.transport.env(role, self.side(role)))
        return env

    def commands(self) -> list[str]:
        """Each role's command as one shell line with the variables kvcal sets in front."""
        return [
            " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env(role).items()) + " " + shlex.join(self.argv(role))
            for role in ROLES
        ]
