"""The engine side: the vLLM container settings that carry the measured transport into a deployment.

The wire config is not rebuilt here: the transport (``kvcal/transports/``) that
rendered the sweep's own engines renders the deployed ones too, placed in a pod
instead of on the sweep's host (``Role.BOTH``, side channel ``$(POD_IP)`` on the
transport's deployed port, never a run-local port). What this module adds is the pod
around it, as the llm-d P2P guide deploys it:

- ``args``: ``--block-size`` (the threshold's block size: the run's unless
  ``--block-size``), ``--kv-transfer-config``, and ``--kv-events-config`` when the
  transport needs the router to see its blocks;
- ``env``: ``POD_IP`` from the downward API first (Kubernetes expands ``$(POD_IP)`` in
  later values and in args only from variables defined before), the transport's
  variables, the KV-events variables, ``PYTHONHASHSEED`` = the run's (identical on every
  peer, or no block hash matches);
- ``volumeMounts`` / ``volumes``: a memory ``emptyDir`` at ``/dev/shm`` at least the CPU
  tier's size when the transport maps one there (10 % headroom, whole GiB);
- the connector's own pull-or-recompute threshold (nixl-pd: ``kv_recompute_threshold``) set to
  the fitted threshold in the kv-transfer-config, with comment lines saying where the engine
  applies it. When the fit measured that transport, the threshold is the engine knob's own
  break-even (a note says so); otherwise it is a proxy (a warning says so).
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from typing import Any

from kvcal.emit.options import canonical_transport
from kvcal.emit.router import PLUGIN_TYPE
from kvcal.emit.run_context import RunContext
from kvcal.errors import InputError
from kvcal.transports import get_transport
from kvcal.transports.base import Role, SideChannel, Transport
from kvcal.transports.p2p_tier import DEFAULT_CPU_BYTES

POD_IP = "$(POD_IP)"
GUIDE_HASH_SEED = "0"
SHM_VOLUME = "dshm"
SHM_HEADROOM = 1.1
_GIB = 2**30


@dataclass(frozen=True)
class EngineSpec:
    """A container-spec fragment for every engine of the pool, and what was assumed to build it."""

    transport: str
    args: list[str]
    env: list[dict[str, Any]]
    volume_mounts: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    comments: tuple[str, ...] = ()  # header lines of the rendered fragment (without '# ')

    def as_mapping(self) -> dict[str, Any]:
        out: dict[str, Any] = {"args": self.args, "env": self.env}
        if self.volumes:
            out["volumeMounts"] = self.volume_mounts
            out["volumes"] = self.volumes
        return out


def shm_size(tier_bytes: int) -> str:
    """A ``sizeLimit`` at least the tier: +10 %, rounded up to whole GiB (the guide: 88 GiB tier, 96 GiB shm)."""
    return f"{max(1, math.ceil(tier_bytes * SHM_HEADROOM / _GIB))}Gi"


def engine_spec(
    ctx: RunContext,
    *,
    block_size: int,
    threshold: int | None = None,
    transport: str | None = None,
    p2p_port: int | None = None,
    cpu_bytes_to_use: int | None = None,
    model: str | None = None,
) -> EngineSpec:
    """The deployed engines' settings for the measured (or given) transport; ``threshold`` (tokens) goes into
    the connector's own pull-or-recompute knob where it has one."""
    name = transport or ctx.transport
    if not name:
        raise InputError(
            "--format vllm needs the measured transport and the fit records none: pass --transport p2p-tier|nixl-pd"
        )
    kind = canonical_transport(name)
    notes: list[str] = []
    warnings: list[str] = []
    options = _tier_options(ctx, kind, cpu_bytes_to_use, warnings)
    if threshold is not None and get_transport(kind).recompute_threshold_key:
        options["recompute_threshold"] = threshold
    wire = get_transport(kind, options)
    port = p2p_port if (wire.pull_names_producer and p2p_port) else wire.deployed_side_port
    side = SideChannel(POD_IP, port)
    config = wire.kv_transfer_config(Role.BOTH, "cuda", side)
    args = ["--block-size", str(block_size), "--kv-transfer-config", _compact(config)]
    args += _events_args(wire, model, ctx.model, warnings)
    seed = _hash_seed(ctx, notes)
    env: list[dict[str, Any]] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    env += [{"name": k, "value": v} for k, v in {**wire.env(Role.BOTH, side), **wire.kv_events_env()}.items()]
    env.append({"name": "PYTHONHASHSEED", "value": str(seed)})
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    tier = wire.shm_bytes()
    if tier:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(tier)}})
    _side_notes(ctx, wire, port, notes, warnings)
    comments = _threshold_notes(ctx, wire, threshold, notes, warnings)
    return EngineSpec(kind, args, env, mounts, volumes, tuple(notes), tuple(warnings), comments)


