"""``kvcal k8s-job --pairs FILE``: an Indexed Job that calibrates every pair of a campaign, one pod a pair.

The manifest holds a ConfigMap (one single-pair ``--pairs`` file per pair, ``pair-<i>.yaml``) and one
``batch/v1`` Job with ``completionMode: Indexed`` and ``completions`` = the number of pairs. Pod ``i``
(``JOB_COMPLETION_INDEX``) runs

    kvcal sweep --pairs /pairs/pair-<i>.yaml --output-dir /results/RUN --name pair-<i> ...

so each pair is swept into its own run folder of the user's volume (``--pvc``: the pods must share it;
one sweep per folder, as the run lock requires), its probes tagged with the pair and its class. A pod
that finds every pair's folder done runs the final step, ``kvcal fit /results/RUN`` (a folder of run
folders is fitted as one campaign, per class) and ``kvcal emit-config /results/RUN --format json -o
/results/RUN/emit.json``, and claims it (``final.done``) only after both succeeded: a rerun after a
failed fit resumes each sweep (done in a moment) and fits again, and a refused emit leaves the last
emit.json whole. Two pods that complete the set at once may both fit: every write is whole, so the
result is the same. ``parallelism`` is 1 by default: pairs that share an engine would slow each
other's probes.

Each pair is checked as the one-pair Job checks its flags (its keys named as the file names them),
and the pair files are packed into as many ConfigMaps as it takes (``kubectl apply`` keeps each
object in a 256 KiB annotation, below a ConfigMap's own 1 MiB), mounted together at /pairs.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from ruamel.yaml.scalarstring import LiteralScalarString

from kvcal.errors import InputError
from kvcal.k8s.job import (
    RESULTS_MOUNT,
    JobSpec,
    _comment,
    dump_yaml,
    final_step,
    job_manifest,
    kubernetes_literal,
    sweep_command,
    sweep_or_resume,
)
from kvcal.settings.sweep import AttachSettings, PairSpec
from kvcal.settings.sweep_flags import flag_of
from kvcal.transports import available

PAIRS_MOUNT = "/pairs"
# The Job's own engine URLs with --pairs: checked as URLs and never used (each pod sweeps its pair's); the reserved
# .invalid domain (RFC 2606) shows it should one ever appear.
STAND_IN_URLS = ("http://producer.invalid:8200", "http://consumer.invalid:8200")
FINAL_MARK = "final.done"  # written after the final step succeeded, never before
# kubectl apply keeps the whole object, as JSON, in its last-applied annotation, and a object's annotations may
# hold 256 KiB (kubernetes/kubectl#712); a ConfigMap's data may hold 1 MiB (Kubernetes' ConfigMap docs). Each
# ConfigMap is filled to 200 KiB of JSON: under both, with room for its metadata and the annotation's escaping.
APPLY_ANNOTATION_BYTES = 256 * 1024
CONFIGMAP_BYTES = 1024 * 1024
CONFIGMAP_FILL_BYTES = 200 * 1024


@dataclass(frozen=True)
class PairsJobSpec:
    """The one-pair Job's settings (its URLs stand in: :data:`STAND_IN_URLS`) and the campaign's pairs."""

    job: JobSpec
    pairs: tuple[PairSpec, ...]
    parallelism: int = 1
    source: str = "--pairs"  # how messages name the pairs file

    def __post_init__(self) -> None:
        if not self.pairs:
            raise InputError("--pairs names no pair")
        if self.job.pvc is None:
            raise InputError("--pairs needs --pvc: the pods sweep into one volume that the final fit reads")
        if not 1 <= self.parallelism <= len(self.pairs):
            raise InputError(f"--parallelism must be 1-{len(self.pairs)} (the number of pairs)")
        if self.job.producer_p2p_host is not None or self.job.producer_p2p_port is not None:
            raise InputError("--pairs names each pair's side channel; drop --producer-p2p-host/--producer-p2p-port")
        names = [pair.name for pair in self.pairs]
        if len(set(names)) != len(names):
            raise InputError(f"{self.source}: a pair name is listed twice")
        for pair in self.pairs:
            try:
                check_pair(self.job, pair)
            except InputError as err:
                raise InputError(f"{self.source}: pair {pair.name}: {err}") from None


def check_pair(job: JobSpec, pair: PairSpec) -> None:
    """A pair's attach keys checked as the one-pair Job checks its flags, the message naming the keys."""
    if pair.producer_url is None or pair.consumer_url is None:
        raise InputError("give both producer_url and consumer_url")
    port = pair.producer_p2p_port if "producer_p2p_port" in pair.model_fields_set else None
    try:
        replace(
            job,
            producer_url=pair.producer_url,
            consumer_url=pair.consumer_url,
            producer_p2p_host=pair.producer_p2p_host,
            producer_p2p_port=port,
        )
    except InputError as err:
        message = str(err)
        for key in AttachSettings.model_fields:  # a pair's keys are the flags' settings, by their own names
            message = message.replace(flag_of(key), key)
        raise InputError(message) from None


def pair_file(pair: PairSpec, transport: str) -> str:
    """The single-pair ``--pairs`` file one pod sweeps (JSON is YAML: no quoting left to chance); a transport whose
    pull names the producer's side channel gets the producer pod's own address, as the one-pair Job does."""
    settings = pair.attach_settings()
    if settings["producer_p2p_host"] is None and available()[transport].pull_names_producer:
        settings["producer_p2p_host"] = urlsplit(str(pair.producer_url)).hostname
    entry = {"name": pair.name, "class": pair.link_class, **{k: v for k, v in settings.items() if v is not None}}
    return json.dumps({"pairs": [entry]}) + "\n"


