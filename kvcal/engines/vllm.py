"""The real engine pair: two vLLM servers, launched by kvcal or attached to, joined by a transport.

Launch mode starts producer and consumer concurrently as planned by
:class:`~kvcal.engines.vllm_launch.LaunchPlan` (own cores or GPUs each, same
``PYTHONHASHSEED``, caches inside kvcal's cache folder), each owned by a
:class:`~kvcal.engines.process.ServerProcess`. Attach mode talks to two running
servers by URL and launches nothing; block size and max model length are then read
from the engines (``vllm:cache_config_info``, ``/v1/models``).

Measuring a leg and proving a pull: :mod:`kvcal.engines.vllm_measure`. Before launching,
the transport's host needs are checked (a GPU; ``/dev/shm`` room for a CPU tier), and
GPUs are split between the roles (:mod:`kvcal.engines.vllm_launch`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kvcal.engines.agreement import EngineIdentity, identity, refuse_mismatch, refuse_setting
from kvcal.engines.base import EnginePair
from kvcal.engines.dtype import kv_dtype_of
from kvcal.engines.http import EngineClient
from kvcal.engines.metrics import MetricsPageError, Snapshot, info_labels
from kvcal.engines.process import ServerProcess, sigterm_raises, wait_all_ready
from kvcal.engines.tinymodel import ensure_tiny_model
from kvcal.engines.vllm_launch import (
    ROLES,
    LaunchPlan,
    VllmSettings,
    check_shm,
    default_cache_dir,
    looks_local,
)
from kvcal.engines.vllm_load import UnderLoad
from kvcal.engines.vllm_measure import PairMeasurement
from kvcal.engines.vllm_setup import vllm_setup
from kvcal.errors import EngineError, InputError
from kvcal.estimate.hfconfig import model_profile_from_config
from kvcal.estimate.profiles import ModelProfile, kv_bytes_per_token
from kvcal.records.run import PairFacts, RoleFacts, RunSetup
from kvcal.records.run_folder import RunFolder
from kvcal.redact import redact_url
from kvcal.settings.sweep import SweepConfig
from kvcal.transports import get_transport
from kvcal.transports.base import Role

log = logging.getLogger(__name__)

__all__ = ["VllmPair", "VllmSettings", "pair_from_config"]


class VllmPair(UnderLoad, PairMeasurement, EnginePair):
    """A vLLM producer/consumer pair behind :class:`EnginePair` (``--engine vllm``)."""

    name = "vllm"

    def __init__(self, settings: VllmSettings | None = None) -> None:
        self.settings = s = settings or VllmSettings()
        if (s.producer_url is None) != (s.consumer_url is None):
            raise InputError("attach mode needs both --producer-url and --consumer-url")
        if s.block_size <= 0 or (s.max_model_len is not None and s.max_model_len <= 0):
            raise InputError("block size and max model length must be positive")
        if s.dp_ranks < 1:
            raise InputError(f"--dp-ranks must be >= 1 (got {s.dp_ranks})")
        if s.dp_ranks > 1 and not s.attach:
            raise InputError(
                "--dp-ranks seeds every rank of running engines: use it in attach mode (--producer-url/--consumer-url)"
            )
        self.transport = get_transport(s.transport, s.transport_options)
        self.cache_dir = Path(s.cache_dir or default_cache_dir()).expanduser()
        self.run_dir = Path(s.run_dir) if s.run_dir else self.cache_dir / "runs"
        self.plan = LaunchPlan(s, self.transport, self.cache_dir, self.run_dir)
        self._profile: ModelProfile | None = None
        self._profile_read = False
        self._engine_facts: dict[str, Any] = {}
        self._clients: dict[Role, EngineClient] = {}
        self._servers: list[ServerProcess] = []
        # The settled reading that ended the previous leg, per engine: on engines kvcal
        # launched nothing else runs between legs, so it is also the next leg's "before"
        # and saves one /metrics scrape (about 10 ms on a busy CPU engine) per engine per leg.
        self._last_reading: dict[Role, Snapshot] = {}
        self._loaded = False  # background load running (load states): no pacing, no reading reuse
        self._stack: contextlib.ExitStack | None = None
        if s.model is not None and not s.attach and looks_local(s.model):
            folder = Path(s.model).expanduser()
            if not (folder / "config.json").is_file():
                raise InputError(f"model folder {folder} not found or has no config.json")

    # -- what the pair is -------------------------------------------------------------

    def _model_profile(self) -> ModelProfile | None:
        """The model's layout from its config.json; None if unreadable.

        The config is read from a local folder, the tiny model, or the local HF cache.
        """
        if not self._profile_read:
            self._profile_read = True
            model = self._engine_facts.get("root") or self.plan.model_path()
            if self.settings.model is None and not self.settings.attach:
                ensure_tiny_model(self.cache_dir / "models")
            config: Path | None = Path(model) / "config.json"
            if config is None or not _is_file(config):
                config = None
                with contextlib.suppress(Exception):  # hub id: only what is cached here, never a download
                    from huggingface_hub import try_to_load_from_cache

                    cached = try_to_load_from_cache(model, "config.json")
                    config = Path(cached) if isinstance(cached, str) else None
            if config is not None:
                try:
                    self._profile = model_profile_from_config(config)
                except InputError as err:
                    log.warning("cannot read the KV layout of %s: %s", model, err)
        return self._profile

    @property
    def block_size(self) -> int:
        return int(self._engine_facts.get("block_size") or self.settings.block_size)

    @property
    def max_model_len(self) -> int:
        value = self._engine_facts.get("max_model_len") or self.plan.max_model_len()
        profile = self._model_profile() if value is None else None
        if profile is not None:
            value = profile.max_position_embeddings
        if value is None:
            raise EngineError("max model length unknown before the engines start; pass --max-model-len")
        return int(value)

    @property
    def vocab_size(self) -> int:
        if self.settings.vocab_size:
            return self.settings.vocab_size
        profile = self._model_profile()
        if profile is None:
            raise InputError(f"cannot read the vocabulary size of {self.plan.model_path()}: no readable config.json")
        return profile.vocab_size

    @property
    def kv_dtype(self) -> str | None:
        """The KV dtype the engines store, where their arguments or reports set one; None: the model's.

        Launch: ``--kv-cache-dtype``, else ``--dtype`` (kvcal's choice included; kvcal.engines.dtype). Attach: the
        cache dtype the engines report; their ``--dtype`` is not visible (vLLM reports no model dtype).
        """
        if self.settings.attach:
            reported = self._engine_facts.get("cache_dtype")
            return reported if reported and reported != "auto" else None
        return kv_dtype_of(self.plan.engine_args())

    @property
    def kv_bytes_per_token(self) -> int | None:
        """KV bytes of one token as the engines store it; None when the layout or the KV dtype's size is unknown."""
        profile = self._model_profile()
        if profile is None:
            return None
        try:
            return kv_bytes_per_token(profile, self.kv_dtype)
        except InputError:  # a KV dtype kvcal has no size for (fp8_inc, int8_per_token_head, ...)
            return None

    def dry_run_commands(self) -> list[str]:
        return [] if self.settings.attach else self.plan.commands()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        if self._stack is not None:
            return
        self._stack = contextlib.ExitStack()
        self._servers = []
        try:
            self._stack.enter_context(sigterm_raises())
            if self.settings.attach:
                self._attach()
            else:
                self._launch()
        except BaseException:
            self.stop()
            raise

    def _launch(self) -> None:
        plan = self.plan
        self.transport.check_host(plan.device == "cuda")  # before anything is launched
        check_shm(self.transport, engines=len(ROLES))
        plan.parallel_sizes()  # refuses one unshared GPU, or sizes that miss a role's GPUs, before anything starts
        if self.settings.model is None:
            ensure_tiny_model(self.cache_dir / "models")
        for folder in (self.cache_dir / "vllm", self.cache_dir / "inductor", self.cache_dir / "tmp", plan.rpc_dir):
            folder.mkdir(parents=True, exist_ok=True)
        assert self._stack is not None
        self._stack.callback(shutil.rmtree, plan.rpc_dir, ignore_errors=True)
        ports = plan.ports()
        for role in ROLES:
            server = ServerProcess(
                role.value,
                plan.argv(role),
                env={**os.environ, **plan.env(role)},
                log_path=self.run_dir / "logs" / f"{role.value}.log",
                ready_url=f"http://{self.settings.host}:{ports[f'{role.value}_http']}/health",
                ports=[ports[f"{role.value}_http"], ports[f"{role.value}_side"]],
            )
            self._stack.callback(server.stop)
            self._servers.append(server)
            server.start()  # both start before either is awaited: they compile concurrently
        ready_by = time.monotonic() + self.settings.startup_timeout_s  # readiness as a whole, facts included
        wait_all_ready(self._servers, self.settings.startup_timeout_s)
        for role in ROLES:
            url = f"http://{self.settings.host}:{ports[f'{role.value}_http']}"
            self._clients[role] = EngineClient(url, name=role.value, request_timeout_s=self.settings.probe_timeout_s)
            self._stack.callback(self._clients[role].close)
        self._read_engine_facts(ready_by)

    def _attach(self) -> None:
        s = self.settings
        if self.transport.pull_names_producer and not (s.producer_p2p_host and s.side_port):
            raise InputError(
                f"attaching over {self.transport.name} needs the producer's side channel: "
                "--producer-p2p-host/--producer-p2p-port"
            )
        assert self._stack is not None and s.producer_url and s.consumer_url
        ready_by = time.monotonic() + s.startup_timeout_s
        for role, url in ((Role.PRODUCER, s.producer_url), (Role.CONSUMER, s.consumer_url)):
            self._clients[role] = EngineClient(url, name=role.value, request_timeout_s=s.probe_timeout_s)
            self._stack.callback(self._clients[role].close)
        self._read_engine_facts(ready_by)

    def _read_engine_facts(self, ready_by: float) -> None:
        """Max model length and model root from ``/v1/models``, block size from ``vllm:cache_config_info``.

        Every read is typed and bounded (kvcal.engines.http) and ends by ``ready_by`` (monotonic): the startup timeout.
        """
        facts: dict[str, Any] = {}
        found: dict[Role, EngineIdentity] = {}
        for role in ROLES:
            client = self._clients[role]
            served = client.models(timeout_s=_left(ready_by, client)).data
            if not served:
                raise client.fail("cannot list models", "the server serves no model")
            client.model = served[0].id
            try:
                labels = (
                    info_labels(client.metrics_text(timeout_s=_left(ready_by, client)), "vllm:cache_config_info") or {}
                )
                found[role] = identity(client.base_url, served[0].root or served[0].id, labels)
            except MetricsPageError as err:
                raise client.fail("GET /metrics sent a page that is not Prometheus text", err) from None
            except ValueError as err:
                raise client.fail("GET /metrics sent an impossible block size", err) from None
            if role is Role.CONSUMER:
                facts = {
                    "max_model_len": served[0].max_model_len,
                    "root": served[0].root,
                    "cache_dtype": found[role].cache_dtype,
                }
                if found[role].block_size is not None:
                    facts["block_size"] = found[role].block_size
        if self.settings.attach:  # launched engines are started alike by kvcal itself
            refuse_mismatch(found[Role.PRODUCER], found[Role.CONSUMER])
            if self.settings.block_size_given:
                refuse_setting(found[Role.CONSUMER], self.settings.block_size)
        self._engine_facts = facts
        self._profile_read = False  # the engines may name a different model folder than the settings

    def restart_consumer(self) -> None:
        """Launch mode: a new consumer process, so its next pull opens a fresh NIXL session (--cold-sessions)."""
        if self.settings.attach or len(self._servers) != len(ROLES):
            raise InputError("--cold-sessions restarts a consumer kvcal launched; attached engines keep their sessions")
        consumer = self._servers[ROLES.index(Role.CONSUMER)]
        consumer.stop()
        consumer.start()
        wait_all_ready([consumer], self.settings.startup_timeout_s)

    def stop(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
        self._clients = {}

    # -- provenance ---------------------------------------------------------------------

    def setup(self) -> RunSetup:
        """Launch: everything kvcal chose (seed, kv-transfer-config per role, versions).

        Attach: what the engines report.
        """
        return vllm_setup(
            self.settings,
            self.transport,
            self.plan,
            block_size=self.block_size,
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_dtype=self.kv_dtype,
        )

    def facts(self) -> PairFacts:
        """Launch: the env, cores or GPUs kvcal set per role and the device.

        Attach: the mode and the producer's DP size.
        """
        if self.settings.attach:
            return PairFacts(
                engine="vllm", mode="attach", producer=RoleFacts(data_parallel_size=self.settings.dp_ranks)
            )
        roles = {}
        sizes = self.plan.parallel_sizes() or {}
        for role in ROLES:
            env, size = self.plan.env(role), sizes.get(role)
            roles[role.value] = RoleFacts(
                env=env,
                cpus=env.get("VLLM_CPU_OMP_THREADS_BIND"),
                gpus=env.get("CUDA_VISIBLE_DEVICES"),
                tensor_parallel_size=size.tensor if size else None,
                pipeline_parallel_size=size.pipeline if size else None,
                data_parallel_size=size.data if size else None,
            )
        return PairFacts(engine="vllm", mode="launch", device=self.plan.device, **roles)

    def describe(self) -> dict[str, Any]:
        """The pair's own provenance.

        Versions, CPU, GPUs and UCX_* env are in :func:`kvcal.files.provenance.host_provenance`.
        """
        launch = not self.settings.attach
        roles = ROLES
        return {
            "engine": "vllm",
            "mode": "launch" if launch else "attach",
            "transport": self.transport.name,
            "model": self._engine_facts.get("root") or self.plan.model_path(),
            "random_weights": self.settings.model is None or self.settings.load_format == "dummy",
            "device": self.plan.device if launch else None,
            "block_size": self.block_size,
            "max_model_len": self._engine_facts.get("max_model_len") or self.plan.max_model_len(),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "dp_ranks": self.settings.dp_ranks,
            "parallel_sizes": {r.value: asdict(p) for r, p in (self.plan.parallel_sizes() or {}).items()}
            if launch
            else None,
            "kv_transfer_config": {
                r.value: self.transport.kv_transfer_config(r, self.plan.device, self.plan.side(r)) for r in roles
            }
            if launch
            else None,
            "env": {r.value: self.plan.env(r) for r in roles} if launch else None,
            "commands": self.dry_run_commands(),
            "urls": {r.value: redact_url(c.base_url) for r, c in self._clients.items()},
            "startup_s": {srv.name: srv.ready_after_s for srv in self._servers},
        }


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file here.

    False for a path no file system can hold (an attached engine's ``root`` is its text).
    """
    try:
        return path.is_file()
    except OSError:  # e.g. a name over 255 bytes: pathlib raises, and the CLI would print it whole as the user's file
        return False


def _left(ready_by: float, client: EngineClient) -> float:
    """Seconds of the startup timeout left; EngineError naming the engine when none is."""
    left = ready_by - time.monotonic()
    if left <= 0:
        raise client.fail("not ready within the startup timeout", "it had not answered /v1/models and /metrics by then")
    return left


def pair_from_config(config: SweepConfig, run: RunFolder) -> VllmPair:
    """The pair ``kvcal sweep`` asks for: settings from the sweep config, server logs in the run folder."""
    return VllmPair(VllmSettings.from_engine(config.engine, run_dir=run.path))
