"""``kvcal k8s-job --pairs FILE``: an Indexed Job that calibrates every pair of a campaign, one pod a pair.

The manifest holds a ConfigMap (one single-pair ``--pairs`` file per pair, ``pair-<i>.yaml``) and one
``batch/v1`` Job with ``completionMode: Indexed`` and ``completions`` = the number of pairs. Pod ``i``
(``JOB_COMPLETION_INDEX``) runs

    kvcal sweep --pairs /pairs/pair-<i>.yaml --output-dir /results/RUN --name pair-<i> ...

so each pair is swept into its own run folder of the user's volume (``--pvc``: the pods must share it;
one sweep per folder, as the run lock requires), its probes tagged with the pair and its class. A pod
that finds every pair's folder done (and wins the ``mkdir`` claim) runs the final step:
``kvcal fit /results/RUN`` (a folder of run folders is fitted as one campaign, per class) and
``kvcal emit-config /results/RUN --format json``. ``parallelism`` is 1 by default: pairs that share an
engine would slow each other's probes.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from ruamel.yaml.scalarstring import LiteralScalarString

from kvcal.emit.k8s import RESULTS_MOUNT, JobSpec, _comment, dump_yaml, job_manifest, sweep_command
from kvcal.errors import InputError
from kvcal.settings import PairSpec
from kvcal.transports import available

PAIRS_MOUNT = "/pairs"


@dataclass(frozen=True)
class PairsJobSpec:
    """The one-pair Job's settings (its URLs are the first pair's) and the campaign's pairs."""

    job: JobSpec
    pairs: tuple[PairSpec, ...]
    parallelism: int = 1

    def __post_init__(self) -> None:
        if not self.pairs:
            raise InputError("--pairs names no pair")
        if self.job.pvc is None:
            raise InputError("--pairs needs --pvc: the pods sweep into one volume that the final fit reads")
        if not 1 <= self.parallelism <= len(self.pairs):
            raise InputError(f"--parallelism must be 1-{len(self.pairs)} (the number of pairs)")
        for pair in self.pairs:  # each pair's URLs as the one-pair Job checks them (reachable, two pods)
            if pair.producer_url is None or pair.consumer_url is None:
                raise InputError(f"pair {pair.name}: give both producer_url and consumer_url")
            try:
                replace(self.job, producer_url=pair.producer_url, consumer_url=pair.consumer_url)
            except InputError as err:
                raise InputError(f"pair {pair.name}: {err}") from None


def pair_file(pair: PairSpec, transport: str) -> str:
    """The single-pair ``--pairs`` file one pod sweeps (JSON is YAML: no quoting left to chance); a transport whose
    pull names the producer's side channel gets the producer pod's own address, as the one-pair Job does."""
    settings = pair.attach_settings()
    if settings["producer_p2p_host"] is None and available()[transport].pull_names_producer:
        settings["producer_p2p_host"] = urlsplit(str(pair.producer_url)).hostname
    entry = {"name": pair.name, "class": pair.link_class, **{k: v for k, v in settings.items() if v is not None}}
    return json.dumps({"pairs": [entry]}) + "\n"


def pod_script(spec: PairsJobSpec) -> str:
    """Sweep this pod's pair; the pod that completes the set fits and emits."""
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
    return (
        "\n".join(
            [
                "set -eu",
                f"mkdir -p {quoted}",
                f'if [ -d {quoted}/"pair-$JOB_COMPLETION_INDEX" ]; then {sweep} --resume; else {sweep}; fi',
                f'touch {quoted}/"pair-$JOB_COMPLETION_INDEX.done"',
                f'if [ "$(ls {quoted}/*.done | wc -l)" -eq {len(spec.pairs)} ] '
                f"&& mkdir {quoted}/.final 2>/dev/null; then",
                f"  kvcal fit {quoted}",
                f"  kvcal emit-config {quoted} --format json > {quoted}/emit.json",
                f"  cat {quoted}/emit.json",
                "fi",
            ]
        )
        + "\n"
    )


def pairs_manifests(spec: PairsJobSpec) -> list[dict[str, Any]]:
    """The ConfigMap of pair files and the Indexed Job, as plain mappings."""
    job = job_manifest(spec.job)
    config_name = f"{spec.job.name}-pairs"
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_name, "namespace": spec.job.namespace, "labels": job["metadata"]["labels"]},
        "data": {f"pair-{i}.yaml": pair_file(pair, spec.job.transport) for i, pair in enumerate(spec.pairs)},
    }
    job["spec"].update({"completionMode": "Indexed", "completions": len(spec.pairs), "parallelism": spec.parallelism})
    pod = job["spec"]["template"]["spec"]
    pod["volumes"].append({"name": "pairs", "configMap": {"name": config_name}})
    container = pod["containers"][0]
    container["args"] = [LiteralScalarString(pod_script(spec))]
    container["volumeMounts"].append({"name": "pairs", "mountPath": PAIRS_MOUNT, "readOnly": True})
    return [config, job]


def render_pairs_job(spec: PairsJobSpec) -> str:
    """The ConfigMap and the Indexed Job as YAML, with a header saying how to apply them and read the result."""
    job = spec.job
    head = (
        f"# kvcal k8s-job --pairs: {len(spec.pairs)} pairs of {len({p.link_class for p in spec.pairs})} link "
        f"class(es), one pod a pair, into PVC {_comment(str(job.pvc))} at {RESULTS_MOUNT}/{_comment(job.run)}.\n"
        f"# kubectl apply -f job.yaml && kubectl -n {_comment(job.namespace)} wait --for=condition=complete "
        f"job/{_comment(job.name)} --timeout=24h\n"
        "# The pod that completes the set runs kvcal fit (per class) and emit-config; its log ends in the JSON.\n"
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
