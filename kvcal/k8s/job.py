"""In-cluster attach mode: render a Kubernetes Job that runs the sweep next to the engines.

Engine pod IPs (and the NIXL side channels behind them) are reachable only inside the
cluster, so a sweep against a live llm-d deployment has to run there. This stage owns
the manifest: one ``batch/v1`` Job whose single container runs, in order,

    kvcal sweep --engine vllm --transport T --producer-url P --consumer-url C --model M
                --output-dir /results --name RUN [--prefix-lengths ...] [--reps N] [extra]
                                                 (--resume when the run folder is there: a rerun)
    kvcal fit /results/RUN
    kvcal emit-config /results/RUN --format json -o /results/RUN/emit.json
    cat /results/RUN/emit.json

with ``backoffLimit: 0`` (a failed calibration must not be silently retried against a
warmed cache), ``restartPolicy: Never``, ``ttlSecondsAfterFinished``, and the results on
an ``emptyDir`` (default) or a PersistentVolumeClaim (``--pvc``) mounted at /results.
A rerun (the Job applied again over the same PVC) continues the sweep and fits again;
emit.json is replaced whole by ``emit-config -o``, so a refused emit (exit 3) leaves the
last good one. Nothing here talks to a cluster: the output is YAML for ``kubectl apply -f``.
"""

from __future__ import annotations

import io
import ipaddress
import re
import shlex
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString

from kvcal.errors import InputError
from kvcal.files.urls import check_host, parse_engine_url
from kvcal.settings.sweep_flags import flag_of, launch_only_flags, sweep_argv
from kvcal.sweep.lengths.probe_plan import validate_prefix_lengths
from kvcal.sweep.validate import side_channel_only
from kvcal.transports import available, transport_names

RESULTS_MOUNT = "/results"
TRANSPORTS = transport_names()
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
# The sweep settings the Job sets itself (their flat names, in command-line order); an extra
# argument repeating one of their flags would silently win or clash.
JOB_SETTINGS = (
    "engine",
    "transport",
    "producer_url",
    "consumer_url",
    "model",
    "producer_p2p_host",
    "producer_p2p_port",
    "prefix_lengths",
    "reps",
    "output_dir",
    "name",
)
_MANAGED = tuple(flag_of(name) for name in JOB_SETTINGS)
# Launch-mode flags: the Job attaches to running engines, it starts none.
_LAUNCH_ONLY = (*launch_only_flags(), "--dry-run")


