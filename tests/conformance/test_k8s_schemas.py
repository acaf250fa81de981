"""kvcal's Kubernetes output against Kubernetes' own JSON schemas, strictly (unknown fields fail).

The schemas come with the ``kubernetes-validate`` package (PyPI): 1.33, the version the
issue names, and the newest the installed package ships. Checked: every ``kvcal k8s-job``
manifest (both transports, every option), and each ``emit-config --format vllm`` fragment
merged into an engine Deployment the way its header says (args/env/volumeMounts into the
container, volumes into the pod).
"""

from __future__ import annotations

import subprocess
from functools import lru_cache
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from conformance_support import KVCAL, REPO

pytestmark = pytest.mark.conformance

VERSIONS = sorted({"1.33.0", latest_version()})
BASE = ["--image", "ghcr.io/example/kvcal:0.1", "--producer-url", "http://10.0.3.17:8200",
        "--consumer-url", "http://10.0.3.18:8200", "--model", "openai/gpt-oss-120b"]
JOBS = {
    "p2p-defaults": ["--transport", "p2p-tier"],
    "nixl-defaults": ["--transport", "nixl-pd"],
    "p2p-every-option": ["--transport", "p2p-tier", "--name", "calib-1", "--namespace", "llm-d", "--prefix-lengths",
                         "1024,2048,4096", "--reps", "5", "--producer-p2p-host", "10.0.3.17", "--producer-p2p-port", "7777",
                         "--pvc", "kvcal-results", "--run-name", "nightly", "--cpu", "500m", "--memory", "4Gi",
                         "--ttl", "3600", "--service-account", "kvcal", "--", "--seed", "7", "--load-states", "idle"],
    "nixl-every-option": ["--transport", "nixl-pd", "--name", "calib-2", "-n", "team-a", "--prefix-lengths", "512,8192",
                          "--reps", "2", "--pvc", "res", "--run-name", "r2", "--cpu", "2", "--memory", "1Gi", "--ttl", "0",
                          "--service-account", "sa-2", "--", "--block-size", "16"],
}
ENGINE_DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "vllm-p2p", "labels": {"app": "vllm"}},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "vllm"}},
             "template": {"metadata": {"labels": {"app": "vllm"}},
                          "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.33.0",
                                                   "command": ["vllm", "serve", "openai/gpt-oss-120b", "--port=8200"],
                                                   "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
}


@lru_cache
def run(args: tuple[str, ...]) -> str:
    done = subprocess.run([KVCAL, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def strictly_valid(resource: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(resource, version, strict=True)


def test_the_strict_schemas_refuse_an_unknown_field() -> None:
    """The validator can fail: a misspelt container field is refused in strict mode."""
    job = yaml.safe_load(run(("k8s-job", *BASE)))
    job["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    for version in VERSIONS:
        with pytest.raises(kubernetes_validate.ValidationError):
            strictly_valid(job, version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(JOBS))
def test_k8s_job_manifests_pass_strict_validation(case: str, version: str) -> None:
    documents = [d for d in yaml.safe_load_all(run(("k8s-job", *BASE, *JOBS[case]))) if d]
    assert [d["kind"] for d in documents] == ["Job"]
    for document in documents:
        strictly_valid(document, version)


PAIRS_FILE = """pairs:
  - {name: n1, class: same-node, producer_url: "http://10.0.3.17:8200", consumer_url: "http://10.0.3.18:8200"}
  - {name: x1, class: tcp, producer_url: "http://10.0.3.17:8200", consumer_url: "http://10.0.4.9:8200",
     producer_p2p_host: 10.0.3.17}
"""


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transport", ["p2p-tier", "nixl-pd"])
def test_the_indexed_job_over_pairs_passes_strict_validation(transport: str, version: str, tmp_path) -> None:
    pairs = tmp_path / "pairs.yaml"
    # nixl-pd's pull names no side channel: a pair's producer_p2p_host is refused for it, as the flag is
    pairs.write_text(PAIRS_FILE if transport == "p2p-tier" else PAIRS_FILE.replace(",\n     producer_p2p_host: 10.0.3.17", ""))
    done = subprocess.run([KVCAL, "k8s-job", "--image", "ghcr.io/example/kvcal:0.1", "--model", "m", "--pairs", str(pairs),
                           "--pvc", "kvcal-results", "--transport", transport, "--parallelism", "2", "--", "--seed", "3"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    documents = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert [d["kind"] for d in documents] == ["ConfigMap", "Job"]
    assert documents[1]["spec"]["completionMode"] == "Indexed" and documents[1]["spec"]["completions"] == 2
    for document in documents:
        strictly_valid(document, version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transport, options", [("p2p-tier", ["--cpu-bytes-to-use", "88GiB"]), ("p2p-tier", []),
                                                ("nixl-pd", [])])
def test_engine_fragment_merged_into_a_deployment_passes_strict_validation(transport: str, options: list[str],
                                                                            version: str) -> None:
    fragment = yaml.safe_load(run(("emit-config", str(REPO / "results" / "baselines" / "cpu-tiny"), "--format", "vllm",
                                   "--transport", transport, *options)))
    deployment = yaml.safe_load(yaml.safe_dump(ENGINE_DEPLOYMENT))
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["args"] = fragment["args"]
    container["env"] = fragment["env"]
    if "volumes" in fragment:
        container["volumeMounts"] = fragment["volumeMounts"]
        pod["volumes"] = fragment["volumes"]
    strictly_valid(deployment, version)