def _tier_options(ctx: RunContext, kind: str, cpu_bytes_to_use: int | None, warnings: list[str]) -> dict[str, Any]:
    """The transport's options: the CPU tier's size when it has one (kvcal's default, with a warning, if not given)."""
    options: dict[str, Any] = {}
    if get_transport(kind).cpu_tier:
        if cpu_bytes_to_use is None:
            ran = _recorded_tier_bytes(ctx)
            was = f"; the run used {ran / _GIB:g} GiB per engine on its own host" if ran else ""
            warnings.append(
                f"cpu_bytes_to_use is kvcal's default {DEFAULT_CPU_BYTES / _GIB:g} GiB{was}, not sized for your "
                "pods: pass --cpu-bytes-to-use (the guide uses 88GiB with a 96Gi /dev/shm)"
            )
        else:
            options["cpu_bytes_to_use"] = cpu_bytes_to_use
    return options


def _events_args(wire: Transport, model: str | None, run_model: str | None, warnings: list[str]) -> list[str]:
    """``--kv-events-config`` when the transport needs the router to see its blocks, on the served model's topic."""
    served = model or run_model
    events = wire.kv_events_config(served or "MODEL")
    if events is None:
        return []
    if not served:
        warnings.append("the KV-events topic needs the served model name and the run records none: pass --model NAME")
    elif not model and ("/" in served and served.startswith(("/", ".", "~"))):
        warnings.append(
            f"the KV-events topic names the run's model folder {served!r}: pass --model with the served model name"
        )
    return ["--kv-events-config", _compact(events)]


def _hash_seed(ctx: RunContext, notes: list[str]) -> str:
    """The run's PYTHONHASHSEED, else the guide's: every engine must share it."""
    seed = ctx.python_hash_seed
    if seed is None:
        notes.append(
            f"PYTHONHASHSEED {GUIDE_HASH_SEED}: the run records none; the guide's value "
            "(it must be the same on every engine)"
        )
        return GUIDE_HASH_SEED
    notes.append(f"PYTHONHASHSEED {seed}: the run's (it must be the same on every engine, or no block hash matches)")
    return seed


def _side_notes(ctx: RunContext, wire: Transport, port: int, notes: list[str], warnings: list[str]) -> None:
    """The listener a pulling transport opens, or the device a P/D handoff run used."""
    if wire.pull_names_producer:
        notes.append(f"P2P listener on port {port} (rank r of a --data-parallel-size engine listens on {port} + r)")
        if port != wire.deployed_side_port:
            warnings.append(
                f"--p2p-port {port}: the router's sidecar always names {wire.deployed_side_port}; "
                "pulls it requests will not reach this listener"
            )
        return
    recorded = (ctx.kv_transfer_config or {}).get("kv_buffer_device")
    if recorded and recorded != "cuda":
        notes.append(f"the run used kv_buffer_device {recorded!r} (CPU engines); deployed GPU engines use 'cuda'")


def _threshold_notes(
    ctx: RunContext, wire: Transport, threshold: int | None, notes: list[str], warnings: list[str]
) -> tuple[str, ...]:
    """Whether the connector's own threshold knob got the engine's measured break-even or a proxy; its comment lines.

    The router's ``minCachedTokenDelta`` drives the P2P tier: for it a P/D handoff run stays a proxy.
    """
    key = wire.recompute_threshold_key
    if not key or threshold is None:
        return ()
    measured = _measured_transport(ctx)
    if measured == wire.name:
        notes.append(
            f"{key} {threshold}: vLLM's own pull-or-recompute threshold on the {wire.name} path this run "
            "measured (a pull against a recompute on the same connector): for it the fit measured the thing itself; "
            f"as the router's minCachedTokenDelta ({PLUGIN_TYPE} drives the P2P tier, OffloadingConnector) the same "
            "number is a proxy: re-measure with --transport p2p-tier on GPU engines"
        )
    else:
        warnings.append(
            f"{key} {threshold} comes from a run that measured {measured or 'a transport it does not record'}, "
            f"not the {wire.name} path vLLM applies it on: treat it as a proxy and re-measure with "
            f"--transport {wire.name}"
        )
    return (
        f"kvcal: {key} {threshold} in --kv-transfer-config: the fitted threshold.",
        *wire.recompute_threshold_applies,
    )


def _measured_transport(ctx: RunContext) -> str | None:
    """The transport the run recorded, by its canonical name (None: none or one kvcal does not know)."""
    try:
        return canonical_transport(ctx.transport) if ctx.transport else None
    except InputError:
        return None


def _recorded_tier_bytes(ctx: RunContext) -> int | None:
    extra = (ctx.kv_transfer_config or {}).get("kv_connector_extra_config")
    value = extra.get("cpu_bytes_to_use") if isinstance(extra, dict) else None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def _compact(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def render_vllm(spec: EngineSpec, *, origin: str = "") -> str:
    """The fragment as YAML under a header that says where each part goes."""
    from ruamel.yaml import YAML

    buf = io.StringIO()
    yaml = YAML(typ="rt")  # keeps each mapping's order: name first, as Kubernetes manifests are written
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.dump(spec.as_mapping(), buf)
    measured = f" (measured by {origin})" if origin else ""
    head = (
        f"# kvcal: vLLM engine settings for transport {spec.transport}{measured}.\n"
        "# Merge args/env/volumeMounts into each engine container and volumes into its pod; keep --block-size equal\n"
        "# to the router's index block size. Shapes follow the llm-d P2P guide and vLLM 0.33; "
        "not checked on GPU engines.\n"
    )
    return head + "".join(f"# {line}\n" for line in spec.comments) + buf.getvalue()