@dataclass(frozen=True)
class JobSpec:
    """Everything the Job manifest depends on; construction validates it (InputError, one line)."""

    image: str
    producer_url: str
    consumer_url: str
    model: str
    name: str = "kvcal-calibrate"
    namespace: str = "default"
    transport: str = "p2p-tier"
    run_name: str | None = None
    prefix_lengths: tuple[int, ...] = ()
    reps: int | None = None
    producer_p2p_host: str | None = None
    producer_p2p_port: int | None = None
    pvc: str | None = None
    cpu: str = "1"
    memory: str = "2Gi"
    ttl_seconds: int = 86400
    service_account: str | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        _dns_label(self.name, "--name")
        _dns_label(self.namespace, "--namespace")
        if self.run_name is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", self.run_name):
            raise InputError(f"--run-name must be letters, digits, '.', '_' or '-' (got {self.run_name!r})")
        if not self.image or any(c.isspace() for c in self.image):
            raise InputError(f"--image must be an image reference without spaces (got {self.image!r})")
        if not self.model.strip():
            raise InputError("--model must name the model the engines serve")
        if self.transport not in TRANSPORTS:
            raise InputError(f"--transport must be one of {', '.join(TRANSPORTS)} (got {self.transport!r})")
        producer = validate_url(self.producer_url, "--producer-url")
        consumer = validate_url(self.consumer_url, "--consumer-url")
        if producer == consumer:
            raise InputError("--producer-url and --consumer-url are the same engine; give two distinct pods")
        if self.prefix_lengths:  # the sweep's own check, here rather than in the cluster minutes later
            try:
                validate_prefix_lengths(list(self.prefix_lengths), _block_size(self.extra_args), None)
            except InputError as err:
                raise InputError(f"--prefix-lengths: {err}") from None
        if self.reps is not None and self.reps < 1:
            raise InputError(f"--reps must be >= 1 (got {self.reps})")
        if self.producer_p2p_host is not None:
            _host(self.producer_p2p_host, "--producer-p2p-host")
        if self.producer_p2p_port is not None and not 1 <= self.producer_p2p_port <= 65535:
            raise InputError(f"--producer-p2p-port must be 1-65535 (got {self.producer_p2p_port})")
        side_channel = [flag_of(k) for k in ("producer_p2p_host", "producer_p2p_port") if getattr(self, k) is not None]
        if side_channel:  # the sweep in the pod would refuse them: refused here, before the Job is applied
            side_channel_only(self.transport, ", ".join(side_channel))
        if self.pvc is not None and (len(self.pvc) > 253 or not _DNS_SUBDOMAIN.match(self.pvc)):
            raise InputError(f"--pvc must be a PersistentVolumeClaim name (lower-case DNS name, got {self.pvc!r})")
        if self.service_account is not None and not _DNS_SUBDOMAIN.match(self.service_account):
            raise InputError(f"--service-account must be a lower-case DNS name (got {self.service_account!r})")
        for flag, qty in (("--cpu", self.cpu), ("--memory", self.memory)):
            if not _QUANTITY.match(qty):
                raise InputError(f"{flag} must be a Kubernetes quantity such as 500m, 2 or 4Gi (got {qty!r})")
        if self.ttl_seconds < 0:
            raise InputError(f"--ttl must be >= 0 seconds (got {self.ttl_seconds})")
        for arg in self.extra_args:
            flag = arg.split("=", 1)[0]
            if flag in _MANAGED:
                raise InputError(
                    f"extra sweep argument {flag} is set by k8s-job itself; use the k8s-job option instead"
                )
            if flag == "--resume":
                raise InputError("extra sweep argument --resume: the Job resumes its run folder by itself on a rerun")
            if flag in _LAUNCH_ONLY:
                raise InputError(
                    f"extra sweep argument {flag} is for launching engines; the Job attaches to running ones"
                )

    @property
    def run(self) -> str:
        return self.run_name or self.name


def _block_size(extra_args: tuple[str, ...]) -> int:
    """The --block-size the Job's sweep will use (64, kvcal sweep's default, unless passed after --)."""
    for i, arg in enumerate(extra_args):
        value = (
            arg.split("=", 1)[1]
            if arg.startswith("--block-size=")
            else (extra_args[i + 1] if arg == "--block-size" and i + 1 < len(extra_args) else None)
        )
        if value is not None:
            try:
                return int(value)
            except ValueError:
                raise InputError(f"extra sweep argument --block-size {value!r} is not an integer") from None
    return 64


def _dns_label(value: str, flag: str) -> None:
    if not value or len(value) > 63 or not _DNS_LABEL.match(value):
        raise InputError(f"{flag} must be a lower-case DNS label (a-z, 0-9, '-', at most 63 characters; got {value!r})")


def _host(host: str, what: str) -> str:
    """A host name or IP the Job can reach; loopback would be the Job's own pod."""
    name = (host or "").strip("[]")
    own_pod = f"{what}: {host} inside the Job is the Job's own pod; give the engine pod's IP or Service name"
    if name.lower() == "localhost":
        raise InputError(own_pod)
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", name):
            raise InputError(f"{what}: {host!r} is not a host name or IP address") from None
        return check_host(name, what)  # the labels as the HTTP client and the resolver will take them
    if ip.is_loopback or ip.is_unspecified:
        raise InputError(own_pod)
    return name


def validate_url(url: str, flag: str) -> tuple[str, str, int]:
    """An engine base URL the Job can reach: http(s)://host[:port][/path], no credentials/query."""
    parts = parse_engine_url(url, flag)
    host = _host(parts.host, flag)
    return host.lower(), parts.scheme, parts.port


def sweep_command(spec: JobSpec) -> list[str]:
    """The ``kvcal sweep`` argv the Job runs (attach mode: the engines already run)."""
    host = spec.producer_p2p_host
    if host is None and available()[spec.transport].pull_names_producer:
        host = urlsplit(spec.producer_url).hostname  # the producer pod's own address carries its P2P listener
    values = dict(
        engine="vllm",
        transport=spec.transport,
        producer_url=spec.producer_url,
        consumer_url=spec.consumer_url,
        model=spec.model,
        producer_p2p_host=host,
        producer_p2p_port=spec.producer_p2p_port,
        prefix_lengths=spec.prefix_lengths,
        reps=spec.reps,
        output_dir=RESULTS_MOUNT,
        name=spec.run,
    )
    return ["kvcal", "sweep", *sweep_argv({name: values[name] for name in JOB_SETTINGS}), *spec.extra_args]