def pod_script(spec: PairsJobSpec) -> str:
    """Sweep this pod's pair (resumed on a rerun); the pod that finds the set complete fits and emits, and marks
    the final step done only after it succeeded. Plain POSIX sh; ``$`` as the shell reads it (not yet doubled)."""
    run_dir = f"{RESULTS_MOUNT}/{spec.job.run}"
    one = sweep_command(spec.job)
    argv = _without(
        one,
        ("--producer-url", "--consumer-url", "--producer-p2p-host", "--producer-p2p-port", "--output-dir", "--name"),
    )
    sweep = (
        shlex.join(argv)
        + f' --pairs "{PAIRS_MOUNT}/pair-$JOB_COMPLETION_INDEX.yaml" --output-dir '
        + shlex.quote(run_dir)
        + ' --name "pair-$JOB_COMPLETION_INDEX"'
    )
    quoted = shlex.quote(run_dir)
    mark = f"{quoted}/{FINAL_MARK}"
    lines = [
        "set -eu",
        f"mkdir -p {quoted}",
        sweep_or_resume(sweep, f'{quoted}/"pair-$JOB_COMPLETION_INDEX"'),
        f'touch {quoted}/"pair-$JOB_COMPLETION_INDEX.done"',
        "missing=0",
        "i=0",
        f'while [ "$i" -lt {len(spec.pairs)} ]; do',
        f'  [ -e {quoted}/"pair-$i.done" ] || missing=$((missing + 1))',
        "  i=$((i + 1))",
        "done",
        f'if [ "$missing" -eq 0 ] && [ ! -e {mark} ]; then',
        *(f"  {line}" for line in final_step(run_dir)),
        f"  touch {mark}",
        "fi",
        f"if [ -e {mark} ]; then cat {quoted}/emit.json; fi",
    ]
    return "\n".join(lines) + "\n"


def config_maps(spec: PairsJobSpec, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The pair files, packed into ConfigMaps of at most :data:`CONFIGMAP_FILL_BYTES` of JSON each."""
    chunks: list[dict[str, str]] = [{}]
    size = 0
    for i, pair in enumerate(spec.pairs):
        key, text = f"pair-{i}.yaml", pair_file(pair, spec.job.transport)
        cost = len(json.dumps({key: text}))  # its share of the object's JSON, escaped as kubectl writes it
        if cost > CONFIGMAP_FILL_BYTES:
            raise InputError(
                f"{spec.source}: pair {pair.name}: its file takes {cost:,} bytes, more than a ConfigMap applied "
                f"with kubectl apply can hold ({APPLY_ANNOTATION_BYTES // 1024} KiB; Kubernetes' own limit is "
                f"{CONFIGMAP_BYTES // 2**20} MiB); shorten its keys"
            )
        if chunks[-1] and size + cost > CONFIGMAP_FILL_BYTES:
            chunks.append({})
            size = 0
        chunks[-1][key] = text
        size += cost
    base = f"{spec.job.name}-pairs"
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": base if k == 0 else f"{base}-{k}",
                "namespace": spec.job.namespace,
                "labels": dict(labels),
            },
            "data": data,
        }
        for k, data in enumerate(chunks)
    ]


def pairs_manifests(spec: PairsJobSpec) -> list[dict[str, Any]]:
    """The ConfigMaps of pair files and the Indexed Job, as plain mappings."""
    job = job_manifest(spec.job)
    configs = config_maps(spec, job["metadata"]["labels"])
    job["spec"].update({"completionMode": "Indexed", "completions": len(spec.pairs), "parallelism": spec.parallelism})
    pod = job["spec"]["template"]["spec"]
    sources = [{"configMap": {"name": c["metadata"]["name"]}} for c in configs]
    pod["volumes"].append({"name": "pairs", "projected": {"sources": sources}})
    container = pod["containers"][0]
    container["args"] = [LiteralScalarString(kubernetes_literal(pod_script(spec)))]
    container["volumeMounts"].append({"name": "pairs", "mountPath": PAIRS_MOUNT, "readOnly": True})
    return [*configs, job]


def render_pairs_job(spec: PairsJobSpec) -> str:
    """The ConfigMap and the Indexed Job as YAML, with a header saying how to apply them and read the result."""
    job = spec.job
    head = (
        f"# kvcal k8s-job --pairs: {len(spec.pairs)} pairs of {len({p.link_class for p in spec.pairs})} link "
        f"class(es), one pod a pair, into PVC {_comment(str(job.pvc))} at {RESULTS_MOUNT}/{_comment(job.run)}.\n"
        f"# kubectl apply -f job.yaml && kubectl -n {_comment(job.namespace)} wait --for=condition=complete "
        f"job/{_comment(job.name)} --timeout=24h\n"
        "# The pod that completes the set runs kvcal fit (per class) and emit-config; its log ends in the JSON.\n"
        "# A rerun (apply it again) resumes each pair's sweep and fits again unless the final step succeeded.\n"
    )
    return head + dump_yaml(pairs_manifests(spec))


def _without(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """``argv`` less each of ``flags`` and its value (the pair's own, or set per pod)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in flags:
            skip = True
            continue
        out.append(arg)
    return out