def job_script(spec: JobSpec) -> str:
    """The container's shell script: sweep (resumed on a rerun), fit, emit (every argument shell-quoted)."""
    run_dir = f"{RESULTS_MOUNT}/{spec.run}"
    lines = ["set -eu", sweep_or_resume(shlex.join(sweep_command(spec)), shlex.quote(run_dir)), *final_step(run_dir)]
    return "\n".join([*lines, "cat " + shlex.quote(f"{run_dir}/emit.json")]) + "\n"


def sweep_or_resume(sweep: str, folder: str) -> str:
    """The sweep, or, when its run folder (``folder``, shell text) is there already (a rerun), the sweep resumed."""
    return f"if [ -d {folder} ]; then {sweep} --resume; else {sweep}; fi"


def final_step(run_dir: str) -> list[str]:
    """Fit the run, then write emit-config's JSON whole (``-o``: a refused emit leaves the last emit.json as it was)."""
    emit_json = f"{run_dir}/emit.json"
    return [
        shlex.join(["kvcal", "fit", run_dir]),
        shlex.join(["kvcal", "emit-config", run_dir, "--format", "json", "-o", emit_json]),
    ]


def kubernetes_literal(text: str) -> str:
    """``text`` as a container's command or args must hold it: every ``$`` doubled.

    Kubernetes expands ``$(VAR)`` in command and args (a model named ``a$(HOME)b`` would
    reach the sweep rewritten) and reduces ``$$`` to ``$``; doubling every ``$`` makes it
    hand the shell the text byte for byte.
    """
    return text.replace("$", "$$")


def job_manifest(spec: JobSpec) -> dict[str, Any]:
    """The Job as a plain mapping (what ``render_job`` dumps)."""
    labels = {"app.kubernetes.io/name": "kvcal", "app.kubernetes.io/component": "calibration", "kvcal.io/run": spec.run}
    volume: dict[str, Any] = {"name": "results"}
    if spec.pvc:
        volume["persistentVolumeClaim"] = {"claimName": spec.pvc}
    else:
        volume["emptyDir"] = {}
    container = {
        "name": "kvcal",
        "image": spec.image,
        "command": ["/bin/sh", "-c"],
        "args": [LiteralScalarString(kubernetes_literal(job_script(spec)))],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": {"requests": {"cpu": spec.cpu, "memory": spec.memory}, "limits": {"memory": spec.memory}},
        "volumeMounts": [{"name": "results", "mountPath": RESULTS_MOUNT}],
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container], "volumes": [volume]}
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": dict(labels)},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": spec.ttl_seconds,
            "template": {
                # A mesh sidecar would keep the pod running after kvcal exits, so the Job never completes.
                "metadata": {"labels": dict(labels), "annotations": {"sidecar.istio.io/inject": "false"}},
                "spec": pod_spec,
            },
        },
    }


def _comment(text: str) -> str:
    """A user string inside a YAML comment: control characters escaped, so a newline cannot end the comment."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def render_job(spec: JobSpec) -> str:
    """The manifest as YAML, with a header saying how to apply it and read the result."""
    storage = (
        f"PVC {_comment(spec.pvc)}"
        if spec.pvc
        else "an emptyDir (lost with the pod: pass --pvc to keep the run folder)"
    )
    head = (
        f"# kvcal k8s-job: in-cluster calibration of {_comment(spec.model)} over {_comment(spec.transport)}; "
        f"results on {storage}.\n"
        f"# kubectl apply -f job.yaml && kubectl -n {_comment(spec.namespace)} logs -f job/{_comment(spec.name)}\n"
        "# The last lines of the log are the emit-config JSON; exit 3 means P2P is not recommended here.\n"
    )
    return head + dump_yaml([job_manifest(spec)])


def dump_yaml(documents: list[dict[str, Any]]) -> str:
    """Manifests as YAML documents (``---`` between them), scripts as literal blocks."""
    yaml = YAML(typ="rt")
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    buf = io.StringIO()
    yaml.dump_all(documents, buf)
    return buf.getvalue()
